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
from scrub.checks.base import CheckOptions
from scrub.checks.numeric import PRECISIONS
from scrub.errors import ExitCode, UsageError
from scrub.fingerprint import fingerprint
from scrub.manifest import ManifestWriter, read_manifest, write_scan_record
from scrub.readers.base import DatasetInfo, ReadOptions, Reader, open_reader
from scrub.records import Issue, Severity
from scrub.runner import PartitionWork, select_checks
from scrub.summary import Progress, ScanAggregate, Summary

#: Seconds one record may take before its decoder is deemed hung (processes scheduler).
DEFAULT_TIMEOUT = 60.0
FAIL_ON = ("error", "warning", "never")


@dataclass
class ScanResult:
    """A finished scan: the summary, and the issues (read back from the manifest on demand)."""

    summary: Summary
    manifest: Path
    _keepalive: object = field(default=None, repr=False)  # a temporary manifest's directory

    def issues(self) -> Iterator[Issue]:
        # A generator method, so that iterating keeps the result (and a temporary manifest) alive.
        yield from read_manifest(self.manifest)

    def exit_code(self, fail_on: str = "error") -> ExitCode:
        """0 when no issue is at or above ``fail_on``, else 1 (``never`` always gives 0)."""
        if fail_on not in FAIL_ON:
            raise UsageError(f"--fail-on must be one of {', '.join(FAIL_ON)}")
        if fail_on == "never":
            return ExitCode.CLEAN
        threshold = Severity(fail_on)
        found = sum(n for s, n in self.summary.issues_by_severity.items() if Severity(s).at_least(threshold))
        return ExitCode.ISSUES if found else ExitCode.CLEAN


def parse_label_range(text: str | None) -> tuple[int, int] | None:
    """``LO:HI`` (HI exclusive) as a pair of ints."""
    if text is None:
        return None
    low, sep, high = text.partition(":")
    try:
        bounds = (int(low), int(high))
    except ValueError:
        bounds = None
    if not sep or bounds is None or bounds[0] >= bounds[1]:
        raise UsageError(f"--label-range {text!r}: expected LO:HI with integers LO < HI")
    return bounds


@dataclass(frozen=True)
class ReplayOptions:
    """The dummy-loss replay's options (``--dummy-loss`` and the flags beside it)."""

    batch_size: int = 64
    lr: float = 0.01
    seed: int = 0
    scale: float | None = None
    model: str = "linear"  # linear, l2, batchnorm, or module:function (a loss or a PyTorch model factory)
    normalize: bool = True

    def config(self, precision: str = "float32"):
        """The replayer's configuration, at the scan's training ``precision`` (a ``--model``
        module is imported now, so that a typo fails before the scan, not after it)."""
        from scrub.replay.replayer import ReplayConfig
        from scrub.replay.usermodel import load_loss

        try:
            config = ReplayConfig(self.batch_size, self.lr, self.seed, precision, self.model, self.normalize)
        except ValueError as error:
            raise UsageError(f"--dummy-loss: {error}") from None
        if ":" in config.model:
            load_loss(config.model)
        return config


@dataclass
class OpenedDataset:
    """A dataset a reader has validated and split into partitions."""

    path: Path
    reader: Reader
    info: DatasetInfo
    partitions: list
    fingerprint: dict[str, Any]

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
    *,
    format: str | None = None,
    root: str | Path | None = None,
    data_key: str | None = None,
    label_key: str | None = None,
    lmdb_codec: str | None = None,
    allow_pickle: bool = False,
    partition_size: int | None = None,
    before_open: Callable[[Reader], None] | None = None,
) -> OpenedDataset:
    """Find the reader for ``path``, validate the dataset, split it, fingerprint it.

    ``before_open(reader)`` runs once the format is known and before the (possibly long)
    listing, so that worker processes can start meanwhile.
    """
    if partition_size is not None and partition_size < 1:
        raise UsageError("--partition-size must be at least 1")
    path = Path(path)
    read_options = ReadOptions(
        root=Path(root) if root else None,
        data_key=data_key,
        label_key=label_key,
        lmdb_codec=lmdb_codec,
        allow_pickle=allow_pickle,
    )
    reader = open_reader(path, format, read_options)
    if before_open is not None:
        before_open(reader)
    info, partitions = reader.open(partition_size or reader.records_per_task)
    return OpenedDataset(path, reader, info, partitions, fingerprint(reader, partitions, info.root))


def scan(
    path: str | Path,
    *,
    format: str | None = None,
    root: str | Path | None = None,
    data_key: str | None = None,
    label_key: str | None = None,
    lmdb_codec: str | None = None,
    allow_pickle: bool = False,
    manifest: str | Path | None = None,
    num_classes: int | None = None,
    label_range: str | tuple[int, int] | None = None,
    max_pixels: int | None = None,
    precision: str = "float32",
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    partition_size: int | None = None,
    plugins: Iterable[str] = (),
    progress: Callable[[Progress], None] | None = None,
    dummy_loss: bool | ReplayOptions = False,
) -> ScanResult:
    """Run every check on every record of the dataset at ``path``.

    The manifest goes to ``manifest`` (a temporary file when None), and beside it the scan
    record (``NAME.scan.json``: the summary, with the dataset's fingerprint) that lets
    `fix` reuse it. ``plugins`` names modules to import first, so that the checks they define
    run too. ``precision`` is the training precision the checks (and the replay) judge against:
    ``float32``, ``float16`` (mixed precision: `fp16-overflow` is an error) or ``bfloat16``
    (float32's range: no `fp16-overflow`). ``dummy_loss`` (True, or `ReplayOptions`) adds the
    replay stage. Raises
    `ScrubError` subclasses with a one-line message when the dataset or the options are
    unusable.
    """
    started = time.perf_counter()
    options = check_options(num_classes, label_range, max_pixels, plugins, precision)
    dataset = open_dataset(
        path, format=format, root=root, data_key=data_key, label_key=label_key, lmdb_codec=lmdb_codec,
        allow_pickle=allow_pickle, partition_size=partition_size,
        before_open=worker_starter(scheduler, workers, timeout),
    )
    try:
        return scan_dataset(
            dataset, options, manifest=manifest, select=select, ignore=ignore, scheduler=scheduler,
            workers=workers, timeout=timeout, progress=progress, started=started,
            replay=replay_options(dummy_loss),
        )
    finally:
        dataset.reader.close()


def check_options(
    num_classes: int | None, label_range: str | tuple[int, int] | None, max_pixels: int | None,
    plugins: Iterable[str] = (), precision: str = "float32",
) -> CheckOptions:
    """Validate the options the checks depend on (``labelled`` is set once the data is known),
    after importing the plugins whose checks may use them."""
    load_plugins(plugins)
    if num_classes is not None and num_classes < 1:
        raise UsageError("--num-classes must be at least 1")
    if isinstance(label_range, tuple):
        label_range = f"{label_range[0]}:{label_range[1]}"
    if max_pixels is not None and max_pixels < 1:
        raise UsageError("--max-pixels must be at least 1")
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    return CheckOptions(num_classes=num_classes, label_range=parse_label_range(label_range), max_pixels=max_pixels,
                        precision=precision)


def worker_starter(scheduler: str | None, workers: int | None, timeout: float) -> Callable[[Reader], None]:
    def start(reader: Reader) -> None:
        plan = pipeline.Plan.choose(scheduler, workers, timeout, reader.preferred_scheduler, None)
        pipeline.prepare(plan, reader.worker_imports)

    return start


def scan_dataset(
    dataset: OpenedDataset,
    options: CheckOptions,
    *,
    manifest: str | Path | None = None,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[Progress], None] | None = None,
    started: float | None = None,
    replay: ReplayOptions | None = None,
) -> ScanResult:
    """Scan a dataset `open_dataset` opened (see `scan`)."""
    started = time.perf_counter() if started is None else started
    info, partitions, reader = dataset.info, dataset.partitions, dataset.reader
    options = replace(options, labelled=info.labelled)
    _check_label_options(dataset, options, replay is not None)
    if replay is not None:
        replay.config(options.precision)  # bad replay options fail before the scan, not after it
    provides = reader.provides | ({"replay"} if replay else set()) | ({"label-vectors"} if info.label_width else set())
    checks = select_checks(select, ignore, options, provides)
    plan = pipeline.Plan.choose(scheduler, workers, timeout, reader.preferred_scheduler, len(partitions))

    keepalive = None
    if manifest is None:
        keepalive = tempfile.TemporaryDirectory(prefix="scrub-")
        manifest = Path(keepalive.name) / "manifest.jsonl"
    writer = ManifestWriter(Path(manifest))
    aggregate = ScanAggregate(checks, options, writer, progress, total=info.records)
    work = PartitionWork(reader, options, checks, moments=replay is not None)
    try:
        aggregate.add_dataset_issues(info.issues)
        pipeline.run(work, partitions, plan, aggregate.add, work.failure)
        aggregate.finish_dataset_checks(_locator(reader, partitions))
        replayed = _replay(dataset, options, replay, plan, aggregate, checks) if replay else None
    except BaseException:
        writer.discard()
        raise
    manifest_path = writer.commit()
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
        options={
            "num_classes": options.num_classes,
            "label_range": list(options.label_range) if options.label_range else None,
            "max_pixels": options.max_pixels,
            "precision": options.precision,
        },
        scheduler=plan.scheduler,
        workers=plan.workers,
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
    )
    write_scan_record(manifest_path, summary.to_dict())
    return ScanResult(summary, manifest_path, keepalive)


def _check_label_options(dataset: OpenedDataset, options: CheckOptions, replay: bool) -> None:
    """A label option that cannot apply is an error, never a silent no-op."""
    given = "--num-classes" if options.num_classes is not None else "--label-range" if options.label_range else None
    if given is None:
        return
    info = dataset.info
    if not info.labelled and not replay:
        raise UsageError(
            f"{given}: {dataset.path} has no labels to check ({info.format}, {info.layout}); "
            "drop it, or name the labels (--label-key for HDF5)"
        )
    width = info.label_width
    if width is not None and given == "--label-range":
        raise UsageError(f"--label-range: the labels of {dataset.path} are vectors of {width}, not class ids")
    if width is not None and options.num_classes != width:
        raise UsageError(
            f"--num-classes {options.num_classes}: the labels of {dataset.path} are vectors of {width} classes"
        )


def replay_options(dummy_loss: bool | ReplayOptions | None) -> ReplayOptions | None:
    """``dummy_loss=True`` means the default options; False or None, no replay."""
    if isinstance(dummy_loss, ReplayOptions):
        return dummy_loss
    return ReplayOptions() if dummy_loss else None


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
