"""The record and issue model every stage shares.

A record's identity (`source`, `key`, `index`) is fixed by the reader when the record is read and
travels unchanged through every stage, so no later stage ever re-derives it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    import numpy as np

    from scrub.checks.boxes import Box
    from scrub.checks.imagedecode import ImageFacts
    from scrub.checks.masks import MaskFacts
    from scrub.checks.tokens import TokenFacts


class Severity(str, Enum):
    """How bad an issue is; ordered so that thresholds can be compared."""

    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]

    def at_least(self, threshold: "Severity") -> bool:
        return self.rank >= threshold.rank


_SEVERITY_RANK = {Severity.WARNING: 1, Severity.ERROR: 2}


class Carries(str, Enum):
    """What a dataset's records carry (a reader's ``provides``) and what a check needs to run
    (its ``needs``): a check runs on a dataset whose reader provides what it needs. "any" and
    "label" checks run everywhere (label checks where the dataset is labelled)."""

    ANY = "any"
    LABEL = "label"
    IMAGE = "image"  # encoded images
    BYTES = "bytes"  # records that are encoded files (their digest finds duplicates)
    ARRAY = "array"  # numbers
    ROWS = "rows"  # paired data/label array datasets
    VALUES = "values"  # values of key-value stores
    MASKS = "masks"  # segmentation masks
    BOXES = "boxes"  # detection boxes
    SAMPLES = "samples"  # WebDataset samples
    FRAMES = "frames"  # records framed with checksums (TFRecord)
    TOKENS = "tokens"  # token sequences and the texts they are tokenized from (language models)
    #: token records a trainer takes whole, one a sample (JSON Lines, token columns, MDS): not the
    #: documents of a store that training packs into samples of its own (Megatron, nanoGPT)
    SEQUENCES = "sequences"
    LABEL_VECTORS = "label-vectors"  # (N, K) labels (`DatasetInfo.label_width`)
    #: labels that are class ids (the scan adds it to a labelled dataset's, `--label-kind`)
    CLASS_LABELS = "class-labels"
    #: labels that are continuous values, regression targets (`--label-kind`)
    VALUE_LABELS = "value-labels"
    REPLAY = "replay"  # the dummy-loss replay ran
    BASELINE = "baseline"  # a --baseline to measure drift from (`scrub.checks.drift`)
    CONTRACT = "contract"  # a --contract to check (`scrub.checks.contract`)
    TRAINING_RUN = "training run"  # the NaN guard's findings
    SEVERAL_DATASETS = "several datasets"
    #: the run holds a training split and an evaluation split (datasets named train, val, test:
    #: `scrub.scanning.splits`), and this dataset is one of them
    SPLITS = "splits"
    #: a dataset of several files (a folder or list of HDF5 or Parquet files), each of which can
    #: be unreadable on its own while the others are read
    SEVERAL_FILES = "several files"
    #: ``--near-text`` is set and the dataset's records carry token data, among them texts
    NEAR_TEXTS = "near texts"

    def __str__(self) -> str:
        return self.value

    @property
    def described(self) -> str:
        """What a dataset lacks when a check that needs this cannot run on it."""
        return _DESCRIBED.get(self, self.value)


#: what the checks of labels need: they run where a dataset is labelled, on labels only
LABEL_NEEDS = frozenset({Carries.LABEL, Carries.CLASS_LABELS, Carries.VALUE_LABELS, Carries.LABEL_VECTORS})

_DESCRIBED = {
    Carries.LABEL: "labels",
    Carries.ARRAY: "numeric values",
    Carries.IMAGE: "images",
    Carries.BYTES: "encoded files",
    Carries.ROWS: "array rows",
    Carries.VALUES: "key-value records",
    Carries.REPLAY: "--dummy-loss replay",
    Carries.BASELINE: "--baseline to measure drift from",
    Carries.CONTRACT: "--contract to check",
    Carries.LABEL_VECTORS: "label vectors",
    Carries.CLASS_LABELS: "class ids as labels (--label-kind)",
    Carries.VALUE_LABELS: "continuous labels (--label-kind)",
    Carries.TOKENS: "token sequences or texts",
    Carries.FRAMES: "checksummed record frames (TFRecord)",
    Carries.SEVERAL_FILES: "second file (a folder or a list of files has several)",
    Carries.SPLITS: (
        "training split and evaluation split in the run (datasets named train and val, validation, test...)"
    ),
    Carries.NEAR_TEXTS: "texts to compare (--near-text, on JSON Lines text, chat, prompt and completion)",
    Carries.SEQUENCES: "training sequences (a packed store's documents are not: their trainer packs them)",
}
#: each severity's name, looked up without the enum's property (a dense scan does it per finding)
SEVERITY_NAMES = {severity: severity.value for severity in Severity}


def manifest_fields(
    source: str,
    key: str,
    index: int | None,
    check: str,
    severity: str,
    message: str,
    details: dict[str, Any],
    content: str | None = None,
    status: str | None = None,
    dataset: str | None = None,
) -> dict[str, Any]:
    """A manifest line's fields in their order (docs/outputs.md): laid out here only, for an
    issue (`Issue.to_dict`) and for a batch's findings encoded without an issue object each
    (`scrub.scanning.encoding.Encoder.add_rows`)."""
    line: dict[str, Any] = {} if dataset is None else {"dataset": dataset}
    line |= {
        "source": source,
        "key": key,
        "index": index,
        "check": check,
        "severity": severity,
        "message": message,
        "details": details,
    }
    if content is not None:
        line["content"] = content
    if status is not None:
        line["status"] = status
    return line


@dataclass(slots=True)
class Issue:
    """One problem found on one record (or on the dataset, with key ``*``).

    These are exactly the fields of a manifest line.
    """

    source: str
    key: str
    index: int | None
    check: str
    severity: Severity
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    #: the record's content hash where its key is only a position (HDF5 rows): its identity
    #: across scans (see `scrub.scanning.baseline`)
    content: str | None = None
    #: against a baseline: new, persisting, reappeared or resolved (see `scrub.scanning.baseline`)
    status: str | None = None
    #: in a scan of several datasets: the dataset (as its path) the record belongs to; ``source``
    #: is then the file or table within it
    dataset: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return manifest_fields(
            self.source,
            self.key,
            self.index,
            self.check,
            self.severity.value,
            self.message,
            self.details,
            self.content,
            self.status,
            self.dataset,
        )

    def stamp(self, severities: Mapping[str, Severity], dataset: str | None) -> None:
        """Set what the run decides for every issue before its manifest line is written: the
        severity the user set for its check, and the dataset it belongs to in a run of several."""
        if self.check in severities:
            self.severity = severities[self.check]
        if dataset is not None:
            self.dataset = dataset

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Issue":
        return cls(
            source=data["source"],
            key=data["key"],
            index=data["index"],
            check=data["check"],
            severity=Severity(data["severity"]),
            message=data["message"],
            details=dict(data.get("details") or {}),
            content=data.get("content"),
            status=data.get("status"),
            dataset=data.get("dataset"),
        )

    def identity(self) -> tuple[str, str, str]:
        """What makes two issues 'the same' across scans (used by baselines and tests)."""
        return (
            (self.source, self.key, self.check)
            if self.dataset is None
            else (f"{self.dataset}:{self.source}", self.key, self.check)
        )


#: A text record's payload: its parts in order, as (role, text, supervised): one
#: ``("text", ..., True)`` for plain text, ``("prompt", ..., False), ("completion", ..., True)``,
#: or one part per chat message, supervised where the role is the assistant's. The loss counts
#: the supervised parts' tokens only.
TextParts = tuple[tuple[str, str, bool], ...]


class RecordFacts(TypedDict, total=False):
    """What a record carries beside its payload and label: set by readers (and by the checks'
    shared passes, which compute a fact once for every check that reads it), read by checks.
    Every key is optional: a record has the facts of its kind."""

    # set by readers
    #: what the payload is: encoded image bytes, numbers, a token sequence (a 1-D integer array
    #: of input ids, in the store's dtype) or a text (`TextParts`, tokenized by the checks)
    kind: Literal["image", "array", "tokens", "text"]
    label_known: bool  # False: the record carries no label at all (not a missing one)
    shape: str  # an array payload's shape, "3x32x32" ("list" for a list column's rows)
    codec: str  # how a key-value store's value was decoded ("datum")
    name: str  # the member or file name the payload came from (format-mismatch's extension)
    raw: bytes  # the bytes `fix` copies where the payload is their decoded form (a .npy file)
    mask: bytes  # a segmentation pair's encoded mask
    mask_name: str
    boxes: list[Box]  # detection boxes as parsed (YOLO, COCO)
    malformed_boxes: list[tuple[str, str]]  # (where, why) of box lines that do not parse
    categories: frozenset[int]  # COCO: the declared category ids
    image_size: tuple[float, float]  # COCO: (width, height) the annotation file declares
    token_labels: np.ndarray  # a token sequence's own labels (absent: the input ids are the labels)
    attention_mask: np.ndarray  # a token sequence's attention mask (absent: every token attends)
    #: (size, mtime_ns) of the file the record's bytes were read from, as the read's ``fstat``
    #: gave them: the dataset's fingerprint takes them instead of a ``stat`` of its own
    file_version: tuple[int, int]
    # computed once per record by the checks' shared passes
    digest: bytes  # the payload's content hash (duplicate)
    image: ImageFacts  # the image decoded once (`scrub.checks.imagedecode`)
    mask_facts: MaskFacts  # the mask decoded once (`scrub.checks.masks`)
    magnitude: float | None  # the row's largest finite magnitude (magnitude-outlier)
    tokens: TokenFacts  # the sequence as the trainer sees it (`scrub.checks.tokens`)


class BatchFacts(TypedDict, total=False):
    """What a `Batch` carries beside its rows and labels."""

    masks: np.ndarray  # the rows' (n, H, W) segmentation masks, where the labels are masks
    profile: Any  # the numeric checks' one profile of the batch (`scrub.checks.numeric.profile`)
    #: the names of a table's columns, in the order of a row's elements (a Parquet table's): the
    #: profile names its features by them as well as by position
    columns: tuple[str, ...]
    #: each row's content identity (``S16``), made once for the checks that collect it
    #: (`scrub.checks.splits.row_identities`)
    identities: np.ndarray


@dataclass(slots=True)
class Record:
    """One sample as read from a dataset.

    `payload` is the encoded bytes (images) or a decoded array, or None when the reader could not
    get any (then `problems` says why). `label` is the parsed label: an int, a float, the raw text
    of a label that is not a number, or None when the record has none. `problems` holds issues
    the reader itself found (a missing file, an unsafe path); they are reported like any other.
    """

    source: str
    key: str
    index: int
    payload: bytes | Any | None
    label: int | float | str | None = None
    meta: RecordFacts = field(default_factory=lambda: RecordFacts())
    problems: list[Issue] = field(default_factory=list)


@dataclass(frozen=True)
class Pieces:
    """The data of one row too large to hold at once (a 3-D volume, a huge image), as a
    `Batch` of that row carries it: its values in consecutive pieces of a block's size.

    ``read()`` yields the row's values, flat, in C order, one piece after another (each valid
    until the next: a reader reuses one buffer); it may be called again for a second pass, until
    the reader moves on to the next row. Every per-row test is a reduction over the pieces.
    """

    shape: tuple[int, ...]  # of the batch: (1, *row shape)
    dtype: Any  # numpy dtype
    read: Callable[[], Iterator[Any]]

    def __len__(self) -> int:
        return 1

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(slots=True)
class Batch:
    """Consecutive rows of one array dataset (HDF5), checked together with vectorized checks.

    Row ``i`` is the record with key ``str(start + i)`` and index ``start + i``; it sits at
    offset ``offset + i`` of its partition. ``data`` may be a reused buffer: checks must not keep
    references to it; for a row larger than a block it is that one row's `Pieces`. ``labels``
    is a 1-D float array, or None for an unlabelled dataset.
    """

    source: str
    start: int
    offset: int
    data: Any
    labels: Any = None
    meta: BatchFacts = field(default_factory=lambda: BatchFacts())
    keys: list[str] | None = None  # the rows' keys when they are not their indices (LMDB arrays)

    def __len__(self) -> int:
        return len(self.data)

    def key(self, row: int) -> str:
        return self.keys[row] if self.keys is not None else str(self.start + row)

    def slices(self, rows: int) -> Iterator[Batch]:
        """The batch in consecutive pieces of at most ``rows`` rows (views, not copies)."""
        if len(self) <= rows:
            yield self
            return
        for first in range(0, len(self), rows):
            last = first + rows
            yield Batch(
                self.source,
                self.start + first,
                self.offset + first,
                self.data[first:last],
                None if self.labels is None else self.labels[first:last],
                {"masks": self.meta["masks"][first:last]} if "masks" in self.meta else {},
                keys=None if self.keys is None else self.keys[first:last],
            )


@dataclass(frozen=True, slots=True)
class TokenRows:
    """Consecutive token sequences of a flat token store (Megatron's ``.bin``, nanoGPT's and
    llm.c's token files) as a `Batch`'s data: ``tokens`` holds them end to end in the store's
    dtype (often a view of its memory map), ``bounds`` (n + 1 integers, from 0) where each
    starts, so that row ``i`` is ``tokens[bounds[i]:bounds[i + 1]]``. The token checks judge
    them in a few vectorized passes over ``tokens`` (`scrub.checks.tokenbatch`): no Python
    object per sequence."""

    tokens: Any  # 1-D integer np.ndarray
    bounds: Any  # 1-D int64 np.ndarray of len(self) + 1 entries

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, item: int | slice) -> Any:
        """Row ``item`` (its tokens), or consecutive rows as `TokenRows` of their own."""
        if isinstance(item, slice):
            first, last, _ = item.indices(len(self))
            last = max(first, last)
            begin = int(self.bounds[first])
            return TokenRows(
                self.tokens[begin : int(self.bounds[last])], self.bounds[first : last + 1] - begin
            )
        return self.tokens[int(self.bounds[item]) : int(self.bounds[item + 1])]

    @property
    def lengths(self) -> Any:
        return self.bounds[1:] - self.bounds[:-1]
