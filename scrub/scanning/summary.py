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

from scrub.checks.base import COLUMN_KINDS, Check, CheckOptions, Finding, make_issue
from scrub.checks.contract import names_no_record
from scrub.manifest import ManifestWriter
from scrub.paths import absolute_place, common_folder
from scrub.profile import PartitionProfile, finish_profile
from scrub.readers.base import DatasetInfo
from scrub.records import Issue, Severity
from scrub.replay.standardize import Moments
from scrub.reports.findings import Collector
from scrub.scanning.baseline import Baseline
from scrub.scanning.columnstores import ColumnStore, column_store
from scrub.scanning.joins import joined_on_cluster, judge_on_cluster
from scrub.scanning.results import LeftPart, NumericStats, PartitionResult
from scrub.wording import counted

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


@dataclass
class Progress:
    """A snapshot for progress displays."""

    records: int
    total: int
    issues: int
    seconds: float


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
        profiling: bool = False,
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
        #: the columns of the dataset checks, and of the split checks (judged with the run's
        #: other splits: `scrub.scanning.splits`)
        self.columns = {c.id: column_store(c) for c in self.checks if c.kind in COLUMN_KINDS}
        #: what the scan wants said about the dataset as a whole (see `Summary.notes`)
        self.notes: list[str] = []
        #: the partitions' profiles merged as they come (None: ``--no-profile``)
        self.profiled: PartitionProfile | None = PartitionProfile() if profiling else None
        #: the finished profile's JSON form (`finish_profile`), once every result is in
        self.profile: dict[str, Any] | None = None
        self._report_progress()

    def add(self, result: PartitionResult) -> None:
        self.records += result.records
        if result.findings is not None:  # encoded in the worker (see `scrub.scanning.encoding.Encoding`)
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
            store = self.columns[check_id]
            if isinstance(column, LeftPart):  # left on a cluster's worker, joined there
                assert isinstance(store, ColumnStore)  # a column of identities
                store.add_left(result.partition, column)
            else:
                store.add(result.partition, *column)
        if self.profiled is not None:
            if result.profile is not None:
                self.profiled.merge(result.profile)
            else:  # a record that crashed its worker: read, nothing known of it
                self.profiled.records += result.records
        # The local scheduler keeps each result until the end: drop what was copied out.
        result.issues, result.offsets, result.columns, result.moments = [], [], {}, {}
        result.profile = None
        self._report_progress()

    def _report_progress(self) -> None:
        if self.progress is not None:
            self.progress(Progress(self.records, self.total, sum(self.by_severity.values()), self.elapsed))

    def add_dataset_issues(self, issues: Sequence[Issue]) -> None:
        """Problems with the dataset as a whole, found by the reader before any record. A file
        that could not be read, its check not run (``--ignore unreadable-file``), is a note:
        its records were not scanned, and nothing may pass over that in silence."""
        for issue in issues:
            if issue.check in self.by_check:
                self.add_issue(issue)
            elif issue.check == "unreadable-file":
                self.notes.append(f"not scanned: {issue.source} cannot be read ({issue.message})")

    def add_issue(
        self,
        issue: Issue,
        position: tuple[int, int] | None = None,
        placed: bool = False,
        partition: int | None = None,
    ) -> None:
        """Stream one issue to the manifest and count it (classed against the baseline);
        ``position``: its record's (partition, offset), when it has one; ``placed``: the caller
        marks the position itself (many at once, `_mark`), and ``partition`` says its partition
        (the reports' order)."""
        issue.stamp(self.severities, self.dataset)
        if self.baseline is not None:
            self.baseline.classify(issue)
        if issue.check in LABEL_CHECKS:
            self.label_flagged.add((issue.source, issue.key))
        self.manifest.write(issue)
        self.collector.add(
            issue, position[0] if position is not None else -1 if partition is None else partition
        )
        self.by_check[issue.check] += 1
        self.by_severity[issue.severity.value] += 1
        if position is not None:
            self._mark(issue.severity.value, position[0], np.asarray([position[1]]))
        elif not placed and not names_no_record(
            issue.check, issue.key
        ):  # a drift, a contract's rule: no record to set aside
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
            store = self.columns[check.id]
            if joined_on_cluster([store]):  # left on a cluster, too many to fetch: judged there
                assert isinstance(store, ColumnStore)  # what `joined_on_cluster` tells
                judgement = judge_on_cluster(check.id, store, self.options, locate)
            else:  # (a column left on a cluster is fetched by `ColumnStore.column`)
                judgement = check.func(store.column(), self.options, locate)
            self.notes += [
                f"{check.id}: {finding.message}" for position, finding in judgement if position is None
            ]
            placed = [(position, finding) for position, finding in judgement if position is not None]
            self.add_findings(check.id, placed, locate, contents)
            self.columns[check.id] = column_store(check)  # free the memory

    def add_findings(
        self,
        check_id: str,
        judgement: Sequence[tuple[tuple[int, int], Finding]],
        locate: Callable[[Sequence[tuple[int, int]]], list[tuple[str, str, int]]],
        contents: Callable[[Sequence[tuple[int, int]]], list[str | None]] | None = None,
    ) -> None:
        """Findings of check ``check_id`` on records at (partition, offset) positions: named
        (``locate``; ``contents``: the content hashes of records keyed by position, their
        identity across scans), streamed, counted and marked."""
        positions = [position for position, _ in judgement]
        identities = locate(positions)
        hashes = contents(positions) if contents is not None else [None] * len(positions)
        marked: dict[tuple[str, int], list[int]] = defaultdict(list)  # (severity, partition) -> offsets
        for (source, key, index), content, (position, finding) in zip(identities, hashes, judgement):
            issue = make_issue(check_id, source, key, index, finding)
            issue.content = content
            self.add_issue(issue, placed=True, partition=int(position[0]))
            marked[issue.severity.value, int(position[0])].append(int(position[1]))
        for (severity, partition), offsets in marked.items():
            self._mark(severity, partition, np.asarray(offsets))

    def finish_profile(self, labels: str | None) -> dict[str, Any] | None:
        """The dataset's profile (`scrub.profile`), finished from the merged partitions' and the
        exact counts; kept as ``profile`` for what judges the dataset as a whole (drift, a
        contract). ``labels``: the label kind, None for a dataset without labels."""
        if self.profiled is None:
            return None
        self.profile = finish_profile(self.profiled, self.stats, labels)
        if self.profiled.reused:
            self.notes.append(
                f"profile: {counted(self.profiled.reused, 'record')} reused from the cache are counted "
                "(records, classes, modes, shapes) but not in the profile's quantiles"
            )
        return self.profile

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
        exactly: bool = False,
    ) -> int:
        """Distinct records with an issue at or above ``severity`` (``exactly``: of that
        severity, whatever else they have). Issues found without a position (the replay's) are
        told apart from the others by identity, through ``locate``."""
        levels = [
            name
            for name in self.marks
            if (name == severity.value if exactly else Severity(name).at_least(severity))
        ]
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
    #: see `scrub.scanning.fingerprint`: lets `fix` check that a manifest belongs to the dataset
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
    #: with ``--baseline``: how the dataset drifted from it (`scrub.scanning.drift`): one
    #: ``{"check", "severity", "feature", "distance", "threshold", "message"}`` a finding
    drift: list[dict[str, Any]] | None = None
    #: a scan of several datasets: each one's own summary (this one holds the totals)
    parts: list["Summary"] = field(default_factory=list)
    #: records with a warning (an issue of warning severity, errors or not): the multi-dataset
    #: table's "warnings" column (``records_with_warnings`` counts records with any issue)
    records_warned: int = 0
    #: ``path`` made absolute where the scan ran (a URL as it is): which dataset a default
    #: manifest holds the scan of, whatever folder it is looked at from (`scrub.manifest`)
    absolute_path: str = ""
    #: the dataset's profile (`scrub.profile`, docs/profile.md); None with ``--no-profile``, and
    #: for the totals of several datasets (each part holds its own)
    profile: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.absolute_path:
            self.absolute_path = absolute_place(self.path)

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
            layout=counted(len(parts), "dataset"),
            root=common_folder([part.path for part in parts]),
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
            records_warned=sum(part.records_warned for part in parts),
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
            drift=(
                None
                if all(part.drift is None for part in parts)
                else [{"dataset": part.path, **found} for part in parts for found in part.drift or []]
            ),
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
            "absolute_path": self.absolute_path,
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
            **({"profile": self.profile} if self.profile is not None else {}),
            **({"replay": self.replay} if self.replay is not None else {}),
            **({"baseline": self.baseline} if self.baseline is not None else {}),
            **({"cache": self.cache} if self.cache is not None else {}),
            **({"drift": self.drift} if self.drift is not None else {}),
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
