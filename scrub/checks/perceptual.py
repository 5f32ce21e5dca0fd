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

import itertools
import math
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
#: the checks that compare images by their hashes: a scan makes the hashes when one of them runs
COMPARES_IMAGES = frozenset({"near-duplicate", "split-leak"})
#: candidate pairs one step of `near_pairs` looks at, at most (its memory: ~40 bytes a pair)
PAIRS_PER_STEP = 1 << 18


def reduced(gray: np.ndarray | Image.Image) -> np.ndarray:
    """The 32 x 32 grayscale a hash is made of (uint8), from a grayscale image of any size (a 2-D
    uint8 array or an ``L`` image): resized with Pillow's Lanczos unless it is that size."""
    if isinstance(gray, np.ndarray) and gray.shape == (SIDE, SIDE):
        return np.asarray(gray, np.uint8)
    image = gray if isinstance(gray, Image.Image) else Image.fromarray(np.asarray(gray, np.uint8))
    if image.size != (SIDE, SIDE):
        image = image.resize((SIDE, SIDE), Image.Resampling.LANCZOS)
    return np.asarray(image, np.uint8)


#: the share of each side a training image's central crops leave out (`crop_phashes`): a copy
#: cut by about that much a side is near the crop's hash, where it is ~13 bits from the whole
#: image's at 5% (docs/checks.md, "Changed copies of images")
CROPS = (0.025, 0.05)


def _zoom(share: float) -> np.ndarray:
    """The (`SIDE`, `SIDE`) matrix that resamples a row of `SIDE` pixels to its central part
    without ``share`` of each end, stretched back to `SIDE` pixels (linear interpolation)."""
    centres = share * SIDE + (np.arange(SIDE) + 0.5) * (1 - 2 * share) - 0.5
    lower = np.clip(np.floor(centres).astype(int), 0, SIDE - 1)
    upper = np.clip(lower + 1, 0, SIDE - 1)
    weight = centres - np.floor(centres)
    matrix = np.zeros((SIDE, SIDE))
    matrix[np.arange(SIDE), lower] += 1 - weight
    matrix[np.arange(SIDE), upper] += weight
    return matrix


#: the DCT of each central crop (`CROPS`) of a 32 x 32 grayscale: the crop resampled, then
#: transformed, in one matrix
_CROP_DCTS = [_DCT @ _zoom(share) for share in CROPS]


def crop_phashes(grays: np.ndarray) -> np.ndarray:
    """The pHash ((n, len(`CROPS`)) uint64) of each central crop of each of ``grays`` ((n, 32, 32)
    uint8, from `reduced`): the crop resampled from the 32 x 32 grayscale the image's own hash is
    made of, so that it costs a hash, not a second decode or resize."""
    grays = np.asarray(grays, np.uint8).reshape(-1, SIDE, SIDE)
    return np.stack([_hashed(transform, grays) for transform in _CROP_DCTS], axis=1)


def phashes(grays: np.ndarray) -> np.ndarray:
    """The pHash (uint64) of each of ``grays`` ((n, 32, 32) uint8, from `reduced`), all at once:
    a partition's images are hashed with a few NumPy calls, not a few per image (each call costs
    a scan of small JPEGs more than the arithmetic does)."""
    return _hashed(_DCT, np.asarray(grays, np.uint8).reshape(-1, SIDE, SIDE))


def _hashed(transform: np.ndarray, grays: np.ndarray) -> np.ndarray:
    """`phashes` with ``transform`` (8 x 32) as the rows' and the columns' DCT."""
    low = (transform @ grays.astype(np.float64) @ transform.T).reshape(len(grays), LOW * LOW)
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


#: the widest band `near_pairs` looks up in a table of all its values (2^22 entries: 32 MiB)
MAX_BAND_BITS = 22
#: the relative costs `_layout` weighs (measured on NumPy arrays of a million): a probe of one
#: query, a candidate pair compared, an entry of a band's table, one probe's pass over the queries
PROBE_COST, PAIR_COST, TABLE_COST, PASS_COST = 2.0, 1.0, 0.1, 5000.0


def near_pairs(
    known: np.ndarray, queries: np.ndarray, radius: int, earlier: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each of ``queries`` (uint64 hashes) within ``radius`` bits of one of ``known``: its
    index, the index of the nearest known hash (the first of equals), and the distance; `NO_HASH`
    matches nothing. ``earlier``: the hashes of one column looked up in itself (``queries`` is
    ``known``), each among those before it only, so that an image is paired with an earlier one
    and never with itself.

    Multi-index hashing (Norouzi et al., 2012): the 64 bits are cut into bands; two hashes within
    ``radius`` bits differ in at most ``radius // bands`` bits of one band (pigeonhole), so each
    query's band is probed at its own value and at every value that many bits away, in a table
    of the known hashes' band values. The cost follows the pairs that agree on a probe, not every
    pair; `_layout` picks the bands for the sizes at hand."""
    usable_known = np.flatnonzero(known != NO_HASH)
    usable_queries = np.flatnonzero(queries != NO_HASH)
    nearest = _Nearest(known, queries, radius, earlier, usable_queries)
    if radius < 0 or not len(usable_known) or not len(usable_queries):
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    edges, flips = _layout(min(radius, 63), len(usable_known), len(usable_queries))
    for low, high in zip(edges[:-1], edges[1:]):
        width = high - low
        band = np.uint64((1 << width) - 1)
        keys = ((known[usable_known] >> np.uint64(low)) & band).astype(np.int64)
        order = usable_known[np.argsort(keys, kind="stable")]
        starts = np.zeros((1 << width) + 1, np.int64)
        np.cumsum(np.bincount(keys, minlength=1 << width), out=starts[1:])
        values = ((queries[usable_queries] >> np.uint64(low)) & band).astype(np.int64)
        for mask in _masks(width, flips):
            wanted = values ^ mask
            first = starts[wanted]
            counts = starts[wanted + 1] - first
            probed = np.flatnonzero(counts)  # most probes of a wide band find nothing
            nearest.compare(order, probed, first[probed], counts[probed])
    return nearest.found()


def _within(width: int, flips: int) -> int:
    """How many values of ``width`` bits are at most ``flips`` bits from one of them."""
    return sum(math.comb(width, count) for count in range(min(flips, width) + 1))


def _masks(width: int, flips: int) -> list[int]:
    """Each value of ``width`` bits with at most ``flips`` bits set: XORed with a band's value,
    one of the values within ``flips`` bits of it."""
    return [
        sum(1 << bit for bit in bits)
        for count in range(min(flips, width) + 1)
        for bits in itertools.combinations(range(width), count)
    ]


def _layout(radius: int, known: int, queries: int) -> tuple[list[int], int]:
    """The band edges and the bits a probe flips that cost least for ``known`` hashes and
    ``queries`` (`PROBE_COST`...): fewer, wider bands cost more probes and fewer candidate pairs."""
    choices = []
    for count in range(-(-64 // MAX_BAND_BITS), max(radius + 1, 4) + 1):
        edges = np.linspace(0, 64, count + 1).round().astype(int).tolist()
        widths = [high - low for low, high in zip(edges[:-1], edges[1:])]
        flips = radius // count
        probed = sum(_within(width, flips) for width in widths)
        share = sum(_within(width, flips) / (1 << width) for width in widths)
        cost = (
            probed * (queries * PROBE_COST + PASS_COST)
            + known * queries * share * PAIR_COST
            + sum(1 << width for width in widths) * TABLE_COST
        )
        choices.append((cost, edges, flips))
    _, edges, flips = min(choices, key=lambda choice: choice[0])
    return edges, flips


class _Nearest:
    """Each query's nearest known hash within the radius (among equals, the first), kept as
    the probes of `near_pairs` bring candidates."""

    def __init__(
        self, known: np.ndarray, queries: np.ndarray, radius: int, earlier: bool, usable: np.ndarray
    ) -> None:
        self.known, self.queries, self.radius, self.earlier, self.usable = (
            known,
            queries,
            radius,
            earlier,
            usable,
        )
        self.best = np.full(len(queries), radius + 1, np.int64)
        self.match = np.full(len(queries), -1, np.int64)

    def compare(
        self, candidates: np.ndarray, probed: np.ndarray, starts: np.ndarray, counts: np.ndarray
    ) -> None:
        """Compare the ``probed`` usable queries, each with its ``counts`` known rows from
        ``starts`` in ``candidates``, a step of at most `PAIRS_PER_STEP` pairs at a time."""
        for chunk in _steps(counts):
            step_counts = counts[chunk]
            total = int(step_counts.sum())
            query = np.repeat(probed[chunk], step_counts)
            offsets = np.arange(total) - np.repeat(np.cumsum(step_counts) - step_counts, step_counts)
            candidate = candidates[np.repeat(starts[chunk], step_counts) + offsets]
            rows = self.usable[query]
            found = distances(self.queries[rows], self.known[candidate])
            near = found <= self.radius
            if self.earlier:
                near &= candidate < rows
            self._keep(rows[near], found[near], candidate[near])

    def _keep(self, rows: np.ndarray, found: np.ndarray, candidate: np.ndarray) -> None:
        """Each query's nearest in a step, then against what the steps before found."""
        if not len(rows):
            return
        ranked = np.lexsort((candidate, found, rows))
        rows, found, candidate = rows[ranked], found[ranked], candidate[ranked]
        first = np.ones(len(rows), bool)
        first[1:] = rows[1:] != rows[:-1]
        rows, found, candidate = rows[first], found[first], candidate[first]
        best, match = self.best[rows], self.match[rows]
        better = (found < best) | ((found == best) & (candidate < match))
        self.best[rows[better]] = found[better]
        self.match[rows[better]] = candidate[better]

    def found(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hit = np.flatnonzero(self.match >= 0)
        return hit, self.match[hit], self.best[hit]


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
