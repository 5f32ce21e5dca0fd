"""`split-leak`'s two joins (`scrub.checks.splits`) as a dask.distributed computation, for runs
whose hashes a single process should not hold: the driver builds the graph and receives only
the pairs found, which are few; the identities and hashes stay on the workers from the moment
they are made until they are dropped.

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

from typing import TYPE_CHECKING

import numpy as np

from scrub.checks.perceptual import NO_HASH, near_pairs

if TYPE_CHECKING:
    import dask.dataframe as dd
    import pandas as pd  # type: ignore[import-untyped]  # no stubs in the environment
    from distributed import Client

#: the columns of a split's frame (`hash_columns`)
ROW, IDENTITY_HIGH, IDENTITY_LOW, PHASH = "row", "identity_high", "identity_low", "phash"
IDENTITY = [IDENTITY_HIGH, IDENTITY_LOW]
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


def hash_columns(rows: np.ndarray, identities: np.ndarray, hashes: np.ndarray) -> pd.DataFrame:
    """One partition of a split's frame: each record's global row number, identity (``S16``) and
    perceptual hash (uint64). Made where the partition's records are (a worker), never gathered."""
    import pandas as pd

    high, low = identity_words(identities)
    return pd.DataFrame(
        {
            ROW: np.asarray(rows, np.int64),
            IDENTITY_HIGH: high,
            IDENTITY_LOW: low,
            PHASH: np.asarray(hashes, np.uint64),
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
    found = client.compute(leak_frame(known, queries, radius, partitions), sync=True)
    found = found.sort_values(QUERY)
    return (
        found[QUERY].to_numpy(np.int64),
        found[KNOWN].to_numpy(np.int64),
        found[DISTANCE].to_numpy(np.int64),
    )


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
    known = part[part[SIDE] == KNOWN_SIDE].sort_values(ROW).drop_duplicates(IDENTITY)
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
        _tagged(frame, [ROW, PHASH], side).map_partitions(_band_rows, layout, meta=_band_meta())
        for frame, side in ((known, KNOWN_SIDE), (queries, QUERY_SIDE))
    ]
    shuffled = dd.concat(exploded).shuffle(on=[BAND, BAND_KEY], npartitions=partitions)
    return shuffled.map_partitions(_near_in, radius, meta=_pairs_meta())


def _band_rows(part: pd.DataFrame, layout: list[tuple[int, int]]) -> pd.DataFrame:
    """A row a band of each hash of ``part`` (`NO_HASH` matches nothing: dropped here, before
    it costs a shuffle), keyed by the band's bits."""
    import pandas as pd

    usable = part[part[PHASH].to_numpy(np.uint64) != NO_HASH]
    hashes = usable[PHASH].to_numpy(np.uint64)
    keys = [(hashes >> np.uint64(low)) & np.uint64((1 << width) - 1) for low, width in layout]
    return pd.DataFrame(
        {
            BAND: np.repeat(np.arange(len(layout), dtype=np.int8), len(usable)),
            BAND_KEY: np.concatenate(keys) if keys else np.empty(0, np.uint64),
            ROW: np.tile(usable[ROW].to_numpy(np.int64), len(layout)),
            PHASH: np.tile(hashes, len(layout)),
            SIDE: np.tile(usable[SIDE].to_numpy(np.int8), len(layout)),
        }
    )


def _near_in(part: pd.DataFrame, radius: int) -> pd.DataFrame:
    """Each query's nearest known hash among a partition's rows, a band at a time (a row is in
    a partition at most once a band: a band's rows are a `near_pairs` of their own)."""
    import pandas as pd

    found = [_pairs_meta()]
    for _, band in part.groupby(BAND, sort=False):
        known = band[band[SIDE] == KNOWN_SIDE].sort_values(ROW)  # the first of equals: the smallest row
        queries = band[band[SIDE] == QUERY_SIDE]
        near, nearest, distance = near_pairs(
            known[PHASH].to_numpy(np.uint64), queries[PHASH].to_numpy(np.uint64), radius
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
