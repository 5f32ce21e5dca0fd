"""The Python API: what the CLI, notebooks, training scripts and nightly jobs call.

>>> import scrub
>>> result = scrub.scan("sample_data/images", num_classes=3)
>>> result.summary.records, result.summary.issues_by_check["corrupt-image"]
>>> for issue in result.issues():
...     print(issue.key, issue.check, issue.message)
"""

from __future__ import annotations

import importlib
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from scrub import pipeline
from scrub.baseline import Baseline
from scrub.cache import holds_results
from scrub.checks.base import CheckOptions
from scrub.errors import ExitCode, IncompleteScan, ScrubError, UsageError, first_line
from scrub.fingerprint import fingerprint
from scrub.manifest import ManifestWriter, read_manifest, write_scan_record
from scrub.options import FAIL_ON, ReplayOptions, RunOptions, ScanOptions, merged
from scrub.readers.base import DatasetInfo, Reader, open_reader
from scrub.records import Batch, Issue, Severity
from scrub.runner import PartitionWork, select_checks
from scrub.summary import Progress, ScanAggregate, Summary


@dataclass
class ScanResult:
    """A finished scan: the summary, and the issues (read back from the manifest on demand)."""

    summary: Summary
    manifest: Path
    _keepalive: object = field(default=None, repr=False)  # a temporary manifest's directory

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
    reader = open_reader(path, options.read, options.origin)
    if before_open is not None:
        before_open(reader)
    info, partitions = reader.open(options.run.partition_size or reader.records_per_task)
    cached = options.cache is not None and type(reader).cache_entries is not Reader.cache_entries
    taken = None if cached else fingerprint(reader, partitions, info.root)
    return OpenedDataset(path, reader, info, partitions, taken)


def scan(
    path: str | Path,
    options: ScanOptions | None = None,
    *,
    progress: Callable[[Progress], None] | None = None,
    **keywords: Any,
) -> ScanResult:
    """Run every check on every record of the dataset at ``path``.

    Options come as a `ScanOptions` (what the command line and config files build) or as
    keywords named as the flags are (``num_classes=10``, ``precision="float16"``,
    ``dummy_loss=True`` or a `ReplayOptions`, ``baseline=...``, ``cache=...``); keywords
    override ``options``. The manifest goes to ``manifest`` (a temporary file when None), and
    beside it the scan record (``NAME.scan.json``: the summary, with the dataset's fingerprint)
    that lets `fix` reuse it. Raises `ScrubError` subclasses with a one-line message when the
    dataset or the options are unusable.
    """
    started = time.perf_counter()
    options = _options(options, keywords)
    load_plugins(options.selection.plugins)
    # With a cache, most nights need no worker at all: start them only for what is left to scan.
    early = not holds_results(options.cache)
    dataset = open_dataset(path, options, before_open=worker_starter(options.run) if early else None)
    try:
        return scan_dataset(dataset, options, progress=progress, started=started)
    finally:
        dataset.reader.close()


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


def scan_dataset(
    dataset: OpenedDataset,
    options: ScanOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
    started: float | None = None,
    manifest: str | Path | None = None,
) -> ScanResult:
    """Scan a dataset `open_dataset` opened (see `scan`); ``manifest`` overrides the options'."""
    started = time.perf_counter() if started is None else started
    info, partitions, reader = dataset.info, dataset.partitions, dataset.reader
    replay = options.replay
    checking = replace(options.checks, labelled=info.labelled)
    _check_label_options(dataset, options, replay is not None)
    if replay is not None:
        replay.config(checking.precision)  # bad replay options fail before the scan, not after it
    provides = reader.provides | ({"replay"} if replay else set()) | ({"label-vectors"} if info.label_width else set())
    checks = select_checks(options.selection, checking, provides, options.origin, str(dataset.path))
    run = options.run
    plan = pipeline.Plan.choose(run.scheduler, run.workers, run.timeout, reader.preferred_scheduler, len(partitions))
    baseline = Baseline.load(options.baseline) if options.baseline is not None else None
    cache, cache_notes = _open_cache(dataset, options, checking, checks) if options.cache is not None else (None, [])

    manifest = manifest if manifest is not None else options.manifest
    keepalive = None
    if manifest is None:
        keepalive = tempfile.TemporaryDirectory(prefix="scrub-")
        manifest = Path(keepalive.name) / "manifest.jsonl"
    writer = ManifestWriter(Path(manifest))
    aggregate = ScanAggregate(checks, checking, writer, progress, total=info.records,
                              severities=options.selection.overrides, baseline=baseline)
    aggregate.notes += cache_notes
    work = PartitionWork(reader, checking, checks, moments=replay is not None, capture=cache is not None)
    scanned_with = plan
    try:
        aggregate.add_dataset_issues(info.issues)
        try:
            if cache is None:
                pipeline.run(work, partitions, plan, aggregate.add, work.failure)
            else:
                scanned_with = _scan_with_cache(dataset, options, work, cache, aggregate, checks, replay is None)
        except (ScrubError, OSError) as error:
            if isinstance(error, UsageError) or aggregate.records == 0:
                raise  # nothing was scanned: it could not start (exit 2), it did not stop halfway
            raise IncompleteScan(
                f"{dataset.path}: the scan stopped after {aggregate.records:,} of {info.records:,} records "
                f"({first_line(error)}); no manifest was written"
            ) from error
        aggregate.finish_dataset_checks(_locator(reader, partitions),
                                        _contents(reader, partitions) if reader.positional_keys else None)
        replayed = _replay(dataset, checking, replay, plan, aggregate, checks) if replay else None
        compared = aggregate.finish_baseline(options.baseline)
        if aggregate.records != info.records:
            aggregate.notes.append(
                f"incomplete: {aggregate.records:,} of the {info.records:,} records listed were read (the dataset "
                "changed during the scan?): the scan exits 3, whatever it found"
            )
    except BaseException:
        writer.discard()
        raise
    manifest_path = writer.commit()
    if cache is not None:
        cache.save()
        aggregate.notes += cache.notes
    summary = Summary(
        dataset=info,
        path=str(dataset.path),
        records=aggregate.records,
        issues_by_check=dict(aggregate.by_check),
        issues_by_severity=dict(aggregate.by_severity),
        records_with_errors=aggregate.records_with(Severity.ERROR),
        records_with_warnings=aggregate.records_with(Severity.WARNING),
        stats={name: dict(sorted(counter.items())) for name, counter in sorted(aggregate.stats.items())},
        checks=[c.id for c in checks],
        options=options.verdict_options(),
        scheduler=scanned_with.scheduler,
        workers=scanned_with.workers,
        seconds=time.perf_counter() - started,
        manifest=str(manifest_path),
        datasets={
            source: {**info.files.get(source, {}), **stats.to_dict()}
            for source, stats in sorted(aggregate.numeric.items())
        },
        reading=dataset.reading,
        fingerprint=dataset.fingerprint,
        replay=replayed,
        notes=info.notes + aggregate.notes,
        baseline=compared,
        cache=cache.describe() if cache is not None else None,
    )
    write_scan_record(manifest_path, summary.to_dict())
    return ScanResult(summary, manifest_path, keepalive)


def _open_cache(dataset: OpenedDataset, options: ScanOptions, checking: CheckOptions,
                checks: Sequence) -> tuple[Any, list[str]]:
    """The result cache for this dataset and these options, or None and a note saying why
    (the reader's records cannot be cached)."""
    from scrub import __version__
    from scrub.cache import ResultCache, scope_digest

    reader = dataset.reader
    if type(reader).cache_entries is Reader.cache_entries:
        return None, [f"cache: {reader.format} records are not cached (image folders, list files and LMDB are): "
                      "every record was scanned"]
    scope = scope_digest((__version__, dataset.reading, options.verdict_options(), checking.labelled,
                          dataset.info.label_width, [c.id for c in checks]))
    cache = ResultCache(options.cache, scope, dataset.path, [c.id for c in checks if c.kind == "dataset"])
    if options.replay is not None:
        cache.notes.append("cache: --dummy-loss reads every record for the replay, so no stored result was reused")
    return cache, []


def _scan_with_cache(dataset: OpenedDataset, options: ScanOptions, work: PartitionWork, cache, aggregate: ScanAggregate,
                     checks: Sequence, reuse_results: bool) -> pipeline.Plan:
    """Reuse the cache's results for unchanged records; scan the others (in this process when
    they are few); store every record's result for the next scan. Returns how the rest ran."""
    import math

    from scrub.runner import Reuse, Subset, SubsetWork

    reader, run = dataset.reader, options.run
    reuse = Reuse(reader, checks)
    lookups, subsets = {}, []
    for number, partition in enumerate(dataset.partitions):
        found = lookups[number] = cache.lookup(reader.cache_entries(partition), usable=reuse_results)
        if found.hits:
            aggregate.add(reuse.result(number, partition, cache.reused(found)))
        if found.misses:
            subsets.append(Subset(number, reader.subset(partition, found.misses), tuple(found.misses)))
    left = sum(len(s) for s in subsets)
    tasks = math.ceil(left / (run.partition_size or reader.records_per_task))
    plan = pipeline.Plan.choose(run.scheduler, run.workers, run.timeout, reader.preferred_scheduler, tasks)
    subset_work = SubsetWork(work)

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
    if subsets:
        pipeline.prepare(plan, reader.worker_imports)
        pipeline.run(subset_work, subsets, plan, add, subset_work.failure)
    return plan


def _check_label_options(dataset: OpenedDataset, scan_options: ScanOptions, replay: bool) -> None:
    """A label option that cannot apply is an error, never a silent no-op."""
    options = scan_options.checks
    name = "num-classes" if options.num_classes is not None else "label-range" if options.label_range else None
    if name is None:
        return
    given = scan_options.origin(name)
    info = dataset.info
    if not info.labelled and not replay:
        raise UsageError(
            f"{given}: {dataset.path} has no labels to check ({info.format}, {info.layout}); "
            "drop it, or name the labels (--label-key for HDF5)"
        )
    width = info.label_width
    if width is not None and name == "label-range":
        raise UsageError(f"{given}: the labels of {dataset.path} are vectors of {width}, not class ids")
    if width is not None and options.num_classes != width:
        raise UsageError(
            f"{given} {options.num_classes}: the labels of {dataset.path} are vectors of {width} classes"
        )


def _replay(dataset: OpenedDataset, options: CheckOptions, replay: ReplayOptions, plan: pipeline.Plan,
            aggregate: ScanAggregate, checks: Sequence) -> dict[str, Any]:
    """The dummy-loss replay: a second pass, featurized in parallel, replayed in record order."""
    from scrub.replay.replayer import Replayer
    from scrub.replay.stage import ReplayStage, ReplayWork, class_count, feature_spec, standardizer

    config = replay.config(options.precision)
    spec = feature_spec(aggregate.stats, scale=replay.scale, max_pixels=options.max_pixels)
    classes = class_count(options.num_classes, options.label_range, dataset.info.classes,
                          aggregate.stats.get("labels"), dataset.info.label_width)
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
        aggregate.notes.append("dummy-loss replay: no typical rows to standardize with: the raw values were replayed")
    used = standardize if replayer.standardizes else None
    return {"classes": classes, "features": spec.dim, "options": asdict(replay) | {"precision": options.precision},
            "standardization": used.describe() if used is not None else None, **stage.finish()}


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
            batch = next(iter(reader.read(partitions[number], offset, offset + 1)), None)
            found.append(row_digest(batch, 0) if isinstance(batch, Batch) else None)
        return found

    return contents


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
