"""What every writer provides, and the registry that finds the writer for a reader's format.

A writer mirrors a reader: from the source dataset and the verdicts (which records to set
aside) it writes the cleaned copy and, optionally, the quarantine, both in the source's own
format, and tallies every source record it wrote (see `scrub.fixing.ledger`). It can then read an
output back and tally it again, so that `fix` verifies what landed on disk rather than what it
meant to write. Writers run in the driver, one sequential pass: writing is bounded by the
output, like ``cp``; writers whose records are files copy them on local worker processes
(images: `scrub.writers.images.CopyImages`), as ``run`` (the scan's run options) allows.
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from scrub.checks.contract import names_no_record
from scrub.fixing.ledger import Ledger
from scrub.formats import WRITERS
from scrub.readers.base import FileSetReader, Reader
from scrub.records import Issue, Severity

if TYPE_CHECKING:  # the fix hands a writer what it opened, and how it runs
    from scrub.options.model import RunOptions
    from scrub.scanning.opening import OpenedDataset


@dataclass
class Verdicts:
    """Which records go to the quarantine: those with an issue at or above the threshold.

    A dataset-level issue (key ``*``: an unreadable or inconsistent file) sets its whole
    source file aside; a finding about the dataset as a whole that names no record (a drift from
    the baseline, a contract's rule: `scrub.checks.contract.names_no_record`) sets nothing
    aside, and is only counted.
    """

    records: set[tuple[str, int]] = field(default_factory=set)
    files: set[str] = field(default_factory=set)
    #: check id -> findings that name no record, of any severity (a cleaned copy cannot remove them)
    not_records: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_issues(cls, issues: Iterable[Issue], threshold: Severity) -> "Verdicts":
        verdicts = cls()
        for issue in issues:
            if issue.status == "resolved":
                continue  # a resolved line (a baseline's) describes an issue no longer found
            if names_no_record(
                issue.check, issue.key
            ):  # whatever its severity: fix cannot act on it either way
                verdicts.not_records[issue.check] = verdicts.not_records.get(issue.check, 0) + 1
                continue
            if not issue.severity.at_least(threshold):
                continue
            if issue.index is None:  # the file as a whole (key `*`; a record keyed `*` has an index)
                verdicts.files.add(issue.source)
            else:
                verdicts.records.add((issue.source, issue.index))
        return verdicts

    def quarantined(self, source: str, index: int) -> bool:
        return source in self.files or (source, index) in self.records


@dataclass
class Tally:
    """What a writer wrote, tallied from the source side."""

    kept: Ledger = field(default_factory=Ledger)
    quarantined: Ledger = field(default_factory=Ledger)
    records_kept: int = 0
    records_quarantined: int = 0
    #: records set aside although no issue at the threshold named them: they cannot be copied
    #: record by record (a file that is missing, outside the root, or inconsistent as a whole)
    forced: list[str] = field(default_factory=list)
    #: files that are not records, copied unchanged into the cleaned copy (README.txt, other
    #: HDF5 datasets, LMDB metadata keys)
    other_files: int = 0
    notes: list[str] = field(default_factory=list)


#: the reader of the format a writer writes (whose partitions and facts it reads)
ReaderT = TypeVar("ReaderT", bound=Reader)


class Writer(ABC, Generic[ReaderT]):
    """Base class of all writers; one per reader format (``Writer[ItsReader]``)."""

    format: ClassVar[str]
    #: Whether `write` can hard-link kept files (``fix --link``) rather than copy them.
    links: ClassVar[bool] = False
    #: Whether the format's library cannot shut down after a failed write (HDF5 segfaults closing
    #: a file whose writes failed): then the command line exits at once after its error line.
    unsafe_after_write_failure: ClassVar[bool] = False
    #: Where the cleaned copy is several files named by one prefix (Megatron's ``PREFIX.bin`` and
    #: ``PREFIX.idx``): their endings; `write` then gets the prefix (`scrub.fixing.outputs.StagedOutput`).
    output_suffixes: ClassVar[tuple[str, ...]] = ()
    #: Whether it reads a source in object storage where it lives (``fix s3://...``); the others
    #: write from a local copy of it (`scrub.storage.staging`, made by `scrub.fixing.cleaning`)
    reads_objects: ClassVar[bool] = False

    def __init__(self, dataset: OpenedDataset, run: RunOptions | None = None) -> None:
        self.dataset = dataset
        self.reader = cast(ReaderT, dataset.reader)  # the table pairs the format's reader and writer
        self.info = dataset.info
        #: the source: a local path (the local copy of one in object storage), or an object
        #: store's (writers that say `reads_objects`)
        self.source: Path = Path(dataset.reader.path) if dataset.reader.staged is not None else dataset.path
        self.run = run  # of the fix; None: the defaults

    @property
    def prefix(self) -> Path:
        """The prefix a pair is named by (`output_suffixes`): the source as given, or one of the
        pair's files without its ending."""
        return self.source.with_suffix("") if self.source.suffix in self.output_suffixes else self.source

    @property
    def output_is_folder(self) -> bool:
        """Whether the cleaned copy is a folder (else a single file, like the source, or a pair)."""
        return not self.output_suffixes and (self.source.is_dir() or self.info.listed)

    def clean_name(self) -> str:
        """The default cleaned copy's name, beside the source: ``NAME.clean`` for a folder or a
        list file's folder, ``STEM.clean.EXT`` for a single file, ``PREFIX.clean`` for a pair."""
        if self.output_suffixes:
            return f"{self.prefix.name}.clean"
        if self.source.is_dir():
            return f"{self.source.name}.clean"
        if self.info.listed:
            return f"{self.source.stem}.clean"
        return f"{self.source.stem}.clean{self.source.suffix}"

    def base_name(self) -> str:
        """The source's name without its extension (files), its name (folders), or a pair's
        prefix's name."""
        if self.output_suffixes:
            return self.prefix.name
        return self.source.name if self.source.is_dir() else self.source.stem

    def quarantine_name(self) -> str:
        """The quarantined dataset's name inside the quarantine folder."""
        return self.base_name() if self.info.listed or self.output_suffixes else self.source.name

    def dataset_in(self, target: Path) -> Path:
        """The path to scan inside a written output (a list layout's list file)."""
        return target / self.source.name if self.info.listed and not self.output_suffixes else target

    @abstractmethod
    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        """Write the cleaned copy at ``clean`` and, unless None, the quarantine at ``quarantine``
        (neither exists yet); tally every source record on the side it went to."""

    @abstractmethod
    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        """Read a written output back (``side`` is "clean" or "quarantine") and tally it the
        way `write` tallied the source."""


class FileSetWriter(Writer[ReaderT]):
    """The writer of a dataset that is one file or a folder of files of one kind (shards, JSON
    Lines, TFRecord files): its cleaned copy is a file of that kind or a folder of them, named
    after the source with the kind's whole extension kept (``train.clean.tar.gz``)."""

    @staticmethod
    @abstractmethod
    def split_name(name: str) -> tuple[str, str]:
        """A file's name as (stem, the kind's whole extension: ``.tar.gz``, ``.jsonl.zst``)."""

    def clean_name(self) -> str:
        if self.source.is_dir():
            return f"{self.source.name}.clean"
        stem, suffix = self.split_name(self.source.name)
        return f"{stem}.clean{suffix}"

    def base_name(self) -> str:
        return self.source.name if self.source.is_dir() else self.split_name(self.source.name)[0]

    def source_files(self) -> list[Any]:
        """The source's files in order (its one file, for a file source): by default, as its
        reader (a `scrub.readers.base.FileSetReader`) lists them."""
        return cast(FileSetReader, self.reader).files()

    def file_name(self, file: Any) -> str:
        """A source file's name within the dataset: its records' source, its output's name."""
        return file.name

    def file_targets(self, output: Path) -> list[tuple[Any, Path]]:
        """(source file, its output) for every file: ``output`` itself for a file source, a file of
        the same name inside it for a folder."""
        files = self.source_files()
        if not self.source.is_dir():
            return [(files[0], output)]
        return [(file, output / self.file_name(file)) for file in files]

    def make_outputs(self, clean: Path, quarantine: Path | None) -> dict[Any, Path]:
        """The output folders of a folder source, made; each source file's quarantine target."""
        if self.source.is_dir():
            clean.mkdir()
            if quarantine is not None:
                quarantine.mkdir()
        return dict(self.file_targets(quarantine)) if quarantine is not None else {}


#: format name -> "module:Class" of its writer: the format table's view (`scrub.formats`).
REGISTRY = WRITERS


def link_again(source: str, destination: Path) -> None:
    """Recreate the link ``source`` (never followed: it leaves the dataset) at ``destination``,
    pointing at the same target by an absolute path, so that an output still lists what could
    not be read."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.join(os.path.dirname(os.path.abspath(source)), os.readlink(source)), destination)


def writer_class(format_name: str) -> type[Writer[Any]]:
    """The writer class of a format of the table."""
    module, _, name = REGISTRY[format_name].partition(":")
    return cast(type[Writer[Any]], getattr(importlib.import_module(module), name))


def writer_for(dataset: OpenedDataset, run: RunOptions | None = None) -> Writer[Any]:
    """The writer for an opened dataset's format (``run``: the fix's `RunOptions`)."""
    return writer_class(dataset.reader.format)(dataset, run)
