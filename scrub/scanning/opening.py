"""Opening a dataset: its reader, validated, split into partitions, fingerprinted; what `scan`
and `fix` both start from."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scrub import pipeline
from scrub.errors import (
    UnopenedDataset,
    UnusableDataset,
    UsageError,
)
from scrub.options.model import RunOptions, ScanOptions, merged
from scrub.readers.base import DatasetInfo, Reader, open_reader
from scrub.scanning.fingerprint import fingerprint
from scrub.storage import is_url, location


@dataclass
class OpenedDataset:
    """A dataset a reader has validated and split into partitions."""

    path: Path
    reader: Reader
    info: DatasetInfo
    partitions: list
    #: None until taken: a cached scan takes it from its lookups' stats, a scan whose records carry
    #: their files' versions from its reads
    fingerprint: dict[str, Any] | None

    def take_fingerprint(
        self,
        known: dict[str, tuple[int, int]] | None = None,
        read: Iterator[tuple[int, int] | None] | None = None,
    ) -> dict[str, Any]:
        """The dataset's fingerprint as it is now (`scrub.scanning.fingerprint.fingerprint`), from
        the stats ``known`` already (a cached scan's lookups) or the versions its reads found
        (``read``), else from a stat of each file: the one way every command takes it."""
        return fingerprint(self.reader, self.partitions, self.info.root, known, read)

    @property
    def reading(self) -> dict[str, Any]:
        """The options that decide what a record is (recorded with every scan)."""
        return self.reader.options.recorded(self.reader.format)


def open_dataset(
    path: str | Path,
    options: ScanOptions | None = None,
    before_open: Callable[[Reader], None] | None = None,
    scanned: bool = False,
    **keywords: Any,
) -> OpenedDataset:
    """Find the reader for ``path``, validate the dataset, split it, fingerprint it.

    ``options`` (or keywords, as for `scan`) say how to read it. ``before_open(reader)`` runs
    once the format is known and before the (possibly long) listing, so that worker processes
    can start meanwhile. ``scanned``: the caller scans every record next, so where they carry
    their files' versions (`Reader.records_carry_versions`) the fingerprint is taken from the
    reads (`scrub.scanning.dataset.DatasetScan.finish`), off the path to the first task, and of
    the very bytes verified.
    """
    options = options_of(options, keywords)
    place: Path = location(path, options.read.storage)
    if not is_url(place) and place.name in ("", ".", ".."):  # `scrub fix .` inside a dataset
        place = place.resolve()  # outputs are named after it
    try:
        reader = open_reader(place, options.read, options.origin)
    except UnusableDataset as error:
        raise UnopenedDataset(str(error)) from None
    shaped_by = sorted(type(reader).shaped_by)  # check options that decide what a record is
    if shaped_by:
        reader.options = replace(
            reader.options, shaping=tuple((n, getattr(options.checks, n)) for n in shaped_by)
        )
    if before_open is not None:
        before_open(reader)
    try:
        info, partitions = reader.open(options.run.partition_size or reader.records_per_task)
    except UnusableDataset as error:
        raise UnopenedDataset(str(error), reader.format) from None
    cached = options.cache is not None and type(reader).cache_entries is not Reader.cache_entries
    later = cached or (scanned and reader.records_carry_versions)
    dataset = OpenedDataset(place, reader, info, partitions, None)
    if not later:
        dataset.fingerprint = dataset.take_fingerprint()
    return dataset


def options_of(options: ScanOptions | None, keywords: dict[str, Any]) -> ScanOptions:
    """``options`` with ``keywords`` laid over it, validated as one."""
    if options is None:
        return ScanOptions.build(**keywords)
    if not keywords:
        return options
    return merged(options, keywords)


def worker_starter(run: RunOptions) -> Callable[[Reader], None]:
    def start(reader: Reader) -> None:
        plan = pipeline.Plan.choose(run.scheduler, run.workers, run.timeout, reader.preferred_scheduler, None)
        pipeline.prepare(replace(plan, fork=reader.forks_cleanly), reader.worker_imports)

    return start


def load_plugins(modules: Iterable[str]) -> None:
    """Import modules that register extra checks (``--plugin my_project.checks``)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UsageError(f"--plugin {module}: cannot import it: {error}") from None
