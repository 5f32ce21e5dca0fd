"""The Python API: what the CLI, notebooks, training scripts and nightly jobs call.

>>> import scrub
>>> result = scrub.scan("sample_data/images", num_classes=3)
>>> result.summary.records, result.summary.issues_by_check["corrupt-image"]
>>> for issue in result.issues():
...     print(issue.key, issue.check, issue.message)
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrub import pipeline
from scrub.baseline import Baseline
from scrub.cache import holds_results
from scrub.checks.base import CheckOptions
from scrub.errors import (
    ExitCode,
    IncompleteScan,
    OutputError,
    ScrubError,
    UnopenedDataset,
    UnusableDataset,
    UsageError,
    first_line,
)
from scrub.fingerprint import fingerprint
from scrub.manifest import ManifestWriter, read_manifest, write_scan_record
from scrub.options import FAIL_ON, ReplayOptions, RunOptions, ScanOptions, merged
from scrub.outputs import scratch_directory
from scrub.readers.base import DatasetInfo, Reader, expand_datasets, open_reader
from scrub.records import Batch, Issue, Severity
from scrub.reports import THUMBNAILS
from scrub.reports.findings import KEYS_PER_CHECK, Collector, Findings
from scrub.runner import Encoding, PartitionWork, select_checks
from scrub.summary import Progress, ScanAggregate, Summary
from scrub.wording import counted

if TYPE_CHECKING:
    from scrub.cache import ResultCache


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
class OpenedDataset:
    """A dataset a reader has validated and split into partitions."""

    path: Path
    reader: Reader
    info: DatasetInfo
    partitions: list
    fingerprint: dict[str, Any] | None  # None until taken (a cached scan takes it from its lookups' stats)

    @property
    def reading(self) -> dict[str, Any]:
        """The options that decide what a record is (recorded with every scan)."""
        options = self.reader.options
        return {
            "format": self.reader.format,
            "root": str(options.root) if options.root else None,
            "data_key": options.data_key,
            "label_key": options.label_key,
            "lmdb_codec": options.lmdb_codec,
            "allow_pickle": options.allow_pickle,
            "labels": str(options.labels) if options.labels else None,
        }


def open_dataset(
    path: str | Path,
    options: ScanOptions | None = None,
    before_open: Callable[[Reader], None] | None = None,
    **keywords: Any,
) -> OpenedDataset:
    """Find the reader for ``path``, validate the dataset, split it, fingerprint it.

    ``options`` (or keywords, as for `scan`) say how to read it. ``before_open(reader)`` runs
    once the format is known and before the (possibly long) listing, so that worker processes
    can start meanwhile.
    """
    options = _options(options, keywords)
    path = Path(path)
    if path.name in ("", ".", ".."):  # `scrub fix .` inside a dataset: outputs are named after it
        path = path.resolve()
    try:
        reader = open_reader(path, options.read, options.origin)
    except UnusableDataset as error:
        raise UnopenedDataset(str(error)) from None
    if before_open is not None:
        before_open(reader)
    try:
        info, partitions = reader.open(options.run.partition_size or reader.records_per_task)
    except UnusableDataset as error:
        raise UnopenedDataset(str(error), reader.format) from None
    cached = options.cache is not None and type(reader).cache_entries is not Reader.cache_entries
    taken = None if cached else fingerprint(reader, partitions, info.root)
    return OpenedDataset(path, reader, info, partitions, taken)


def scan(
    path: str | Path | Sequence[str | Path],
    options: ScanOptions | None = None,
    *,
    progress: Callable[[Progress], None] | None = None,
    **keywords: Any,
) -> ScanResult:
    """Run every check on every record of the dataset at ``path`` (or of several datasets).

    Options come as a `ScanOptions` (what the command line and config files build) or as
    keywords named as the flags are (``num_classes=10``, ``precision="float16"``,
    ``dummy_loss=True`` or a `ReplayOptions`, ``baseline=...``, ``cache=...``); keywords
    override ``options``. The manifest goes to ``manifest`` (a temporary file when None), and
    beside it the scan record (``NAME.scan.json``: the summary, with the dataset's fingerprint)
    that lets `fix` reuse it. Raises `ScrubError` subclasses with a one-line message when the
    dataset or the options are unusable.

    ``path`` may also be a list of paths, glob patterns and folders of datasets (see
    `scrub.readers.base.expand_datasets`; one path that names several, a folder of LMDB
    environments or a pattern, is expanded as on the command line): they are scanned together,
    their partitions sharing one pool of workers, into one manifest whose lines name their
    ``dataset``; the summary holds the totals and a section per dataset (``Summary.parts``).
    """
    started = time.perf_counter()
    options = _options(options, keywords)
    if isinstance(path, (str, Path)) and not _names_several(path, options):
        return scan_one(path, options, progress=progress, started=started)
    found = expand_datasets([path] if isinstance(path, (str, Path)) else path, options.read)
    note = found.note()
    return scan_many(
        [(p, options) for p in found.paths],
        options,
        progress=progress,
        started=started,
        notes=[note] if note else [],
    )


def scan_one(
    path: str | Path,
    options: ScanOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
    started: float | None = None,
) -> ScanResult:
    """`scan` of the one dataset at ``path`` as it is (a caller that expanded its paths already:
    the command line)."""
    started = time.perf_counter() if started is None else started
    load_plugins(options.selection.plugins)
    # With a cache, most nights need no worker at all: start them only for what is left to scan.
    early = not holds_results(options.cache)
    dataset = open_dataset(path, options, before_open=worker_starter(options.run) if early else None)
    try:
        return scan_dataset(dataset, options, progress=progress, started=started)
    finally:
        dataset.reader.close()


def _names_several(path: str | Path, options: ScanOptions) -> bool:
    """Whether one path names several datasets (a pattern, a folder of datasets), as on the
    command line; a dataset path is opened as it is."""
    if Path(path).exists() and options.read.format not in (None, "auto"):
        return False
    found = expand_datasets([path], options.read)
    return found.paths != [Path(path)] or bool(found.skipped)


def scan_many(
    datasets: Sequence[tuple[str | Path, ScanOptions]],
    options: ScanOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
    started: float | None = None,
    notes: Sequence[str] = (),
) -> ScanResult:
    """Scan several datasets as one run, each with its own options (a config file's
    ``[paths."GLOB"]`` sections may differ per dataset); ``options`` gives what belongs to the
    run as a whole: the scheduler and workers, the manifest, the baseline and the reports."""
    started = time.perf_counter() if started is None else started
    if not datasets:
        raise UnusableDataset("no dataset to scan: the paths given name none")
    plugins = [module for _, own in datasets for module in own.selection.plugins]
    load_plugins(dict.fromkeys(plugins))
    opened: list[OpenedDataset] = []
    per_dataset: list[ScanOptions] = []
    unopened: list[Unopened] = []
    try:
        for position, (path, own) in enumerate(datasets):
            try:
                opened.append(open_dataset(path, own))
            except UnopenedDataset as error:
                if len(datasets) == 1:
                    raise
                unopened.append(Unopened(position, Path(path), error))
                continue
            per_dataset.append(replace(own, **_run_wide(options)))
        if not opened:
            first = unopened[0].error
            raise UnusableDataset(f"none of the {len(unopened)} datasets can be read; the first: {first}")
        return _scan_opened(
            opened, per_dataset, options, progress, started, list(notes), several=True, unopened=unopened
        )
    finally:
        for dataset in opened:
            dataset.reader.close()


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


def _run_wide(options: ScanOptions) -> dict[str, Any]:
    """The options that belong to a run, not to one of its datasets (a dataset's own are
    replaced by them: its summary says what the run used)."""
    return {
        name: getattr(options, name)
        for name in (
            "run",
            "manifest",
            "baseline",
            "json",
            "fail_on",
            "quiet",
            "show",
            "junit",
            "html",
            "summary_md",
        )
    }


def _options(options: ScanOptions | None, keywords: dict[str, Any]) -> ScanOptions:
    """``options`` with ``keywords`` laid over it, validated as one."""
    if options is None:
        return ScanOptions.build(**keywords)
    if not keywords:
        return options
    return merged(options, keywords)


def worker_starter(run: RunOptions) -> Callable[[Reader], None]:
    def start(reader: Reader) -> None:
        plan = pipeline.Plan.choose(run.scheduler, run.workers, run.timeout, reader.preferred_scheduler, None)
        pipeline.prepare(plan, reader.worker_imports)

    return start


@dataclass
class Tasks:
    """What is left to run of one dataset's scan: ``work`` over ``items``, results to ``add``."""

    work: pipeline.Work
    items: list
    add: Callable[[Any], None]
    failure: Callable[..., Any]


class DatasetScan:
    """One dataset's share of a scan: its checks, its aggregate, its tasks and its summary.
    Several share one pool of workers and one manifest when several datasets are scanned."""

    def __init__(
        self,
        dataset: OpenedDataset,
        options: ScanOptions,
        writer: ManifestWriter,
        baseline: Baseline | None,
        progress: Callable[[Progress], None] | None,
        label: str | None = None,
    ) -> None:
        self.dataset, self.options = dataset, options
        info, reader = dataset.info, dataset.reader
        self.replay = options.replay
        self.checking = replace(options.checks, labelled=info.labelled)
        if self.checking.declared_range is None and info.class_range is not None:
            self.checking = replace(self.checking, label_range=info.class_range)
        if "masks" in reader.provides and self.checking.declared_range is None:
            note = "mask values are not checked against a class count (mask-out-of-range): give --num-classes"
            if note not in info.notes:
                info.notes.append(note)
        _check_label_options(dataset, options, self.replay is not None)
        if self.replay is not None:
            self.replay.config(
                self.checking.precision
            )  # bad replay options fail before the scan, not after it
        provides = (
            reader.provides
            | ({"replay"} if self.replay else set())
            | ({"label-vectors"} if info.label_width else set())
        )
        self.checks = select_checks(
            options.selection, self.checking, provides, options.origin, str(dataset.path)
        )
        self.cache: ResultCache | None
        self.cache, cache_notes = (
            _open_cache(dataset, options, self.checking, self.checks)
            if options.cache is not None
            else (None, [])
        )
        limits = {
            "show": options.show,
            "per_check": KEYS_PER_CHECK,
            "images": THUMBNAILS if options.html is not None else 0,
        }
        self.aggregate = ScanAggregate(
            self.checks,
            self.checking,
            writer,
            progress,
            total=info.records,
            severities=options.selection.overrides,
            baseline=baseline,
            dataset=label,
            collector=Collector(**limits),
        )
        self.aggregate.notes += cache_notes
        # issues leave the workers as manifest lines, unless the driver needs each one
        compact = baseline is None and self.replay is None and self.cache is None
        encoding = Encoding(self.aggregate.severities, label, **limits) if compact else None
        self.work = PartitionWork(
            reader,
            self.checking,
            self.checks,
            moments=self.replay is not None,
            capture=self.cache is not None,
            encoding=encoding,
        )
        self.replayed: dict[str, Any] | None = None

    def tasks(self) -> Tasks:
        """The dataset-wide issues the reader found, the results the cache holds, and the tasks
        for the rest."""
        self.aggregate.add_dataset_issues(self.dataset.info.issues)
        if self.cache is None:
            return Tasks(self.work, list(self.dataset.partitions), self.aggregate.add, self.work.failure)
        return self._cached_tasks()

    def _cached_tasks(self) -> Tasks:
        """Reuse the cache's results for unchanged records; return the tasks for the others, whose
        results are stored for the next scan."""
        from scrub.runner import Reuse, Subset, SubsetWork

        dataset, cache, aggregate = self.dataset, self.cache, self.aggregate
        assert cache is not None  # `tasks` comes here only with a cache
        reader = dataset.reader
        reuse = Reuse(reader, self.checks)
        lookups, subsets = {}, []
        reuse_results = self.replay is None
        for number, partition in enumerate(dataset.partitions):
            entries = reader.cache_entries(partition)
            assert entries is not None  # a cache is opened only for a reader whose records it holds
            found = lookups[number] = cache.lookup(entries, usable=reuse_results)
            if found.hits:
                aggregate.add(reuse.result(number, partition, cache.reused(found)))
            if found.misses:
                subsets.append(Subset(number, reader.subset(partition, found.misses), tuple(found.misses)))
        size = self.options.run.partition_size or reader.records_per_task
        # the cache's subsets are partitions' leftovers: regroup them into tasks of a partition's size
        subset_work = SubsetWork(self.work)

        def add(result) -> None:
            identities = lookups[result.partition].identities
            for offset, digest, outcome, values in result.captured:
                if offset in identities and (identities[offset][3] or digest) is not None:
                    key, stat, context, content = identities[offset]
                    cache.store(key, stat, content or digest, context, outcome, values)
            result.captured = []
            aggregate.add(result)

        # the stats the lookups took are the fingerprint's: a second stat of every file is not needed
        dataset.fingerprint = fingerprint(reader, dataset.partitions, dataset.info.root, cache.stats)
        self.left = sum(len(s) for s in subsets)
        self.task_count = math.ceil(self.left / size)
        return Tasks(subset_work, subsets, add, subset_work.failure)

    def finish(self, plan: pipeline.Plan) -> None:
        """After every result is in: the dataset checks, then the replay."""
        dataset, aggregate = self.dataset, self.aggregate
        reader, partitions, info = dataset.reader, dataset.partitions, dataset.info
        aggregate.finish_dataset_checks(
            _locator(reader, partitions), _contents(reader, partitions) if reader.positional_keys else None
        )
        self._note_the_range()
        self._note_idle_selections()
        if self.replay is not None:
            self.replayed = _replay(dataset, self.checking, self.replay, plan, aggregate, self.checks)
        if aggregate.records != info.records and info.snapshots:
            aggregate.notes.append(
                f"the database changed during the scan: {info.records:,} records when it was listed, "
                f"{aggregate.records:,} read (each partition's key range whole, from one snapshot)"
            )
            info.records = aggregate.records
        elif aggregate.records != info.records:
            aggregate.notes.append(
                f"incomplete: {aggregate.records:,} of the {info.records:,} records listed were read (the "
                "dataset "
                "changed during the scan?): the scan exits 3, whatever it found"
            )

    def _note_idle_selections(self) -> None:
        """A check the user selected that found nothing to look at in any record is said: a pass
        of `--select nonfinite-data` over 8-bit images (which hold no NaN) is not a clean bill."""
        selected = self.options.selection.select
        if not selected or self.aggregate.records == 0:
            return
        seen = {
            "array": any(s.finite_values or s.nonfinite_values for s in self.aggregate.numeric.values()),
            "image": bool(self.aggregate.stats.get("formats")),
        }
        what = {"array": "numeric values (float images, arrays)", "image": "an image that decodes"}
        for check in self.checks:
            if check.id in selected and not seen.get(check.needs, True):
                self.aggregate.notes.append(
                    f"{self.options.origin('select')} {check.id}: ran on no record: none of the "
                    f"{counted(self.aggregate.records, 'record')} holds {what[check.needs]}"
                )

    def _note_the_range(self) -> None:
        """A class range the user declared that leaves whole label values out is said once, as
        a question about the option, beside its (many) `label-out-of-range` findings."""
        from scrub.checks.labels import range_note

        declared = self.options.checks.declared_range  # the user's, not the dataset's own ClassLabel
        info = self.dataset.info
        if (
            declared is None
            or info.label_width is not None
            or "label-out-of-range" not in self.aggregate.by_check
        ):
            return
        name = "num-classes" if self.options.checks.label_range is None else "label-range"
        shown = self.options.checks.num_classes if name == "num-classes" else f"{declared[0]}:{declared[1]}"
        note = range_note(
            self.aggregate.stats.get("labels"),
            declared,
            f"{self.options.origin(name)} {shown}",
            info.classes,
            folders=info.layout == "class-folders",
        )
        if note is not None:
            self.aggregate.notes.append(note)

    def summary(
        self, plan: pipeline.Plan, seconds: float, manifest: Path, compared: dict[str, Any] | None
    ) -> Summary:
        dataset, aggregate, info = self.dataset, self.aggregate, self.dataset.info
        locate = tuple_locator(dataset.reader, dataset.partitions)
        assert dataset.fingerprint is not None  # taken on opening, or from the cache's lookups
        if self.cache is not None:
            self.cache.save()
            aggregate.notes += self.cache.notes
        return Summary(
            dataset=info,
            path=str(dataset.path),
            records=aggregate.records,
            issues_by_check=dict(aggregate.by_check),
            issues_by_severity=dict(aggregate.by_severity),
            records_with_errors=aggregate.records_with(Severity.ERROR, locate),
            records_with_warnings=aggregate.records_with(Severity.WARNING, locate),
            stats={name: dict(sorted(counter.items())) for name, counter in sorted(aggregate.stats.items())},
            checks=[c.id for c in self.checks],
            options=self.options.verdict_options(),
            scheduler=plan.scheduler,
            workers=plan.workers,
            seconds=seconds,
            manifest=str(manifest),
            datasets={
                source: {**info.files.get(source, {}), **stats.to_dict()}
                for source, stats in sorted(aggregate.numeric.items())
            },
            reading=dataset.reading,
            fingerprint=dataset.fingerprint,
            replay=self.replayed,
            notes=info.notes + aggregate.notes,
            baseline=compared,
            cache=self.cache.describe() if self.cache is not None else None,
        )


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
    """One plan for every dataset's tasks: the schedulers the readers prefer, the tasks' count."""
    preferred = [scan.dataset.reader.preferred_scheduler for scan in scans]
    count = sum(getattr(scan, "task_count", len(task.items)) for scan, task in zip(scans, tasks))
    scheduler = "processes" if "processes" in preferred else preferred[0]
    work = [scan.dataset.reader.work_seconds for scan in scans]
    known = [seconds for seconds in work if seconds is not None]
    if run.workers is None and len(known) == len(work) and sum(known) < pipeline.IN_PROCESS_SECONDS:
        scheduler = "sync"  # a pool would cost more than it saves
    alone = [scan.dataset.reader.format for scan in scans if scan.dataset.reader.in_one_process]
    if alone:  # its handle lives in this process: threads share it, other processes cannot
        if run.scheduler not in (None, "threads", "sync"):
            raise UsageError(
                f"--scheduler {run.scheduler}: {alone[0]} is read by the scan's own process only "
                "(one handle, shared by threads): use --scheduler threads or sync"
            )
        scheduler = "threads"
    return pipeline.Plan.choose(run.scheduler, run.workers, run.timeout, scheduler, count, run.cluster_wait)


def scan_dataset(
    dataset: OpenedDataset,
    options: ScanOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
    started: float | None = None,
    manifest: str | Path | None = None,
) -> ScanResult:
    """Scan a dataset `open_dataset` opened (see `scan`); ``manifest`` overrides the options'."""
    return _scan_opened(
        [dataset],
        [options],
        options,
        progress,
        time.perf_counter() if started is None else started,
        [],
        manifest,
        several=False,
    )


def _scan_opened(
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
) -> ScanResult:
    """Scan opened datasets in one run: their tasks share one pool, their issues one manifest.
    ``several``: the run named its datasets as several (paths, a pattern, a folder of datasets),
    so every issue names its dataset and the summary has a part per dataset, even if one;
    ``unopened``: the datasets of the run that could not be opened, each an error of its own."""
    baseline = Baseline.load(options.baseline) if options.baseline is not None else None
    manifest = manifest if manifest is not None else options.manifest
    keepalive = None
    if manifest is None:
        keepalive = scratch_directory("manifest")
        manifest = Path(keepalive.name) / "manifest.jsonl"
    combined = _CombinedProgress(progress, len(datasets)) if several and progress is not None else None
    scans: list[DatasetScan] = []
    writer = ManifestWriter(Path(manifest))
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
                )
            )
        unreadable = [_unreadable_aggregate(dataset, options, writer, baseline) for dataset in unopened]
        tasks = [scan.tasks() for scan in scans]
        plan = _plan(scans, tasks, options.run)
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
        for scan in scans:
            scan.finish(plan)
        compared = scans[0].aggregate.finish_baseline(options.baseline)
    except BaseException:
        writer.discard()
        raise
    manifest_path = writer.commit()
    seconds = time.perf_counter() - started
    parts = [scan.summary(plan, seconds, manifest_path, None if several else compared) for scan in scans]
    for unread, aggregate in zip(unopened, unreadable):  # each in its place among the datasets named
        parts.insert(unread.position, unread.summary(aggregate, options, plan))
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


def _open_cache(
    dataset: OpenedDataset, options: ScanOptions, checking: CheckOptions, checks: Sequence
) -> tuple[ResultCache | None, list[str]]:
    """The result cache for this dataset and these options, or None and a note saying why
    (the reader's records cannot be cached)."""
    from scrub import __version__
    from scrub.cache import ResultCache, scope_digest

    reader = dataset.reader
    if type(reader).cache_entries is Reader.cache_entries:
        from scrub.formats import format_names
        from scrub.readers.base import reader_class

        cached = [
            name for name in format_names() if reader_class(name).cache_entries is not Reader.cache_entries
        ]
        listed = " and ".join([", ".join(cached[:-1]), cached[-1]] if len(cached) > 1 else cached)
        return None, [
            f"cache: {reader.format} records are not cached ({listed} records are): every record was scanned"
        ]
    scope = scope_digest(
        (
            __version__,
            dataset.reading,
            options.verdict_options(),
            checking.labelled,
            dataset.info.label_width,
            [c.id for c in checks],
        )
    )
    assert options.cache is not None  # opened only when --cache is given
    cache = ResultCache(options.cache, scope, dataset.path, [c.id for c in checks if c.kind == "dataset"])
    if options.replay is not None:
        cache.notes.append(
            "cache: --dummy-loss reads every record for the replay, so no stored result was reused"
        )
    return cache, []


def _check_label_options(dataset: OpenedDataset, scan_options: ScanOptions, replay: bool) -> None:
    """A label option that cannot apply is an error, never a silent no-op."""
    options = scan_options.checks
    name = (
        "num-classes" if options.num_classes is not None else "label-range" if options.label_range else None
    )
    if name is None:
        return
    given = scan_options.origin(name)
    info = dataset.info
    if not info.labelled and not replay:
        naming = [
            f"--{name.replace('_', '-')}"
            for name in ("label_key", "labels")
            if name in reader_options(dataset)
        ]
        raise UsageError(
            f"{given}: {dataset.path} has no labels to check ({info.format}, {info.layout}); drop it"
            + (f", or name the labels ({', '.join(naming)})" if naming else "")
            + (f"; {info.label_hint}" if info.label_hint else "")
        )
    width = info.label_width
    if width is not None and name == "label-range":
        raise UsageError(f"{given}: the labels of {dataset.path} are vectors of {width}, not class ids")
    if width is not None and options.num_classes != width:
        raise UsageError(
            f"{given} {options.num_classes}: the labels of {dataset.path} are vectors of {width} classes"
        )


def reader_options(dataset: OpenedDataset) -> frozenset[str]:
    """The `ReadOptions` fields the dataset's reader reads."""
    return type(dataset.reader).options_used


def _replay(
    dataset: OpenedDataset,
    options: CheckOptions,
    replay: ReplayOptions,
    plan: pipeline.Plan,
    aggregate: ScanAggregate,
    checks: Sequence,
) -> dict[str, Any]:
    """The dummy-loss replay: a second pass, featurized in parallel, replayed in record order."""
    from scrub.replay.replayer import Replayer
    from scrub.replay.stage import ReplayStage, ReplayWork, class_count, feature_spec, standardizer

    config = replay.config(options.precision)
    spec = feature_spec(aggregate.stats, scale=replay.scale, max_pixels=options.max_pixels)
    classes = class_count(
        options.num_classes,
        options.label_range,
        dataset.info.classes,
        aggregate.stats.get("labels"),
        dataset.info.label_width,
    )
    standardize = standardizer(spec, aggregate.stats, aggregate.moments) if config.normalize else None
    selected = {c.id for c in checks}

    def emit(issue: Issue) -> None:
        if issue.check in selected:
            aggregate.add_issue(issue)

    replayer = Replayer(config, classes, spec.dim, standardize, spec.shape or (spec.dim,))
    stage = ReplayStage(replayer, [len(p) for p in dataset.partitions], emit, aggregate.label_flagged)
    work = ReplayWork(dataset.reader, spec)
    pipeline.run(work, dataset.partitions, plan, stage.add, work.failure)
    if config.normalize and standardize is None:
        aggregate.notes.append(
            "dummy-loss replay: no typical rows to standardize with: the raw values were replayed"
        )
    used = standardize if replayer.standardizes else None
    return {
        "classes": classes,
        "features": spec.dim,
        "options": asdict(replay) | {"precision": options.precision},
        "standardization": used.describe() if used is not None else None,
        **stage.finish(),
    }


def load_plugins(modules: Iterable[str]) -> None:
    """Import modules that register extra checks (``--plugin my_project.checks``)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UsageError(f"--plugin {module}: cannot import it: {error}") from None


def _contents(reader: Reader, partitions: Sequence) -> Callable:
    """The content hashes of records keyed by position, read back one by one (dataset checks
    flag few records: at most ~1,000 per rare bin)."""
    from scrub.runner import row_digest

    def contents(positions: Sequence[tuple[int, int]]) -> list[str | None]:
        found = []
        for number, offset in positions:
            # the reading stays open while the digest is made: a row read in pieces reads then
            rows = iter(reader.read(partitions[number], offset, offset + 1))
            batch = next(rows, None)
            found.append(row_digest(batch, 0) if isinstance(batch, Batch) else None)
            for _ in rows:  # ends the reading (closes its file)
                pass
        return found

    return contents


def tuple_locator(reader, partitions: Sequence) -> Callable:
    """`_locator` giving (source, key, index) tuples (the aggregate's identities)."""
    locate = _locator(reader, partitions)
    return lambda positions: [tuple(identity) for identity in locate(positions)]


def _locator(reader, partitions: Sequence) -> Callable:
    """Resolve (partition, offset) positions to record identities, grouped by partition."""

    def locate(positions: Sequence[tuple[int, int]]) -> list[tuple[str, str, int]]:
        found: dict[tuple[int, int], tuple[str, str, int]] = {}
        by_partition: dict[int, list[int]] = {}
        for number, offset in positions:
            by_partition.setdefault(number, []).append(offset)
        for number, offsets in by_partition.items():
            for offset, identity in zip(offsets, reader.locate(partitions[number], offsets)):
                found[(number, offset)] = identity
        return [found[(number, offset)] for number, offset in positions]

    return locate
