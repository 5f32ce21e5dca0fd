"""Aggregate partial results as they complete into the scan's summary.

Memory grows with the number of issues (they are streamed to the manifest, and the identities
of records with issues are kept to count them) and with the compact columns of the dataset
checks, never with the records themselves.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scrub.baseline import Baseline
from scrub.checks.base import RARE_KEPT, Check, CheckOptions, Column, in_sorted, make_issue, sorted_unique
from scrub.checks.numeric import MAGNITUDE_KEPT_PER_BIN, magnitude_bins
from scrub.manifest import ManifestWriter
from scrub.readers.base import DatasetInfo
from scrub.records import Issue, Severity
from scrub.replay.standardize import Moments
from scrub.reports.findings import Collector
from scrub.results import NumericStats, PartitionResult

#: 2: the replay trains with plain SGD (`replay.options.lr` is a plain learning rate), its
#: `precision` moved to `options.precision`, `batches_skipped` counts batches with nothing applied.
SCHEMA_VERSION = 2
LABEL_CHECKS = frozenset(
    {
        "label-out-of-range",
        "label-outlier",
        "non-integer-label",
        "nonfinite-label",
        "missing-label",
        "invalid-label-vector",
    }
)


class ColumnStore:
    """One dataset check's collected values, packed as they arrive."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.categories: dict[str, int] = {}
        self._positions: list[np.ndarray] = []
        self._values: list[np.ndarray] = []

    def add(self, partition: int, offsets: Any, values: Any) -> None:
        if len(offsets) == 0:
            return
        positions = np.empty((len(offsets), 2), dtype=np.int32)
        positions[:, 0] = partition
        positions[:, 1] = offsets
        self._positions.append(positions)
        if self.dtype == "category":
            codes = [self.categories.setdefault(v, len(self.categories)) for v in values]
            self._values.append(np.asarray(codes, dtype=np.uint16))
        else:
            self._values.append(np.asarray(values, dtype=self.dtype))

    def column(self) -> Column:
        if not self._positions:
            empty = np.empty(0, dtype=object if self.dtype == "category" else self.dtype)
            return Column(np.empty((0, 2), dtype=np.int32), empty)
        positions = np.concatenate(self._positions)
        values = np.concatenate(self._values)
        if self.dtype == "category":
            names = list(self.categories)
            return Column(positions, np.array(names, dtype=object)[values], categories=(values, names))
        return Column(positions, values)


class RareValueStore:
    """A histogram of numeric values plus the positions of the values that are still rare.

    A value (or, with ``bins``, a bin of values) seen more than ``cap`` times is common: its
    positions are dropped and never kept again. With ``keep_negative``, negative values keep
    their positions (every negative label is reported). Vectorized: the only Python loop is the
    histogram update, once per distinct value (bin) of a partition.
    """

    def __init__(
        self,
        cap: int = RARE_KEPT,
        bins: Callable[[np.ndarray], np.ndarray] | None = None,
        keep_negative: bool = True,
    ) -> None:
        self.cap = cap
        self.bins = bins
        self.keep_negative = keep_negative
        #: the histogram so far: sorted distinct values (bins) and their counts, kept in NumPy: a
        #: Counter updated per value held the GIL ~1.5 ms a partition of 1,000 classes, which the
        #: worker threads of an HDF5 scan waited for (`merge_histograms`)
        self.distinct = np.empty(0, dtype=np.float64)
        self.totals = np.empty(0, dtype=np.int64)
        self.common = np.empty(0, dtype=np.float64)
        self._positions: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []

    def add(
        self,
        partition: int,
        offsets: Any,
        values: Any,
        histogram: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Add a partition's values; with ``histogram`` (every value's bin and count, counted by
        the worker), ``values`` may be only the rare ones."""
        values = np.asarray(values, dtype=np.float64)
        if len(values) == 0 and histogram is None:
            return
        keys = values if self.bins is None else self.bins(values)
        distinct, counts = histogram if histogram is not None else np.unique(keys, return_counts=True)
        distinct = np.asarray(distinct, dtype=np.float64)
        self.distinct, self.totals = merge_histograms(
            self.distinct, self.totals, distinct, np.asarray(counts, dtype=np.int64)
        )
        totals = self.totals[np.searchsorted(self.distinct, distinct)]
        newly_common = np.sort(distinct[(totals > self.cap) & ((distinct >= 0) | (not self.keep_negative))])
        if len(newly_common):
            self.common = sorted_unique(np.concatenate((self.common, newly_common)))  # not union1d: see there
            for i, kept in enumerate(self._keys):
                rare = ~in_sorted(kept, newly_common)
                self._keys[i], self._values[i], self._positions[i] = (
                    kept[rare],
                    self._values[i][rare],
                    self._positions[i][rare],
                )
        rare = ~in_sorted(keys, self.common)
        if rare.any():
            positions = np.empty((int(rare.sum()), 2), dtype=np.int32)
            positions[:, 0], positions[:, 1] = partition, np.asarray(offsets)[rare]
            self._positions.append(positions)
            self._values.append(values[rare])
            self._keys.append(keys[rare])

    def column(self) -> Column:
        distinct, counts = self.distinct, self.totals
        if not self._positions:
            return Column(np.empty((0, 2), dtype=np.int32), np.empty(0), (distinct, counts))
        return Column(np.concatenate(self._positions), np.concatenate(self._values), (distinct, counts))


def merge_histograms(
    distinct: np.ndarray, counts: np.ndarray, more: np.ndarray, more_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Two histograms of sorted distinct values as one, sorted: counts of equal values summed.
    Values are float64: labels and magnitude bins, all finite (a NaN would stay an entry of its
    own, as in a Counter of them)."""
    if not len(more):
        return distinct, counts
    values = np.concatenate((distinct, more))
    order = np.argsort(values, kind="stable")
    values, summed = values[order], np.concatenate((counts, more_counts))[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    return values[starts], np.add.reduceat(summed, starts)


@dataclass
class Progress:
    """A snapshot for progress displays."""

    records: int
    total: int
    issues: int
    seconds: float


def _store(dtype: str) -> ColumnStore | RareValueStore:
    if dtype == "rare":
        return RareValueStore()
    if dtype == "magnitude":
        return RareValueStore(MAGNITUDE_KEPT_PER_BIN, bins=magnitude_bins, keep_negative=False)
    return ColumnStore(dtype)


def _column_store(check: Check) -> ColumnStore | RareValueStore:
    """A fresh store for a dataset check's column (dataset checks always declare its dtype)."""
    assert check.column_dtype is not None
    return _store(check.column_dtype)


class ScanAggregate:
    """Folds partial results into counts, streams issues to the manifest, runs dataset checks."""

    def __init__(
        self,
        checks: Sequence[Check],
        options: CheckOptions,
        manifest: ManifestWriter,
        progress: Callable[[Progress], None] | None = None,
        total: int = 0,
        severities: dict[str, str] | None = None,
        baseline: Baseline | None = None,
        dataset: str | None = None,
        collector: Collector | None = None,
    ) -> None:
        self.checks = list(checks)
        #: in a scan of several datasets, the one this aggregate is of (every issue names it)
        self.dataset = dataset
        #: check id -> the severity the user set for it (``--check-severity``, a config file)
        self.severities = {c: Severity(level) for c, level in (severities or {}).items() if level != "ignore"}
        self.baseline = baseline
        self.options = options
        self.manifest = manifest
        self.progress = progress
        self.total = total
        self.started = time.perf_counter()
        self.records = 0
        self.by_check: Counter[str] = Counter({c.id: 0 for c in self.checks})
        self.by_severity: Counter[str] = Counter({s.value: 0 for s in Severity})
        #: severity -> partition -> which of its records have an issue of it (a byte a record, for
        #: the partitions that have any: flat in the number of findings)
        self.marks: dict[str, dict[int, np.ndarray]] = {s.value: {} for s in Severity}
        #: issues without a position (the dataset's own, key ``*``; the replay's): their records' identities
        self.unplaced: dict[str, set[tuple[str, str, int | None]]] = {s.value: set() for s in Severity}
        #: what the reports name, gathered as the issues stream by
        self.collector = collector if collector is not None else Collector()
        #: records with a label issue: the dummy-loss replay does not repeat them
        self.label_flagged: set[tuple[str, str]] = set()
        self.stats: dict[str, Counter] = defaultdict(Counter)
        self.numeric: dict[str, NumericStats] = {}
        self.moments: dict[str, Moments] = {}  # for the replay's standardization
        self.columns = {c.id: _column_store(c) for c in self.checks if c.kind == "dataset"}
        #: what the scan wants said about the dataset as a whole (see `Summary.notes`)
        self.notes: list[str] = []
        self._report_progress()

    def add(self, result: PartitionResult) -> None:
        self.records += result.records
        if result.findings is not None:  # encoded in the worker (see `scrub.encoding.Encoding`)
            self.manifest.write_lines(result.lines, result.line_count)
            for (check, _, severity), count in result.findings.counts.items():
                self.by_check[check] += count
                self.by_severity[severity] += count
            self.collector.merge(result.findings)
            for severity, offsets in result.flagged.items():
                self._mark(severity, result.partition, offsets)
            result.lines, result.findings, result.flagged = [], None, {}
        issue_offsets = (
            result.offsets if len(result.offsets) == len(result.issues) else [None] * len(result.issues)
        )
        for issue, offset in zip(result.issues, issue_offsets):
            self.add_issue(issue, None if offset is None else (result.partition, offset))
        for name, counter in result.stats.items():
            self.stats[name].update(counter)
        for source, stats in result.numeric.items():
            self.numeric.setdefault(source, NumericStats()).merge(stats)
        for key, moments in result.moments.items():
            self.moments.setdefault(key, Moments()).merge(moments)
        for check_id, column in result.columns.items():
            self.columns[check_id].add(result.partition, *column)
        # The local scheduler keeps each result until the end: drop what was copied out.
        result.issues, result.offsets, result.columns, result.moments = [], [], {}, {}
        self._report_progress()

    def _report_progress(self) -> None:
        if self.progress is not None:
            self.progress(Progress(self.records, self.total, sum(self.by_severity.values()), self.elapsed))

    def add_dataset_issues(self, issues: Sequence[Issue]) -> None:
        """Problems with the dataset as a whole, found by the reader before any record."""
        for issue in issues:
            if issue.check in self.by_check:
                self.add_issue(issue)

    def add_issue(self, issue: Issue, position: tuple[int, int] | None = None, placed: bool = False) -> None:
        """Stream one issue to the manifest and count it (classed against the baseline);
        ``position``: its record's (partition, offset), when it has one; ``placed``: the caller
        marks the position itself (many at once, `_mark`)."""
        if issue.check in self.severities:
            issue.severity = self.severities[issue.check]
        if self.dataset is not None:
            issue.dataset = self.dataset
        if self.baseline is not None:
            self.baseline.classify(issue)
        if issue.check in LABEL_CHECKS:
            self.label_flagged.add((issue.source, issue.key))
        self.manifest.write(issue)
        self.collector.add(issue)
        self.by_check[issue.check] += 1
        self.by_severity[issue.severity.value] += 1
        if position is not None:
            self._mark(issue.severity.value, position[0], np.asarray([position[1]]))
        elif not placed:
            self.unplaced[issue.severity.value].add((issue.source, issue.key, issue.index))

    def _mark(self, severity: str, partition: int, offsets: np.ndarray) -> None:
        if not len(offsets):
            return
        marks = self.marks[severity]
        mask = marks.get(partition)
        needed = int(offsets.max()) + 1
        if mask is None or len(mask) < needed:
            grown = np.zeros(max(needed, 0 if mask is None else len(mask)), dtype=bool)
            if mask is not None:
                grown[: len(mask)] = mask
            mask = marks[partition] = grown
        mask[offsets] = True

    def finish_dataset_checks(
        self,
        locate: Callable[[Sequence[tuple[int, int]]], list[tuple[str, str, int]]],
        contents: Callable[[Sequence[tuple[int, int]]], list[str | None]] | None = None,
    ) -> None:
        """Judge the collected columns; ``contents`` gives the content hash of records keyed by
        position (their identity across scans)."""
        for check in self.checks:
            if check.kind != "dataset":
                continue
            assert check.func is not None  # a dataset check's judge
            judgement = check.func(self.columns[check.id].column(), self.options, locate)
            self.notes += [
                f"{check.id}: {finding.message}" for position, finding in judgement if position is None
            ]
            judgement = [(position, finding) for position, finding in judgement if position is not None]
            positions = [position for position, _ in judgement]
            identities = locate(positions)
            hashes = contents(positions) if contents is not None else [None] * len(positions)
            marked: dict[tuple[str, int], list[int]] = defaultdict(list)  # (severity, partition) -> offsets
            for (source, key, index), content, (position, finding) in zip(identities, hashes, judgement):
                issue = make_issue(check.id, source, key, index, finding)
                issue.content = content
                self.add_issue(issue, placed=True)
                marked[issue.severity.value, int(position[0])].append(int(position[1]))
            for (severity, partition), offsets in marked.items():
                self._mark(severity, partition, np.asarray(offsets))
            self.columns[check.id] = _column_store(check)  # free the memory

    def finish_baseline(self, path) -> dict[str, Any] | None:
        """Write the baseline's issues no longer found (status ``resolved``) and return the
        comparison's counts for the summary; None without a baseline."""
        if self.baseline is None:
            return None
        for issue in self.baseline.resolved():
            self.manifest.write(issue)
        return {"path": str(path), **self.baseline.counts()}

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def records_with(
        self,
        severity: Severity,
        locate: Callable[[Sequence[tuple[int, int]]], list[tuple[str, str, int]]] | None = None,
    ) -> int:
        """Distinct records with an issue at or above ``severity``. Issues found without a
        position (the replay's) are told apart from the others by identity, through ``locate``."""
        levels = [name for name in self.marks if Severity(name).at_least(severity)]
        unplaced: set = set().union(*(self.unplaced[name] for name in levels))
        unions = {}
        for partition in set().union(*(self.marks[name] for name in levels)):
            masks = [self.marks[name][partition] for name in levels if partition in self.marks[name]]
            union = unions[partition] = np.zeros(max(map(len, masks)), dtype=bool)
            for mask in masks:
                union[: len(mask)] |= mask
        if locate is not None and any(key != "*" for _, key, _ in unplaced):
            for partition, union in unions.items():
                unplaced.update(locate([(partition, int(offset)) for offset in np.flatnonzero(union)]))
            return len(unplaced)
        return len(unplaced) + sum(int(union.sum()) for union in unions.values())


@dataclass
class Summary:
    """The scan's results, as shown in the table and written by ``--json``."""

    dataset: DatasetInfo
    path: str
    records: int
    issues_by_check: dict[str, int]
    issues_by_severity: dict[str, int]
    records_with_errors: int
    records_with_warnings: int
    stats: dict[str, dict]
    checks: list[str]
    options: dict[str, Any]
    scheduler: str
    workers: int
    seconds: float
    manifest: str | None
    #: per array dataset: dtype, shape, min/max/mean of its finite values
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the options that decide what a record is (format, keys, codec)
    reading: dict[str, Any] = field(default_factory=dict)
    #: see `scrub.fingerprint`: lets `fix` check that a manifest belongs to the dataset
    fingerprint: dict[str, Any] = field(default_factory=dict)
    #: what the dummy-loss replay did (`--dummy-loss`), else None
    replay: dict[str, Any] | None = None
    #: what a person should know that is not an issue of a record: a rule that did not apply
    #: and why, which label dataset was used, ...
    notes: list[str] = field(default_factory=list)
    #: with ``--baseline``: its path and the counts new, persisting, reappeared, resolved
    baseline: dict[str, Any] | None = None
    #: with ``--cache``: the cache file, and how many records were reused and scanned
    cache: dict[str, Any] | None = None
    #: a scan of several datasets: each one's own summary (this one holds the totals)
    parts: list["Summary"] = field(default_factory=list)

    @classmethod
    def combine(
        cls,
        parts: Sequence["Summary"],
        options: dict[str, Any],
        seconds: float,
        manifest: str,
        baseline: dict[str, Any] | None,
        notes: Sequence[str] = (),
    ) -> "Summary":
        """The totals of several datasets' summaries, with each one kept as a part."""

        def total(name: str) -> dict[str, int]:
            counts: Counter[str] = Counter()
            for part in parts:
                counts.update(getattr(part, name))
            return dict(counts)

        stats: dict[str, Counter] = defaultdict(Counter)
        for part in parts:
            for name, counter in part.stats.items():
                stats[name].update(counter)
        formats = sorted({part.dataset.format for part in parts})
        info = DatasetInfo(
            format="+".join(formats),
            layout=f"{len(parts)} datasets",
            root=_common_folder([part.path for part in parts]),
            labelled=any(part.dataset.labelled for part in parts),
            records=sum(part.dataset.records for part in parts),
        )
        return cls(
            dataset=info,
            path=info.root,
            records=sum(part.records for part in parts),
            issues_by_check=total("issues_by_check"),
            issues_by_severity=total("issues_by_severity"),
            records_with_errors=sum(part.records_with_errors for part in parts),
            records_with_warnings=sum(part.records_with_warnings for part in parts),
            stats={name: dict(sorted(counter.items())) for name, counter in sorted(stats.items())},
            checks=list(dict.fromkeys(check for part in parts for check in part.checks)),
            options=options,
            scheduler=parts[0].scheduler,
            workers=parts[0].workers,
            seconds=seconds,
            manifest=manifest,
            datasets={
                f"{part.path}:{source}": facts for part in parts for source, facts in part.datasets.items()
            },
            fingerprint={"datasets": {part.path: part.fingerprint for part in parts}},
            notes=list(notes) + [f"{part.path}: {note}" for part in parts for note in part.notes],
            baseline=baseline,
            parts=list(parts),
        )

    def sole_causes(self) -> list[str]:
        """The checks that flag every record of a dataset whose every record has an error: a
        cause of the dataset as a whole (every value pickled, a codec nothing decodes, a shard
        all NaN), which `fix` refuses to turn into an empty cleaned copy. Empty otherwise."""
        if self.records < 2 or self.records_with_errors < self.records:
            return []
        return sorted(check for check, count in self.issues_by_check.items() if count >= self.records)

    @property
    def complete(self) -> bool:
        """Whether every record the reader listed was read (else the scan exits 3)."""
        if self.parts:
            return all(part.complete for part in self.parts)
        return self.records == self.dataset.records

    @property
    def issues(self) -> int:
        return sum(self.issues_by_severity.values())

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        from scrub import __version__

        return {
            "schema": SCHEMA_VERSION,
            "scrub_version": __version__,
            "path": self.path,
            "dataset": self.dataset.to_dict(),
            "records": self.records,
            "complete": self.complete,
            "records_with_issues": {"error": self.records_with_errors, "warning": self.records_with_warnings},
            "quarantine": self.records_with_errors,
            "issues": {
                "total": self.issues,
                "by_severity": dict(self.issues_by_severity),
                "by_check": dict(sorted(self.issues_by_check.items())),
            },
            "stats": self.stats,
            **({"datasets": self.datasets} if self.datasets else {}),
            **({"replay": self.replay} if self.replay is not None else {}),
            **({"baseline": self.baseline} if self.baseline is not None else {}),
            **({"cache": self.cache} if self.cache is not None else {}),
            "notes": list(self.notes),
            "checks": self.checks,
            "options": self.options,
            "reading": self.reading,
            "fingerprint": self.fingerprint,
            "scheduler": self.scheduler,
            "workers": self.workers,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records_per_second, 1),
            "manifest": self.manifest,
            **({"parts": [_part(part.to_dict()) for part in self.parts]} if self.parts else {}),
        }


def _part(document: dict[str, Any]) -> dict[str, Any]:
    """A dataset's section of a several-dataset summary: what the whole already says is left out."""
    for name in (
        "schema",
        "scrub_version",
        "manifest",
        "scheduler",
        "workers",
        "seconds",
        "records_per_second",
    ):
        document.pop(name, None)
    return document


def _common_folder(paths: Sequence[str]) -> str:
    import os

    if not paths:
        return "."
    if len({os.path.isabs(p) for p in paths}) == 1:  # as they were given: relative stays relative
        return os.path.commonpath(paths) or "."
    return os.path.commonpath([os.path.abspath(p) for p in paths])
