"""A contract broken: what `scan --contract FILE` finds (`scrub.profile.contract`).

Three rules records break one by one are judged per record, so that the records are named and
`fix` sets them aside: a class outside the contract's set (`contract-classes`), an image outside
its size bounds (`contract-image-size`) and a sequence outside its length bounds
(`contract-length`). The rest concern the dataset as a whole and are judged on its profile once
every record is in (`scrub.scanning.contract`): key ``*``, the dataset's path as source — a class
of the set with no record is also `contract-classes`, at key ``*``. `fix` neither sets records
aside for those nor refuses because of them (`names_no_record`). Every finding names the
contract file's line, the expected and the found value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrub.checks.base import CheckOptions, Finding, batch_check, reader_check, record_check
from scrub.checks.drift import NOT_RECORDS as DRIFTS
from scrub.checks.labels import integer_label, integral_labels
from scrub.checks.tokens import token_facts
from scrub.records import Batch, Carries, Issue, Record, Severity, TokenRows

#: the contract's checks judged on the profile only: every finding of theirs concerns the
#: dataset as a whole (key ``*``), none names a record
DATASET_LEVEL = frozenset(
    {
        "contract-record-count",
        "contract-class-share",
        "contract-label-share",
        "contract-dtype",
        "contract-shape",
        "contract-image-mode",
        "contract-vocabulary",
    }
)
#: the contract's checks judged record by record (their findings name the records); of these,
#: `contract-classes` also finds a class with no record, on the profile (key ``*``)
PER_RECORD = frozenset({"contract-classes", "contract-image-size", "contract-length"})

#: the checks that judge no record at all, drifts and the contract's dataset-level rules: a
#: cache of per-record verdicts leaves them out (they are judged again each night on the profile)
JUDGE_NO_RECORD = DRIFTS | DATASET_LEVEL


def names_no_record(check: str, key: str | None) -> bool:
    """Whether a finding concerns the dataset as a whole as its profile shows it — a drift from
    the baseline, a contract's rule broken by the dataset as a whole (key ``*``) — rather than a
    record or a file: `fix` sets nothing aside for it nor refuses because of it (no cleaned copy
    can remove it), and the scan's "records to quarantine" leaves it out. (Any other key-``*``
    finding, an unreadable file, sets its file aside.)"""
    return check in JUDGE_NO_RECORD or (check in PER_RECORD and key == "*")


def about_the_profile(issue: Issue) -> bool:
    """`names_no_record` of an issue."""
    return names_no_record(issue.check, issue.key)


_WHOLE = """\
        Nothing: the finding concerns the dataset as a whole and names no record (key `*`), so
        `fix` sets no record aside for it and does not refuse because of it; it says so. Either
        the data changed upstream, or the contract is out of date: edit its line."""


def _level(contract: Any, check: str) -> Severity | None:
    """The severity the contract's ``[severity]`` table gives ``check`` (None: the check's own)."""
    level = contract.severity(check)
    return Severity(level) if level is not None else None


@record_check("contract-classes", Severity.ERROR, needs=Carries.CONTRACT)
def unknown_class(record: Record, options: CheckOptions) -> Finding | None:
    """A record whose class id is not in the contract's class set (`[labels] classes`), or a
    class of the set with no record.

    What it finds:
        Class labels outside the set the contract lists — a new class id an export started to
        write, a class renumbered — each record named (details: `label`, `expected` (the set),
        `contract` (file:line), `line`). And, judged on the profile once every record is in, a
        class the contract lists that no record holds — a class folder not copied, a filter that
        dropped a category — as a finding on the dataset as a whole (key `*`; details: `rule`,
        `contract`, `line`, `expected`, `found`).
    Why it breaks training:
        A model built for the contract's classes has no output for a new one: cross-entropy
        indexes past its logits (a device-side assert, or NaN), or the class is trained as a
        wrong one without an error. A model never shown a class never predicts it; its accuracy
        on it is zero, without a sign in the loss.
    Example:
        `label 7 is not in the contract's classes [0, 1, 2] (scrub.contract.toml:8)`;
        `class 2 of the contract's set has no record (scrub.contract.toml:8)`.
    What fix does:
        Moves a record outside the set to the quarantine. A class with no record (key `*`)
        sets nothing aside and does not make `fix` refuse: no cleaned copy can add it.
    """
    contract = options.contract
    if contract is None or contract.classes is None or options.label_kind == "value":
        return None
    label = integer_label(record.label)
    if label is None or label in contract.classes:
        return None
    return _unknown(label, contract)


@batch_check("contract-classes")
def unknown_classes(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    contract = options.contract
    labels = batch.labels
    if contract is None or contract.classes is None or labels is None or np.ndim(labels) != 1:
        return []
    if options.label_kind == "value":
        return []
    known = np.asarray(contract.classes)
    integral = integral_labels(labels)
    bad = np.flatnonzero(
        integral & ~np.isin(np.where(integral, labels, known[0] if known.size else 0), known)
    )
    return [(int(row), _unknown(int(labels[row]), contract)) for row in bad]


def _unknown(label: int, contract: Any) -> Finding:
    shown = ", ".join(str(c) for c in contract.classes[:20]) + (", ..." if len(contract.classes) > 20 else "")
    where = contract.where("labels.classes")
    return Finding(
        f"label {label} is not in the contract's classes [{shown}] ({where})",
        {
            "label": label,
            "expected": list(contract.classes),
            "contract": where,
            "line": contract.line("labels.classes"),
        },
        _level(contract, "contract-classes"),
    )


@record_check("contract-image-size", Severity.ERROR, needs=Carries.CONTRACT)
def image_outside_bounds(record: Record, options: CheckOptions) -> Finding | None:
    """An image whose width or height lies outside the contract's bounds (`[images] width`,
    `height`).

    What it finds:
        Encoded images, by the size their header declares, narrower or wider (lower or taller)
        than the contract's `[smallest, largest]`: thumbnails where full images were, a new
        camera's resolution, images resized to half upstream. Details: `width`, `height`,
        `expected`, `contract` (file:line), `line`.
    Why it breaks training:
        A pipeline tuned for one size (a crop without a resize, anchors sized for it, a batch
        that must stack) fails or learns from a blur; a resolution that halved lowers accuracy
        without an error.
    Example:
        `320x240 is outside the contract's width [640, 640] (scrub.contract.toml:14)`.
    What fix does:
        Moves the image to the quarantine (`fix --contract FILE`).
    """
    contract = options.contract
    facts = record.meta.get("image")
    if contract is None or facts is None or facts.width is None or facts.height is None:
        return None
    for side, size, bounds in (
        ("width", facts.width, contract.width),
        ("height", facts.height, contract.height),
    ):
        if bounds is None:
            continue
        low, high = bounds
        if (low is not None and size < low) or (high is not None and size > high):
            rule = f"images.{side}"
            where = contract.where(rule)
            return Finding(
                f"{facts.width}x{facts.height} is outside the contract's {side} [{low}, {high}] ({where})",
                {
                    "width": facts.width,
                    "height": facts.height,
                    "expected": [low, high],
                    "contract": where,
                    "line": contract.line(rule),
                },
                _level(contract, "contract-image-size"),
            )
    return None


# needs tokens, not the contract: the runner hands a flat token store's sequences (`TokenRows`)
# only to the token checks; without --contract the scan leaves every contract check out. Tokens,
# not training sequences: the profile's lengths (what the bounds were inferred from) are those
# of every token record, a packed store's documents included
@record_check("contract-length", Severity.ERROR, needs=Carries.TOKENS)
def sequence_outside_bounds(record: Record, options: CheckOptions) -> Finding | None:
    """A token sequence shorter or longer than the contract's bounds (`[tokens] length`).

    What it finds:
        Sequences (of token ids, or texts with `--tokenizer`) whose length before truncation
        lies outside the contract's `[shortest, longest]`: a changed chat template that doubled
        them, a split that cut them short. Details: `length`, `expected`, `contract`
        (file:line), `line`.
    Why it breaks training:
        Sequences twice as long as the job was sized for are truncated (the rest never
        learned) or run out of memory; far shorter ones waste a packed batch, and an empty one
        gives a loss over nothing.
    Example:
        `4,100 tokens is outside the contract's length [3, 2,048] (scrub.contract.toml:27)`.
    What fix does:
        Moves the record to the quarantine (`fix --contract FILE`).
    """
    contract = options.contract
    if contract is None or contract.length is None:
        return None
    facts = token_facts(record, options)
    if facts is None or facts.length is None:
        return None
    return _length(facts.length, contract)


@batch_check("contract-length")
def sequences_outside_bounds(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    contract = options.contract
    if contract is None or contract.length is None or not isinstance(batch.data, TokenRows):
        return []
    low, high = contract.length
    lengths = batch.data.lengths
    outside = np.zeros(len(lengths), bool)
    if low is not None:
        outside |= lengths < low
    if high is not None:
        outside |= lengths > high
    found = []
    for row in np.flatnonzero(outside):
        finding = _length(int(lengths[row]), contract)
        assert finding is not None  # outside the bounds, as the mask says
        found.append((int(row), finding))
    return found


def _length(length: int, contract: Any) -> Finding | None:
    low, high = contract.length
    if (low is None or length >= low) and (high is None or length <= high):
        return None
    where = contract.where("tokens.length")
    shown = f"[{'' if low is None else f'{low:,}'}, {'' if high is None else f'{high:,}'}]"
    return Finding(
        f"{length:,} tokens is outside the contract's length {shown} ({where})",
        {
            "length": length,
            "expected": [low, high],
            "contract": where,
            "line": contract.line("tokens.length"),
        },
        _level(contract, "contract-length"),
    )


def _dataset_rule(id: str, severity: Severity, summary: str, finds: str, why: str, example: str) -> None:
    reader_check(
        id,
        severity,
        f"""{summary}

    What it finds:
        {finds} Judged on the scan's profile once every record is in (details: `rule`,
        `contract` (file:line), `expected`, `found`).
    Why it breaks training:
        {why}
    Example:
        {example}
    What fix does:
{_WHOLE}
    """,
        needs=Carries.CONTRACT,
    )


_dataset_rule(
    "contract-record-count",
    Severity.ERROR,
    "The number of records lies outside the contract's bounds (`[records] min`, `max`).",
    "The dataset's record count against the contract's bounds: a third of the rows gone after a "
    "failed export, twice as many after a job appended its output twice.",
    "A shard that did not arrive trains a model on part of the data without an error; no single "
    "record shows it (a minimum count that actually fails: TFDV #127).",
    "`6,667 records; the contract says 8,000 to 12,000 (scrub.contract.toml:6)`.",
)
_dataset_rule(
    "contract-class-share",
    Severity.WARNING,
    "A class's share of the labelled records fell below the contract's minimum (`[labels] min-class-share`).",
    "Each class's share against the smallest the contract allows it (by default half of the share "
    "seen when the contract was inferred).",
    "A class that became rare is learned worse, and the model's prior moves with the shares.",
    "`class 0's share is 12.0%; the contract says at least 20.0% (scrub.contract.toml:11)`.",
)
_dataset_rule(
    "contract-label-share",
    Severity.WARNING,
    "The share of records with a label fell below the contract's minimum (`[labels] min-labelled-share`).",
    "The labelled records' share of all records, against the contract's minimum.",
    "Records without a label are dropped or, worse, trained with a default label; a falling share "
    "means an upstream join lost them.",
    "`90.0% of the records have a label; the contract says at least 99.0% (scrub.contract.toml:13)`.",
)
_dataset_rule(
    "contract-dtype",
    Severity.ERROR,
    "Array rows stored in a dtype the contract does not list (`[arrays] dtypes`).",
    "The dtypes of the array rows (HDF5, NumPy, LMDB arrays, Parquet vectors) against the "
    "contract's: float64 where float32 was, integers where floats were.",
    "A changed dtype changes what the loader hands the model (float64 doubles memory; integers "
    "lose the scale; a cast can overflow float16).",
    "`4,096 rows stored as float64; the contract's dtypes are float32 (scrub.contract.toml:17)`.",
)
_dataset_rule(
    "contract-shape",
    Severity.ERROR,
    "Array rows of a shape the contract does not list (`[arrays] shapes`).",
    "The shapes of the array rows (elements joined by x: `16`, `3x32x32`) against the contract's.",
    "A row of another shape fails the first layer, or a batch's collate, or is silently reshaped.",
    "`100 rows of shape 15; the contract's shapes are 16 (scrub.contract.toml:16)`.",
)
_dataset_rule(
    "contract-image-mode",
    Severity.ERROR,
    "Images of a mode the contract does not list (`[images] modes`).",
    "The modes images decode to (RGB, L, RGBA, CMYK, ...) against the contract's.",
    "A grayscale image where RGB was expected fails a collate or is broadcast into three equal "
    "channels; CMYK's four channels fail the first convolution.",
    "`12 images of mode L; the contract's modes are RGB (scrub.contract.toml:21)`.",
)
_dataset_rule(
    "contract-vocabulary",
    Severity.ERROR,
    "A token id at or above the contract's vocabulary size (`[tokens] vocabulary`).",
    "The largest token id the profile saw (sampled in a large flat store: `--vocab-size` names "
    "every record) against the contract's vocabulary.",
    "An id past the embedding table indexes out of range: a device-side assert, or NaN.",
    "`token id 50,300 is not below the contract's vocabulary of 50,257 (scrub.contract.toml:25)`.",
)
