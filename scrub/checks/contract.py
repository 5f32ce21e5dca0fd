"""A contract broken: what `scan --contract FILE` finds (`scrub.profile.contract`).

Three rules records break one by one are judged per record, so that the records are named and
`fix` sets them aside: a class outside the contract's set (`contract-classes`), an image outside
its size bounds (`contract-image-size`) and a token sequence outside its length bounds
(`contract-length`). The rules of the dataset as a whole (and the class rule's missing class, the
length rule's extremes) are judged on its profile once every record is in: key ``*``, the
dataset's path as source; `fix` neither sets records aside for them nor refuses because of them
(`names_no_record`).
Every finding names the contract file's line, the expected and the found value.
"""

from __future__ import annotations

import numpy as np

from scrub.checks.base import CheckOptions, Finding, batch_check, reader_check, record_check
from scrub.checks.drift import NOT_RECORDS as DRIFTS
from scrub.checks.labels import integer_label, integral_labels
from scrub.checks.tokens import token_facts
from scrub.records import Batch, Carries, Record, Severity, TokenRows

#: the contract's findings about the dataset as a whole: they name no record to set aside
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

#: every finding about the dataset as a whole that names no record, drifts and contract rules
#: alike: `fix` sets nothing aside for them nor refuses because of them, and the scan's "records
#: to quarantine" leaves them out
NAMES_NO_RECORD = DRIFTS | DATASET_LEVEL
#: the contract's checks that name records one by one and, with key ``*``, the dataset as a
#: whole (a class missing): only the key-``*`` findings name no record
PER_RECORD = frozenset({"contract-classes", "contract-image-size", "contract-length"})


def names_no_record(check: str, key: str) -> bool:
    """Whether a finding concerns the dataset as a whole and names no record to set aside: a
    drift, a contract rule judged on the profile, or the key-``*`` finding of a contract check
    that otherwise names records (a class missing from the data)."""
    return check in NAMES_NO_RECORD or (check in PER_RECORD and key == "*")


_WHOLE = """\
        Nothing: the finding concerns the dataset as a whole and names no record (key `*`), so
        `fix` sets no record aside for it and does not refuse because of it; it says so. Either
        the data changed upstream, or the contract is out of date: edit its line."""


@record_check("contract-classes", Severity.ERROR, needs=Carries.CONTRACT)
def unknown_class(record: Record, options: CheckOptions) -> Finding | None:
    """A record whose class id is not in the contract's class set (`[labels] classes`), or a
    class of the set that no record holds.

    What it finds:
        Class labels outside the set the contract lists: a new class id an export started to
        write, a class renumbered; each such record is named. And, once every record is in, each
        class the contract lists that no record holds (a class folder not copied, a filter that
        dropped a category): one finding about the dataset as a whole (key `*`). Details:
        `label` (a record's), `expected` (the set), `found` (the classes held: key `*`),
        `contract` (file:line).
    Why it breaks training:
        A model built for the contract's classes has no output for a new one: cross-entropy
        indexes past its logits (a device-side assert, or NaN), or the class is trained as a
        wrong one without an error. A model never shown a class never predicts it; its accuracy
        on it is zero, without a sign in the loss.
    Example:
        `label 7 is not in the contract's classes [0, 1, 2] (scrub.contract.toml:8)`;
        `class 2 of the contract's set has no record (scrub.contract.toml:8)`.
    What fix does:
        Moves a record with a class outside the set to the quarantine (`fix --contract FILE`). A
        missing class names no record: fix sets nothing aside for it and does not refuse
        because of it (a cleaned copy cannot bring a class back).
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


def _level(contract, check: str) -> Severity | None:
    """The severity the contract's ``[severity]`` table gives ``check`` (None: the check's own)."""
    level = contract.severity(check)
    return Severity(level) if level is not None else None


def _unknown(label: int, contract) -> Finding:
    shown = ", ".join(str(c) for c in contract.classes[:20]) + (", ..." if len(contract.classes) > 20 else "")
    return Finding(
        f"label {label} is not in the contract's classes [{shown}] ({contract.where('labels.classes')})",
        {
            "label": label,
            "expected": list(contract.classes),
            "contract": contract.where("labels.classes"),
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
        `expected`, `contract` (file:line).
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
            where = contract.where(f"images.{side}")
            return Finding(
                f"{facts.width}x{facts.height} is outside the contract's {side} [{low}, {high}] ({where})",
                {
                    "width": facts.width,
                    "height": facts.height,
                    "expected": [low, high],
                    "contract": where,
                    "line": contract.line(f"images.{side}"),
                },
                _level(contract, "contract-image-size"),
            )
    return None


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


@record_check("contract-length", Severity.ERROR, needs=Carries.TOKENS)  # the token path runs it
def sequence_outside_bounds(record: Record, options: CheckOptions) -> Finding | None:
    """A token sequence shorter or longer than the contract's bounds (`[tokens] length`).

    What it finds:
        Each token sequence (a JSON Lines or token-column record, an MDS sample, a Megatron or
        nanoGPT document) whose length lies outside the contract's `[shortest, longest]`: a
        changed chat template that doubled the lengths, a tokenizer that now emits nothing.
        Details: `length`, `expected`, `contract` (file:line). And, once every record is in, the
        shortest and longest sequence the profile saw, as one finding about the dataset as a
        whole (key `*`; details `rule`, `expected`, `found`).
    Why it breaks training:
        Sequences twice as long as the job was sized for are truncated (what is cut off is never
        learned) or run out of memory; empty ones give a loss over nothing.
    Example:
        `4,100 tokens; the contract says 3 to 2,048 (scrub.contract.toml:27)`.
    What fix does:
        Moves the record to the quarantine (`fix --contract FILE`). The key-`*` finding names
        no record: fix sets nothing aside for it and does not refuse because of it.
    """
    contract = options.contract
    if contract is None or contract.length is None:
        return None
    facts = token_facts(record, options)
    if facts is None or facts.length is None:
        return None
    return _length_outside(int(facts.length), contract)


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
        finding = _length_outside(int(lengths[row]), contract)
        assert finding is not None  # the mask and the function share the bounds
        found.append((int(row), finding))
    return found


def _length_outside(length: int, contract) -> Finding | None:
    low, high = contract.length
    if (low is None or length >= low) and (high is None or length <= high):
        return None
    where = contract.where("tokens.length")
    shown = f"{low:,} to {high:,}" if low is not None and high is not None else f"{low} to {high}"
    return Finding(
        f"{length:,} tokens; the contract says {shown} ({where})",
        {
            "length": length,
            "expected": [low, high],
            "contract": where,
            "line": contract.line("tokens.length"),
        },
        _level(contract, "contract-length"),
    )
