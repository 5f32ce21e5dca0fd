"""`split-leak`'s two joins (`scrub.checks.splits`), `duplicate`'s grouping and `near-duplicate`'s
pairs as dask.distributed computations, for runs whose hashes a single process should not hold: the
driver builds the graph and receives only the pairs found, which are few; the identities and hashes
stay on the workers from the moment they are made until they are dropped. A scan on a cluster
leaves those checks' columns on its workers (`leave_on_cluster`) and judges them here
(`judge_on_cluster`, `leaks_on_cluster`), as a scan on one machine judges them in its own process.

The inputs are dask dataframes of one row a record (`hash_columns` makes a partition of them):
a global row number, the 16-byte content identity as two uint64 words, the perceptual hash
(`NO_HASH` where the record has none). The result is what `split_leak` computes from
`near_pairs` and its sort of the identities: for each query row, the first known row with its
identity (distance `EXACT`), else the nearest known hash within the radius, ties to the
smallest known row.

Both joins are the same three steps: tag each row with its side, shuffle the known rows and the
queries together on a key that two rows must share to match, then join inside each partition.

* Exact: the key is the identity. A partition holds every known copy of its identities, so the
  first copy is its smallest row there.
* Near: multi-index hashing (Norouzi et al., 2012) with radius + 1 bands: two hashes within
  ``radius`` bits agree on at least one band (pigeonhole), so each hash is exploded into one
  row a band, keyed by (band number, the band's bits), and a near pair shares at least one
  partition. Inside a partition, each band's rows are compared by `near_pairs` itself (its own
  bands and probes), not pair by pair: the rows that share a band's key are far too many pairs
  for random hashes (a band of 64 / (radius + 1) bits), but a partition's share of them is a
  small `near_pairs`. It may find near pairs that share no key in that band: they are true
  pairs all the same, and each query keeps its nearest of all partitions' finds. A band's rows
  in one partition hold few of its key's values, so its bits tell `near_pairs` little there:
  more partitions make smaller lookups, but not proportionally cheaper ones.

A last, small shuffle on the query row keeps each query's best: exact before near, then the
distance, then the smallest known row.

Needs dask.dataframe, hence pandas and (for the p2p shuffle of dask.distributed) pyarrow: not
among scrub's own dependencies (they come with the ``test`` and ``parquet`` extras), so they are
imported when a join is built, not when this module is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from scrub.checks.base import CheckOptions, Column, Finding, Locate, Position
from scrub.checks.dataset import later_copies, near_images, same_content
from scrub.checks.perceptual import NO_HASH, near_pairs
from scrub.checks.splits import column_layout, identity_parts
from scrub.errors import IncompleteScan, first_line
from scrub.scanning.columnstores import ColumnStore, RareValueStore
from scrub.scanning.runner import LeftColumns

if TYPE_CHECKING:
    import dask.dataframe as dd
    import pandas as pd  # type: ignore[import-untyped]  # no stubs in the environment
    from distributed import Client

    from scrub.scanning.dataset import DatasetScan

#: the columns of a split's frame (`hash_columns`)
ROW, IDENTITY_HIGH, IDENTITY_LOW, PHASH = "row", "identity_high", "identity_low", "phash"
IDENTITY = [IDENTITY_HIGH, IDENTITY_LOW]
#: the hashes of a training image's central crops (`scrub.checks.splits`), looked up as its own
CROPS = ["crop_0", "crop_1"]
#: the columns of the pairs found
QUERY, KNOWN, DISTANCE = "query", "known", "distance"
#: the distance of a pair of equal identities: ranks before every Hamming distance
EXACT = -1
#: which side of the join a row of a shuffled frame comes from
SIDE, KNOWN_SIDE, QUERY_SIDE = "side", 0, 1
#: a row's band number and the band's bits, in the near join's exploded frames
BAND, BAND_KEY = "band", "band_key"


def identity_words(identities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """16-byte identities (``S16``, as `scrub.checks.splits.identity_parts` gives them) as two
    uint64 columns (big-endian words: their order is the bytes' order)."""
    words = np.ascontiguousarray(identities, "S16").view(">u8").reshape(-1, 2).astype(np.uint64)
    return words[:, 0].copy(), words[:, 1].copy()


def hash_columns(
    rows: np.ndarray, identities: np.ndarray, hashes: np.ndarray, crops: np.ndarray | None = None
) -> pd.DataFrame:
    """One partition of a split's frame: each record's global row number, identity (``S16``),
    perceptual hash (uint64) and the hashes of its image's central crops ((n, 2) uint64; `NO_HASH`
    where none). Made where the partition's records are (a worker), never gathered."""
    import pandas as pd

    high, low = identity_words(identities)
    if crops is None:
        crops = np.full((len(rows), len(CROPS)), NO_HASH, np.uint64)
    return pd.DataFrame(
        {
            ROW: np.asarray(rows, np.int64),
            IDENTITY_HIGH: high,
            IDENTITY_LOW: low,
            PHASH: np.asarray(hashes, np.uint64),
            **{name: np.asarray(crops[:, number], np.uint64) for number, name in enumerate(CROPS)},
        }
    )


def band_layout(radius: int) -> list[tuple[int, int]]:
    """The (lowest bit, width) of each band: radius + 1 bands as even as 64 bits allow, so that
    two hashes within ``radius`` bits agree on one; past 63 bits every pair is within the radius,
    and one band of no bits keys every hash alike."""
    if radius >= 64:
        return [(0, 0)]
    edges = np.linspace(0, 64, radius + 2).round().astype(int).tolist()
    return [(low, high - low) for low, high in zip(edges[:-1], edges[1:])]


def leak_frame(
    known: dd.DataFrame, queries: dd.DataFrame, radius: int, partitions: int | None = None
) -> dd.DataFrame:
    """The lazy join: a frame of (``query``, ``known``, ``distance``) rows, one a query that
    matched, ``distance`` `EXACT` for an equal identity. ``partitions``: of each shuffle (by
    default as many as the inputs have together); ``radius`` < 0 looks for exact copies only."""
    import dask.dataframe as dd

    partitions = partitions or known.npartitions + queries.npartitions
    found = [_exact_pairs(known, queries, partitions)]
    if radius >= 0:
        found.append(_near_pairs(known, queries, radius, partitions))
    pairs = dd.concat(found) if len(found) > 1 else found[0]
    return pairs.shuffle(on=QUERY, npartitions=partitions).map_partitions(_best_per_query, meta=_pairs_meta())


def distributed_leaks(
    client: Client, known: dd.DataFrame, queries: dd.DataFrame, radius: int, partitions: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`leak_frame` computed on ``client``'s cluster: the query rows that matched (ascending),
    each one's known row and distance (`EXACT` for an equal identity), as NumPy arrays."""
    found = _computed(client, leak_frame(known, queries, radius, partitions))
    found = found.sort_values(QUERY)
    return (
        found[QUERY].to_numpy(np.int64),
        found[KNOWN].to_numpy(np.int64),
        found[DISTANCE].to_numpy(np.int64),
    )


def _computed(client: Client, collection: Any) -> Any:
    """``collection`` computed on ``client``'s cluster; a cluster that cannot (its scheduler
    gone, its workers dying) ends the scan in one line, as one that fails mid-scan does."""
    from concurrent.futures import CancelledError

    from distributed.comm import CommClosedError
    from distributed.scheduler import KilledWorker

    try:
        return client.compute(collection, sync=True)
    except (OSError, TimeoutError, CancelledError, CommClosedError, KilledWorker) as error:
        raise IncompleteScan(
            f"the dask cluster at {client.scheduler.address} failed while joining the records' content "
            f"identities ({type(error).__name__}: {first_line(error) or 'no reason given'}); no manifest "
            "was written"
        ) from None


def _tagged(frame: dd.DataFrame, columns: list[str], side: int) -> dd.DataFrame:
    return frame[columns].assign(**{SIDE: np.int8(side)})


def _exact_pairs(known: dd.DataFrame, queries: dd.DataFrame, partitions: int) -> dd.DataFrame:
    """Each query's first known row of the same identity: both sides shuffled on the identity,
    so that every copy of one is in one partition, then joined there."""
    import dask.dataframe as dd

    columns = [ROW, *IDENTITY]
    both = dd.concat([_tagged(known, columns, KNOWN_SIDE), _tagged(queries, columns, QUERY_SIDE)])
    return both.shuffle(on=IDENTITY, npartitions=partitions).map_partitions(_exact_in, meta=_pairs_meta())


def _exact_in(part: pd.DataFrame) -> pd.DataFrame:
    known = _first_of_each_identity(part[part[SIDE] == KNOWN_SIDE])
    joined = part[part[SIDE] == QUERY_SIDE].merge(known, on=IDENTITY, suffixes=("_query", "_known"))
    return _pairs(
        joined[f"{ROW}_query"].to_numpy(np.int64),
        joined[f"{ROW}_known"].to_numpy(np.int64),
        np.full(len(joined), EXACT, np.int64),
    )


def _near_pairs(known: dd.DataFrame, queries: dd.DataFrame, radius: int, partitions: int) -> dd.DataFrame:
    """Each query's nearest known hash within ``radius``: both sides exploded into a row a band,
    shuffled on the band's key, compared by `near_pairs` band by band in each partition."""
    import dask.dataframe as dd

    layout = band_layout(radius)
    exploded = [
        _tagged(frame, [ROW, PHASH, *CROPS], side).map_partitions(_band_rows, layout, meta=_band_meta())
        for frame, side in ((known, KNOWN_SIDE), (queries, QUERY_SIDE))
    ]
    shuffled = dd.concat(exploded).shuffle(on=[BAND, BAND_KEY], npartitions=partitions)
    return shuffled.map_partitions(_near_in, radius, meta=_pairs_meta())


def _band_rows(part: pd.DataFrame, layout: list[tuple[int, int]]) -> pd.DataFrame:
    """A row a band of each hash of ``part``, its crops' as its own (`NO_HASH` matches nothing:
    dropped here, before it costs a shuffle), keyed by the band's bits."""
    import pandas as pd

    columns = [name for name in (PHASH, *CROPS) if name in part]
    hashes = np.concatenate([part[name].to_numpy(np.uint64) for name in columns])
    usable = hashes != NO_HASH
    hashes = hashes[usable]
    rows = np.tile(part[ROW].to_numpy(np.int64), len(columns))[usable]
    sides = np.tile(part[SIDE].to_numpy(np.int8), len(columns))[usable]
    keys = [(hashes >> np.uint64(low)) & np.uint64((1 << width) - 1) for low, width in layout]
    return pd.DataFrame(
        {
            BAND: np.repeat(np.arange(len(layout), dtype=np.int8), len(hashes)),
            BAND_KEY: np.concatenate(keys) if keys else np.empty(0, np.uint64),
            ROW: np.tile(rows, len(layout)),
            PHASH: np.tile(hashes, len(layout)),
            SIDE: np.tile(sides, len(layout)),
        }
    )


def _near_in(part: pd.DataFrame, radius: int, earlier: bool = False) -> pd.DataFrame:
    """Each query's nearest known hash among a partition's rows, a band at a time (a row is in
    a partition at most once a band: a band's rows are a `near_pairs` of their own). ``earlier``:
    the rows are one side, each compared with those before it (`near-duplicate`'s pairs)."""
    import pandas as pd

    found = [_pairs_meta()]
    for _, band in part.groupby(BAND, sort=False):
        band = band.sort_values(ROW, kind="stable")  # the first of equals: the smallest row
        known = band if earlier else band[band[SIDE] == KNOWN_SIDE]
        queries = band if earlier else band[band[SIDE] == QUERY_SIDE]
        near, nearest, distance = near_pairs(
            known[PHASH].to_numpy(np.uint64), queries[PHASH].to_numpy(np.uint64), radius, earlier
        )
        found.append(
            _pairs(queries[ROW].to_numpy(np.int64)[near], known[ROW].to_numpy(np.int64)[nearest], distance)
        )
    return _best_per_query(pd.concat(found, ignore_index=True))


def _best_per_query(pairs: pd.DataFrame) -> pd.DataFrame:
    """Each query's best pair: the least distance (an exact copy first), then the smallest row."""
    ranked = pairs.sort_values([QUERY, DISTANCE, KNOWN], kind="stable")
    return ranked.drop_duplicates(QUERY).reset_index(drop=True)


def _pairs(query: np.ndarray, known: np.ndarray, distance: np.ndarray) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        {
            QUERY: np.asarray(query, np.int64),
            KNOWN: np.asarray(known, np.int64),
            DISTANCE: np.asarray(distance, np.int64),
        }
    )


def _pairs_meta() -> pd.DataFrame:
    empty = np.empty(0, np.int64)
    return _pairs(empty, empty, empty)


def _band_meta() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        {
            BAND: np.empty(0, np.int8),
            BAND_KEY: np.empty(0, np.uint64),
            ROW: np.empty(0, np.int64),
            PHASH: np.empty(0, np.uint64),
            SIDE: np.empty(0, np.int8),
        }
    )


# The scan's joins on its cluster: `duplicate`, `near-duplicate` and `split-leak` judged where
# their columns were collected. A record's row number says where it is: the run's dataset (its
# tag), the partition and the offset, in bits that sort as the datasets, partitions and records do.

#: the bits of a row number: dataset tag, partition, offset (within 63 bits)
TAG_BITS, PARTITION_BITS, OFFSET_BITS = 8, 23, 32
#: the checks whose columns a scan on a cluster leaves on its workers (`leave_on_cluster`)
JOINED_ON_CLUSTER = ("duplicate", "near-duplicate", "split-leak")
#: the width of a column of identities alone (`duplicate`'s)
IDENTITY_ONLY = 16
#: a check's columns of fewer values than this, all datasets together, are fetched into the
#: driver and judged there: at most ~125 MiB more in the driver, where a shuffle on a small
#: cluster took 4 times as long (docs/benchmarks.md, "A scan of splits on a cluster")
FETCHED_BELOW = 1_000_000


def joined_on_cluster(stores: Sequence[ColumnStore | RareValueStore]) -> bool:
    """Whether a check's columns (a store a dataset) are joined on the cluster: some were left
    there, and they are too many to fetch (`FETCHED_BELOW`)."""
    left = [store for store in stores if isinstance(store, ColumnStore) and store.left]
    return bool(left) and sum(store.count for store in left) >= FETCHED_BELOW


def leave_on_cluster(scans: Sequence[DatasetScan], scheduler: str, kept: bool) -> None:
    """Set which columns each scan's work leaves on the cluster's workers (`PartitionWork.leaving`):
    on a cluster, those of `JOINED_ON_CLUSTER`, unless the driver needs their values: a
    dataset with a result cache (it stores every record's values), split-leak with kept splits
    (``kept``: ``--against``, whose store keeps them) or with texts signed (``--near-text``: its
    MinHash join runs in the driver). A dataset beyond the row numbers' bits keeps its columns too."""
    if "://" not in scheduler:
        return
    for tag, scan in enumerate(scans):
        if scan.cache is not None or len(scan.dataset.partitions) >= 1 << PARTITION_BITS:
            continue
        leave = set()
        for check in scan.checks:
            if check.id in JOINED_ON_CLUSTER and check.kind == "dataset":
                leave.add(check.id)
            elif check.id == "split-leak" and check.kind == "split" and scan.split and not kept:
                signs_texts = column_layout(np.dtype(check.column_dtype).itemsize)[1]
                if tag < 1 << TAG_BITS and not signs_texts:
                    leave.add(check.id)
        scan.work.leaving = LeftColumns(frozenset(leave)) if leave else None


def judge_on_cluster(
    check_id: str, store: ColumnStore, options: CheckOptions, locate: Locate
) -> list[tuple[Position, Finding]]:
    """A dataset check of `JOINED_ON_CLUSTER` on its column left on a cluster. `duplicate`: each
    later copy of an identity, with the first (in dataset order), by a shuffle on the identity.
    `near-duplicate`: each image's nearest earlier image within ``--near-distance`` bits, among
    the first image of each identity (later copies are `duplicate`'s), by the band-key join."""
    client = store.left[0][1].future.client
    frame = store_frame(client, store, 0)
    if frame is None or check_id == "near-duplicate" and not options.near_distance:
        return []
    if check_id == "duplicate":
        pairs = frame.shuffle(on=IDENTITY, npartitions=frame.npartitions).map_partitions(
            _later_copies, meta=_pairs_meta()
        )
        found = _computed(client, pairs).sort_values(QUERY)
        copies, firsts = row_positions(found[QUERY].to_numpy()), row_positions(found[KNOWN].to_numpy())
        named = locate([(partition, offset) for _, partition, offset in firsts])
        return [((part, offset), same_content(first)) for (_, part, offset), first in zip(copies, named)]
    assert check_id == "near-duplicate"
    found = _computed(client, _earlier_near_pairs(frame, options.near_distance)).sort_values(QUERY)
    rows = np.unique(np.concatenate([found[QUERY].to_numpy(np.int64), found[KNOWN].to_numpy(np.int64)]))
    involved = Column(np.array([(p, o) for _, p, o in row_positions(rows)], np.int64).reshape(-1, 2), rows)
    pairs = (np.searchsorted(rows, found[QUERY].to_numpy()), np.searchsorted(rows, found[KNOWN].to_numpy()))
    return near_images(involved, locate, np.arange(len(rows)), pairs, found[DISTANCE].tolist())


def _earlier_near_pairs(frame: dd.DataFrame, radius: int) -> dd.DataFrame:
    """Each image's nearest earlier image within ``radius`` bits (the first of equals), among
    the first image of each identity: the firsts kept by a shuffle on the identity, then
    exploded into band rows and shuffled on the band keys, each band's rows of a partition
    compared by `near_pairs` (earlier ones only), each image's best kept."""
    partitions = frame.npartitions
    firsts = frame.shuffle(on=IDENTITY, npartitions=partitions).map_partitions(
        _first_of_each_identity, meta=hash_columns(*_no_values())
    )
    exploded = _tagged(firsts, [ROW, PHASH], QUERY_SIDE).map_partitions(
        _band_rows, band_layout(radius), meta=_band_meta()
    )
    shuffled = exploded.shuffle(on=[BAND, BAND_KEY], npartitions=partitions)
    pairs = shuffled.map_partitions(_near_in, radius, True, meta=_pairs_meta())
    return pairs.shuffle(on=QUERY, npartitions=partitions).map_partitions(_best_per_query, meta=_pairs_meta())


def _first_of_each_identity(part: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``part`` whose identity no row before them holds (the partition holds every
    row of its identities)."""
    return part.sort_values(ROW, kind="stable").drop_duplicates(IDENTITY)


def leaks_on_cluster(
    training: Sequence[tuple[int, ColumnStore]], evaluation: tuple[int, ColumnStore], radius: int
) -> list[tuple[Position, int, Position, int | None]]:
    """`split-leak`'s joins of columns left on a cluster: each record of the ``evaluation`` split
    (tag, store) that a record of a ``training`` split holds, exactly or (``radius`` > 0) by a
    perceptual hash within ``radius`` bits: (its position, the training split's tag, the training
    record's position, the distance: None for an exact copy)."""
    import dask.dataframe as dd

    left = [part for _, store in [*training, evaluation] for _, part in store.left]
    if not left:
        return []
    client = left[0].future.client
    known = [frame for tag, store in training if (frame := store_frame(client, store, tag)) is not None]
    queries = store_frame(client, evaluation[1], evaluation[0])
    if not known or queries is None:
        return []
    query, copy, distance = distributed_leaks(
        client, dd.concat(known) if len(known) > 1 else known[0], queries, radius if radius else -1
    )
    return [
        ((q[1], q[2]), k[0], (k[1], k[2]), None if d == EXACT else int(d))
        for q, k, d in zip(row_positions(query), row_positions(copy), distance.tolist())
    ]


def store_frame(client: Client, store: ColumnStore, tag: int) -> dd.DataFrame | None:
    """A column's frame (`hash_columns`) of the parts left on ``client``'s cluster, each made on
    the worker holding it, and of the values the driver holds (of a dataset that kept its
    column, or a record whose worker died), sent to the cluster. None: no values."""
    import dask.dataframe as dd

    parts = [(partition, part) for partition, part in store.left if part.count]
    made = [
        client.submit(
            part_frame, part.future, store.check_id, store.dtype, _row_base(tag, partition), pure=False
        )
        for partition, part in parts
    ]
    here = store.here()
    if len(here.values):
        partitions, offsets = here.positions[:, 0].astype(np.int64), here.positions[:, 1].astype(np.int64)
        rows = _row_base(tag, 0) | (partitions << OFFSET_BITS) | offsets
        made.append(client.scatter(_values_frame(rows, here.values)))
    if not made:
        return None
    return dd.from_delayed(made, meta=hash_columns(*_no_values()), verify_meta=False)


def part_frame(left: dict[str, tuple[Any, ...]], check_id: str, dtype: str, base: int) -> pd.DataFrame:
    """On the worker: the frame of one partition's column left there (`LeftColumns.left`), its
    values taken as the column's ``dtype``, as the driver's store takes them (`ColumnStore.add`)."""
    offsets, values = left[check_id][:2]
    return _values_frame(base + np.asarray(offsets, np.int64), np.asarray(values, dtype))


def row_positions(rows: np.ndarray) -> list[tuple[int, int, int]]:
    """(tag, partition, offset) of each row number."""
    rows = np.asarray(rows, np.int64)
    tags = rows >> (PARTITION_BITS + OFFSET_BITS)
    partitions = (rows >> OFFSET_BITS) & ((1 << PARTITION_BITS) - 1)
    offsets = rows & ((1 << OFFSET_BITS) - 1)
    return list(zip(tags.tolist(), partitions.tolist(), offsets.tolist()))


def _row_base(tag: int, partition: int) -> int:
    return (tag << (PARTITION_BITS + OFFSET_BITS)) | (partition << OFFSET_BITS)


def _values_frame(rows: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    """A frame of a column's values: `duplicate`'s identities, or `split-leak`'s packed
    identities, hashes and crops (`scrub.checks.splits.identity_parts`)."""
    if values.dtype.itemsize == IDENTITY_ONLY:
        return hash_columns(rows, values, np.full(len(values), NO_HASH, np.uint64))
    identities, hashes, crops, _ = identity_parts(values)
    return hash_columns(rows, identities, hashes, crops)


def _no_values() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.empty(0, np.int64), np.empty(0, "S16"), np.empty(0, np.uint64)


def _later_copies(part: pd.DataFrame) -> pd.DataFrame:
    """Each row of a partition whose identity an earlier row has, with the first such row (the
    partition holds every row of its identities), grouped as `duplicate` groups them."""
    part = part.sort_values(ROW, kind="stable")
    rows = part[ROW].to_numpy(np.int64)
    words = np.stack(
        [part[IDENTITY_HIGH].to_numpy(np.uint64), part[IDENTITY_LOW].to_numpy(np.uint64)], axis=1
    )
    copies, firsts = later_copies(np.ascontiguousarray(words.astype(">u8")).view("S16").reshape(-1))
    return _pairs(rows[copies], rows[firsts], np.full(len(copies), EXACT, np.int64))
