"""Checks on class labels. They run only on datasets that have labels."""

from __future__ import annotations

import math

import numpy as np

from scrub.checks.base import CheckOptions, Finding, batch_check, record_check
from scrub.records import Batch, Record, Severity


def integer_label(label: object) -> int | None:
    """The label as a class index, or None when it is not an integer (3.0 counts as 3)."""
    if isinstance(label, bool):
        return None
    if isinstance(label, int):
        return label
    if isinstance(label, float) and math.isfinite(label) and label.is_integer():
        return int(label)
    return None


@record_check("missing-label", Severity.ERROR, needs="label")
def missing_label(record: Record, options: CheckOptions) -> Finding | None:
    """A record of a labelled dataset that has no label.

    What it finds:
        A list line with a path and no label; an image lying at the root of a class-folder
        dataset, outside every class folder.
    Why it breaks training:
        Caffe silently reads a missing label as class 0, teaching the model a wrong answer; other
        loaders raise mid-epoch.
    Example:
        `train.txt` line 17 is `birds/0042.jpg` with nothing after it.
    What fix does:
        Moves the record to the quarantine.
    """
    if record.label is None and record.meta.get("label_known", True):
        return Finding("record has no label")
    return None


@record_check("non-integer-label", Severity.ERROR, needs="label")
def non_integer_label(record: Record, options: CheckOptions) -> Finding | None:
    """A class label that is not an integer: `3.5`, `cat`, `1e3x`.

    What it finds:
        Labels that cannot be a class index: fractional numbers and text. Labels stored as
        integral floats (`3.0`, Caffe's float32 labels) are fine.
    Why it breaks training:
        Caffe parses `cat` as 0 and truncates `3.5` to 3; cross-entropy needs an integer index,
        so the model trains on a label nobody meant.
    Example:
        `train.txt` line 5 is `img/0005.jpg 3.5`.
    What fix does:
        Moves the record to the quarantine.
    """
    label = record.label
    if label is None or integer_label(label) is not None:
        return None
    if isinstance(label, float) and not math.isfinite(label):
        return None  # NaN and Inf labels are the numeric checks' business
    return Finding(f"label {label!r} is not an integer", {"label": label})


@record_check("label-out-of-range", Severity.ERROR, needs="label")
def label_out_of_range(record: Record, options: CheckOptions) -> Finding | None:
    """A label outside the declared class range: < 0 or >= `--num-classes` (or `--label-range`).

    What it finds:
        Integer labels outside `[0, num_classes)` or `[LO, HI)`. Runs only when a range is
        declared; without one, `label-outlier` looks for labels far from the rest.
    Why it breaks training:
        Cross-entropy indexes the logits with the label: past the end it reads garbage memory or
        raises a device-side assert on a GPU; Caffe only checks in debug builds. The loss goes NaN.
    Example:
        Label 8000 in a 10-class dataset (`--num-classes 10`).
    What fix does:
        Moves the record to the quarantine.
    """
    declared = options.declared_range
    value = integer_label(record.label)
    if declared is None or value is None:
        return None
    low, high = declared
    if low <= value < high:
        return None
    return Finding(
        f"label {value} is outside [{low}, {high})",
        {"label": value, "low": low, "high": high},
    )


def integral_labels(labels: np.ndarray) -> np.ndarray:
    """Mask of the labels that are class indices: finite and integral (3.0 counts as 3)."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(labels) & (labels == np.round(labels))


@batch_check("non-integer-label")
def non_integer_labels(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    if batch.labels is None:
        return []
    labels = batch.labels
    bad = np.flatnonzero(np.isfinite(labels) & ~integral_labels(labels))
    return [(int(r), Finding(f"label {labels[r]:g} is not an integer", {"label": float(labels[r])})) for r in bad]


@batch_check("label-out-of-range")
def labels_out_of_range(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    declared = options.declared_range
    if batch.labels is None or declared is None:
        return []
    low, high = declared
    labels = batch.labels
    bad = np.flatnonzero(integral_labels(labels) & ((labels < low) | (labels >= high)))
    return [
        (int(r), Finding(f"label {int(labels[r])} is outside [{low}, {high})", {"label": int(labels[r]), "low": low, "high": high}))
        for r in bad
    ]
