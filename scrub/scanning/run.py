"""A run of one or several opened datasets: their tasks on one pool, their issues in one
manifest, the datasets that could not be opened as findings of their own, the summary."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scrub import pipeline
from scrub.errors import (
    ExitCode,
    IncompleteScan,
    OutputError,
    ScrubError,
    UnopenedDataset,
    UsageError,
    first_line,
)
from scrub.fixing.outputs import scratch_directory
from scrub.manifest import ManifestWriter, read_manifest, write_scan_record
from scrub.options.keys import FAIL_ON, KEYS
from scrub.options.model import RunOptions, ScanOptions
from scrub.paths import split_of, split_roles
from scrub.readers.base import DatasetInfo
from scrub.records import Issue, Severity
from scrub.reports.findings import KEYS_PER_CHECK, Collector, Findings
from scrub.scanning.baseline import Baseline
from scrub.scanning.dataset import DatasetScan, Tasks
from scrub.scanning.history import History
from scrub.scanning.joins import leave_on_cluster
from scrub.scanning.opening import OpenedDataset
from scrub.scanning.splits import describe_splits, judge_splits, unused_comparisons
from scrub.scanning.summary import Progress, ScanAggregate, Summary


@dataclass
class ScanResult:
    """A finished scan: the summary, and the issues (read back from the manifest on demand)."""

    summary: Summary
    manifest: Path
    _keepalive: object = field(default=None, repr=False)  # a temporary manifest's directory
    #: what the reports name (the first errors, keys per check), gathered during the scan
    findings: Findings | None = field(default=None, repr=False)

    def issues(self) -> Iterator[Issue]:
        """Every manifest line, in order (with a baseline, ``status`` says new, persisting,
        reappeared or resolved; resolved lines describe issues no longer found)."""
        # A generator method, so that iterating keeps the result (and a temporary manifest) alive.
        yield from read_manifest(self.manifest)

    def exit_code(self, fail_on: str = "error") -> ExitCode:
        """0 when no issue is at or above ``fail_on``, else 1 (``never`` always gives 0; ``new``
        counts only the errors a baseline did not hold: new and reappeared ones)."""
        if fail_on not in FAIL_ON:
            raise UsageError(f"--fail-on must be one of {', '.join(FAIL_ON)}")
        if not self.summary.complete:
            return ExitCode.INCOMPLETE  # a scan that did not cover every record never looks clean
        if fail_on == "never":
            return ExitCode.CLEAN
        if fail_on == "new":
            if self.summary.baseline is None:
                raise UsageError("--fail-on new needs a baseline (--baseline OLD_MANIFEST)")
            return ExitCode.ISSUES if self.summary.baseline["new_errors"] else ExitCode.CLEAN
        threshold = Severity(fail_on)
        found = sum(n for s, n in self.summary.issues_by_severity.items() if Severity(s).at_least(threshold))
        return ExitCode.ISSUES if found else ExitCode.CLEAN


@dataclass
class Unopened:
    """One of several datasets of a run that could not be opened: an `unreadable-dataset`
    finding of its own, so that the others are scanned and a nightly job sees all of it."""

    position: int  # among the run's datasets, as named
    path: Path
    error: UnopenedDataset

    def issue(self) -> Issue:
        from scrub.checks.base import Finding, make_issue

        message = str(self.error)
        return make_issue(
            "unreadable-dataset",
            self.path.name,
            "*",
            None,
            Finding(message, {"format": self.error.format} if self.error.format else {}),
        )

    def summary(self, aggregate: ScanAggregate, options: ScanOptions, plan: pipeline.Plan) -> Summary:
        """Its part of the run's summary: no record read, its one error."""
        info = DatasetInfo(
            format=self.error.format or "unknown",
            layout="unreadable",
            root=str(self.path),
            labelled=False,
            records=0,
        )
        return Summary(
            dataset=info,
            path=str(self.path),
            records=0,
            issues_by_check=dict(aggregate.by_check),
            issues_by_severity=dict(aggregate.by_severity),
            records_with_errors=aggregate.records_with(Severity.ERROR),
            records_with_warnings=aggregate.records_with(Severity.WARNING),
            stats={},
            checks=["unreadable-dataset"],
            options=options.verdict_options(),
            scheduler=plan.scheduler,
            workers=plan.workers,
            seconds=0.0,
            manifest=None,
            notes=aggregate.notes,
        )


def run_wide(options: ScanOptions) -> dict[str, Any]:
    """The options that belong to a run, not to one of its datasets (a dataset's own are
    replaced by them: its summary says what the run used): where and how it runs, and its
    outputs (`Key.run_wide`)."""
    return {"run": options.run} | {
        key.attribute: getattr(options, key.attribute) for key in KEYS.values() if key.run_wide
    }


def _unreadable_aggregate(
    dataset: Unopened, options: ScanOptions, writer: ManifestWriter, baseline: Baseline | None
) -> ScanAggregate:
    """A dataset that could not be opened, as the aggregate of its one finding (written to the
    manifest, classed against the baseline, counted and kept for the reports like any other);
    ``--ignore unreadable-dataset`` makes it a note, never nothing."""
    from scrub.checks import REGISTRY

    check = REGISTRY["unreadable-dataset"]
    aggregate = ScanAggregate(
        [check],
        options.checks,
        writer,
        severities=options.selection.overrides,
        baseline=baseline,
        dataset=str(dataset.path),
        collector=Collector(options.show, KEYS_PER_CHECK, 0),
    )
    if check.id in options.selection.ignored:
        aggregate.notes.append(f"not scanned: it cannot be read ({dataset.error}); --ignore {check.id}")
    else:
        aggregate.add_issue(dataset.issue())
    return aggregate


def _plan(scans: Sequence[DatasetScan], tasks: Sequence[Tasks], run: RunOptions) -> pipeline.Plan:
    """One plan for every dataset's tasks (`pipeline.Plan.for_scan`)."""
    demands = [
        pipeline.Demand(
            reader.format,
            reader.preferred_scheduler,
            reader.work_seconds,
            reader.in_one_process,
            reader.forks_cleanly,
        )
        for reader in (scan.dataset.reader for scan in scans)
    ]
    count = sum(getattr(scan, "task_count", len(task.items)) for scan, task in zip(scans, tasks))
    return pipeline.Plan.for_scan(run, demands, count)


def scan_dataset(
    dataset: OpenedDataset,
    options: ScanOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
    started: float | None = None,
    manifest: str | Path | None = None,
    found: Sequence[Issue] = (),
) -> ScanResult:
    """Scan a dataset `open_dataset` opened (see `scan`); ``manifest`` overrides the options';
    ``found``: issues of its records found by a run it was part of (`fix` of a run's splits:
    `split-leak`), written and counted with the scan's own."""
    return scan_opened(
        [dataset],
        [options],
        options,
        progress,
        time.perf_counter() if started is None else started,
        [],
        manifest,
        several=False,
        found=[found],
    )


def scan_opened(
    datasets: Sequence[OpenedDataset],
    own: Sequence[ScanOptions],
    options: ScanOptions,
    progress: Callable[[Progress], None] | None,
    started: float,
    notes: list[str],
    manifest: str | Path | None = None,
    *,
    several: bool,
    unopened: Sequence[Unopened] = (),
    found: Sequence[Sequence[Issue]] = (),
) -> ScanResult:
    """Scan opened datasets in one run: their tasks share one pool, their issues one manifest.
    ``several``: the run named its datasets as several (paths, a pattern, a folder of datasets),
    so every issue names its dataset and the summary has a part per dataset, even if one;
    ``unopened``: the datasets of the run that could not be opened, each an error of its own;
    ``found``: per dataset, issues of its records found elsewhere (`scan_dataset`)."""
    baseline = Baseline.load(options.baseline) if options.baseline is not None else None
    manifest = manifest if manifest is not None else options.manifest
    keepalive = None
    if manifest is None:
        keepalive = scratch_directory("manifest")
        manifest = Path(keepalive.name) / "manifest.jsonl"
    combined = _CombinedProgress(progress, len(datasets)) if several and progress is not None else None
    scans: list[DatasetScan] = []
    writer = ManifestWriter(Path(manifest))
    history = (
        History.open(options.against, options.origin("against")) if options.against is not None else None
    )
    roles = _roles(datasets, several, history)
    try:
        for number, (dataset, dataset_options) in enumerate(zip(datasets, own)):
            scans.append(
                DatasetScan(
                    dataset,
                    dataset_options,
                    writer,
                    baseline,
                    combined.of(number) if combined else progress,
                    str(dataset.path) if several else None,
                    roles[number],
                )
            )
        unreadable = [_unreadable_aggregate(dataset, options, writer, baseline) for dataset in unopened]
        tasks = [scan.tasks() for scan in scans]
        plan = _plan(scans, tasks, options.run)
        leave_on_cluster(scans, plan.scheduler, kept=history is not None)
        _run_to_the_end(scans, tasks, plan, several)
        kept = _judge(scans, plan, history, options, notes if several else scans[0].aggregate.notes, found)
        compared = scans[0].aggregate.finish_baseline(options.baseline)
    except BaseException:
        writer.discard()
        raise
    finally:  # what the scan left on a cluster is judged by now
        pipeline.release_cluster_results()
    manifest_path = writer.commit()
    seconds = time.perf_counter() - started
    parts = [scan.summary(plan, seconds, manifest_path, None if several else compared) for scan in scans]
    for unread, aggregate in zip(unopened, unreadable):  # each in its place among the datasets named
        parts.insert(unread.position, unread.summary(aggregate, options, plan))
    splits = describe_splits(scans, kept)
    run_notes = notes if several else parts[0].notes
    run_notes += ([splits] if splits is not None else []) + (history.notes if history is not None else [])
    summary = (
        parts[0]
        if not several
        else Summary.combine(parts, options.verdict_options(), seconds, str(manifest_path), compared, notes)
    )
    write_scan_record(manifest_path, summary.to_dict())
    collector = scans[0].aggregate.collector
    for aggregate in [scan.aggregate for scan in scans[1:]] + unreadable:
        collector.merge(aggregate.collector)
    return ScanResult(summary, manifest_path, keepalive, collector.finish())


def _run_to_the_end(
    scans: Sequence[DatasetScan], tasks: Sequence[Tasks], plan: pipeline.Plan, several: bool
) -> None:
    """`_run`; a run that stops after some records were scanned is an `IncompleteScan` (exit 3)
    saying how far it got, one that could not start its own error (exit 2)."""
    try:
        _run(scans, tasks, plan)
    except (ScrubError, OSError) as error:
        records = sum(scan.aggregate.records for scan in scans)
        if isinstance(error, (UsageError, OutputError)) or records == 0:
            raise  # nothing was scanned: it could not start (exit 2), it did not stop halfway
        listed = sum(scan.dataset.info.records for scan in scans)
        where = scans[0].dataset.path if not several else f"{len(scans)} datasets"
        raise IncompleteScan(
            f"{where}: the scan stopped after {records:,} of {listed:,} records "
            f"({first_line(error)}); no manifest was written"
        ) from error


def _judge(
    scans: Sequence[DatasetScan],
    plan: pipeline.Plan,
    history: History | None,
    options: ScanOptions,
    notes: list[str],
    found: Sequence[Sequence[Issue]],
) -> list[str]:
    """Once every record is in: each dataset as a whole (`DatasetScan.finish`), the splits across
    the datasets (returns the kept training splits compared), the comparisons no record could use
    (said in ``notes``), and the issues of each dataset's records found elsewhere."""
    for scan in scans:
        scan.finish(plan)
    kept = judge_splits(scans, history)
    notes.extend(unused_comparisons(scans, options))
    for scan, issues in zip(scans, found):
        for issue in issues:
            scan.aggregate.add_issue(replace(issue, dataset=None))
    return kept


def _roles(datasets: Sequence[OpenedDataset], several: bool, history: History | None) -> list[str | None]:
    """Each dataset's split: in a run of both kinds (`split_roles`), or by its name alone
    against a store of kept training splits (a dataset named as neither is said, not compared)."""
    if history is None:
        return split_roles([dataset.path for dataset in datasets]) if several else [None] * len(datasets)
    roles = [split_of(dataset.path) for dataset in datasets]
    for dataset, role in zip(datasets, roles):
        if role is None:
            history.notes.append(
                f"{history.given} {history.folder}: {dataset.path} is named as no split (train, val, "
                "test...): not compared, not kept"
            )
    return roles


def _run(scans: Sequence[DatasetScan], tasks: Sequence[Tasks], plan: pipeline.Plan) -> None:
    """Every dataset's tasks on one pool (one task list: many small shards use every core)."""
    if not any(task.items for task in tasks):
        return
    imports = dict.fromkeys(name for scan in scans for name in scan.dataset.reader.worker_imports)
    pipeline.prepare(plan, list(imports))
    if len(tasks) == 1:
        task = tasks[0]
        pipeline.run(task.work, task.items, plan, task.add, task.failure)
        return
    work = ManyWork([task.work for task in tasks], [task.failure for task in tasks])

    def add(tagged: tuple[int, Any]) -> None:
        number, result = tagged
        tasks[number].add(result)

    items = [
        Part(number, local, item)
        for number, task in enumerate(tasks)
        for local, item in enumerate(task.items)
    ]
    pipeline.run(work, items, plan, add, work.failure)


@dataclass(frozen=True)
class Part:
    """A task's item in a run of several datasets: which dataset, and its own item."""

    dataset: int
    number: int
    item: Any

    def __len__(self) -> int:
        return len(self.item)


class ManyWork:
    """The `pipeline.Work` of several datasets: each `Part` goes to its dataset's work; results
    come back tagged with the dataset's number."""

    def __init__(self, works: Sequence[pipeline.Work], failures: Sequence[Callable[..., Any]]) -> None:
        self.works = list(works)
        self.failures = list(failures)

    def __call__(
        self,
        number: int,
        part: Part,
        start: int = 0,
        stop: int | None = None,
        on_record: pipeline.OnRecord | None = None,
    ) -> tuple[int, Any]:
        return part.dataset, self.works[part.dataset](part.number, part.item, start, stop, on_record)

    def failure(self, number: int, part: Part, offset: int, reason: str) -> tuple[int, Any]:
        return part.dataset, self.failures[part.dataset](part.number, part.item, offset, reason)

    @property
    def leaving(self) -> TaggedLeaving | None:
        leavings = tuple(getattr(work, "leaving", None) for work in self.works)
        return TaggedLeaving(leavings) if any(leavings) else None


@dataclass(frozen=True)
class TaggedLeaving:
    """The `pipeline.Leaving` of a `ManyWork`: each tagged result is split by its dataset's."""

    leavings: tuple[Any, ...]

    def taken(self, tagged: tuple[int, Any]) -> tuple[int, Any]:
        number, result = tagged
        leaving = self.leavings[number]
        return number, leaving.taken(result) if leaving is not None else result

    def left(self, tagged: tuple[int, Any]) -> Any:
        number, result = tagged
        leaving = self.leavings[number]
        return leaving.left(result) if leaving is not None else None

    def attach(self, tagged: tuple[int, Any], left: Any) -> tuple[int, Any]:
        number, result = tagged
        leaving = self.leavings[number]
        return number, leaving.attach(result, left) if leaving is not None else result


class _CombinedProgress:
    """One progress display for several datasets' aggregates: their latest snapshots summed."""

    def __init__(self, progress: Callable[[Progress], None], count: int) -> None:
        self.progress = progress
        self.latest = [Progress(0, 0, 0, 0.0) for _ in range(count)]

    def of(self, number: int) -> Callable[[Progress], None]:
        def update(snapshot: Progress) -> None:
            self.latest[number] = snapshot
            self.progress(
                Progress(
                    sum(p.records for p in self.latest),
                    sum(p.total for p in self.latest),
                    sum(p.issues for p in self.latest),
                    max(p.seconds for p in self.latest),
                )
            )

        return update
