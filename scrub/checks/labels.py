"""Checks on class labels, and what decides whether labels are class ids at all. They run only
on datasets that have labels; the class checks only where the labels are class ids
(`label_kind`): regression targets get the numeric checks of `scrub.checks.numeric`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from scrub.checks.base import (
    CheckOptions,
    Column,
    Finding,
    Locate,
    batch_check,
    batch_collector,
    dataset_check,
    record_check,
)
from scrub.records import Batch, Carries, Record, Severity
from scrub.wording import counted

#: what `--label-kind` takes
LABEL_KINDS = ("auto", "class", "value")
#: `--label-kind auto` reads at most this many labels before the scan (`Reader.label_sample`)...
LABEL_SAMPLE = 10_000
#: ...and reads float labels as continuous values when more than this share of the finite ones
#: are not integers (label vectors: when more than this share of the rows hold a value outside
#: [0, 1], which no one-hot, multi-label or soft target does)
VALUE_SHARE = 0.5
#: below `VALUE_SHARE`, a share of non-integral labels from which a note says that they were
#: read as class ids all the same (their findings are many `non-integer-label` errors)
AMBIGUOUS_SHARE = 0.1
#: the checks that judge labels as class ids (said in the note when they do not run)
CLASS_CHECKS = ("non-integer-label", "label-out-of-range", "label-outlier", "invalid-label-vector")


def label_kind(
    options: CheckOptions, sample: np.ndarray | None, declared: bool, vectors: bool
) -> tuple[str, str | None]:
    """("class" or "value", a note or None): what a dataset's labels are, decided once, before
    the scan, so that every partition judges them alike.

    ``--label-kind class`` or ``value`` decides. ``auto``: class ids where a class range is
    declared (``--num-classes``, ``--label-range``) or the dataset declares its classes
    (``declared``: class folders, a ``ClassLabel``); else continuous values when ``sample`` (the
    labels `Reader.label_sample` read, in their stored dtype) holds floats of which more than
    `VALUE_SHARE` of the finite ones are not integers (label vectors: rows with a value outside
    [0, 1]); else class ids. A format that samples no labels keeps them class ids."""
    chosen = options.label_kind
    if chosen == "class":
        return "class", None
    if chosen == "value":
        return "value", (
            f"labels: judged as continuous values (--label-kind value): {_unrun()} do not run; NaN, "
            "overflow and magnitude outliers are checked"
        )
    if declared or options.declared_range is not None or sample is None or sample.size == 0:
        return "class", None
    if sample.dtype.kind != "f":
        return "class", None
    with np.errstate(invalid="ignore"):
        if vectors and sample.ndim == 2:
            finite = np.isfinite(sample).all(axis=1)
            odd = (finite & ((sample < 0) | (sample > 1)).any(axis=1)).sum()
            what = (
                f"{int(odd):,} of the {int(finite.sum()):,} label vectors sampled hold a value outside [0, 1]"
            )
        else:
            values = sample.reshape(-1)
            finite = np.isfinite(values)
            odd = (finite & ~integral_labels(values)).sum()
            what = f"{int(odd):,} of the {int(finite.sum()):,} finite labels sampled are not integers"
    total = int(finite.sum())
    share = odd / total if total else 0.0
    if share > VALUE_SHARE:
        return "value", (
            f"labels: read as continuous values (regression targets): {what}; {_unrun()} do not run, "
            "NaN, overflow and magnitude outliers are checked (--label-kind class reads them as class ids)"
        )
    if share >= AMBIGUOUS_SHARE:
        return "class", (
            f"labels: read as class ids although {what} (non-integer-label); --label-kind value reads "
            "them as continuous values (regression targets)"
        )
    return "class", None


def _unrun() -> str:
    return f"the class checks ({', '.join(CLASS_CHECKS[:3])})"


def integer_label(label: object) -> int | None:
    """The label as a class index, or None when it is not an integer (3.0 counts as 3)."""
    if isinstance(label, bool):
        return None
    if isinstance(label, int):
        return label
    if isinstance(label, float) and math.isfinite(label) and label.is_integer():
        return int(label)
    return None


@record_check("missing-label", Severity.ERROR, needs=Carries.LABEL)
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


@record_check("non-integer-label", Severity.ERROR, needs=Carries.CLASS_LABELS)
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


@record_check("label-out-of-range", Severity.ERROR, needs=Carries.CLASS_LABELS)
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


def range_note(
    histogram: Mapping[int, int] | None,
    declared: tuple[int, int],
    option: str,
    classes: Sequence[str] | None = None,
    folders: bool = False,
) -> str | None:
    """A note when a declared class range leaves whole classes out (``--num-classes 5`` on a
    10-class folder gives 1,500 `label-out-of-range` findings, and the option, not the data, may
    be what is wrong): the values outside it with their counts (and class names), or None.
    A value outside counts as a class when it is a class folder, or when it labels at least half
    as many records as the typical value inside (two stray labels 8000 and -1 are the data's
    problem, which the findings name). ``histogram``: label value -> records; ``folders``:
    ``classes`` are class folders."""
    low, high = declared
    counts = {int(value): count for value, count in (histogram or {}).items()}
    outside = sorted((value, count) for value, count in counts.items() if not low <= value < high)
    inside = sorted(count for value, count in counts.items() if low <= value < high)
    typical = inside[len(inside) // 2] if inside else 0

    def folder(value: int) -> bool:
        return folders and classes is not None and 0 <= value < len(classes)

    if not any(folder(value) or count >= max(2, typical / 2) for value, count in outside):
        return None

    def named(value: int) -> str:
        if classes is not None and 0 <= value < len(classes):
            return f" ({'class folder ' if folders else ''}{classes[value]})"
        return ""

    shown = ", ".join(f"{value}{named(value)}: {count:,}" for value, count in outside[:5])
    more = f" and {len(outside) - 5} more" if len(outside) > 5 else ""
    records = sum(count for _, count in outside)
    return (
        f"{option} leaves {counted(len(outside), 'label value')} outside [{low}, {high}), "
        f"{counted(records, 'record')} in all ({shown}{more}); the labels run from {min(counts)} to "
        f"{max(counts)}: is {option} right?"
    )


def integral_labels(labels: np.ndarray) -> np.ndarray:
    """Mask of the labels that are class indices: finite and integral (3.0 counts as 3)."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(labels) & (labels == np.round(labels))


@batch_check("non-integer-label")
def non_integer_labels(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    if batch.labels is None or np.ndim(batch.labels) == 2:  # label vectors: invalid-label-vector
        return []
    labels = batch.labels
    bad = np.flatnonzero(np.isfinite(labels) & ~integral_labels(labels))
    return [
        (int(r), Finding(f"label {labels[r]:g} is not an integer", {"label": float(labels[r])})) for r in bad
    ]


@batch_check("label-out-of-range")
def labels_out_of_range(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    declared = options.declared_range
    if batch.labels is None or declared is None or np.ndim(batch.labels) == 2:
        return []
    low, high = declared
    labels = batch.labels
    bad = np.flatnonzero(integral_labels(labels) & ((labels < low) | (labels >= high)))
    return [
        (
            int(r),
            Finding(
                f"label {int(labels[r])} is outside [{low}, {high})",
                {"label": int(labels[r]), "low": low, "high": high},
            ),
        )
        for r in bad
    ]


# -- label vectors: (N, K) one-hot, multi-label or soft targets ----------------------------------

#: A dataset is multi-label when at least this share of its label vectors has several positives
#: (or values in [0, 1] that do not sum to 1): then an all-zero row is a legitimate negative.
MULTI_LABEL_SHARE = 0.1
#: How far from 1 a probability row may sum (float32 rounding of soft targets).
SUM_TOLERANCE = 1e-3


def vector_kinds(labels: np.ndarray) -> np.ndarray:
    """What each label vector is: ``onehot``, ``zero``, ``multihot`` (0/1 with several ones),
    ``probability`` (in [0, 1], sums to 1), ``unit`` (in [0, 1], does not), ``outside`` (a
    value outside [0, 1]); ``""`` for a row with a NaN or Inf (`nonfinite-label`)."""
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(labels).all(axis=1)
        binary = ((labels == 0) | (labels == 1)).all(axis=1)
        inside = ((labels >= 0) & (labels <= 1)).all(axis=1)
        sums = labels.sum(axis=1)
    ones = (labels == 1).sum(axis=1)
    kinds = np.full(len(labels), "unit", dtype=object)
    kinds[inside & (np.abs(sums - 1) <= SUM_TOLERANCE)] = "probability"
    kinds[binary & (ones > 1)] = "multihot"
    kinds[binary & (ones == 1)] = "onehot"
    kinds[binary & (ones == 0)] = "zero"
    kinds[~inside] = "outside"
    kinds[~finite] = ""
    return kinds


_VECTOR_REASONS = {
    "zero": "all zero: no class (a single-label dataset)",
    "multihot": "several ones in a single-label dataset",
    "outside": "a value outside [0, 1]",
    "unit": "does not sum to 1 (soft targets)",
}


def _no_record_vector(record: Record) -> None:
    return None  # label vectors come only from array datasets, as batches


@dataset_check(
    "invalid-label-vector",
    Severity.ERROR,
    collect=_no_record_vector,
    dtype="category",
    needs=Carries.LABEL_VECTORS,
)
def invalid_label_vector(column: Column, options: CheckOptions, locate: Locate) -> list:
    """A label vector that is not what the dataset's (N, K) labels are: one-hot, multi-label or
    soft targets.

    What it finds:
        The kind of an (N, K) label dataset is read from its rows: multi-label when at least
        10% of the rows have several positives (or values in [0, 1] that do not sum to 1), else
        single-label (one-hot or soft targets). Errors: a value outside [0, 1] (any dataset); in
        a single-label dataset, an all-zero row (no class) and a 0/1 row with several ones. A
        warning: in a single-label dataset, a row of values in [0, 1] that does not sum to 1
        (within 0.001). The summary's notes say which kind was read. NaN and Inf are
        `nonfinite-label`'s.
    Why it breaks training:
        Cross-entropy with a target outside [0, 1] is unbounded below: the model drives the
        loss to -Inf. A one-hot row with no 1 trains the record towards nothing (loss 0), one
        with two 1s doubles its loss; soft targets that do not sum to 1 scale the record's
        gradient. Binary cross-entropy takes the log of the target's complement too.
    Example:
        Row 12 of `labels` in `train.h5` is all zero while the other rows are one-hot.
    What fix does:
        Moves the record to the quarantine (targets not summing to 1: a warning, nothing by
        default).
    """
    if len(column.values) == 0:
        return []
    kinds, counts = np.unique(column.values, return_counts=True)
    share = dict(zip(kinds.tolist(), counts.tolist()))
    total = int(counts.sum())
    multi = share.get("multihot", 0) + share.get("unit", 0)
    if multi >= MULTI_LABEL_SHARE * total:
        kind, bad = "multi-label", {"outside"}
    else:
        kind = "one-hot" if share.get("onehot", 0) >= share.get("probability", 0) else "soft targets"
        bad = {"zero", "multihot", "outside", "unit"}
    note = (
        f"label vectors read as {kind} ({', '.join(f'{share[k]:,} {k}' for k in sorted(share))} "
        f"of {total:,} rows)"
    )
    judgement: list = [(None, Finding(note, {"kind": kind}))]
    flagged = np.flatnonzero(np.isin(column.values, sorted(bad)))
    for i in flagged:
        reason = str(column.values[i])
        severity = Severity.WARNING if reason == "unit" else None
        position = (int(column.positions[i, 0]), int(column.positions[i, 1]))
        judgement.append(
            (
                position,
                Finding(
                    f"label vector: {_VECTOR_REASONS[reason]}", {"reason": reason, "kind": kind}, severity
                ),
            )
        )
    return judgement


@batch_collector("invalid-label-vector")
def _vector_kinds(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    labels = batch.labels
    if labels is None or np.ndim(labels) != 2:
        return np.empty(0, int), np.empty(0, dtype=object)
    kinds = vector_kinds(np.asarray(labels))
    rows = np.flatnonzero(kinds != "")
    return rows, kinds[rows]
