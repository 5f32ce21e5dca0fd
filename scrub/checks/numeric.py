"""Vectorized checks on numeric rows: HDF5 rows, LMDB arrays, the pixels of float images.

Each batch is profiled once (`profile`): one pass for each row's maximum, one for its minimum,
one for the batch's sum. A row's extremes say at once whether it holds a NaN or an Inf (the
extremes are then NaN or infinite), whether it is all zero (both are 0), and its largest
magnitude, which every magnitude check and the dataset-relative outlier rule judge. A batch whose
profile is clean costs nothing more; only rows that the profile flags are examined exactly.

Magnitudes are judged as training sees them: a float32 loader casts every value to float32, a
layer squares them (a variance, an L2 norm, an MSE loss), mixed precision casts them to float16.
The limits are the exact rounding thresholds of those casts:

* float16 rounds a magnitude of 65520 or more to Inf (its largest finite value is 65504);
* float32 rounds a magnitude of 2^128 - 2^103 (~3.4028236e38) or more to Inf;
* the sum of a row's squares (its L2 norm squared) overflows float32 from ``||x|| >= 2^64``
  (~1.8447e19): one value that large is enough, and so are 768 values of 1e18.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from scrub.checks.base import (
    CheckOptions,
    Column,
    Finding,
    Locate,
    batch_check,
    batch_collector,
    dataset_check,
    reader_check,
    record_check,
    value_counts,
)
from scrub.checks.labels import integral_labels
from scrub.records import Batch, Carries, Pieces, Record, Severity

FP16_MAX = 65504.0
#: The smallest magnitude that float16 rounds to Inf (65504 plus half of its last step, 32).
FP16_OVERFLOW = 65520.0
F32_MAX = float(np.finfo(np.float32).max)
#: The smallest magnitude that float32 rounds to Inf (its largest value plus half a step).
F32_OVERFLOW = 2.0**128 - 2.0**103
#: From this L2 norm on, the sum of a row's squares is Inf in float32 (2^64 squared is 2^128).
SQUARE_OVERFLOW = 2.0**64
#: Training precisions (`--precision`): what the checks and the replay judge against.
PRECISIONS = ("float32", "float16", "bfloat16")
#: How training normalizes each record (`--normalization`): not at all (or not declared), or by
#: the record's own statistics (per-image or per-row standardization: (x - mean) / std).
NORMALIZATIONS = ("none", "per-record")


def constant_severity(options: CheckOptions) -> Severity | None:
    """The severity of a constant record (`constant-image`, `constant-row`, `zero-norm`): an
    error where training is declared to divide each record by its own standard deviation (0
    for it), else the check's default (None)."""
    return Severity.ERROR if options.normalization == "per-record" else None


def constant_hint(options: CheckOptions) -> str:
    """What a constant record's message adds when `constant_severity` made it an error."""
    return " (--normalization per-record)" if constant_severity(options) is not None else ""


@dataclass
class Profile:
    """What one pass over a batch found; the checks judge it."""

    rows: np.ndarray  # the batch as (n, row size); (1, 0) for a row read in pieces
    floating: bool
    nonfinite_rows: np.ndarray  # row numbers with a NaN or Inf (exact)
    zero_rows: np.ndarray  # row numbers that are all zero (exact)
    #: per row, the largest magnitude as float64 (NaN or Inf for a row with a NaN or an Inf)
    magnitudes: np.ndarray
    low: float | None  # min / max of the finite values, None when there are none
    high: float | None
    total: float  # sum of the finite values
    finite_values: int
    nonfinite_values: int
    #: a row larger than a block: read again, piece by piece, for the details of a finding
    pieces: Pieces | None = None

    @property
    def dtype(self) -> np.dtype:
        return self.pieces.dtype if self.pieces is not None else self.rows.dtype

    @property
    def width(self) -> int:
        """Values per row."""
        return self.pieces.size if self.pieces is not None else self.rows.shape[1]

    def values(self, row: int) -> Iterator[np.ndarray]:
        """A row's values, flat, in one piece or (a row larger than a block) several."""
        if self.pieces is not None:
            yield from self.pieces.read()
        else:
            yield self.rows[row]

    @property
    def largest(self) -> float:
        """The largest finite magnitude in the batch (0 when there is none)."""
        if self.low is None:
            return 0.0
        assert self.high is not None  # set together with low
        return max(abs(self.low), abs(self.high))


def profile(batch: Batch) -> Profile:
    """Profile a batch once (cached in ``batch.meta``) for every numeric check and the stats."""
    cached = batch.meta.get("profile")
    if cached is not None:
        return cached
    if isinstance(batch.data, Pieces):
        result = _profile_pieces(batch.data)
    else:
        data = np.asarray(batch.data)
        result = _profile_rows(data.reshape(len(data), -1))
    batch.meta["profile"] = result
    return result


def _profile_rows(rows: np.ndarray) -> Profile:
    floating = rows.dtype.kind in "fc"
    if rows.size == 0:
        nothing = np.empty(0, int)
        return Profile(rows, floating, nothing, nothing, np.zeros(len(rows)), None, None, 0.0, 0, 0)
    if rows.dtype.kind == "c":
        return _profile_complex(rows)
    return _profile_real(rows, floating)


def _profile_pieces(pieces: Pieces) -> Profile:
    """One row's profile, combined from its pieces': NaN and Inf propagate through the largest
    magnitude, a row is all zero when every piece is, extremes and sums combine."""
    magnitude, zero, low, high = 0.0, True, None, None
    total, finite_values, nonfinite_values = 0.0, 0, 0
    for piece in pieces.read():
        part = _profile_rows(np.asarray(piece).reshape(1, -1))
        if not part.rows.size:
            continue
        part_magnitude = float(part.magnitudes[0])
        magnitude = part_magnitude if math.isnan(part_magnitude) else max(magnitude, part_magnitude)
        zero = zero and len(part.zero_rows) == 1
        if part.low is not None:
            low = part.low if low is None else min(low, part.low)
            high = part.high if high is None else max(high, cast(float, part.high))
        total += part.total
        finite_values += part.finite_values
        nonfinite_values += part.nonfinite_values
    floating = np.dtype(pieces.dtype).kind in "fc"
    nonfinite = np.flatnonzero([floating and not math.isfinite(magnitude)])
    zero_rows = np.flatnonzero([zero and pieces.size > 0])
    return Profile(
        np.empty((1, 0), pieces.dtype),
        floating,
        nonfinite,
        zero_rows,
        np.array([magnitude]),
        low,
        high,
        total,
        finite_values,
        nonfinite_values,
        pieces,
    )


def _profile_real(rows: np.ndarray, floating: bool) -> Profile:
    if floating and rows.dtype not in _SIGN_MASKS:  # big-endian or extended floats: as float64
        with np.errstate(over="ignore"):
            rows = rows.astype(np.float64)
    low = high = None
    if floating and rows.shape[1] < WIDE_ROW:
        magnitudes, nonfinite, zero = _narrow_magnitudes(rows)
    else:
        # NaN propagates through max and min, and an Inf is an extreme: the extremes of a row say
        # whether it holds a NaN or an Inf, whether it is all zero, and how large it is.
        starts = np.arange(0, rows.size, rows.shape[1])
        flat = rows.reshape(-1)
        row_max, row_min = np.maximum.reduceat(flat, starts), np.minimum.reduceat(flat, starts)
        high64, low64 = row_max.astype(np.float64), row_min.astype(np.float64)
        with np.errstate(invalid="ignore"):
            magnitudes = np.maximum(high64, -low64)
        nonfinite = np.flatnonzero(~np.isfinite(magnitudes)) if floating else np.empty(0, int)
        zero = np.flatnonzero((row_max == 0) & (row_min == 0))
        if len(nonfinite) == 0:
            low, high = float(low64.min()), float(high64.max())
    if len(nonfinite) == 0:  # the fast, common case: no NaN or Inf anywhere
        with np.errstate(over="ignore"):
            total = _total(rows)
            if not math.isfinite(total):  # finite values whose float32 sum overflows
                total = float(rows.sum(dtype=np.float64))
        if low is None:
            low, high = float(rows.min()), float(rows.max())
        return Profile(rows, floating, nonfinite, zero, magnitudes, low, high, total, rows.size, 0)
    clean = np.flatnonzero(np.isfinite(magnitudes))
    suspects = rows[nonfinite]
    finite_values = suspects[np.isfinite(suspects)]
    parts = [v for v in (rows[clean], finite_values) if v.size]
    low = min(float(v.min()) for v in parts) if parts else None
    high = max(float(v.max()) for v in parts) if parts else None
    with np.errstate(over="ignore"):
        total = float(rows[clean].sum(dtype=np.float64)) + float(finite_values.sum(dtype=np.float64))
    count = finite_values.size + len(clean) * rows.shape[1]
    return Profile(rows, True, nonfinite, zero, magnitudes, low, high, total, count, rows.size - count)


def _total(rows: np.ndarray) -> float:
    """The sum of the 2-D ``rows`` (for the mean). Float rows are summed by `np.einsum`, several
    times faster than `np.sum`'s pairwise sum, which took a large share of a block's profile:
    wide rows one sum per row in their dtype, then those in float64 (more accurate than
    `np.sum`); narrow rows in one sum, accurate enough for a mean. Integers by `np.sum`, which
    widens them (einsum would wrap them); float16 in float64 (its own sum rounds each block's
    total to 3 digits). Speeds and errors: docs/benchmarks.md, "Design measurements"."""
    if rows.dtype.kind == "f" and rows.dtype.itemsize >= 4 and rows.dtype.isnative:
        if rows.shape[1] >= WIDE_ROW:
            return float(np.einsum("ij->i", rows).sum(dtype=np.float64))
        return float(np.einsum("ij->", rows))
    return float(rows.sum(dtype=np.float64 if rows.dtype.kind == "f" else None))


#: Rows at least this wide get their extremes from two per-row reductions; narrower float rows
#: from one over their bits (see `_narrow_magnitudes`): on wide rows the two plain reductions
#: are faster, on narrow rows NumPy's per-row overhead makes one pass over the bits (plus the
#: batch's min, max and sum) win (see docs/benchmarks.md, "Design measurements").
WIDE_ROW = 128
#: float dtype -> (the integer type of its bits, the mask that clears the sign, the bits of +Inf)
_SIGN_MASKS: dict[np.dtype, tuple[type[np.signedinteger], int, int]] = {
    np.dtype(np.float16): (np.int16, 0x7FFF, 0x7C00),
    np.dtype(np.float32): (np.int32, 0x7FFFFFFF, 0x7F800000),
    np.dtype(np.float64): (np.int64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000),
}
_SCRATCH = threading.local()


def _narrow_magnitudes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each row's largest magnitude as float64, NaN/Inf for a non-finite row; the non-finite
    rows; the all-zero rows), from one per-row maximum of the bits with the sign cleared.

    IEEE floats without their sign bit order like the integers of their bits, and every NaN
    lies above +Inf: the row's maximum says whether it holds a NaN or an Inf (>= Inf's bits),
    whether it is all zero (0; -0.0 included) and how large it is. One reduction instead of two
    pays on narrow rows, where NumPy's per-row overhead dominates.
    """
    kind, mask, infinity = _SIGN_MASKS[rows.dtype]
    bits = np.ascontiguousarray(rows).view(kind)
    scratch = getattr(_SCRATCH, "array", None)
    if scratch is None or scratch.dtype != bits.dtype or scratch.size < bits.size:
        scratch = _SCRATCH.array = np.empty(bits.size, bits.dtype)
    cleared = np.bitwise_and(bits.reshape(-1), kind(mask), out=scratch[: bits.size])
    largest = np.maximum.reduceat(cleared, np.arange(0, bits.size, rows.shape[1]))
    nonfinite = np.flatnonzero(largest >= infinity)
    zero = np.flatnonzero(largest == 0)
    magnitudes = largest.view(rows.dtype).astype(np.float64)
    if len(nonfinite):
        nan_rows = nonfinite[largest[nonfinite] > infinity]
        magnitudes[nan_rows] = np.nan
    return magnitudes, nonfinite, zero


def _profile_complex(rows: np.ndarray) -> Profile:
    """Complex rows (rare): judged by the real and imaginary parts' magnitudes."""
    parts = np.abs(np.stack([rows.real, rows.imag])).max(axis=0)
    found = _profile_real(parts.astype(rows.real.dtype, copy=False), True)
    zero = np.flatnonzero(~rows.any(axis=1))
    return Profile(
        rows,
        True,
        found.nonfinite_rows,
        zero,
        found.magnitudes,
        found.low,
        found.high,
        found.total,
        found.finite_values,
        found.nonfinite_values,
    )


def _magnitudes64(rows: np.ndarray) -> np.ndarray:
    """|values| as float64 (exact for every float32, integer and float64 value that matters)."""
    with np.errstate(invalid="ignore"):
        if rows.dtype.kind == "c":
            return np.maximum(np.abs(rows.real), np.abs(rows.imag)).astype(np.float64)
        return np.abs(rows.astype(np.float64, copy=False))


ROW_COUNT_MISMATCH = reader_check(
    "row-count-mismatch",
    Severity.ERROR,
    """The data and label datasets of a file disagree on the number of rows.

    What it finds:
        An HDF5 file whose `label` dataset has more or fewer rows than its `data` dataset
        (reported once per file, with key `*`). scrub checks the rows both have.
    Why it breaks training:
        Caffe's HDF5Data layer pairs rows by position: every row after a missing or extra one is
        trained with its neighbour's label, or the layer aborts.
    Example:
        `train.h5` has 10,000 data rows and 9,999 labels.
    What fix does:
        Sets the whole file aside, copied byte for byte into the quarantine (whatever
        `--severity`): when the counts disagree, which label belongs to which row is unknown.
    """,
    needs=Carries.ROWS,
)


@batch_check("nonfinite-data", Severity.ERROR)
def nonfinite_data(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """A NaN, +Inf or -Inf value in a row.

    What it finds:
        Rows with any non-finite value; details count NaN, +Inf and -Inf and give the first
        flat position inside the row.
    Why it breaks training:
        One NaN input makes the forward pass NaN, the loss NaN, and every weight NaN after the
        next update: the classic "loss is NaN" after hours of training.
    Example:
        Row 1234 of `train.h5` has a NaN at position 17.
    What fix does:
        Moves the row to the quarantine.
    """
    found = profile(batch)
    rows = np.asarray(found.nonfinite_rows)
    if not len(rows):
        return []
    if found.pieces is not None:
        counted: Iterable[tuple[int, int, int, int, int]] = [_nonfinite_in_pieces(found)]
    else:
        values = found.rows[rows]  # counted for every flagged row at once: a broken shard flags them all
        nan, posinf, neginf = np.isnan(values), values == np.inf, values == -np.inf
        firsts = np.argmax(nan | posinf | neginf, axis=1).tolist()
        counted = zip(
            rows.tolist(),
            nan.sum(axis=1).tolist(),
            posinf.sum(axis=1).tolist(),
            neginf.sum(axis=1).tolist(),
            firsts,
        )
    findings = []
    messages: dict[tuple[int, int, int, int], str] = {}  # rows of a broken block often read alike
    for row, nans, posinfs, neginfs, first in counted:
        message = messages.get((nans, posinfs, neginfs, first))
        if message is None:
            summary = ", ".join(
                f"{n} {name}" for n, name in ((nans, "NaN"), (posinfs, "+Inf"), (neginfs, "-Inf")) if n
            )
            message = messages[(nans, posinfs, neginfs, first)] = f"{summary} (first at position {first})"
        details = {"nan": nans, "posinf": posinfs, "neginf": neginfs, "first_position": first}
        findings.append((row, Finding(message, details)))
    return findings


def _nonfinite_in_pieces(found: Profile) -> tuple[int, int, int, int, int]:
    """(row, NaNs, +Infs, -Infs, first non-finite position) of a row read in pieces."""
    nans = posinfs = neginfs = position = 0
    first = -1
    for piece in found.values(0):
        nan, posinf, neginf = np.isnan(piece), piece == np.inf, piece == -np.inf
        bad = nan | posinf | neginf
        if first < 0 and bad.any():
            first = position + int(np.argmax(bad))
        nans += int(nan.sum())
        posinfs += int(posinf.sum())
        neginfs += int(neginf.sum())
        position += piece.size
    return 0, nans, posinfs, neginfs, first


@batch_check("fp16-overflow", Severity.WARNING)
def fp16_overflow(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """A finite value that becomes Inf in float16: magnitude 65520 or more (65504 is float16's
    largest finite value; from 65520 the cast rounds to Inf).

    What it finds:
        Rows with a finite value of magnitude >= 65520, in float or integer data; details give
        how many and the largest magnitude. A warning when training in float32 (the default
        `--precision`), an **error** with `--precision float16`; not run with `--precision
        bfloat16`, which has float32's range.
    Why it breaks training:
        Under AMP / float16 the value turns into Inf on the first cast and the loss into NaN,
        though the same data trains fine in float32 (measured: PyTorch's float16 autocast gives an
        Inf in the first linear layer for any input above 65504).
    Example:
        Raw sensor counts up to 70000 stored as float32.
    What fix does:
        With `--precision float16`, moves the row to the quarantine. In float32 nothing by
        default (a warning): scale the data, or quarantine with `--severity warning`.
    """
    if options.precision == "bfloat16":
        return []
    found = profile(batch)
    if found.largest < FP16_OVERFLOW:
        return []
    severity = Severity.ERROR if options.precision == "float16" else None
    hint = "" if severity is None else " (--precision float16)"
    return _overflows(found, FP16_OVERFLOW, "float16", hint, severity)


@batch_check("float32-overflow", Severity.ERROR)
def float32_overflow(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """A finite float64 value beyond float32's range: Inf once a float32 loader casts it.

    What it finds:
        Rows of float64 (or longer) data with a finite value of magnitude >= 2^128 - 2^103
        (~3.4028236e38, float32's largest value 3.4028235e38 plus half a step: from there the
        cast rounds to Inf); details give how many and the largest magnitude. Integer data
        cannot reach it (2^64 is far below).
    Why it breaks training:
        Every float32 pipeline casts the data (`torch.from_numpy(x).float()`, `ToTensor`,
        Caffe's blobs): the value arrives as Inf, and the first layer turns it into NaN. No
        NaN check on the stored float64 data sees it.
    Example:
        Row 4711 of `features.h5` (float64) holds 1e39.
    What fix does:
        Moves the row to the quarantine.
    """
    found = profile(batch)
    if found.dtype.itemsize <= 4 or found.dtype.kind not in "fc" or found.largest < F32_OVERFLOW:
        return []
    return _overflows(found, F32_OVERFLOW, "float32")


@batch_check("square-overflow", Severity.ERROR)
def square_overflow(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """A row whose sum of squares overflows float32: its L2 norm is 2^64 (~1.8e19) or more.

    What it finds:
        Rows whose L2 norm, computed exactly on the values as float32 holds them, is >= 2^64
        (= sqrt(2^128)): the sum of their squares is Inf in float32. One value of magnitude
        >= 2^64 is enough; so are 768 values of 1e18. Finite values only (a NaN or Inf is
        `nonfinite-data`, a float64 value beyond float32 `float32-overflow`); details give the
        norm and the largest magnitude.
    Why it breaks training:
        Every layer that squares its input goes Inf on such a row: an L2 normalization or a
        cosine similarity (norm Inf; PyTorch's `F.normalize` then silently returns zeros), an
        MSE loss (measured: Inf in PyTorch 2.13 on CPU), a BatchNorm variance accumulated in
        float32 (PyTorch's CPU kernel accumulates in float64 and survives it). In a plain linear
        layer, one SGD step on a row of ~1e30 leaves weights near 1e26, and a later batch
        overflows (measured, see "Does the cleaned copy train?" in docs/replay.md).
    Example:
        A sentinel of 1e30 written into a row of `features.h5`.
    What fix does:
        Moves the row to the quarantine.
    """
    found = profile(batch)
    width = max(1, found.width)
    if found.largest * math.sqrt(width) < SQUARE_OVERFLOW:  # no row can reach it
        return []
    candidates = np.flatnonzero(~(found.magnitudes * math.sqrt(width) < SQUARE_OVERFLOW))
    findings = []
    for row in candidates.tolist():
        scaled_squares, largest, any_finite = 0.0, 0.0, False
        for values in found.values(row):
            with np.errstate(over="ignore"):  # as a float32 loader casts them; beyond, float32-overflow
                magnitude = _magnitudes64(values).astype(np.float32).astype(np.float64)
            finite = magnitude[np.isfinite(magnitude)]
            if finite.size:
                any_finite = True
                scaled_squares += float(np.square(finite / SQUARE_OVERFLOW).sum())
                largest = max(largest, float(finite.max()))
        if not any_finite:
            continue
        norm = math.sqrt(scaled_squares) * SQUARE_OVERFLOW
        if norm < SQUARE_OVERFLOW:
            continue
        findings.append(
            (
                int(row),
                Finding(
                    f"L2 norm {norm:.3g}: the sum of its squares overflows float32 (largest |value| "
                    f"{largest:g})",
                    {"norm": norm, "max_abs": largest},
                ),
            )
        )
    return findings


def _overflows(
    found: Profile, limit: float, type_name: str, hint: str = "", severity: Severity | None = None
) -> list[tuple[int, Finding]]:
    """A finding for each row holding values that become Inf in ``type_name`` (at ``limit``)."""
    return [
        (
            row,
            Finding(
                f"{count} value(s) become Inf in {type_name} (largest {largest:g}){hint}",
                {"count": count, "max_abs": largest},
                severity,
            ),
        )
        for row, count, largest in _rows_beyond(found, limit)
    ]


def _rows_beyond(found: Profile, limit: float) -> list[tuple[int, int, float]]:
    """(row, how many, the largest) of the rows holding finite values of magnitude >= ``limit``."""
    candidates = np.flatnonzero(~(found.magnitudes < limit))  # NaN rows too: they may hold one
    result = []
    for row in candidates.tolist():
        count, largest = 0, 0.0
        for values in found.values(row):
            magnitude = _magnitudes64(values)
            magnitude = magnitude[np.isfinite(magnitude)]
            if magnitude.size:
                count += int((magnitude >= limit).sum())
                largest = max(largest, float(magnitude.max()))
        if count:
            result.append((int(row), count, largest))
    return result


#: A row whose largest magnitude is this many times the typical row's is a `magnitude-outlier`.
MAGNITUDE_FACTOR = 1000.0
#: ...when such rows are rare: at most this share of the rows (or this many, in small datasets).
MAGNITUDE_RARE_SHARE = 0.01
MAGNITUDE_RARE_ROWS = 3
#: Histogram resolution of row magnitudes: bins of 2^(1/8) (9%).
MAGNITUDE_BINS_PER_OCTAVE = 8
#: The positions of at most this many rows per bin are kept (beyond, the bin is common).
MAGNITUDE_KEPT_PER_BIN = 1000
#: Bins are kept positive (the store keeps the positions of negative values).
_BIN_OFFSET = 10_000


def magnitude_bins(values: np.ndarray) -> np.ndarray:
    """The histogram bin of each (positive, finite) magnitude: floor(8 * log2(m)), offset."""
    return np.floor(np.log2(values) * MAGNITUDE_BINS_PER_OCTAVE) + _BIN_OFFSET


def _bin_floor(bins: np.ndarray) -> np.ndarray:
    return np.exp2((bins - _BIN_OFFSET) / MAGNITUDE_BINS_PER_OCTAVE)


def _row_magnitude(record: Record) -> float | None:
    return record.meta.get("magnitude")


@dataset_check(
    "magnitude-outlier", Severity.WARNING, collect=_row_magnitude, dtype="magnitude", needs=Carries.ARRAY
)
def magnitude_outlier(column: Column, options: CheckOptions, locate: Locate) -> list:
    """A row whose largest |value| is over 1000 times the typical row's, in a dataset where such
    rows are rare.

    What it finds:
        The typical row magnitude is the median, over the dataset's finite, non-zero rows, of
        each row's largest |value| (from a histogram with bins 9% wide). Rows whose largest
        |value| exceeds 1000 x that median are flagged when they are rare: at most 1% of the
        rows (or 3 rows), and at most 1000 of about the same magnitude (more are a second population, a
        unit change between shards say: nothing is flagged, and the summary's notes say so);
        details give the row's largest |value|, the median and the factor. The factor was
        chosen from data: over 100,000 rows, the largest row magnitude was at most 2.6x the
        median for Gaussian features, 68x for Student-t(3), 533x for log-normal (sigma 2) and
        86x for rows with log-normal scales; only Cauchy-like data (the largest up to 1.5e5x)
        crosses it, and there the flagged rows are extreme indeed.
    Why it breaks training:
        An input orders of magnitude larger than the rest gives a gradient as much larger: with
        plain SGD, one step on it throws the weights far from where the other data put them (a
        row 1e6 times the rest multiplies a linear layer's weights by thousands), later losses
        explode, and in float16 they become Inf. Usually a unit error or a sentinel value.
    Example:
        One row of `features.h5` holds 1e6 where the others lie within -3..3.
    What fix does:
        Nothing by default (a warning); with `--severity warning` the row is quarantined.
    """
    return judge_magnitudes(column, MAGNITUDE_FACTOR, "rows", "largest |value|", "the typical row's")


def judge_magnitudes(column: Column, factor: float, things: str, what: str, typical: str) -> list:
    """The rare entries of a ``magnitude`` column over ``factor`` times its median (see
    `magnitude_outlier`, and `label_magnitude_outlier` for labels); a note, and no finding,
    when they are not rare. ``things``, ``what``, ``typical``: the words of the messages."""
    if column.histogram is None or len(column.values) == 0:
        return []
    bins, counts = column.histogram
    order = np.argsort(bins)
    bins, counts = bins[order], counts[order]
    total = int(counts.sum())
    middle = int(np.searchsorted(np.cumsum(counts), (total + 1) / 2))
    median = float(_bin_floor(bins[middle]) * 2 ** (0.5 / MAGNITUDE_BINS_PER_OCTAVE))  # the bin's middle
    threshold = factor * median
    reaching = _bin_floor(bins + 1) > threshold  # bins that hold rows above the threshold
    above = np.flatnonzero(column.values > threshold)  # complete unless one of their bins went common
    count = max(len(above), int(counts[_bin_floor(bins) > threshold].sum()))
    if count == 0:
        return []
    if (counts[reaching] > MAGNITUDE_KEPT_PER_BIN).any() or count > max(
        MAGNITUDE_RARE_ROWS, MAGNITUDE_RARE_SHARE * total
    ):
        note = (
            f"{count:,} of {total:,} {things} have a {what} over {factor:g}x {typical} ({median:.3g}): "
            "too many to be outliers, none flagged (a second population?)"
        )
        return [(None, Finding(note, {"rows": count, "median_max_abs": median}))]
    judgement = []
    positions = [(int(column.positions[i, 0]), int(column.positions[i, 1])) for i in above]
    for i, position in zip(above, positions):
        value = float(column.values[i])
        judgement.append(
            (
                position,
                Finding(
                    f"{what} {value:.3g} is {value / median:.3g}x {typical} ({median:.3g})",
                    {"max_abs": value, "median_max_abs": median, "factor": value / median},
                ),
            )
        )
    return judgement


@batch_collector("magnitude-outlier")
def _row_magnitudes(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    magnitudes = profile(batch).magnitudes
    with np.errstate(invalid="ignore"):
        rows = np.flatnonzero(np.isfinite(magnitudes) & (magnitudes > 0))
    return rows, magnitudes[rows]


@batch_check("zero-norm", Severity.WARNING)
def zero_norm(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """A row whose values are all zero.

    What it finds:
        Rows of only zeros (an unwritten row of a pre-allocated dataset, a failed feature
        extraction), and float or 16/32-bit images all of whose pixels are 0. A warning; an
        **error** with `--normalization per-record`, as for `constant-row` (a row of one non-zero
        value), whose rule it shares.
    Why it breaks training:
        L2-normalization and cosine similarity divide by the row's norm, and per-record
        standardization by its standard deviation: 0/0 = NaN. Otherwise it is a sample with no
        signal, usually a pipeline failure.
    Example:
        Rows 9000-9999 of `features.h5` were allocated but never written.
    What fix does:
        Nothing by default (a warning); with `--normalization per-record` (an error), or with
        `--severity warning`, the rows are quarantined.
    """
    found = profile(batch)
    if found.width == 0:
        return []  # empty rows are empty-record's business
    finding = Finding(f"all values are zero{constant_hint(options)}", severity=constant_severity(options))
    return [(int(row), finding) for row in found.zero_rows]


@batch_check("constant-row", Severity.WARNING)
def constant_row(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """A row whose values are all the same, and not all zero: its standard deviation is 0.

    What it finds:
        Rows of two or more values that are all equal to one non-zero finite value (a feature
        extractor that returned its bias, a sensor stuck at one reading, a fill value written over
        a row), and float or 16/32-bit images whose pixels all have one value. All-zero rows are
        `zero-norm`'s and rows holding a NaN or an Inf `nonfinite-data`'s; a row of one value is
        not judged (no row of one value has a spread). A warning; an **error** with
        `--normalization per-record`, which declares that training standardizes each row by its
        own statistics. Details: `value`.
    Why it breaks training:
        Per-record standardization, (x - mean) / std over the row, divides 0 by 0 on it: every
        value becomes NaN, and so do the loss and, one step later, the weights (measured on a
        constant float image in PyTorch: `(x - x.mean()) / x.std()` is NaN everywhere). Without
        it, the row carries no signal within itself: usually a pipeline failure.
    Example:
        Row 512 of `features.h5` holds 0.5 in all of its 128 columns.
    What fix does:
        Nothing by default (a warning); with `--normalization per-record` (an error), or with
        `--severity warning`, the row is moved to the quarantine.
    """
    found = profile(batch)
    if found.width < 2:
        return []
    if found.pieces is not None:  # one row larger than a block: its extremes say it
        same = found.low is not None and found.low == found.high and not found.nonfinite_values
        rows = np.flatnonzero([same and not len(found.zero_rows)])
        values: list[int | float | str] = [cast(float, found.low)] * len(rows)
    else:
        rows = _constant_rows(found)
        values = [v if isinstance(v, (int, float)) else str(v) for v in found.rows[rows, 0].tolist()]
    if not len(rows):
        return []
    severity, hint = constant_severity(options), constant_hint(options)
    return [
        (int(row), Finding(f"all {found.width} values are {_shown(value)}{hint}", {"value": value}, severity))
        for row, value in zip(rows.tolist(), values)
    ]


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _constant_rows(found: Profile) -> np.ndarray:
    """The rows of ``found.rows`` whose values are all equal, other than the all-zero and the
    non-finite ones. A constant row's first value is not 0 (else it is all zero), its magnitude
    is the row's largest (which the profile has) and it equals the last value: only the rare
    rows that pass all three are compared whole. The first column is read once (a strided read
    touches as much memory as the batch for narrow rows: copied, it is read once); the costs
    are in docs/benchmarks.md, "Design measurements"."""
    rows = found.rows
    first = np.ascontiguousarray(rows[:, 0])
    magnitude = np.abs(first) if first.dtype.kind == "f" else _magnitudes64(first)  # float: exact
    same = (first != 0) & (magnitude == found.magnitudes)
    same[found.nonfinite_rows] = False  # a row of +Inf: nonfinite-data's
    candidates = np.flatnonzero(same)
    candidates = candidates[rows[candidates, -1] == first[candidates]]
    if not len(candidates):
        return candidates
    picked = rows[candidates]
    return candidates[(picked == picked[:, :1]).all(axis=1)]


@batch_check("empty-record")
def empty_rows(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    if batch.data.size or len(batch) == 0:
        return []
    return [(row, Finding("empty row (0 values)", {"size": 0})) for row in range(len(batch))]


@record_check("nonfinite-label", Severity.ERROR, needs=Carries.LABEL)
def nonfinite_label(record: Record, options: CheckOptions) -> Finding | None:
    """A NaN or infinite label.

    What it finds:
        Float labels that are NaN, +Inf or -Inf (Caffe stores HDF5 labels as float32).
    Why it breaks training:
        Cross-entropy casts the label to an index (NaN becomes 0 or garbage); a regression loss
        becomes NaN outright.
    Example:
        Row 42 of `train.h5` has label NaN.
    What fix does:
        Moves the record to the quarantine.
    """
    label = record.label
    if isinstance(label, float) and not math.isfinite(label):
        return Finding(f"label is {label}", {"label": str(label)})
    return None


@batch_check("nonfinite-label")
def nonfinite_labels(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    if batch.labels is None:
        return []
    labels = np.asarray(batch.labels)
    if labels.ndim == 2:  # label vectors: a row with any NaN or Inf
        finite = np.isfinite(labels)
        bad = np.flatnonzero(~finite.all(axis=1))
        return [
            (
                int(row),
                Finding(
                    f"label vector holds {int((~finite[row]).sum())} NaN/Inf value(s) "
                    f"(first at column {int(np.flatnonzero(~finite[row])[0])})",
                    {"nonfinite": int((~finite[row]).sum())},
                ),
            )
            for row in bad
        ]
    bad = np.flatnonzero(~np.isfinite(labels))
    return [(int(row), Finding(f"label is {labels[row]}", {"label": str(labels[row])})) for row in bad]


# -- continuous labels (regression targets: `--label-kind`) -------------------------------------


def _label_magnitude(label: object) -> float | None:
    """A record's label as a finite magnitude, or None (no label, text, NaN or Inf)."""
    if isinstance(label, bool) or not isinstance(label, (int, float, np.integer, np.floating)):
        return None
    magnitude = abs(float(label))
    return magnitude if math.isfinite(magnitude) else None


def _label_overflow(magnitude: float, label: float, options: CheckOptions) -> Finding | None:
    """The finding of one finite label of ``magnitude``, or None (see `label_overflow`)."""
    if magnitude >= SQUARE_OVERFLOW:
        beyond = " and it is Inf in float32 already" if magnitude >= F32_OVERFLOW else ""
        return Finding(
            f"label {label:g}: its square overflows float32 (|label| >= 2^64){beyond}: a squared-error loss "
            "on it is Inf",
            {"label": label, "limit": SQUARE_OVERFLOW},
        )
    if options.precision == "float16" and magnitude >= FP16_OVERFLOW:
        return Finding(
            f"label {label:g} becomes Inf in float16 (--precision float16)",
            {"label": label, "limit": FP16_OVERFLOW},
        )
    return None


@record_check("label-overflow", Severity.ERROR, needs=Carries.VALUE_LABELS)
def label_overflow(record: Record, options: CheckOptions) -> Finding | None:
    """A continuous label (a regression target) that the loss cannot hold: its square overflows
    float32, or, with `--precision float16`, it overflows float16.

    What it finds:
        Where labels are continuous values (`--label-kind`, read as such by default when most
        float labels are not integers): a finite label of magnitude >= 2^64 (~1.8447e19), whose
        square is Inf in float32 (a float64 label beyond float32's range, Inf once cast, is one of
        them); with `--precision float16`, a label of magnitude >= 65520, which float16 rounds to
        Inf. NaN and Inf labels are `nonfinite-label`'s; a label far larger than the others but
        below these limits is `label-magnitude-outlier`'s. Details: `label`, `limit`.
    Why it breaks training:
        A squared-error loss (MSE, the usual regression loss) squares the difference between
        prediction and label: past 2^64 the square is Inf in float32, the loss is Inf and its
        gradient NaN. A model trained in float16 cannot even hold the label.
    Example:
        Row 77 of the `label` dataset of `train.h5` holds 3e20 where the targets lie within
        -5..5.
    What fix does:
        Moves the record to the quarantine.
    """
    magnitude = _label_magnitude(record.label)
    if magnitude is None:
        return None
    return _label_overflow(magnitude, float(cast(Any, record.label)), options)


@batch_check("label-overflow")
def labels_overflowing(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    if batch.labels is None:
        return []
    labels = np.asarray(batch.labels, dtype=np.float64)
    if labels.ndim == 2:  # a vector of targets: judged by its largest finite value
        with np.errstate(invalid="ignore"):
            shown = np.where(np.isfinite(labels), labels, 0.0)
        largest = np.argmax(np.abs(shown), axis=1) if shown.size else np.zeros(len(shown), int)
        labels = shown[np.arange(len(shown)), largest] if shown.size else labels[:, 0]
    limit = FP16_OVERFLOW if options.precision == "float16" else SQUARE_OVERFLOW
    with np.errstate(invalid="ignore"):
        rows = np.flatnonzero(np.isfinite(labels) & (np.abs(labels) >= limit))
    found = []
    for row in rows.tolist():
        finding = _label_overflow(abs(float(labels[row])), float(labels[row]), options)
        if finding is not None:
            found.append((row, finding))
    return found


#: A continuous label whose magnitude is this many times the typical label's is a
#: `label-magnitude-outlier` (when such labels are rare: the `magnitude-outlier` rules).
LABEL_MAGNITUDE_FACTOR = 1e6


def _record_label_magnitude(record: Record) -> float | None:
    magnitude = _label_magnitude(record.label)
    return magnitude if magnitude else None  # 0 has no magnitude to compare


@dataset_check(
    "label-magnitude-outlier",
    Severity.ERROR,
    collect=_record_label_magnitude,
    dtype="magnitude",
    needs=Carries.VALUE_LABELS,
)
def label_magnitude_outlier(column: Column, options: CheckOptions, locate: Locate) -> list:
    """A continuous label (a regression target) over a million times the typical label's
    magnitude, in a dataset where such labels are rare.

    What it finds:
        Where labels are continuous values (`--label-kind`): the typical label magnitude is the
        median |label| over the dataset's finite, non-zero labels (a label vector: its largest
        |value|), from a histogram with bins 9% wide; a label over 1,000,000 x that median is
        flagged when such labels are rare, by `magnitude-outlier`'s rules (at most 1% of the
        labels, or 3; else a note says how many and none is flagged). Details: `max_abs`,
        `median_max_abs`, `factor`. The factor was chosen from data: over 100,000 targets, the
        largest |target| was 7x the median for Gaussian targets, 98x for Student-t(3), 6.5e3x
        for log-normal (sigma 2), 5.2e5x for log-normal (sigma 3), 4.5e4x for Cauchy and 3e5x for
        Pareto (alpha 1): the rule flags sentinel and corrupt values, not heavy tails.
    Why it breaks training:
        A squared-error loss grows with the square of the label: one target a million times the
        others gives a gradient a million times the usual, and one plain SGD step throws the
        weights so far that the next losses overflow (a target of 1.4e19 among values near 1 is
        finite, its square too, and still ends the run). Adam divides the step by the gradient's
        running magnitude and survives the step, but its statistics stay dominated by it.
    Example:
        Two targets of 1.4e19 (a float written over its bits) among 4,096 in -3..3.
    What fix does:
        Moves the record to the quarantine (an error: `--check-severity
        label-magnitude-outlier=warning` keeps such labels where they are real).
    """
    return judge_magnitudes(
        column, LABEL_MAGNITUDE_FACTOR, "labels", "|label|", "the typical label's magnitude"
    )


@batch_collector("label-magnitude-outlier")
def _label_magnitudes(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    if batch.labels is None:
        return np.empty(0, int), np.empty(0)
    labels = np.abs(np.asarray(batch.labels, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        if labels.ndim == 2:
            labels = np.where(np.isfinite(labels), labels, 0.0).max(axis=1) if labels.size else labels[:, 0]
        rows = np.flatnonzero(np.isfinite(labels) & (labels > 0))
    return rows, labels[rows]


def label_stats(labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """Histogram (values, counts) of the integral, finite labels of a batch; for label vectors,
    the rows whose column k is at least 0.5 (one-hot: the class counts; multi-label: the
    positives per class)."""
    labels = np.asarray(labels)
    if labels.ndim == 2:
        with np.errstate(invalid="ignore"):
            positives = (labels >= 0.5).sum(axis=0)
        return np.arange(labels.shape[1]), positives
    whole = integral_labels(labels)
    with np.errstate(invalid="ignore"):
        whole &= np.abs(labels) < INT64_LIMIT  # beyond, no int64 holds it (label-outlier's business)
    return value_counts(labels[whole].astype(np.int64))


#: 2^63: the first magnitude that no int64 holds (casting it gives garbage and a NumPy warning)
INT64_LIMIT = 2.0**63
