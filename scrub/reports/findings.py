"""The few issues a report names, picked from a manifest of any size in one streaming pass.

Order: against a baseline, the issues that are new or reappeared come first (they are what a
nightly job fails on, and a person reading a report wants them named, not the first ten known
ones in dataset order); then the others. Within each, leaks between splits (`split-leak`) come
first: a copied test record makes every metric of the run wrong, whatever else it found. Then
dataset order: the dataset (of a run of several), the partition (a reader lists its partitions
in dataset order), then the record's index. The partition comes before the index because some
formats number records per file (a folder of Parquet or HDF5 files: ``part-00001.parquet:880``
is after every row of ``part-00000.parquet``). Without a baseline and without leaks every issue
ranks the same, so the order is dataset order. Issues read back from a manifest carry no
partition: they are ordered by dataset and index.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from scrub.checks.drift import NOT_RECORDS
from scrub.manifest import read_manifest
from scrub.records import SEVERITY_NAMES, Issue, Severity

#: keys a report names per check (JUnit failures, the HTML report)
KEYS_PER_CHECK = 10
#: baseline statuses a report names first, and marks: what ``--fail-on new`` fails on
MARKED = ("new", "reappeared")
#: drift from the baseline (`scrub.checks.drift`): findings on the dataset as a whole (key ``*``)
DRIFT_CHECKS = NOT_RECORDS
#: a contract's checks (`scrub.checks.contract`) all start with this; those with key ``*``
#: concern the dataset as a whole, the others name a record
CONTRACT_PREFIX = "contract-"
#: thumbnails of quarantined images in the HTML report, at most (and of each of its sections of
#: paired records)
THUMBNAILS = 200
#: a record of an evaluation split that copies a training record: what reports name first
LEAK_CHECK = "split-leak"
#: checks whose finding pairs its record with another one (a leak's training record in
#: ``details.train``, a copy's ``details.first``): the HTML report shows the two side by side,
#: so the collector keeps as many of their issues as it keeps thumbnails
PAIRED_CHECKS = frozenset({LEAK_CHECK, "duplicate", "near-duplicate", "near-duplicate-text"})
#: drift and contract findings on the dataset as a whole a report names one by one, at most:
#: a few per feature in practice, capped so that a report's size stays bounded whatever happens
DATASET_FINDINGS = 500


def is_dataset_finding(issue: Issue) -> bool:
    """Whether ``issue`` is a drift or a contract finding on the dataset as a whole: the
    reports name each one (its feature, what was measured, the limit) in a section of its
    own rather than among records."""
    return issue.key == "*" and (issue.check in DRIFT_CHECKS or issue.check.startswith(CONTRACT_PREFIX))


def describe_finding(issue: Issue) -> tuple[str, str, str]:
    """A dataset finding's feature, what was found and what was expected, as the reports show
    them: a drift's distance and threshold (``details.distance``, ``details.threshold``), a
    contract's found and expected values (``details.found``, ``details.expected``, the
    contract file's ``details.line``). "" where the details do not say."""
    details = issue.details or {}
    feature = str(details.get("feature") or details.get("rule") or "")
    line = details.get("line")
    if line is not None:
        feature = f"{feature} (contract line {line})" if feature else f"contract line {line}"
    if "distance" in details:
        found = f"distance {_value(details['distance'])}"
    elif "found" in details:
        found = f"found {_value(details['found'])}"
    else:
        found = ""
    if "threshold" in details:
        limit = f"threshold {_value(details['threshold'])}"
    elif "expected" in details:
        limit = f"expected {_value(details['expected'])}"
    else:
        limit = ""
    return feature, found, limit


#: characters of a found or expected value a report shows (a class set can be long)
VALUE_CHARACTERS = 80


def _value(value: object) -> str:
    if isinstance(value, bool) or value is None:
        text = str(value).lower()
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_value(item) for item in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{key}: {_value(item)}" for key, item in value.items()) + "}"
    else:
        text = str(value)
    return text if len(text) <= VALUE_CHARACTERS else text[: VALUE_CHARACTERS - 1] + "…"


@dataclass
class Findings:
    """What the reports name: the first errors and the first keys per check, new and
    reappeared ones first (see the module's docstring); `mark` says which to mark."""

    errors: list[Issue] = field(default_factory=list)  # the first ``show`` errors (``Issue.status``)
    error_count: int = 0  # every error of tonight's scan (resolved baseline lines are not)
    #: check -> the first records it flagged, and the `mark` of each; its issues counted by
    #: status (new, persisting, reappeared; "found" without a baseline) and by (status, severity)
    keys: dict[str, list[str]] = field(default_factory=dict)
    key_marks: dict[str, list[str]] = field(default_factory=dict)
    statuses: dict[str, Counter] = field(default_factory=dict)
    severities: dict[str, Counter] = field(default_factory=dict)
    #: issues a thumbnail can show: (source, key, index, check, message) of errors on images
    quarantined: list[Issue] = field(default_factory=list)
    #: how many errors and thumbnails were looked for (a report that wants more collects again)
    show: int = 0
    images: int = 0
    #: drift and contract findings on the dataset as a whole (`is_dataset_finding`): new and
    #: reappeared first, then by dataset, errors first, else as found; the first
    #: `DATASET_FINDINGS`, and how many there were
    dataset_findings: list[Issue] = field(default_factory=list)
    dataset_finding_count: int = 0
    #: check of `PAIRED_CHECKS` -> its first issues in report order, details and all (``keys``
    #: names the first ``per_check`` of them): as many as thumbnails are looked for, at least
    #: ``per_check``
    pairs: dict[str, list[Issue]] = field(default_factory=dict)

    @property
    def more_errors(self) -> int:
        return self.error_count - len(self.errors)


def record_name(issue: Issue) -> str:
    """How reports name a record: its key, after its source file where that is another name
    (``train.h5:3`` for row 3 of one of several HDF5 files)."""
    name = issue.key if issue.source == issue.key else f"{issue.source}:{issue.key}"
    if issue.dataset is None:
        return name
    if issue.source == issue.dataset.rstrip("/").rsplit("/", 1)[-1]:  # an LMDB's source is its own name
        return f"{issue.dataset}:{issue.key}"
    return f"{issue.dataset}:{name}"


def partner(issue: Issue) -> Issue | None:
    """The record a finding pairs ``issue``'s record with, as an issue on it (what `record_name`
    and the HTML report's thumbnails need): a leak's training record (``details.train``, of the
    training dataset; its evaluation record, ``details.evaluation``, when the finding is on the
    training record), a copy's first (``details.first``, of the same dataset); None for other
    checks, and where the details do not name one."""
    details = issue.details or {}
    if issue.check == LEAK_CHECK:  # on the training record with ``fix --leak-side train``
        other = details.get("train", details.get("evaluation"))
        dataset = other.get("dataset") if isinstance(other, dict) else None
    elif issue.check in PAIRED_CHECKS:
        other, dataset = details.get("first"), issue.dataset
    else:
        return None
    if not isinstance(other, dict) or other.get("key") is None:
        return None
    key = str(other["key"])
    index = other.get("index")
    return Issue(
        str(other.get("source") or key),
        key,
        index if isinstance(index, int) else None,
        issue.check,
        issue.severity,
        "",
        dataset=None if dataset is None else str(dataset),
    )


def partner_name(issue: Issue) -> str | None:
    """How reports name the record `partner` pairs ``issue``'s record with (None: none)."""
    other = partner(issue)
    return None if other is None else record_name(other)


def leaks_first(checks: Iterable[str]) -> list[str]:
    """``checks`` in their order, but for `split-leak` first: how reports list the checks."""
    return sorted(checks, key=lambda check: check != LEAK_CHECK)


def mark(status: str | None) -> str:
    """How reports mark an issue of this baseline status: ``new`` or ``reappeared``, else ""."""
    return status if status in MARKED else ""


def _rank(status: str | None) -> int:
    """0 for what reports name first (new, reappeared), 1 for the rest (persisting; any issue
    of a scan without a baseline)."""
    return 0 if status in MARKED else 1


def _ranks(status: str | None, check: str) -> tuple[int, int]:
    """`_rank`, then 0 for a leak between splits and 1 for the rest: what reports name first."""
    return _rank(status), 0 if check == LEAK_CHECK else 1


def _order(issue: Issue, partition: int) -> tuple:
    return (
        *_ranks(issue.status, issue.check),
        issue.dataset or "",
        partition,
        issue.index if issue.index is not None else -1,
        issue.source,
        issue.key,
        issue.check,
    )


def collect(manifest: Path, show: int = 10, per_check: int = KEYS_PER_CHECK, images: int = 0) -> Findings:
    """One pass over ``manifest``: the first ``show`` errors, ``per_check`` keys per check, and
    the first ``images`` errors (for thumbnails), each in report order (new and reappeared
    first, then dataset order); memory stays flat."""
    collector = Collector(show, per_check, images)
    for issue in read_manifest(manifest):
        collector.add(issue)
    return collector.finish()


class Collector:
    """`collect`, one issue at a time: a scan feeds it as it writes the manifest (workers feed
    one per partition, merged in the driver), so that its reports need no second pass over a
    manifest of millions of lines. Memory: the kept issues and a few counts per check."""

    def __init__(
        self, show: int = 10, per_check: int = KEYS_PER_CHECK, images: int = 0, partition: int = -1
    ) -> None:
        self.show, self.per_check, self.images = show, per_check, images
        #: the partition whose issues this collector is given, when one (a worker's); -1: unknown
        self.partition = partition
        self.errors: list[tuple] = []  # a max-heap (negated order) of the smallest ``max(show, images)``
        self.keys: dict[str, list[tuple]] = {}
        self.counter = 0
        #: (check, status, severity) -> issues: one count per issue, the rest derived at the end
        self.counts: Counter[tuple[str, str, str]] = Counter()
        #: drift and contract findings on the dataset as a whole, kept whole (`is_dataset_finding`)
        self.dataset_findings: list[Issue] = []
        self.dataset_finding_count = 0

    def add(self, issue: Issue, partition: int | None = None) -> None:
        """Count an issue (of ``partition``: by default the collector's), and keep it if it is
        among the first so far (the fast path rejects most issues of a dense partition before
        building anything)."""
        status = issue.status or "found"
        if status == "resolved":
            return
        self.counts[(issue.check, status, SEVERITY_NAMES[issue.severity])] += 1
        if is_dataset_finding(issue):
            self.dataset_finding_count += 1
            if len(self.dataset_findings) < DATASET_FINDINGS:
                self.dataset_findings.append(issue)
        self.keep(issue, partition)

    def count(self, check: str, severity: Severity, issues: int = 1) -> None:
        """Count found issues without their objects (see `wants`)."""
        self.counts[(check, "found", SEVERITY_NAMES[severity])] += issues

    def wants(
        self, check: str, severity: Severity, dataset: str | None, index: int, status: str | None = None
    ) -> bool:
        """Whether an issue of ``check`` on record ``index`` (of baseline ``status``) may be
        kept: False when it comes after every one kept, so that its object need not be built."""
        rank, at = _ranks(status, check), (self.partition, index)
        if not _after_all(rank, dataset, at, self.keys.get(check, []), self.kept_per_check(check)):
            return True
        return severity is Severity.ERROR and not _after_all(
            rank, dataset, at, self.errors, max(self.show, self.images)
        )

    def kept_per_check(self, check: str) -> int:
        """How many issues of ``check`` are kept: ``per_check``, and as many as thumbnails for
        a check whose findings the HTML report shows as pairs (`PAIRED_CHECKS`)."""
        return max(self.per_check, self.images) if check in PAIRED_CHECKS else self.per_check

    def keep(self, issue: Issue, partition: int | None = None) -> None:
        """Keep an issue (counted already; of ``partition``, by default the collector's) if it
        is among the first so far."""
        partition = self.partition if partition is None else partition
        severity = SEVERITY_NAMES[issue.severity]
        heap = self.keys.get(issue.check)
        if heap is None:
            heap = self.keys[issue.check] = []
        wanted = max(self.show, self.images) if severity == "error" else 0
        limit = self.kept_per_check(issue.check)
        if _after(issue, partition, heap, limit) and (
            not wanted or _after(issue, partition, self.errors, wanted)
        ):
            return  # the fast path of a dense partition: after every issue kept, nothing to build
        order = _order(issue, partition)
        if len(heap) < limit or order < heap[0][0].order:
            self.counter += 1
            _keep(heap, order, self.counter, issue, limit)
        if wanted and (len(self.errors) < wanted or order < self.errors[0][0].order):
            self.counter += 1
            _keep(self.errors, order, self.counter, issue, wanted)

    @property
    def severities(self) -> dict[str, Counter]:
        """check -> issues by (status, severity)."""
        found: dict[str, Counter] = {}
        for (check, status, severity), count in self.counts.items():
            found.setdefault(check, Counter())[(status, severity)] += count
        return found

    def merge(self, other: "Collector") -> None:
        """Add what another collector (of other records) saw: its counts, and its kept issues."""
        self.counts.update(other.counts)
        self.dataset_finding_count += other.dataset_finding_count
        self.dataset_findings += other.dataset_findings[: DATASET_FINDINGS - len(self.dataset_findings)]
        for check, heap in other.keys.items():
            for order, _, issue in heap:
                self.counter += 1
                limit = self.kept_per_check(check)
                _keep(self.keys.setdefault(check, []), order.order, self.counter, issue, limit)
        for order, _, issue in other.errors:
            self.counter += 1
            _keep(self.errors, order.order, self.counter, issue, max(self.show, self.images))

    def finish(self) -> Findings:
        found = Findings(show=self.show, images=self.images)
        found.dataset_findings = sorted(  # stable: the order they were found in, errors first
            self.dataset_findings,
            key=lambda issue: (_rank(issue.status), issue.dataset or "", issue.severity != Severity.ERROR),
        )
        found.dataset_finding_count = self.dataset_finding_count
        for (check, status, severity), count in self.counts.items():
            found.statuses.setdefault(check, Counter())[status] += count
            found.severities.setdefault(check, Counter())[(status, severity)] += count
            if severity == "error":
                found.error_count += count
        ranked = [item[2] for item in sorted(self.errors, key=lambda item: item[0].order)]
        found.errors = ranked[: self.show]
        found.quarantined = ranked[: self.images]
        for check, heap in sorted(self.keys.items()):
            kept = [item[2] for item in sorted(heap, key=lambda item: item[0].order)]
            if check in PAIRED_CHECKS:
                found.pairs[check] = kept
            kept = kept[: self.per_check]
            found.keys[check] = [record_name(issue) for issue in kept]
            found.key_marks[check] = [mark(issue.status) for issue in kept]
        return found


def _after(issue: Issue, partition: int, heap: list, limit: int) -> bool:
    """Whether ``issue`` (of ``partition``) comes after every issue of a full ``heap`` by its
    rank, dataset, partition and index alone (`_order` compares those first), without building
    its order."""
    if limit <= 0:
        return True
    if issue.index is None:
        return False
    rank = _ranks(issue.status, issue.check)
    return _after_all(rank, issue.dataset, (partition, issue.index), heap, limit)


def _after_all(
    rank: tuple[int, int], dataset: str | None, at: tuple[int, int], heap: list, limit: int
) -> bool:
    """Whether the record ``at`` (partition, index) of ``dataset``, of `_ranks` ``rank``, comes
    after every issue of a full ``heap``: a later rank always does; the same rank, by a later
    place in the same dataset (another dataset may sort either side: no fast answer)."""
    if limit <= 0:
        return True
    if len(heap) < limit:
        return False
    last = heap[0][0].order
    if rank != last[:2]:
        return rank > last[:2]
    return (dataset or "") == last[2] and at > (last[3], last[4])


def _keep(heap: list, order: tuple, counter: int, issue: Issue, limit: int) -> None:
    """Keep the ``limit`` smallest by ``order`` (a heap of negated keys: the largest on top)."""
    if limit <= 0:
        return
    item = (_Reversed(order), counter, issue)
    if len(heap) < limit:
        heapq.heappush(heap, item)
    elif item[0] > heap[0][0]:
        heapq.heapreplace(heap, item)


class _Reversed:
    """Orders in reverse, so that heapq's min-heap keeps the largest of the kept on top."""

    __slots__ = ("order",)

    def __init__(self, order: tuple) -> None:
        self.order = order

    def __lt__(self, other: "_Reversed") -> bool:
        return self.order > other.order

    def __gt__(self, other: "_Reversed") -> bool:
        return self.order < other.order

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.order == other.order
