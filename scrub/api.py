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
from dataclasses import dataclass, field
from pathlib import Path

from scrub import pipeline
from scrub.checks.base import CheckOptions
from scrub.errors import ExitCode, UsageError
from scrub.manifest import ManifestWriter, read_manifest
from scrub.readers.base import ReadOptions, open_reader
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
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    partition_size: int | None = None,
    plugins: Iterable[str] = (),
    progress: Callable[[Progress], None] | None = None,
) -> ScanResult:
    """Run every check on every record of the dataset at ``path``.

    The manifest goes to ``manifest`` (a temporary file when None). ``plugins`` names modules
    to import first, so that the checks they define run too. Raises `ScrubError` subclasses
    with a one-line message when the dataset or the options are unusable.
    """
    started = time.perf_counter()
    load_plugins(plugins)
    if num_classes is not None and num_classes < 1:
        raise UsageError("--num-classes must be at least 1")
    if isinstance(label_range, tuple):
        label_range = f"{label_range[0]}:{label_range[1]}"
    label_range = parse_label_range(label_range)
    if max_pixels is not None and max_pixels < 1:
        raise UsageError("--max-pixels must be at least 1")
    path = Path(path)
    read_options = ReadOptions(
        root=Path(root) if root else None,
        data_key=data_key,
        label_key=label_key,
        lmdb_codec=lmdb_codec,
        allow_pickle=allow_pickle,
    )
    reader = open_reader(path, format, read_options)
    if partition_size is not None and partition_size < 1:
        raise UsageError("--partition-size must be at least 1")
    early_plan = pipeline.Plan.choose(scheduler, workers, timeout, reader.preferred_scheduler, None)
    pipeline.prepare(early_plan, reader.worker_imports)
    info, partitions = reader.open(partition_size or reader.records_per_task)
    options = CheckOptions(
        labelled=info.labelled, num_classes=num_classes, label_range=label_range, max_pixels=max_pixels
    )
    checks = select_checks(select, ignore, options, reader.provides)
    plan = pipeline.Plan.choose(scheduler, workers, timeout, reader.preferred_scheduler, len(partitions))

    keepalive = None
    if manifest is None:
        keepalive = tempfile.TemporaryDirectory(prefix="scrub-")
        manifest = Path(keepalive.name) / "manifest.jsonl"
    writer = ManifestWriter(Path(manifest))
    aggregate = ScanAggregate(checks, options, writer, progress, total=info.records)
    work = PartitionWork(reader, options, checks)
    try:
        aggregate.add_dataset_issues(info.issues)
        pipeline.run(work, partitions, plan, aggregate.add, work.failure)
        aggregate.finish_dataset_checks(_locator(reader, partitions))
    except BaseException:
        writer.discard()
        raise
    manifest_path = writer.commit()
    summary = Summary(
        dataset=info,
        path=str(path),
        records=aggregate.records,
        issues_by_check=dict(aggregate.by_check),
        issues_by_severity=dict(aggregate.by_severity),
        records_with_errors=aggregate.records_with(Severity.ERROR),
        records_with_warnings=aggregate.records_with(Severity.WARNING),
        stats={name: dict(sorted(counter.items())) for name, counter in sorted(aggregate.stats.items())},
        checks=[c.id for c in checks],
        options={
            "num_classes": num_classes,
            "label_range": list(label_range) if label_range else None,
            "max_pixels": max_pixels,
        },
        scheduler=plan.scheduler,
        workers=plan.workers,
        seconds=time.perf_counter() - started,
        manifest=str(manifest_path),
        datasets={
            source: {**info.files.get(source, {}), **stats.to_dict()}
            for source, stats in sorted(aggregate.numeric.items())
        },
    )
    return ScanResult(summary, manifest_path, keepalive)


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
