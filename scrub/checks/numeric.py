"""Vectorized checks on numeric rows (HDF5 datasets; LMDB arrays later).

Each batch is profiled once (`profile`): one pass of row sums, one of min, one of max. A batch
whose profile is clean costs nothing more; only rows that the profile flags are examined
exactly. A float32 row sum can overflow to Inf on finite data, and a sum can be 0 on non-zero
data, so every row the sums flag is re-checked exactly before it is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from scrub.checks.base import CheckOptions, Finding, batch_check, reader_check, record_check
from scrub.checks.labels import integral_labels
from scrub.records import Batch, Record, Severity

FP16_MAX = 65504.0


@dataclass
class Profile:
    """What one pass over a batch found; the checks judge it."""

    rows: np.ndarray  # the batch as (n, row size)
    floating: bool
    nonfinite_rows: np.ndarray  # row numbers with a NaN or Inf (exact)
    zero_rows: np.ndarray  # row numbers that are all zero (exact)
    low: float | None  # min / max of the finite values, None when there are none
    high: float | None
    total: float  # sum of the finite values
    finite_values: int
    nonfinite_values: int


def profile(batch: Batch) -> Profile:
    """Profile a batch once (cached in ``batch.meta``) for every numeric check and the stats."""
    cached = batch.meta.get("profile")
    if cached is not None:
        return cached
    data = np.asarray(batch.data)
    rows = data.reshape(len(data), -1)
    floating = np.issubdtype(rows.dtype, np.floating) or np.issubdtype(rows.dtype, np.complexfloating)
    if rows.size == 0:
        result = Profile(rows, floating, np.empty(0, int), np.empty(0, int), None, None, 0.0, 0, 0)
    elif floating:
        result = _profile_floats(rows)
    else:
        sums = rows.sum(axis=1, dtype=np.int64 if np.issubdtype(rows.dtype, np.signedinteger) else np.uint64)
        zero = _exact_zero_rows(rows, np.flatnonzero(sums == 0))
        result = Profile(rows, False, np.empty(0, int), zero, float(rows.min()), float(rows.max()),
                         float(sums.sum(dtype=np.float64)), rows.size, 0)
    batch.meta["profile"] = result
    return result


def _profile_floats(rows: np.ndarray) -> Profile:
    with np.errstate(invalid="ignore", over="ignore"):
        sums = rows.sum(axis=1)
    finite_sums = np.isfinite(sums)
    if finite_sums.all():  # no NaN or Inf anywhere: the fast, common case
        zero = _exact_zero_rows(rows, np.flatnonzero(sums == 0))
        return Profile(rows, True, np.empty(0, int), zero, float(rows.min()), float(rows.max()),
                       float(sums.sum(dtype=np.float64)), rows.size, 0)
    suspects = np.flatnonzero(~finite_sums)
    finite_mask = np.isfinite(rows[suspects])
    nonfinite = suspects[~finite_mask.all(axis=1)]  # the rest overflowed on finite values
    clean = np.flatnonzero(finite_sums)
    finite_values = rows[suspects][finite_mask]
    parts = [v for v in (rows[clean].ravel(), finite_values) if v.size]
    low = min(float(v.min()) for v in parts) if parts else None
    high = max(float(v.max()) for v in parts) if parts else None
    total = float(sums[clean].sum(dtype=np.float64)) + float(finite_values.sum(dtype=np.float64))
    zero = _exact_zero_rows(rows, clean[sums[clean] == 0])
    count = int(finite_mask.sum()) + len(clean) * rows.shape[1]
    return Profile(rows, True, nonfinite, zero, low, high, total, count, rows.size - count)


def _exact_zero_rows(rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    if len(candidates) == 0:
        return candidates
    return candidates[~rows[candidates].any(axis=1)]


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
    needs="rows",
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
    findings = []
    for row in found.nonfinite_rows:
        values = found.rows[row]
        nan, posinf, neginf = np.isnan(values), np.isposinf(values), np.isneginf(values)
        first = int(np.flatnonzero(nan | posinf | neginf)[0])
        counts = {"nan": int(nan.sum()), "posinf": int(posinf.sum()), "neginf": int(neginf.sum())}
        names = {"nan": "NaN", "posinf": "+Inf", "neginf": "-Inf"}
        summary = ", ".join(f"{n} {names[name]}" for name, n in counts.items() if n)
        findings.append((int(row), Finding(f"{summary} (first at position {first})", counts | {"first_position": first})))
    return findings


@batch_check("fp16-overflow", Severity.WARNING)
def fp16_overflow(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """A finite value whose magnitude exceeds 65504: it becomes Inf in float16 / mixed precision.

    What it finds:
        Rows with a finite value above 65504 or below -65504 (float16's largest finite value),
        in float or integer data; details give how many and the largest magnitude.
    Why it breaks training:
        Under AMP / float16 the value turns into Inf on the first cast, and the loss into NaN,
        though the same data trains fine in float32.
    Example:
        Raw sensor counts up to 70000 stored as float32.
    What fix does:
        Nothing by default (a warning): scale the data, or quarantine with `--severity warning`.
    """
    found = profile(batch)
    if found.low is None or (found.low >= -FP16_MAX and found.high <= FP16_MAX):
        return []
    rows = found.rows
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(rows.astype(np.float64, copy=False)) if not found.floating else np.abs(rows)
        over = (magnitude > FP16_MAX) & np.isfinite(magnitude)
    findings = []
    for row in np.flatnonzero(over.any(axis=1)):
        largest = float(magnitude[row][over[row]].max())
        count = int(over[row].sum())
        findings.append((int(row), Finding(f"{count} value(s) beyond float16's range (largest {largest:g})",
                                           {"count": count, "max_abs": largest})))
    return findings


@batch_check("zero-norm", Severity.WARNING)
def zero_norm(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """A row whose values are all zero.

    What it finds:
        Rows of only zeros (an unwritten row of a pre-allocated dataset, a failed feature
        extraction).
    Why it breaks training:
        L2-normalization and cosine similarity divide by the row's norm: 0/0 = NaN. Otherwise it
        is a sample with no signal, usually a pipeline failure.
    Example:
        Rows 9000-9999 of `features.h5` were allocated but never written.
    What fix does:
        Nothing by default (a warning); with `--severity warning` the rows are quarantined.
    """
    found = profile(batch)
    if found.rows.shape[1] == 0:
        return []  # empty rows are empty-record's business
    return [(int(row), Finding("all values are zero")) for row in found.zero_rows]


@batch_check("empty-record")
def empty_rows(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    if np.asarray(batch.data).size or len(batch) == 0:
        return []
    return [(row, Finding("empty row (0 values)", {"size": 0})) for row in range(len(batch))]


@record_check("nonfinite-label", Severity.ERROR, needs="label")
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
    bad = np.flatnonzero(~np.isfinite(batch.labels))
    return [(int(row), Finding(f"label is {batch.labels[row]}", {"label": str(batch.labels[row])})) for row in bad]


def label_stats(labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """Histogram (values, counts) of the integral, finite labels of a batch."""
    labels = np.asarray(labels)
    return np.unique(labels[integral_labels(labels)].astype(np.int64), return_counts=True)
