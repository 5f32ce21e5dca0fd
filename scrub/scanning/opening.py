"""Opening a dataset: its reader, validated, split into partitions, fingerprinted; what `scan`
and `fix` both start from."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scrub import pipeline
from scrub.errors import (
    UnopenedDataset,
    UnusableDataset,
    UsageError,
)
from scrub.options.model import RunOptions, ScanOptions, merged
from scrub.paths import is_within
from scrub.readers.base import DatasetInfo, Reader, open_reader
from scrub.scanning.fingerprint import fingerprint
from scrub.storage import forget_listings, location, on_this_machine
from scrub.storage.memo import Memo
from scrub.storage.spool import Spool, spooling
from scrub.storage.staging import StagedCopy


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
    #: the local copies of objects its opening read whole, which its partitions read
    spool: Spool | None = None
    #: what its opening learned of its files, kept in the ``--cache`` directory (one that keeps
    #: nothing without one); a scan keeps whole partitions' results in it too
    memo: Memo = field(default_factory=Memo)

    def take_fingerprint(
        self,
        known: dict[str, tuple[int, int]] | None = None,
        read: Iterator[tuple[int, int] | None] | None = None,
    ) -> dict[str, Any]:
        """The dataset's fingerprint as it is now (`scrub.scanning.fingerprint.fingerprint`), from
        the stats ``known`` already (a cached scan's lookups) or the versions its reads found
        (``read``), else from a stat of each file: the one way every command takes it. A local
        copy of a dataset in object storage is fingerprinted by its objects' versions, as the
        dataset is where it is read in place: a scan and a fix agree however each read it."""
        if self.reader.staged is not None:
            return fingerprint(self.reader, self.partitions, self.info.root, self.reader.staged.versions())
        return fingerprint(self.reader, self.partitions, self.info.root, known, read)

    def close(self) -> None:
        """Release what the reader holds open, and its local copies of objects."""
        _release(self.reader, self.spool)

    @property
    def reading(self) -> dict[str, Any]:
        """The options that decide what a record is (recorded with every scan)."""
        return self.reader.options.recorded(self.reader.format)


def open_dataset(
    path: str | Path,
    options: ScanOptions | None = None,
    before_open: Callable[[Reader], None] | None = None,
    scanned: bool = False,
    needs_files: Callable[[str], bool] | None = None,
    **keywords: Any,
) -> OpenedDataset:
    """Find the reader for ``path``, validate the dataset, split it, fingerprint it.

    ``options`` (or keywords, as for `scan`) say how to read it. ``before_open(reader)`` runs
    once the format is known and before the (possibly long) listing, so that worker processes
    can start meanwhile. ``scanned``: the caller scans every record next, so where they carry
    their files' versions (`Reader.records_carry_versions`) the fingerprint is taken from the
    reads (`scrub.scanning.dataset.DatasetScan.finish`), off the path to the first task, and of
    the very bytes verified. ``needs_files(format)``: whether the caller reads the source's
    files itself (`fix`'s writer), so that a dataset in object storage is read from a local copy
    even where its reader reads objects; asked once the format is known, before the dataset is
    opened.
    """
    options = options_of(options, keywords)
    place: Path = location(path, options.read.storage)
    if on_this_machine(place) and place.name in ("", ".", ".."):  # `scrub fix .` inside a dataset
        place = place.resolve()  # outputs are named after it
    # what an earlier opening in this process listed is listed again: objects rewritten since
    # have other versions (the sniff and the opening below share one listing)
    forget_listings(place)
    memo = Memo.for_dataset(options.cache, place)  # what opening learned last time (``--cache``)
    with memo.in_use():
        dataset = _opened(place, options, before_open, scanned, needs_files)
    dataset.memo = memo
    unsaved = memo.save()
    if unsaved is not None:
        dataset.info.notes.append(unsaved)
    return dataset


def _opened(
    place: Path,
    options: ScanOptions,
    before_open: Callable[[Reader], None] | None,
    scanned: bool,
    needs_files: Callable[[str], bool] | None,
) -> OpenedDataset:
    """`open_dataset` of a location."""
    try:
        reader = open_reader(place, options.read, options.origin)
        if (
            not on_this_machine(place)
            and reader.staged is None
            and needs_files is not None
            and needs_files(reader.format)
        ):
            local = replace(options.read, sniffed=reader.format, local_copy=True)
            reader = open_reader(place, local, options.origin)
    except UnusableDataset as error:
        raise UnopenedDataset(str(error)) from None
    shaped_by = sorted(type(reader).shaped_by)  # check options that decide what a record is
    if shaped_by:
        reader.options = replace(
            reader.options, shaping=tuple((n, getattr(options.checks, n)) for n in shaped_by)
        )
    # objects a reader must read whole to open the dataset are read once, into copies its
    # workers read, where they share this machine's disk
    spool = Spool() if not on_this_machine(place) and _workers_here(options.run) else None
    try:
        if reader.staged is not None:
            _reachable_by_workers(reader.staged, options.run)
        if before_open is not None:
            before_open(reader)
        try:
            with spooling(spool):
                info, partitions = reader.open(options.run.partition_size or reader.records_per_task)
        except UnusableDataset as error:
            said = str(error) if reader.staged is None else reader.staged.named(str(error))
            raise UnopenedDataset(said, reader.format) from None
    except BaseException:
        _release(reader, spool)
        raise
    if spool is not None and spool.note is not None:
        info.notes.append(spool.note)
    if reader.staged is not None:
        _within_copy(reader, partitions)
        info.notes[:] = [reader.staged.note, *(reader.staged.named(note) for note in info.notes)]
    cached = options.cache is not None and type(reader).cache_entries is not Reader.cache_entries
    later = reader.staged is None and (cached or (scanned and reader.records_carry_versions))
    dataset = OpenedDataset(place, reader, info, partitions, None, spool)
    if not later:
        dataset.fingerprint = dataset.take_fingerprint()
    return dataset


def _release(reader: Reader, spool: Spool | None = None) -> None:
    try:
        reader.close()
    finally:
        if reader.staged is not None:
            reader.staged.remove()
        if spool is not None:
            spool.remove()


def _within_copy(reader: Reader, partitions: list) -> None:
    """Refuse a dataset in object storage that names files beyond what its URL names (a list
    file, a COCO JSON and its image folder): its local copy does not hold them, and every record
    would pass for a missing file."""
    assert reader.staged is not None
    copy = str(reader.staged.folder)
    outside = next(
        (
            m
            for m in reader.members(partitions)
            if not (is_within(os.path.abspath(m), copy, itself=False) and os.path.lexists(m))
        ),
        None,
    )
    if outside is not None:
        _release(reader)
        raise UnopenedDataset(
            f"{reader.staged.url}: names files beyond it ({os.path.basename(outside)}, ...), which are read "
            "from this machine only for its format: list files and COCO annotations in object storage "
            "are not read yet (copy the dataset down first)",
            reader.format,
        )


def _workers_here(run: RunOptions) -> bool:
    """Whether the run's workers read this machine's files: local workers, or a cluster on it (a
    loopback address)."""
    address = run.scheduler or ""
    if "://" not in address:
        return True
    host = address.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _reachable_by_workers(staged: StagedCopy, run: RunOptions) -> None:
    """Refuse a cluster elsewhere for a dataset copied to this machine: its workers could not open
    the copy. One on this machine (a loopback address) reads it as local workers do."""
    if _workers_here(run):
        return
    address = run.scheduler
    raise UsageError(
        f"{staged.url}: {staged.why}, so this run reads a copy on this machine, which the workers "
        f"of {address} cannot open: run it with local workers (--scheduler processes), or from a "
        "machine of the cluster with the dataset on its disk"
    )


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
