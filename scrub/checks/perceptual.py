"""A 64-bit perceptual hash of an image (pHash), from the decode the scan makes anyway, and the
Hamming-radius lookup that finds the images near one another by it.

The hash is imagehash's ``phash`` (after Zauner, "Implementation and Benchmarking of Perceptual
Image Hash Functions", 2010): the grayscale image resized to 32 x 32 (Pillow's Lanczos), its
two-dimensional DCT-II, the 8 x 8 lowest frequencies, each bit set where the coefficient is
above their median, row by row, the first the most significant. A JPEG's comes from the
reduced decode that judges it (libjpeg's DCT scaling to the smallest size of at least 32 pixels a
side, then Lanczos), not from a second, full decode: within a few bits of the full image's
(docs/checks.md, "Splits"). A hash has at most 32 bits set (a bit per coefficient above the
median); a constant image has none (`NO_HASH`, which names no image: its coefficients but the
mean are rounding noise).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from PIL import Image

#: the side of the grayscale image the DCT is taken of, and of the block of frequencies kept
SIDE = 32
LOW = 8
MIDDLE = LOW * LOW // 2
#: what a record without a hash holds in its column (a constant image's hash is 0 too: it names
#: nothing that another image could be near)
NO_HASH = 0
#: the 8 lowest rows of the DCT-II matrix of size 32 (scipy's unnormalized ``dct``, up to a
#: factor that the median threshold ignores)
_DCT = np.cos(np.pi * (2 * np.arange(SIDE)[None, :] + 1) * np.arange(LOW)[:, None] / (2 * SIDE))
#: candidate pairs one step of `near_pairs` looks at, at most (its memory: ~40 bytes a pair)
PAIRS_PER_STEP = 1 << 22


def reduced(gray: np.ndarray | Image.Image) -> np.ndarray:
    """The 32 x 32 grayscale a hash is made of (uint8), from a grayscale image of any size (a 2-D
    uint8 array or an ``L`` image): resized with Pillow's Lanczos unless it is that size."""
    if isinstance(gray, np.ndarray) and gray.shape == (SIDE, SIDE):
        return np.asarray(gray, np.uint8)
    image = gray if isinstance(gray, Image.Image) else Image.fromarray(np.asarray(gray, np.uint8))
    if image.size != (SIDE, SIDE):
        image = image.resize((SIDE, SIDE), Image.Resampling.LANCZOS)
    return np.asarray(image, np.uint8)


def phashes(grays: np.ndarray) -> np.ndarray:
    """The pHash (uint64) of each of ``grays`` ((n, 32, 32) uint8, from `reduced`), all at once:
    a partition's images are hashed with a few NumPy calls, not a few per image (each call costs
    a scan of small JPEGs more than the arithmetic does)."""
    grays = np.asarray(grays, np.uint8).reshape(-1, SIDE, SIDE)
    low = (_DCT @ grays.astype(np.float64) @ _DCT.T).reshape(len(grays), LOW * LOW)
    ordered = np.sort(low, axis=1)
    bits = low > ((ordered[:, MIDDLE - 1] + ordered[:, MIDDLE]) / 2)[:, None]  # above the median
    hashed = np.packbits(bits, axis=1).view(">u8").reshape(-1).astype(np.uint64)
    flat = grays.reshape(len(grays), -1)
    hashed[flat.min(axis=1) == flat.max(axis=1)] = NO_HASH  # constant: its bits would be noise
    return hashed


def phash(gray: np.ndarray | Image.Image) -> int:
    """The pHash of one grayscale image of any size (`phashes` of its `reduced` form)."""
    return int(phashes(reduced(gray)[None])[0])


#: the bits set in each byte value (NumPy before 2.0 has no ``bitwise_count``)
_BITS_SET = np.array([bin(value).count("1") for value in range(256)], np.int64)


def distances(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Hamming distances of two arrays of 64-bit hashes, element by element."""
    different = np.bitwise_xor(first, second).astype(np.uint64)
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(different).astype(np.int64)
    return _BITS_SET[different.reshape(-1).view(np.uint8).reshape(*different.shape, 8)].sum(axis=-1)


def _bands(radius: int) -> Iterator[tuple[int, np.uint64]]:
    """(shift, mask) of each of ``radius + 1`` bands of the 64 bits: two hashes within
    ``radius`` bits of each other agree on at least one band (pigeonhole)."""
    count = radius + 1
    edges = np.linspace(0, 64, count + 1).round().astype(int)
    for low, high in zip(edges[:-1], edges[1:]):
        yield int(low), np.uint64((1 << int(high - low)) - 1)


def near_pairs(
    known: np.ndarray, queries: np.ndarray, radius: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each of ``queries`` (uint64 hashes) within ``radius`` bits of one of ``known``: its
    index, the index of the nearest known hash (the first of equals), and the distance. Known
    hashes are looked up by bands (multi-index hashing: `_bands`), so the cost follows the pairs
    that agree on a band, not every pair; `NO_HASH` matches nothing."""
    best = np.full(len(queries), radius + 1, np.int64)
    match = np.full(len(queries), -1, np.int64)
    usable_known = np.flatnonzero(known != NO_HASH)
    usable_queries = np.flatnonzero(queries != NO_HASH)
    if radius < 0 or not len(usable_known) or not len(usable_queries):
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    for shift, mask in _bands(min(radius, 63)):
        keys = (known[usable_known] >> np.uint64(shift)) & mask
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        wanted = (queries[usable_queries] >> np.uint64(shift)) & mask
        starts = np.searchsorted(sorted_keys, wanted, side="left")
        counts = np.searchsorted(sorted_keys, wanted, side="right") - starts
        for chunk in _steps(counts):
            step_counts = counts[chunk]
            total = int(step_counts.sum())
            if not total:
                continue
            query = np.repeat(chunk, step_counts)
            offsets = np.arange(total) - np.repeat(np.cumsum(step_counts) - step_counts, step_counts)
            candidate = usable_known[order[np.repeat(starts[chunk], step_counts) + offsets]]
            found = distances(queries[usable_queries[query]], known[candidate])
            near = found <= radius
            rows, found, candidate = usable_queries[query[near]], found[near], candidate[near]
            if not len(rows):
                continue
            # each query's nearest in this step (among equals, the first known), then against
            # what the steps before found
            ranked = np.lexsort((candidate, found, rows))
            rows, found, candidate = rows[ranked], found[ranked], candidate[ranked]
            first = np.ones(len(rows), bool)
            first[1:] = rows[1:] != rows[:-1]
            rows, found, candidate = rows[first], found[first], candidate[first]
            better = (found < best[rows]) | ((found == best[rows]) & (candidate < match[rows]))
            best[rows[better]] = found[better]
            match[rows[better]] = candidate[better]
    hit = np.flatnonzero(match >= 0)
    return hit, match[hit], best[hit]


def _steps(counts: np.ndarray) -> Iterator[np.ndarray]:
    """Consecutive runs of query positions whose candidates number at most `PAIRS_PER_STEP`
    (one query alone may have more: its run is itself)."""
    total = np.cumsum(counts)
    start = 0
    while start < len(counts):
        base = total[start - 1] if start else 0
        stop = int(np.searchsorted(total, base + PAIRS_PER_STEP, side="right"))
        stop = max(stop, start + 1)
        yield np.arange(start, stop)
        start = stop
