"""The check catalogue: stable ids, default severities and the documentation beside the code.

Three kinds of check exist:

* ``reader`` checks are found while reading (a missing file, an unsafe path): the reader attaches
  them to the record; the catalogue only documents them.
* ``record`` checks are pure functions ``(record, options) -> Finding | None``. A check may also
  have a vectorized ``batch`` form ``(batch, options) -> [(row, Finding), ...]`` for array
  datasets (HDF5 rows); numeric checks have only that form.
* ``dataset`` checks need the whole dataset (duplicates, the dominant shape, the label
  distribution). They ``collect`` one small value per record during the map step, and ``judge``
  the collected column once every partition is done (compute a property apart from judging it).

Ids are part of the public interface: never rename or reuse one.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from scrub.records import Carries, Issue, Record, Severity

#: The fixed sections of every check's docstring, in order (feeds `scrub checks --explain`,
#: docs/checks.md and a test that fails when one is missing).
DOC_SECTIONS = ("What it finds", "Why it breaks training", "Example", "What fix does")

CheckKind = Literal["reader", "record", "dataset", "split"]
#: the kinds of check that collect a column of one value a record (`Check.collect`): a dataset
#: check judges its dataset's, a split check the columns of the run's splits together
COLUMN_KINDS = ("dataset", "split")

#: the ignore index of each kind of label, as PyTorch's segmentation references and Hugging
#: Face's language-model losses use them (``--ignore-index auto``)
MASK_IGNORE_INDEX = 255
TOKEN_IGNORE_INDEX = -100


@dataclass(frozen=True, slots=True)
class Finding:
    """What a check says about one record; the runner adds identity, id and severity."""

    message: str
    details: dict[str, Any] = field(default_factory=dict)
    severity: Severity | None = None  # overrides the check's default when set


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """Everything a check may depend on besides the record. Picklable, immutable."""

    labelled: bool = True
    precision: str = "float32"  # the training precision: float32, float16 or bfloat16
    num_classes: int | None = None
    label_range: tuple[int, int] | None = None  # inclusive LO, exclusive HI
    #: what the labels are: "class" ids, continuous "value"s (regression targets), or "auto":
    #: decided from the dataset before the scan (`scrub.checks.labels.label_kind`); a scan
    #: hands its checks the decided kind
    label_kind: str = "auto"
    max_pixels: int | None = None
    #: the label value the loss ignores (``cross_entropy(ignore_index=...)``); None: none;
    #: "auto": by what is checked, 255 for masks and -100 for token labels (`MASK_IGNORE_INDEX`,
    #: `TOKEN_IGNORE_INDEX`), as PyTorch's segmentation code and Hugging Face use them
    ignore_index: int | None | Literal["auto"] = "auto"
    #: colours of RGB masks, as (class id, (r, g, b)) pairs (``--mask-palette``); None: RGB masks
    #: are not class maps
    mask_palette: tuple[tuple[int, tuple[int, int, int]], ...] | None = None
    #: token ids must be below this (None: unknown, from `tokenizer` when given)
    vocab_size: int | None = None
    #: the length the trainer truncates sequences to (None: no truncation)
    max_length: int | None = None
    #: the model's positions: a longer sequence fails (None: unknown, from `tokenizer`)
    max_positions: int | None = None
    #: a tokenizer.json, config.json or a folder of them (`scrub.vocabulary`)
    tokenizer: str | None = None
    #: ``--contract``: the contract file as read (`scrub.profile.contract.Contract`), whose
    #: per-record rules the contract's checks judge
    contract: Any = None
    #: how training normalizes each record (``--normalization``): "per-record" (per-image or
    #: per-row standardization, which divides by the record's own standard deviation) makes a
    #: constant record an error; "none" (not declared) a warning
    normalization: str = "none"
    #: an encoded image with a side shorter than this is a `tiny-image`
    min_image_side: int = 10
    #: an encoded image whose long side is more than this many times its short side is an
    #: `extreme-aspect-ratio`
    max_aspect_ratio: float = 10.0
    #: an image within this many bits of an earlier image's perceptual hash is a
    #: `near-duplicate`, of a training image's a `split-leak` (``--near-distance``; 0: exact
    #: copies only)
    near_distance: int = 6
    #: a text of an evaluation split whose estimated Jaccard similarity to a training text is at
    #: least this is a `split-leak` (``--near-text``; 0: texts compared exactly only)
    near_text: float = 0.0
    #: the scan makes each image's perceptual hash (`near-duplicate` and `split-leak` compare
    #: them): set by the scan (`scrub.scanning.dataset.DatasetScan`), not an option
    perceptual_hashes: bool = False

    @property
    def mask_ignore_index(self) -> int | None:
        return MASK_IGNORE_INDEX if self.ignore_index == "auto" else self.ignore_index

    @property
    def token_ignore_index(self) -> int | None:
        return TOKEN_IGNORE_INDEX if self.ignore_index == "auto" else self.ignore_index

    @property
    def declared_range(self) -> tuple[int, int] | None:
        if self.label_range is not None:
            return self.label_range
        if self.num_classes is not None:
            return (0, self.num_classes)
        return None


@dataclass(frozen=True)
class Check:
    id: str
    severity: Severity
    kind: CheckKind
    needs: Carries  # which records it applies to (see `Carries`)
    doc: str
    func: Callable[..., Any] | None = None
    collect: Callable[[Record], Any] | None = None
    column_dtype: str | None = None
    batch: Callable[..., Any] | None = None  # the vectorized form, over a Batch of rows
    collect_batch: Callable[..., Any] | None = None  # dataset checks: (rows, values) of a Batch
    #: a partition's values collected record by record into its column, in one call (where
    #: making each record's value alone costs more: a batch of perceptual hashes)
    pack: Callable[[list], Any] | None = None

    @property
    def summary(self) -> str:
        """The docstring's first paragraph, as one line (it may wrap over several)."""
        return unwrap(self.doc.strip().split("\n\n", 1)[0])

    @property
    def sections(self) -> dict[str, str]:
        return parse_sections(self.doc)


Position = tuple[int, int]  # (partition number, offset of the record within its partition)


@dataclass(frozen=True, slots=True)
class Column:
    """The values one dataset check collected over the whole dataset, with their positions."""

    positions: np.ndarray  # shape (n, 2): partition number, offset
    values: np.ndarray
    #: (distinct values, counts) over every record, when ``values`` holds only some of them
    histogram: tuple[np.ndarray, np.ndarray] | None = None
    #: a ``"category"`` column's (codes, names): ``values[i] == names[codes[i]]``
    categories: tuple[np.ndarray, list] | None = None

    def in_dataset_order(self) -> np.ndarray:
        """Indices that sort the entries into dataset order (partition, offset)."""
        return np.lexsort((self.positions[:, 1], self.positions[:, 0]))

    def factorized(self) -> tuple[np.ndarray, list]:
        """(codes, names) of the values, names in first-seen order: a few distinct values among
        many rows are then judged per name, without sorting the rows' Python strings (a sort that
        cost the driver time at the end of a scan: see docs/benchmarks.md, "Design
        measurements")."""
        if self.categories is not None:
            return self.categories
        names: dict[Any, int] = {}
        codes = np.fromiter(
            (names.setdefault(value, len(names)) for value in self.values.tolist()),
            dtype=np.intp,
            count=len(self.values),
        )
        return codes, list(names)


Locate = Callable[[Sequence[Position]], list[tuple[str, str, int]]]

REGISTRY: dict[str, Check] = {}


def _register(check: Check) -> Check:
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", check.id):
        raise ValueError(f"check id {check.id!r} must be kebab-case")
    if check.id in REGISTRY:
        raise ValueError(f"duplicate check id {check.id!r}")
    REGISTRY[check.id] = check
    return check


def record_check(id: str, severity: Severity, needs: Carries | str = Carries.ANY) -> Callable:
    """Register ``func(record, options) -> Finding | None`` as a record check."""

    def decorate(func: Callable) -> Callable:
        _register(Check(id, severity, "record", Carries(needs), inspect.getdoc(func) or "", func=func))
        return func

    return decorate


#: A ``"rare"`` column keeps the positions of a value's records until it has seen more than this
#: many of them: beyond, the value is common and only counted.
RARE_KEPT = 1000


def dataset_check(
    id: str,
    severity: Severity,
    collect: Callable[[Record], Any],
    dtype: str,
    needs: Carries | str = Carries.ANY,
    pack: Callable[[list], Any] | None = None,
) -> Callable:
    """Register ``judge(column, options, locate) -> list[(position, Finding)]``.

    ``collect(record)`` returns the record's value (or None to leave it out); ``dtype`` is the
    NumPy dtype the values are packed into, ``"category"`` for a few distinct strings,
    ``"rare"`` to keep a histogram of numbers plus the positions of their rare values only, or
    ``"magnitude"`` for the same over 9%-wide bins of positive magnitudes. ``judge`` may return
    ``(None, finding)`` for what concerns the dataset rather than a record: it becomes a note in
    the summary, so that a rule that does not apply says why. ``pack``: as a split check's.
    """
    return _column_check("dataset", id, severity, collect, dtype, needs, pack)


def split_check(
    id: str,
    severity: Severity,
    collect: Callable[[Record], Any],
    dtype: str,
    needs: Carries | str = Carries.SPLITS,
    pack: Callable[[list], Any] | None = None,
) -> Callable:
    """Register ``judge(train, evaluation, options) -> [(row, (training split, row), distance)]``,
    a check of a run's splits: ``collect`` as a dataset check's, once per record of each split;
    ``pack``: what turns a partition's collected values into its column (`Check.pack`);
    ``judge`` gets the training splits' columns and one evaluation split's, and names the rows
    of the evaluation split it flags, each with the training record it concerns and how far
    apart they are (None: the same) (`scrub.scanning.splits` runs it once every dataset of the
    run is scanned, and words the findings)."""
    return _column_check("split", id, severity, collect, dtype, needs, pack)


def _column_check(
    kind: CheckKind,
    id: str,
    severity: Severity,
    collect: Callable[[Record], Any],
    dtype: str,
    needs: Carries | str,
    pack: Callable[[list], Any] | None = None,
) -> Callable:
    """The decorator that registers a check of a kind that collects a column (`COLUMN_KINDS`)."""

    def decorate(func: Callable) -> Callable:
        doc = inspect.getdoc(func) or ""
        _register(Check(id, severity, kind, Carries(needs), doc, func, collect, dtype, pack=pack))
        return func

    return decorate


def batch_check(id: str, severity: Severity | None = None, needs: Carries | str = Carries.ARRAY) -> Callable:
    """Register ``func(batch, options) -> [(row, Finding), ...]``, the vectorized form of a check.

    For an id already registered (a record check), this adds the batch form to it; otherwise it
    registers a batch-only check with ``severity`` and the function's docstring.
    """

    def decorate(func: Callable) -> Callable:
        if id in REGISTRY:
            REGISTRY[id] = replace(REGISTRY[id], batch=func)
        else:
            if severity is None:
                raise ValueError(f"new check {id!r} needs a severity")
            _register(Check(id, severity, "record", Carries(needs), inspect.getdoc(func) or "", batch=func))
        return func

    return decorate


def batch_collector(id: str) -> Callable:
    """Add to dataset check ``id`` a vectorized ``collect_batch(batch) -> (rows, values)``."""

    def decorate(func: Callable) -> Callable:
        REGISTRY[id] = replace(REGISTRY[id], collect_batch=func)
        return func

    return decorate


def reader_check(id: str, severity: Severity, doc: str, needs: Carries | str = Carries.ANY) -> Check:
    """Document a check that readers detect while reading."""
    return _register(Check(id, severity, "reader", Carries(needs), inspect.cleandoc(doc)))


def parse_sections(doc: str) -> dict[str, str]:
    """Split a check docstring into its fixed sections (``Heading:`` lines at column 0), each
    unwrapped (`unwrap`): the docstring's line breaks are its source's, not the reader's."""
    sections: dict[str, str] = {}
    current: str | None = None
    for line in inspect.cleandoc(doc).splitlines()[1:]:
        heading = line.rstrip().rstrip(":")
        if line.rstrip().endswith(":") and heading in DOC_SECTIONS:
            current = heading
            sections[current] = ""
        elif current is not None:
            sections[current] += line.strip() + "\n"
    return {name: unwrap(text) for name, text in sections.items()}


def unwrap(text: str) -> str:
    """Text wrapped for a source file as paragraphs of one line each (blank lines between
    paragraphs kept), for a terminal or a page to wrap at its own width."""
    paragraphs = [
        " ".join(line.strip() for line in block.splitlines()) for block in text.strip().split("\n\n")
    ]
    return "\n\n".join(paragraph.strip() for paragraph in paragraphs if paragraph.strip())


def get(check_id: str) -> Check:
    try:
        return REGISTRY[check_id]
    except KeyError:
        raise KeyError(f"unknown check id {check_id!r}") from None


def make_issue(check_id: str, source: str, key: str, index: int | None, finding: Finding) -> Issue:
    """Turn a check's finding into a manifest issue, with the check's default severity."""
    check = get(check_id)
    return Issue(
        source=source,
        key=key,
        index=index,
        check=check.id,
        severity=finding.severity or check.severity,
        message=finding.message,
        details=dict(finding.details),
    )


def problem(record: Record, check_id: str, message: str, **details: Any) -> Issue:
    """An issue that a reader found on a record it could not read normally."""
    return make_issue(check_id, record.source, record.key, record.index, Finding(message, details))


#: `value_counts` counts with `np.bincount` up to this value: its array of counts stays small
BINCOUNT_LIMIT = 1 << 16


def value_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_counts=True)`` of integers: with `np.bincount` when they are
    small and non-negative (class indices, mask values), which does not sort and so is several
    times faster (see docs/benchmarks.md, "Design measurements"), else with `np.unique`."""
    values = values.ravel()
    if values.dtype == bool:
        values = values.view(np.uint8)
    if values.size and values.dtype.kind in "ui":
        small = values.dtype.kind == "u" and values.dtype.itemsize <= 2  # 8- and 16-bit: in range
        if small or (int(values.min()) >= 0 and int(values.max()) < BINCOUNT_LIMIT):
            counts = np.bincount(values)
            present = np.flatnonzero(counts)
            return present, counts[present]
    return np.unique(values, return_counts=True)


def in_sorted(values: np.ndarray, sorted_values: np.ndarray) -> np.ndarray:
    """``np.isin(values, sorted_values)`` for a sorted 1-D ``sorted_values``, by binary search:
    `np.isin` sorts both sides with `np.unique` once the second is more than a few values, and
    its first call imports ``numpy.ma`` (see `sorted_unique`)."""
    values = np.asarray(values)
    if not len(sorted_values):
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    return sorted_values[at] == values


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-D array, without its first call's import of ``numpy.ma``
    (a cost on every scan's start-up: see docs/benchmarks.md, "Design measurements")."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
