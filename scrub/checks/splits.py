"""Checks of a run's splits: a record of an evaluation split that is also in a training split,
an image that is nearly one of its images (`scrub.checks.perceptual`), or (``--near-text``) a
text that nearly is one of its texts (`scrub.checks.minhash`).

A record's content identity is a 128-bit XXH3 digest of what it holds, whatever its key or file
name (`content_identity`, the value `duplicate` compares too): an encoded file by its bytes, a
token sequence by its ids (`tokens_identity`), a text by its normalized form
(`normalized_text`), an array value or an array row by its dtype, shape and bytes
(`array_identity`); an image has a perceptual hash as well. The
identities of each split are a column of 24 bytes a record (`IDENTITY_BYTES`); `split_leak`
matches an evaluation split's against the training splits' by sorting, and the hashes by bands
(`scrub.checks.perceptual.near_pairs`), so a run costs a sort of its records' identities and
the pairs of hashes that share a band, not a comparison of every pair. With ``--near-text``
each value also holds its text's MinHash signature (`SIGNATURE_BYTES`), looked up by LSH bands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any, cast

import numpy as np
import xxhash

from scrub.checks.base import Check, CheckOptions, Column, batch_collector, split_check
from scrub.checks.minhash import (
    NO_SIGNATURE,
    band_keys,
    near_text_pairs,
    normalized_text,
    signatures,
)
from scrub.checks.perceptual import CROPS, NO_HASH, crop_phashes, near_pairs, phashes
from scrub.records import Batch, Pieces, Record, Severity, TextParts, TokenRows

#: a leaked record: (its row in the evaluation split's column, (the training split's number, the
#: row of its copy in that split's column), None for an exact copy, the perceptual hashes'
#: distance in bits (an int), or the texts' estimated Jaccard similarity (a float)); the first
#: copy in the run's order of the splits
Leak = tuple[int, tuple[int, int], int | float | None]
#: a record's column value: its content identity (16 bytes), then its perceptual hash (8 bytes,
#: big-endian; `NO_HASH` for a record that is no image, or whose image has no hash)
IDENTITY_BYTES = 24
#: with ``--near-text``, what follows: the record's MinHash signature (`scrub.checks.minhash`,
#: 128 uint32 values; `NO_SIGNATURE` for a record that is no text)
SIGNATURE_BYTES = 512
#: in a training split's column, what follows the hash: the hashes of its image's central crops
#: (`scrub.checks.perceptual.CROPS`, 8 bytes each; `NO_HASH` for a record that is no image)
CROP_BYTES = 8 * len(CROPS)
#: a column's parts (`identity_parts`)
Parts = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]


_NO_HASH = NO_HASH.to_bytes(8, "big")


def content_identity(record: Record) -> bytes | None:
    """16 bytes naming what ``record`` holds (None: nothing to name: it could not be read, or
    holds nothing, an empty sequence or array, which `empty-record` judges)."""
    digest = record.meta.get("digest")  # an encoded file's bytes (`scrub.checks.properties`)
    if digest is not None:
        return digest
    payload, kind = record.payload, record.meta.get("kind")
    if payload is None:
        return None
    if kind == "tokens":
        return tokens_identity(cast(np.ndarray, payload))
    if kind == "text":
        parts = cast(TextParts, payload)
        text = "\x1f".join(f"{role}\x1e{normalized_text(part)}" for role, part, _ in parts)
        return xxhash.xxh3_128_digest(b"text\0" + text.encode())
    if isinstance(payload, np.ndarray):
        return array_identity(payload)
    return None


#: the seeds of a token sequence's identity, by how its ids are hashed (`tokens_identity`)
_NARROW_TOKENS, _WIDE_TOKENS = (xxhash.xxh3_64_intdigest(name) for name in (b"tokens u2", b"tokens i8"))


def tokens_identity(ids: np.ndarray) -> bytes | None:
    """A sequence's identity by its ids, whatever dtype its store keeps them in: hashed as
    little-endian uint16 when every id is in [0, 65536) (a flat store of uint16 ids, the most
    common, is hashed as it lies, without a conversion), else as int64; None for no ids."""
    if not len(ids):
        return None
    narrow = ids.dtype == _U2 or (ids.dtype.kind in "iu" and ids.min() >= 0 and ids.max() < 1 << 16)
    if narrow:
        return xxhash.xxh3_128_digest(np.ascontiguousarray(ids, _U2).data, _NARROW_TOKENS)
    return xxhash.xxh3_128_digest(np.ascontiguousarray(ids, _I8).data, _WIDE_TOKENS)


def token_row_identities(rows: TokenRows) -> np.ndarray:
    """`tokens_identity` of each sequence of a flat store's batch (``S16``; zeros for an empty
    one), in a few vectorized passes: a store of another dtype than uint16 is converted once
    for the batch, not once a sequence."""
    bounds = np.asarray(rows.bounds, np.int64)
    tokens = np.asarray(rows.tokens)[: int(bounds[-1])]
    identities = np.zeros(len(rows), "S16")
    filled = np.flatnonzero(bounds[1:] > bounds[:-1])
    if not len(filled):
        return identities
    narrow = np.ones(len(rows), bool)
    if tokens.dtype != _U2:
        starts = bounds[filled]
        narrow[filled] = (np.minimum.reduceat(tokens, starts) >= 0) & (
            np.maximum.reduceat(tokens, starts) < 1 << 16
        )
    digest = xxhash.xxh3_128_digest
    for ids, seed, width in (
        (filled[narrow[filled]], _NARROW_TOKENS, 2),
        (filled[~narrow[filled]], _WIDE_TOKENS, 8),
    ):
        if not len(ids):
            continue
        held = np.ascontiguousarray(tokens, _U2 if width == 2 else _I8).data.cast("B")
        begins, ends = (bounds[ids] * width).tolist(), (bounds[ids + 1] * width).tolist()
        identities[ids] = [digest(held[begin:end], seed) for begin, end in zip(begins, ends)]
    return identities


def array_identity(value: np.ndarray) -> bytes | None:
    """An array's identity: its dtype, shape and bytes (equal bytes of another dtype or shape
    are other values); None for an array of no values."""
    if not value.size or value.dtype.hasobject:
        return None
    return xxhash.xxh3_128_digest(np.ascontiguousarray(value).data, _array_seed(value.dtype, value.shape))


def array_row_identities(batch: Batch) -> np.ndarray:
    """`array_identity` of each row of an array dataset's batch (``S16``; zeros for rows of no
    values), a row read in pieces (`Pieces`) hashed piece by piece."""
    data = batch.data
    identities = np.zeros(len(batch), "S16")
    row_shape = tuple(data.shape[1:])
    if not int(np.prod(row_shape)) or np.dtype(data.dtype).hasobject:
        return identities
    seed = _array_seed(np.dtype(data.dtype), row_shape)
    if isinstance(data, Pieces):
        state = xxhash.xxh3_128(seed=seed)
        for piece in data.read():
            state.update(np.ascontiguousarray(piece).data)
        identities[0] = state.digest()
        return identities
    flat = np.ascontiguousarray(data).reshape(len(data), -1)
    digest = xxhash.xxh3_128_digest
    identities[:] = [digest(row.data, seed) for row in flat]
    return identities


def _array_seed(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    return xxhash.xxh3_64_intdigest(f"array\0{dtype.str}{tuple(shape)}".encode())


def row_identities(batch: Batch) -> np.ndarray:
    """The content identity of each row of ``batch`` (``S16``, zeros for a row of nothing): a
    flat store's sequences by their ids, an array dataset's rows by their values; made once
    for a batch whichever checks collect them (`duplicate`, `split-leak`)."""
    made = batch.meta.get("identities")
    if made is None:
        if isinstance(batch.data, TokenRows):
            made = token_row_identities(batch.data)
        else:
            made = array_row_identities(batch)
        batch.meta["identities"] = made
    return made


_U2, _I8 = np.dtype("<u2"), np.dtype("<i8")


def image_identity(record: Record) -> tuple[bytes, np.ndarray] | None:
    """What `near-duplicate` collects of an image: its content identity and what its perceptual
    hash is made of (None: no image, or no hash made of it)."""
    gray: np.ndarray | None = getattr(record.meta.get("image"), "reduced", None)
    identity = content_identity(record) if gray is not None else None
    return None if identity is None or gray is None else (identity, gray)


def split_identity(record: Record) -> bytes | tuple[bytes, np.ndarray] | None:
    """What `split-leak` collects of a record: its content identity, with what an image's
    perceptual hash is made of (`pack_identities` makes the hashes a partition at a time)."""
    image = image_identity(record)
    if image is not None:
        return image
    identity = content_identity(record)
    return None if identity is None else identity + _NO_HASH


def pack_identities(values: list, crops: bool = False) -> np.ndarray:
    """A partition's `split_identity` values as its column: each identity and its record's
    perceptual hash (`NO_HASH` where it has none), the images' hashed in one call; with
    ``crops``, each image's hashes of its central crops too (`CROP_BYTES` more a record,
    `crop_phashes`). A value already packed (a cached record's) is kept."""
    width = IDENTITY_BYTES + (CROP_BYTES if crops else 0)
    packed = _packed_bytes(values, width)
    images = [number for number, value in enumerate(values) if isinstance(value, tuple)]
    if not images:
        return packed.view(f"S{width}").reshape(-1)
    joined = b"".join([values[number][0] for number in images])
    packed[images, :16] = np.frombuffer(joined, np.uint8).reshape(-1, 16)
    grays = np.stack([values[number][1] for number in images])
    packed[images, 16:IDENTITY_BYTES] = _hash_bytes(phashes(grays))
    if crops:
        packed[images, IDENTITY_BYTES:] = _hash_bytes(crop_phashes(grays))
    return packed.view(f"S{width}").reshape(-1)


def _packed_bytes(values: list, width: int) -> np.ndarray:
    """Rows of ``width`` bytes (a writable (n, ``width``) uint8 array): each value that is bytes
    already (packed, or an identity with its `NO_HASH`) zero-padded to the width (a zero hash is
    `NO_HASH`, a zero signature none), the others zero for their packing."""
    rows = np.array([value if isinstance(value, bytes) else b"" for value in values], f"S{width}")
    return np.frombuffer(rows.tobytes(), np.uint8).reshape(len(values), width).copy()


def _hash_bytes(hashes: np.ndarray) -> np.ndarray:
    """Hashes (uint64, a row of them each or one each) as big-endian bytes, a row a record."""
    return hashes.astype(">u8").view(np.uint8).reshape(len(hashes), -1)


def collect_split(record: Record, texts: bool = False) -> Any:
    """What `split-leak` collects of a record in a variant of its column (`split_variant`):
    `split_identity` (the crops' hashes are made from the same grayscale); with ``texts``, a
    text's identity and its parts' text (its MinHash signature's making)."""
    if texts and record.meta.get("kind") == "text" and record.payload is not None:
        identity = content_identity(record)
        if identity is not None:
            return identity, "\n".join(part for _, part, _ in cast(TextParts, record.payload))
    return split_identity(record)


def pack_split(values: list, crops: bool = False, texts: bool = False) -> np.ndarray:
    """`pack_identities` of a variant's values; with ``texts``, each identity followed by its
    record's MinHash signature (`scrub.checks.minhash`; `NO_SIGNATURE` for a record that is no
    text), the texts' made in one call."""
    base = IDENTITY_BYTES + (CROP_BYTES if crops else 0)
    width = base + (SIGNATURE_BYTES if texts else 0)
    packed = _packed_bytes(values, width)
    tuples = [number for number, value in enumerate(values) if isinstance(value, tuple)]
    signed = [number for number in tuples if isinstance(values[number][1], str)]
    images = [number for number in tuples if not isinstance(values[number][1], str)]
    if images:
        column = pack_identities([values[number] for number in images], crops)
        packed[images, :base] = np.frombuffer(column.tobytes(), np.uint8).reshape(len(images), base)
    if signed:
        joined = b"".join([values[number][0] for number in signed])
        packed[signed, :16] = np.frombuffer(joined, np.uint8).reshape(-1, 16)
        made = signatures([values[number][1] for number in signed])
        packed[signed, base:] = made.view(np.uint8).reshape(len(signed), SIGNATURE_BYTES)
    return packed.view(f"S{width}").reshape(-1)


def split_variant(check: Check, crops: bool, texts: bool) -> Check:
    """`split-leak` with a wider column: ``crops``, a training split's images hashed at their
    central crops too (a cropped copy is near a crop's hash, not the whole image's); ``texts``
    (``--near-text``), each text's MinHash signature."""
    width = IDENTITY_BYTES + (CROP_BYTES if crops else 0) + (SIGNATURE_BYTES if texts else 0)
    return replace(
        check,
        collect=partial(collect_split, texts=texts),
        pack=partial(pack_split, crops=crops, texts=texts),
        column_dtype=f"S{width}",
    )


def column_layout(width: int) -> tuple[bool, bool]:
    """Whether a `split-leak` column of values ``width`` bytes wide holds central crops' hashes,
    and MinHash signatures (`split_variant`)."""
    texts = width >= IDENTITY_BYTES + SIGNATURE_BYTES
    return width - (SIGNATURE_BYTES if texts else 0) == IDENTITY_BYTES + CROP_BYTES, texts


@split_check(
    "split-leak", Severity.ERROR, collect=split_identity, dtype=f"S{IDENTITY_BYTES}", pack=pack_identities
)
def split_leak(train: Sequence[Column], evaluation: Column, options: CheckOptions) -> list[Leak]:
    """A record of an evaluation split (val, test) holds what a record of a training split holds.

    What it finds:
        In a run of several datasets named as splits (`train`, `val`/`valid`/`validation`/`dev`,
        `test`/`eval`/`holdout`: a folder per split, a file per split, or the children of one
        folder), each record of an evaluation split whose content identity equals a training
        record's: the same bytes for encoded files (images, documents in LMDB, WebDataset,
        TFRecord, Parquet image columns), the same ids for token sequences (JSON Lines, token
        columns, MDS, a Megatron or nanoGPT store's documents or windows), the same normalized
        text (Unicode NFC, case folded, whitespace collapsed) for texts, the same dtype, shape
        and values for array values and rows; and an image whose perceptual hash (pHash, from
        the decode that judges it) is within `--near-distance` bits (default 6) of a training
        image's (or of its central crops': a training image is hashed at 2.5% and 5% off each
        side too): a re-encoded, resized, cropped or brightened copy; with `--near-text J`, a text whose
        estimated Jaccard similarity (MinHash of 5-word shingles) to a training text is at
        least J. Details name the training record (`train`), `match` (`exact`, `perceptual` or
        `minhash`), the `distance` in bits or the `similarity`; records that could not be read
        are counted in a note, not compared.
    Why it breaks training:
        A test record the model was trained on is answered from memory: every metric on the
        evaluation split overstates what the model does on new data, and model selection on a
        leaked validation split picks the model that memorized best (3.25% of CIFAR-10's test
        set has a near-duplicate in its training set; more than 4% of common validation sets
        overlap C4's training text).
    Example:
        `val/cat/0042.jpg` has the same bytes as `train/cat/1337.jpg`.
    What fix does:
        `fix` of the evaluation split removes (or quarantines) the leaked record: the
        evaluation split is the one whose worth the leak destroys, and the training split keeps
        its data. `fix --leak-side train` removes the training copy instead, and keeps the
        evaluation split whole.
    """
    if not len(evaluation.values) or not any(len(column.values) for column in train):
        return []
    # every training record, split after split, each split in dataset order: the first copy of
    # an identity is first after a stable sort, and the first of equally near hashes
    orders = [column.in_dataset_order() for column in train]
    parts = [identity_parts(column.values[order]) for column, order in zip(train, orders)]
    known, known_hashes = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    # each training image at its central crops as well: a cropped copy is near one of them
    crops = np.concatenate([_crops_of(part) for part in parts])
    looked_up = np.concatenate([known_hashes, crops.T.reshape(-1)])
    owners = np.concatenate([np.full(len(order), number) for number, order in enumerate(orders)])
    rows = np.concatenate(orders)
    identities, hashes, _, signed = identity_parts(evaluation.values)
    by_identity = np.argsort(known, kind="stable")
    ordered = known[by_identity]
    found = np.searchsorted(ordered, identities)
    found[found == len(ordered)] = 0
    exact = ordered[found] == identities
    matches: list[tuple[int, int, int | float | None]] = [
        (int(row), int(by_identity[found[row]]), None) for row in np.flatnonzero(exact)
    ]
    rest = np.flatnonzero(~exact)
    if options.near_distance:
        near, nearest, distance = near_pairs(looked_up, hashes[rest], options.near_distance)
        nearest %= len(known_hashes)  # a crop's hash names its image
        matches += [(int(rest[n]), int(k), int(d)) for n, k, d in zip(near, nearest, distance)]
        rest = np.setdiff1d(rest, rest[near])
    if options.near_text and signed is not None:
        matches += _near_texts(parts, signed, rest, options.near_text)
    return sorted((row, (int(owners[first]), int(rows[first])), distance) for row, first, distance in matches)


def _crops_of(part: Parts) -> np.ndarray:
    """A column's hashes of its images' central crops (`NO_HASH` in a column without them)."""
    return part[2] if part[2] is not None else np.full((len(part[0]), len(CROPS)), NO_HASH, np.uint64)


def _near_texts(
    parts: Sequence[Parts],
    signed: np.ndarray,
    rest: np.ndarray,
    threshold: float,
) -> list[tuple[int, int, int | float | None]]:
    """The evaluation texts of rows ``rest`` (signatures ``signed``) whose estimated Jaccard
    similarity to a training text (the training splits' `identity_parts`, one after the other)
    is at least ``threshold``: (row, its nearest, the estimate)."""
    known = np.concatenate(
        [
            part[3]
            if part[3] is not None
            else np.full((len(part[0]), signed.shape[1]), NO_SIGNATURE, np.uint32)
            for part in parts
        ]
    )
    if not len(known) or not len(rest):
        return []
    queries = signed[rest]
    near, nearest, similarity = near_text_pairs(
        band_keys(known), known, band_keys(queries), queries, threshold
    )
    return [(int(rest[n]), int(k), round(float(j), 3)) for n, k, j in zip(near, nearest, similarity)]


def identity_parts(values: np.ndarray) -> Parts:
    """A column's content identities (``S16``), perceptual hashes (uint64, `NO_HASH` where the
    record has none), the hashes of its images' central crops ((n, 2) uint64; None in a column
    without them) and its texts' MinHash signatures ((n, 128) uint32; None in a column without
    them): `column_layout`."""
    width = values.dtype.itemsize if len(values) else IDENTITY_BYTES
    packed = np.frombuffer(values.tobytes(), np.uint8).reshape(len(values), width)
    identities = np.ascontiguousarray(packed[:, :16]).view("S16").reshape(-1)
    hashes = np.ascontiguousarray(packed[:, 16:IDENTITY_BYTES]).view(">u8").reshape(-1).astype(np.uint64)
    with_crops, with_texts = column_layout(width)
    crops = signed = None
    if with_crops:
        cropped = np.ascontiguousarray(packed[:, IDENTITY_BYTES : IDENTITY_BYTES + CROP_BYTES])
        crops = cropped.view(">u8").reshape(len(values), -1).astype(np.uint64)
    if with_texts:
        signed = (
            np.ascontiguousarray(packed[:, width - SIGNATURE_BYTES :])
            .view(np.uint32)
            .reshape(len(values), -1)
        )
        # a value packed without one (a batch's rows) is zero-padded to the column's width: no
        # signature (a signature's 128 values are never all 0 but by a 2^-4096 chance)
        signed[~signed.any(axis=1)] = NO_SIGNATURE
    return identities, hashes, crops, signed


@batch_collector("split-leak")
def _row_identities(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Each row's identity (`row_identities`) and `NO_HASH`: a row of nothing has none."""
    identities = row_identities(batch)
    rows = np.flatnonzero(identities != b"")
    packed = np.empty((len(rows), IDENTITY_BYTES), np.uint8)
    packed[:, :16] = np.frombuffer(np.ascontiguousarray(identities[rows], "S16").tobytes(), np.uint8).reshape(
        -1, 16
    )
    packed[:, 16:] = np.frombuffer(_NO_HASH, np.uint8)
    return rows, packed.view(f"S{IDENTITY_BYTES}").reshape(-1)
