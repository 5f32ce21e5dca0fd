"""What every reader provides, and the registry that finds the reader for a path.

A reader turns a dataset path into partitions (small, picklable descriptions of a slice of the
dataset that a worker can read on its own) and a partition into a stream of records. Readers
are the only place that knows a format; the pipeline only moves partitions and results.
"""

from __future__ import annotations

import glob
import importlib
import os
import re
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from contextvars import ContextVar
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

try:
    import resource

    _RUSAGE_THREAD: int | None = resource.RUSAGE_THREAD
except (ImportError, AttributeError):
    _RUSAGE_THREAD = None

import xxhash

from scrub.errors import UnusableDataset, UsageError
from scrub.fixing.outputs import is_output_name
from scrub.formats import FORMAT_KEYS, READERS, format_names, load_plugins
from scrub.paths import extension, split_roles
from scrub.records import Batch, Carries, Issue, Record
from scrub.storage import (
    forget_listings,
    list_objects,
    location,
    missing_objects,
    on_this_machine,
    read_file,
    read_file_version,
    remote_errors,
    same_place,
    stat_version,
    storage_of,
)
from scrub.storage.staging import (
    LIBRARY_OPENS_FILES,
    MOST_OBJECTS,
    WRITER_COPIES_FILES,
    StagedCopy,
    fetch_heads,
    fill,
    local_copy,
)

#: What a reader splits a dataset into (its own type per reader: row ranges, key ranges, tuples
#: of entries); small and picklable, and ``len()`` is its number of records.
PartitionT = TypeVar("PartitionT", bound=Sized)
#: (key, file path, context, content hash) of a record, for the result cache (`Reader.cache_entries`)
CacheEntry = tuple[str, str | None, str, bytes | None]


#: `ReadOptions` fields that are not a reader's options (nor recorded with a scan)
NOT_READERS = ("format", "own", "storage_options", "shaping", "sniffed", "local_copy")


@dataclass(frozen=True)
class ReadOptions:
    """Reader options from the command line; each reader uses the ones that concern it.

    The options every format may take are fields; a format's own options (declared with its row
    of `scrub.formats`: ``--lmdb-codec``, ``--labels``...) are held in ``own`` and read as
    attributes all the same (``options.lmdb_codec``), their key's default when not given.
    """

    root: Path | None = None  # where list-file paths are relative to (default: the list's folder)
    data_key: str | None = None  # the field, dataset, column or member of the data (per format)
    label_key: str | None = None  # the field, dataset, column or member of the labels (per format)
    format: str | None = None  # force a reader (default: the first whose sniff accepts the path)
    #: fsspec's options for URLs (endpoint, profile...; ``{"s3": {...}}`` for one protocol): where
    #: the data lives, not what a record is, so neither a reader's option nor recorded (secrets)
    storage_options: tuple[tuple[str, Any], ...] = ()
    #: (name, value) of the check options that decide what the reader's records are
    #: (`Reader.shaped_by`: a flat token file's windows are ``--max-length`` tokens long), set by
    #: `scrub.scanning.opening`; read as attributes as the others (``options.max_length``), and
    #: recorded with the scan where set (they decide what a record is there, and nowhere else)
    shaping: tuple[tuple[str, Any], ...] = ()
    #: (attribute, value) of the formats' own options that were given
    own: tuple[tuple[str, Any], ...] = ()
    #: the format `expand_datasets` found the dataset to be (a child of a folder of datasets):
    #: `open_reader` takes it instead of sniffing the path again; not an option, not recorded
    sniffed: str | None = None
    #: read a dataset in object storage from a local copy even where its reader reads objects:
    #: a fix whose writer opens the source's files itself (`scrub.storage.staging`); not recorded
    local_copy: bool = False

    def __getattr__(self, name: str) -> Any:
        """A format's own option (only called for a name that is not a field)."""
        if not name.startswith("_"):
            for attribute, value in (*self.__dict__.get("own", ()), *self.__dict__.get("shaping", ())):
                if attribute == name:
                    return value
            for key in FORMAT_KEYS.values():
                if key.attribute == name:
                    return key.default
        raise AttributeError(f"{type(self).__name__} has no option {name!r}")

    def given(self) -> dict[str, Any]:
        """Every option that differs from its default, by attribute (``format`` aside)."""
        default = ReadOptions()
        shared = {
            item.name: getattr(self, item.name)
            for item in fields(self)
            if item.name not in NOT_READERS and getattr(self, item.name) != getattr(default, item.name)
        }
        return shared | {name: value for name, value in self.own if value != getattr(default, name)}

    @property
    def storage(self) -> dict[str, Any]:
        """`storage_options` as fsspec takes them (nested tables as dicts)."""
        return _unfrozen(self.storage_options)

    def recorded(self, format: str) -> dict[str, Any]:
        """What decides what a record is, as a scan records it and its fingerprint hashes it:
        the format read and every reading option, the formats' own included (paths as text)."""
        names = [item.name for item in fields(self) if item.name not in NOT_READERS]
        names += [key.attribute for key in FORMAT_KEYS.values()]
        shaping = {name: value for name, value in self.shaping if value is not None}
        return (
            {"format": format}
            | {
                name: str(value) if isinstance(value, Path) else value
                for name in names
                for value in [getattr(self, name)]
            }
            | shaping
        )


def _unfrozen(pairs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {
        key: _unfrozen(value) if isinstance(value, tuple) and value and isinstance(value[0], tuple) else value
        for key, value in pairs
    }


@dataclass
class DatasetInfo:
    """What a reader learned when it opened the dataset; goes into the summary."""

    format: str
    layout: str
    root: str
    labelled: bool
    records: int
    classes: list[str] | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    #: per source file: what it holds (dtype, shape, chunks, ... of array datasets)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: problems with the dataset as a whole (key ``*``), found while opening it
    issues: list[Issue] = field(default_factory=list)
    #: K when the labels are (N, K) vectors (one-hot, multi-label, soft targets), else None
    label_width: int | None = None
    #: what a person should know about how the dataset was read (which labels were used, what
    #: is not checked); printed and written to the summary's ``notes``
    notes: list[str] = field(default_factory=list)
    #: ``records`` is what a snapshot listed, and the scan reads each partition in a snapshot of
    #: its own (a database a writer may be committing to): a different count read says the
    #: database changed, not that records were lost
    snapshots: bool = False
    #: the class range the dataset itself declares (a Hugging Face ``ClassLabel``'s names):
    #: ``label-out-of-range`` uses it when neither --num-classes nor --label-range is given
    class_range: tuple[int, int] | None = None
    #: how to have this dataset's labels checked, where it holds none but looks like it could
    #: serve as another's (a ``y.npy`` scanned as data): said when a label option cannot apply
    label_hint: str | None = None
    #: where a record's key names its image file (the folder of an image folder, a pair layout's
    #: images/), for the HTML report's thumbnails; None where records are not image files
    image_root: str | None = None
    #: per source file of token ids stored in a fixed integer dtype (a Megatron ``.bin``, a
    #: nanoGPT ``train.bin``, an MDS or Arrow column): that dtype's name ("uint16"), which
    #: `token-dtype-overflow` holds against the vocabulary
    token_dtypes: dict[str, str] = field(default_factory=dict)

    #: the layout of a dataset whose records a list file names (Caffe's ImageData and HDF5Data
    #: lists, CSV lists): its cleaned copy is a list of its own, beside copies of what it names
    LIST_FILE: ClassVar[str] = "list-file"

    @property
    def listed(self) -> bool:
        """Its records are named by a list file (see `LIST_FILE`)."""
        return self.layout == self.LIST_FILE

    def to_dict(self) -> dict[str, Any]:
        document = {
            "format": self.format,
            "layout": self.layout,
            "root": self.root,
            "labelled": self.labelled,
            "classes": self.classes,
            "skipped": dict(self.skipped),
        }
        if self.label_width is not None:
            document["label_width"] = self.label_width
        if self.files:
            document["files"] = self.files
        return document


class Reader(ABC, Generic[PartitionT]):
    """Base class of all readers. Instances are pickled to workers: keep them small."""

    #: The name used by ``--format``.
    format: ClassVar[str]
    #: The local scheduler that runs this reader's partitions fastest (measured, see
    #: docs/benchmarks.md). Not a ClassVar: a reader may choose for the dataset it opened (an
    #: uncompressed HDF5 file runs on threads, a compressed one on processes).
    preferred_scheduler: str = "processes"
    #: How long one core would take to check the opened dataset, where its size tells (array
    #: readers; None: unknown). A scan whose work is under `scrub.pipeline.IN_PROCESS_SECONDS`
    #: runs in the scan's own process: a pool would cost more than it saves.
    work_seconds: float | None = None
    #: Records per task: enough work (~0.2 s) to amortize a task's fixed cost (sending it, merging
    #: its result; see docs/benchmarks.md, "Design measurements").
    records_per_task: ClassVar[int] = 1000
    #: What its records carry, matched against each check's ``needs`` (see `Carries`; the scan
    #: adds LABEL_VECTORS for a dataset whose `DatasetInfo.label_width` is set, REPLAY with the
    #: replay). Not a ClassVar: a reader may narrow it for the dataset it opened (JPEGs hold no
    #: floats).
    provides: frozenset[Carries] = frozenset()
    #: Whether a record's key is only its position (HDF5 rows): then its content is its identity
    #: across scans (see `scrub.scanning.baseline`).
    positional_keys: bool = False
    #: The `ReadOptions` fields this reader reads; another one given is an error naming these.
    options_used: ClassVar[frozenset[str]] = frozenset()
    #: The check options (`scrub.checks.base.CheckOptions` fields) that decide what this format's
    #: records are (a flat token file is read in windows of ``--max-length`` tokens): handed to
    #: the reader in `ReadOptions.shaping`, recorded with the scan, reused by ``fix --manifest``
    #: and ``restore`` as the reading options are.
    shaped_by: ClassVar[frozenset[str]] = frozenset()
    #: Whether only the scan's own process can read the dataset (LevelDB): threads or sync only.
    in_one_process: ClassVar[bool] = False
    #: Whether the scan's process holds nothing of the dataset that a forked copy of it could
    #: misuse (no library handle such as an HDF5 file, no thread of the reader's own): its worker
    #: processes may then be forked from the scan itself rather than from the worker server
    #: (`scrub.execution.workers.fork_context`), which starts them sooner. Never for a dataset in a bucket
    #: (its file system runs an event loop thread): `__init__` says so.
    forks_cleanly: bool = False
    #: Whether each record is read from a file of its own, `members` gives those files in the
    #: partitions' order, one a record, and each record carries its file's version as read
    #: (`RecordFacts.file_version`): a scan's fingerprint then takes them from the reads
    #: (`scrub.scanning.opening.open_dataset`) instead of a ``stat`` of every file before the first task
    records_carry_versions: bool = False
    #: Modules worker processes should import before the first task (start-up is on the clock).
    worker_imports: ClassVar[tuple[str, ...]] = ()
    #: Name endings of the files that are each a dataset of this format (``.h5``): a folder whose
    #: files are datasets of several formats is a folder of datasets (`expand_datasets`).
    file_suffixes: ClassVar[tuple[str, ...]] = ()
    #: Whether a dataset of this format is a folder that is one database (LMDB, LevelDB): a
    #: folder holding such folders is a folder of datasets (`expand_datasets`).
    database_folder: ClassVar[bool] = False
    #: Name endings of the files a dataset of this format is named by the common prefix of
    #: (Megatron's ``data/name`` for ``name.bin`` and ``name.idx``): that prefix names a dataset
    #: although no file bears it (`names_dataset`).
    prefix_files: ClassVar[tuple[str, ...]] = ()
    #: Whether each file of this format is a dataset of its own that no folder of them forms one
    #: of (nanoGPT's ``train.bin`` and ``val.bin``: two token streams, each cut by its own
    #: trainer): a folder of such files is a folder of datasets (`expand_datasets`), as a folder
    #: of LMDB environments is, where a folder of HDF5 files is one dataset.
    files_are_datasets: ClassVar[bool] = False
    #: Whether it reads a dataset in object storage where it lives (``s3://...``: through fsspec,
    #: by ranges); the others' libraries open local files only, so `open_reader` gives them a
    #: local copy (`scrub.storage.staging`).
    reads_objects: ClassVar[bool] = False

    # What `open` sets and writers (`scrub.writers`) may read; nothing else of a reader is theirs.
    #: The folder the records' paths are relative to (an image folder, a list file's root, an
    #: HDF5 file's folder); "" where records are not files (LMDB).
    root: str = ""
    #: Where a list names the dataset's files (HDF5 folders and source lists): (source, path) of
    #: each, in order; empty otherwise.
    listed: Sequence[tuple[str, str]] = ()

    def __init__(self, path: Path, options: ReadOptions) -> None:
        self.path = path
        self.options = options
        #: the dataset in object storage this reader reads a local copy of (`open_reader`)
        self.staged: StagedCopy | None = None
        self.forks_cleanly = self.forks_cleanly and storage_of(path).forks_cleanly

    @classmethod
    @abstractmethod
    def sniff(cls, path: Path) -> bool:
        """Whether ``path`` looks like this reader's format (cheap: never reads a whole file)."""

    @classmethod
    def holds_dataset(cls, path: Path) -> bool:
        """Whether ``path``, a child of a folder of datasets, is a dataset of this format: by
        default what `sniff` says; a reader that takes any folder says more (`expand_datasets`)."""
        return cls.sniff(path)

    @abstractmethod
    def open(self, partition_size: int) -> tuple[DatasetInfo, list[PartitionT]]:
        """Validate the dataset and split it into partitions of about ``partition_size`` records.

        Raises `UnusableDataset` with a one-line message when the dataset cannot be read.
        Every partition supports ``len()``: its number of records.
        """

    @abstractmethod
    def read(
        self, partition: PartitionT, start: int = 0, stop: int | None = None
    ) -> Iterator[Record | Batch]:
        """Yield the records ``start:stop`` of a partition, in order, one by one or in batches of
        consecutive rows (array datasets). Runs in a worker."""

    def close(self) -> None:
        """Release what the driver process holds open (called when a scan or fix ends)."""

    def label_sample(self, partitions: Sequence[PartitionT], most: int) -> Any:
        """Up to ``most`` of the dataset's labels as an array in their stored dtype ((n,) class
        ids or values, (n, K) vectors), read in the driver before the scan, for
        ``--label-kind auto`` to decide once, for every partition alike, whether they are class
        ids or continuous values (`scrub.checks.labels.label_kind`); the same labels for the
        same dataset whatever its partitioning (the first of each file, say). None where the
        reader cannot read labels apart from its records: the labels are then class ids unless
        ``--label-kind value`` says otherwise."""
        return None

    @abstractmethod
    def members(self, partitions: Sequence[PartitionT]) -> Iterator[str]:
        """The path of every file the dataset consists of (list files included), in a fixed order;
        the fingerprint stats them."""

    @abstractmethod
    def locate(self, partition: PartitionT, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        """The identity (source, key, index) of records of a partition, without reading them."""

    def cache_entries(self, partition: PartitionT) -> list[CacheEntry | None] | None:
        """For the result cache (`scrub.scanning.cache`): per record whose verdict depends only on its
        bytes and ``context``, (key, file path, context, content hash), with either the path of
        the file that holds it (stat-ed, hashed only when changed) or the hash of its bytes; None
        for a record never to reuse. None when this reader's records cannot be cached."""
        return None

    def subset(self, partition: PartitionT, offsets: Sequence[int]) -> PartitionT:
        """A partition of only the records at ``offsets`` (needed with `cache_entries`)."""
        raise NotImplementedError

    def partition_entry(self, partition: PartitionT) -> tuple[Any, str] | None:
        """For a reader whose records are checked in blocks (no record's result to keep, so no
        `cache_entries`): (the file a partition reads, what else its result depends on: its place
        in the file, how the dataset is read) where its whole result depends only on those and
        the file's version (`scrub.scanning.wholes`); None where it cannot be reused."""
        return None


def sampled_files(reader: Reader, partitions: Sequence[Any], records: int) -> tuple[list[Any], list[Any]]:
    """(the first partitions, which together hold ``records`` records or all there are; the
    files they read, in order, as the reader opens them): what a reader judges its dataset by on
    opening, and the files whose versions a memo of that judgement depends on
    (`scrub.storage.memo.Memo.remembered`'s ``place`` and ``also``)."""
    sampled: list[Any] = []  # partitions of a file each (``path``), of ``len()`` records
    held = 0
    for partition in partitions:
        if held >= records:
            break
        sampled.append(partition)
        held += len(partition)
    paths = dict.fromkeys(partition.path for partition in sampled)
    return sampled, [location(path, reader.options.storage) for path in paths]


def entries_by_place(
    reader: Reader,
    path: str,
    source: str,
    anchor: object,
    numbers: Iterable[int],
    context: str,
    key: Callable[[int], str],
) -> list[CacheEntry | None]:
    """Cache entries of records named without reading them: by their file's (size, version)
    (`scrub.storage.stat_version`: its mtime locally, its ETag from the listing in a bucket, so a
    file not rewritten is not read again) and their place in it (``anchor``, where their
    partition starts, and each record's number from there). ``key(number)``: the record's key
    in the cache; ``context``: what else its verdict depends on (how the dataset was read)."""
    versions = reader.__dict__.setdefault("_versions", {})
    if path not in versions:
        versions[path] = stat_version(location(path, reader.options.storage))
    size, version = versions[path]
    identity = f"{source}\0{size}\0{version}\0{anchor}\0"
    return [
        (key(number), None, context, xxhash.xxh3_128_digest(f"{identity}{number}".encode()))
        for number in numbers
    ]


class FileSetReader(Reader[PartitionT]):
    """The reader of a dataset that is one file of a kind or a folder of them (WebDataset shards,
    TFRecord files), as `scrub.writers.base.FileSetWriter` writes them: it sniffs and lists its
    files one way."""

    @classmethod
    @abstractmethod
    def is_set_file(cls, path: Any) -> bool:
        """Whether ``path``, a file, is one of the format's (cheap: its name, its first bytes)."""

    @classmethod
    @abstractmethod
    def set_files_in(cls, folder: Any) -> list[Any]:
        """The format's files directly inside ``folder``, by name."""

    @classmethod
    def set_of_files(cls, files: list[Any]) -> bool:
        """Whether a folder holding ``files`` (`set_files_in`'s) is a dataset of the format."""
        return bool(files)

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_file():
            return cls.is_set_file(path)
        if not path.is_dir():
            return False
        try:
            return cls.set_of_files(cls.set_files_in(path))
        except OSError:
            return False

    def files(self) -> list[Any]:
        """The dataset's files in order (its one file, for a file source)."""
        return [self.path] if self.path.is_file() else self.set_files_in(self.path)


#: format name -> "module:Class" of its reader: the format table's view (`scrub.formats`);
#: imports are deferred until a reader is used.
REGISTRY = READERS


def reader_class(format_name: str) -> type[Reader]:
    if format_name not in REGISTRY:
        load_plugins()  # a package's own format, by its entry point
    try:
        target = REGISTRY[format_name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise UsageError(f"unknown format {format_name!r}: choose one of {known}") from None
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


#: What the sniffs of one `open_reader` share, by key (`shared_sniff`); None outside one.
_SHARED_SNIFFS: ContextVar[dict[Any, Any] | None] = ContextVar("scrub_shared_sniffs", default=None)
SharedT = TypeVar("SharedT")


def shared_sniff(key: Any, make: Callable[[], SharedT]) -> SharedT:
    """``make()``, made once for ``key`` among the sniffs of one `open_reader`: two formats that
    look below a folder for their files (Parquet's and Arrow's) walk its tree once between them.
    Outside an opening (a sniff of its own), made anew: the folder may have changed since."""
    shared = _SHARED_SNIFFS.get()
    if shared is None:
        return make()
    if key not in shared:
        shared[key] = make()
    return shared[key]


def open_reader(
    path: Path, options: ReadOptions, origin: Callable[[str], str] = lambda name: f"--{name}"
) -> Reader:
    """The reader for ``path``: the one ``options.format`` names, else the first that sniffs it.

    A reading option this reader does not use is an error that names the ones it does use:
    ``--data-key`` on an image folder must not pass for a key that was looked at.
    """
    if not on_this_machine(path):  # objects: read in place, or from a local copy
        return _object_store_reader(path, options, origin)
    if not names_dataset(path):
        raise UnusableDataset(f"{path}: no such file or directory")
    if options.format not in (None, "auto"):
        return _applicable(reader_class(options.format), path, options, origin)
    if options.sniffed is not None:  # sniffed once already, when a folder of datasets was listed
        return _applicable(reader_class(options.sniffed), path, options, origin)
    token = _SHARED_SNIFFS.set({})
    try:
        return _sniffed_reader(path, options, origin)
    finally:
        _SHARED_SNIFFS.reset(token)


def _object_store_reader(place: Any, options: ReadOptions, origin: Callable[[str], str]) -> Reader:
    """`open_reader` of a dataset in object storage: its format's reader where that reads objects
    (`Reader.reads_objects`), else the reader of a local copy (`scrub.storage.staging`), whose
    format is found on a mirror of the objects' heads before the objects are copied whole."""
    if not names_dataset(place):
        raise UnusableDataset(f"{place}: no such object or prefix")
    named = options.format if options.format not in (None, "auto") else options.sniffed
    if named is None and not _copied_by_name(place):
        named = _taker_by_name(place) or _first_taker(place)
    if named is not None and reader_class(named).reads_objects and not options.local_copy:
        return _applicable(reader_class(named), place, options, origin)
    endings = tuple(dict.fromkeys(e for n in format_names() for e in reader_class(n).prefix_files))
    writer_needs_it = named is not None and reader_class(named).reads_objects  # `local_copy` asked
    why = WRITER_COPIES_FILES if writer_needs_it else LIBRARY_OPENS_FILES
    copy = local_copy(place, endings, most=MOST_OBJECTS if named is None else None, why=why)
    if copy is None and named is None:  # a folder of very many objects: the image reader's
        return _applicable(reader_class(format_names(plugins=False)[-1]), place, options, origin)
    if copy is None:
        raise UnusableDataset(f"{place}: no such object or prefix")
    try:
        if named is None:  # its format is found on the objects' heads, before they are copied
            fetch_heads(copy, place)
            reader = open_reader(copy.path, options, origin)
            if type(reader).reads_objects:  # a folder nothing else takes: the image reader's
                copy.remove()
                return _applicable(type(reader), place, options, origin)
            fill(copy, place)
        else:
            fill(copy, place)
            reader = open_reader(copy.path, replace(options, sniffed=named), origin)
    except UnusableDataset as error:
        copy.remove()
        raise UnusableDataset(copy.named(str(error))) from None
    except BaseException:
        copy.remove()
        raise
    reader.staged = copy
    return reader


def _taker_by_name(place: Any) -> str | None:
    """The format of an object whose name ends as a format that reads objects names its files
    (``train-000000.tar``, ``data.parquet``), where that reader takes it: one sniff, where every
    reader's sniff in order costs a dozen requests (the formats before those never take such a
    name: LMDB, HDF5, NumPy and LevelDB files say what they are by their own names and magic)."""
    name = str(place).rstrip("/").rsplit("/", 1)[-1].lower()
    for format_name in format_names(plugins=False):
        cls = reader_class(format_name)
        if cls.reads_objects and cls.file_suffixes and name.endswith(cls.file_suffixes):
            return format_name if _sniffs(cls, place) else None
    return None


def _copied_by_name(place: Any) -> bool:
    """Whether an object's name says its format is one read from a local copy (``train.h5``,
    ``x.npz``): the head mirror tells which (one request, none where ``--cache`` keeps the copy),
    where every reader's sniff of the URL costs a request or two each. Not the suffixes of a
    pair's files (Megatron's ``.bin`` beside ``.idx``): such an object may be half of a pair."""
    name = str(place).rstrip("/").rsplit("/", 1)[-1].lower()
    readers = [reader_class(format_name) for format_name in format_names(plugins=False)]
    paired = {ending for cls in readers for ending in cls.prefix_files}
    return any(
        not cls.reads_objects and name.endswith(suffix) and suffix not in paired
        for cls in readers
        for suffix in cls.file_suffixes
    )


def _first_taker(path: Any) -> str | None:
    """The first of scrub's own formats whose reader sniffs ``path``, else the image reader's where
    it holds a dataset there (a folder of images, a list file): the order of every sniff."""
    *specific, catch_all = format_names(plugins=False)  # the last (images) takes any folder
    for name in specific:
        if _sniffs(reader_class(name), path):
            return name
    return catch_all if reader_class(catch_all).holds_dataset(path) else None


def _sniffed_reader(path: Path, options: ReadOptions, origin: Callable[[str], str]) -> Reader:
    """`open_reader` without a format given: the first reader that sniffs ``path``."""
    taker = _first_taker(path)
    if taker is not None:
        return _applicable(reader_class(taker), path, options, origin)
    *specific, catch_all = format_names(plugins=False)
    for name in format_names():  # packages' own formats: looked for only now (see `format_names`)
        if name not in specific and name != catch_all and reader_class(name).sniff(path):
            return _applicable(reader_class(name), path, options, origin)
    if reader_class(catch_all).sniff(path):  # a folder without images: its reader says so
        return _applicable(reader_class(catch_all), path, options, origin)
    raise UnusableDataset(
        f"{path}: not a dataset scrub can read (expected {', '.join(sorted(REGISTRY))}; "
        "use --format to force one)"
    )


def names_dataset(path: Path) -> bool:
    """Whether ``path`` exists, or is the prefix a format names its dataset by (`Reader.prefix_files`:
    ``data/my_text_document`` for ``my_text_document.bin`` and ``.idx``)."""
    with storage_of(path).errors_as_one_line(path):
        return _names_dataset(path)
    return False  # not reached: an error is raised as one line


def _names_dataset(path: Any) -> bool:
    if path.exists():
        return True
    # installed packages' formats too, looked up only now: a path that exists never pays for them
    for name in format_names():
        endings = reader_class(name).prefix_files
        if endings and all((path.parent / f"{path.name}{ending}").is_file() for ending in endings):
            return True
    return False


#: A dataset that would fill fewer tasks than this per core is split finer: a small dataset in one
#: task of `Reader.records_per_task` records left one core checking all of it while the others
#: idled (see docs/benchmarks.md, "Design measurements").
TASKS_PER_CORE = 4
#: ...but never into tasks of fewer records than this (each task costs time to send and merge).
MIN_RECORDS_PER_TASK = 25

ItemT = TypeVar("ItemT")


def partition_size_for(records: int, most: int) -> int:
    """Records per partition for a dataset of ``records``: at most ``most`` (the reader's default or
    ``--partition-size``), fewer when that would leave a core of this machine without work."""
    spread = -(-records // (TASKS_PER_CORE * (os.cpu_count() or 1)))
    return max(1, min(most, max(MIN_RECORDS_PER_TASK, spread)))


def split_records(items: Sequence[ItemT], most: int) -> list[Sequence[ItemT]]:
    """``items`` in consecutive partitions of `partition_size_for` records."""
    size = partition_size_for(len(items), most)
    return [tuple(items[start : start + size]) for start in range(0, len(items), size)]


def extension_of(key: str) -> str:
    """A key's extension as written (``.JPEG``), exactly as `format-mismatch` judges (in lower
    case) and names it (as written): a cached verdict depends on both."""
    return extension(key)


#: How many files `ReadAhead` announces to the kernel ahead of the one being read
READ_AHEAD_FILES = 16
#: Where the system cannot say what a thread read from its disks (`blocks_read`): a read slower
#: than this came from the disk, not the page cache (which serves a small JPEG far faster)
SLOW_READ_SECONDS = 0.0005


def blocks_read() -> int | None:
    """The blocks this thread has read from a disk so far (Linux's per-thread ``ru_inblock``,
    cheap to ask), or None where the system cannot say (no ``RUSAGE_THREAD``: macOS, Windows)."""
    if _RUSAGE_THREAD is None:
        return None
    try:
        return resource.getrusage(_RUSAGE_THREAD).ru_inblock
    except OSError:
        return None


def will_need(path: str, keep: bool = False) -> int | None:
    """Ask the kernel to start reading ``path`` now (``POSIX_FADV_WILLNEED``, asynchronous): on a
    cold page cache the disk then has the next files queued while this one decodes, instead of
    one small read at a time. Costs an open and a close when the file is cached. Does
    nothing where the system has no ``posix_fadvise`` (macOS, Windows). ``keep``: return the
    descriptor, open, for the read to use (`read_file_version`), instead of closing it, while
    the process keeps fewer than its share open (`_HELD`)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return None
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None  # the read itself will say why
    try:
        advise(descriptor, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    if keep and _HELD.acquire(blocking=False):  # released by `ReadAhead` when read or collected
        return descriptor
    os.close(descriptor)
    return None


def _open_files_limit() -> int:
    """This process's limit on open descriptors (``RLIMIT_NOFILE``), or 1,024 where unknown."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 1024
    return soft if soft > 0 else 1 << 20  # RLIM_INFINITY is -1


#: Descriptors `ReadAhead` may keep open at once in this process, over all its threads (files
#: announced, not yet read): a quarter of the process's limit, at most 256, so that a scan on
#: many threads never runs out of descriptors (16 a reader's thread, 32 for pairs of files).
_HELD = threading.BoundedSemaphore(max(1, min(256, _open_files_limit() // 4)))


def _close_all(descriptors: dict[int, int]) -> None:
    for descriptor in descriptors.values():
        os.close(descriptor)
        _HELD.release()
    descriptors.clear()


class ReadAhead:
    """Reads a partition's files in order, announcing the next ones to the kernel (`will_need`)
    once a read proves to come from the disk.

    Cold, the disk then works on the next files while this one decodes, which brought a cold scan
    of JPEGs level with ``jpeginfo -c``. Warm, announcing would only add an open, an fadvise and a
    close to every file, so it starts once a read made this thread read blocks from a disk
    (`blocks_read`). That is exact where timing is not: cold files the host's cache serves come
    in under `SLOW_READ_SECONDS`, and a cached read that lost its core for a moment took longer
    (warm, many files were announced needlessly). Where the system cannot count blocks, the
    first read slower than that decides. (Numbers: docs/benchmarks.md, "Design measurements".)
    ``paths`` holds None for a file not to touch before its turn (a link, checked before it is
    read)."""

    def __init__(self, paths: Sequence[str | None]) -> None:
        self.paths = paths
        self.announced: int | None = None  # the next file to announce, once reading is slow
        self.blocks = blocks_read()
        #: (size, mtime_ns) of the file last read, as its ``fstat`` gave them
        self.version: tuple[int, int] = (-1, -1)
        #: the announced files, open (by number) for their read: an open and a close less a cold
        #: file; those a partition cut short never read are closed when this is collected
        self.held: dict[int, int] = {}
        weakref.finalize(self, _close_all, self.held)

    def read(self, number: int, record: Record, shown: str, check: str = "missing-file") -> bytes | None:
        """File ``number`` of ``paths``, or None with a problem on the record (see `read_bytes`)."""
        try:
            return self.read_or_raise(number)
        except OSError as error:
            report_unreadable(record, error, shown, check)
            return None

    def read_or_raise(self, number: int) -> bytes:
        """File ``number`` of ``paths``; OSError as `read_file` raises it, for a reader that
        words its own problem (a YOLO label file)."""
        path = self.paths[number]
        assert path is not None  # only files that may be read are read here
        if self.announced is not None:
            self._announce(number)
            opened = self.held.pop(number, None)
            if opened is not None:
                _HELD.release()  # closed by the read, whatever it finds
            return self._read(path, opened)
        started = time.perf_counter()
        try:
            return self._read(path)
        finally:
            if self.blocks is None:
                cold = time.perf_counter() - started > SLOW_READ_SECONDS
            else:
                blocks = blocks_read()
                cold, self.blocks = blocks is None or blocks > self.blocks, blocks
            if cold:
                self.announced = number + 1
                self._announce(number)

    def _read(self, path: str, opened: int | None = None) -> bytes:
        """The file's bytes; its version as read kept in `version`."""
        data, size, mtime = read_file_version(path, opened)
        self.version = (size, mtime)
        return data

    def _announce(self, number: int) -> None:
        assert self.announced is not None
        end = min(len(self.paths), number + 1 + READ_AHEAD_FILES)
        while self.announced < end:
            path = self.paths[self.announced]
            if path is not None:
                descriptor = will_need(path, keep=True)
                if descriptor is not None:
                    self.held[self.announced] = descriptor
            self.announced += 1


def read_bytes(record: Record, path: str, shown: str, check: str = "missing-file") -> bytes | None:
    """A record's file, or None with a problem on the record (``check``) saying why not."""
    try:
        return read_file(path)
    except OSError as error:
        report_unreadable(record, error, shown, check)
        return None


def report_unreadable(record: Record, error: OSError, shown: str, check: str) -> None:
    """The problem a file that could not be read puts on its record."""
    from scrub.checks.base import problem

    if isinstance(error, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        record.problems.append(problem(record, check, f"no such file: {shown}"))
    else:
        record.problems.append(problem(record, check, f"cannot read {shown}: {error.strerror}"))


GLOB_CHARACTERS = frozenset("*?[")
#: a brace pattern, as WebDataset names shards: ``train-{000000..000099}.tar``, ``{a,b}.tar``
BRACES = re.compile(r"\{[^{}]*(\.\.|,)[^{}]*\}")


def _brace_paths(pattern: str) -> list[Path]:
    """The paths a brace pattern names (expanded as WebDataset expands shard lists); each must
    exist."""
    from braceexpand import braceexpand

    paths = [Path(text) for text in braceexpand(pattern)]
    missing = [path for path in paths if not path.exists()]
    if missing:
        raise UnusableDataset(
            f"{pattern}: {missing[0]} does not exist ({len(missing)} of the {len(paths)} paths "
            "this pattern names are missing)"
        )
    return paths


@dataclass
class Datasets:
    """What command-line arguments name: the datasets, and what was passed over (said out loud)."""

    paths: list[Path]
    #: entries of a folder of datasets, or glob matches, that are not datasets
    skipped: list[Path] = field(default_factory=list)
    #: entries of a folder of datasets that are scrub's own outputs (``NAME.clean``, ...)
    outputs: list[Path] = field(default_factory=list)
    #: the format each dataset was found to be where listing it took a sniff (a child of a
    #: folder of datasets), by its path: opening it takes that (`sniffed_reading`)
    formats: dict[str, str] = field(default_factory=dict)
    #: files a format's option reads beside the data file (`Key.companion`: NumPy's ``--labels``),
    #: where a folder or a pattern names them too: what each is, and the file
    companions: list[tuple[str, Path]] = field(default_factory=list)

    def sniffed_reading(self, path: Path, options: ReadOptions) -> ReadOptions:
        """``options`` for opening the dataset ``path``, with the format its listing found, if
        any: the path is sniffed once."""
        found = self.formats.get(str(path))
        return (
            options
            if found is None or options.format not in (None, "auto")
            else replace(options, sniffed=found)
        )

    def note(self) -> str | None:
        said = []
        companions: dict[str, list[Path]] = {}
        for what, path in self.companions:
            companions.setdefault(what, []).append(path)
        for what, paths in (
            ("not datasets", self.skipped),
            ("scrub's own outputs (cleaned copies, quarantines)", self.outputs),
            *companions.items(),
        ):
            if paths:
                names = ", ".join(str(p) for p in paths[:5]) + (
                    f" and {len(paths) - 5} more" if len(paths) > 5 else ""
                )
                said.append(f"{len(paths)} entr{'y is' if len(paths) == 1 else 'ies are'} {what} ({names})")
        return "not scanned: " + "; ".join(said) if said else None


def expand_datasets(arguments: Sequence[str | Path], options: ReadOptions) -> Datasets:
    """The datasets that command-line arguments name, in order, each once.

    An argument is a dataset, a glob pattern (``'shards/train-*.h5'``, for shells that do not
    expand it; ``**`` recurses), or a folder whose children are datasets: a folder that holds
    LMDB environments is scanned as each of its children that is a dataset (LMDB environments
    and data files, HDF5 files, list files, folders of images), and so is a folder of flat token
    files (`Reader.files_are_datasets`). A folder that no reader takes
    as a whole and that holds no such child stays one argument: opening it says what is wrong.
    A folder of class sub-folders is one image dataset (ImageFolder's layout), and a folder of
    HDF5 files is one HDF5 dataset, as when it is named alone.
    """
    found = Datasets([])
    for argument in arguments:
        text = str(argument)
        if not on_this_machine(argument):  # a URL: its patterns match keys (`_urls_in`)
            _urls_in(text, options, found)
            continue
        path = Path(text)
        if not path.exists() and BRACES.search(text):
            for named in _brace_paths(text):
                _datasets_in(named, options, found)
        elif not path.exists() and GLOB_CHARACTERS & set(text):
            matches = [Path(match) for match in sorted(glob.glob(text, recursive=True))]
            if not matches:
                raise UnusableDataset(f"{text}: no file or folder matches this pattern")
            for match in matches:
                if options.format not in (None, "auto") or is_dataset(match) or _collection(match):
                    _datasets_in(match, options, found)
                else:
                    found.skipped.append(match)
        else:
            _datasets_in(path, options, found)
    unique: dict[str, Path] = {}
    for path in found.paths:
        unique.setdefault(same_place(path), path)
    companions = [(key, getattr(options, key.attribute)) for key in FORMAT_KEYS.values() if key.companion]
    for key, named in companions:
        if named is not None and same_place(named) in unique:  # not data: read with the data
            said = f"{key.companion} --{key.name} reads with the data"
            found.companions.append((said, unique.pop(same_place(named))))
    found.paths = list(unique.values())
    for key, named in companions:
        if named is not None and len(found.paths) > 1:
            names = ", ".join(str(path) for path in found.paths[:3]) + (
                " ..." if len(found.paths) > 3 else ""
            )
            raise UsageError(
                f"--{key.name} {named}: {key.companion} of one data file, and {len(found.paths)} datasets "
                f"are named ({names}): name the data file alone"
            )
    return found


def _urls_in(text: str, options: ReadOptions, found: Datasets) -> None:
    """A URL argument: one object or prefix, a brace pattern of shards, or a glob (fsspec's)."""
    place = location(text, options.storage)
    forget_listings(place)  # a run's first listing of a store sees it as it is now
    if BRACES.search(text):
        from braceexpand import braceexpand

        places = [location(url, options.storage) for url in braceexpand(text)]
        with remote_errors(place):
            missing = missing_objects(places)
        if missing:
            raise UnusableDataset(
                f"{text}: {missing[0]} does not exist ({len(missing)} of the {len(places)} objects this "
                "pattern names are missing)"
            )
        found.paths += places
    elif GLOB_CHARACTERS & set(text.split("://", 1)[1]):
        with remote_errors(place):
            matches = sorted(place.fs.glob(place.path))
        if not matches:
            raise UnusableDataset(f"{text}: no object matches this pattern")
        protocol = text.split("://", 1)[0]
        found.paths += [location(f"{protocol}://{match}", options.storage) for match in matches]
    else:  # a prefix of datasets is each of them, as a folder is (from one listing: `list_objects`)
        with remote_errors(place):
            list_objects(place)  # fills the file system's listings, which the checks below read
            _datasets_in(place, options, found)


def _datasets_in(path: Path, options: ReadOptions, found: Datasets) -> None:
    """Add ``path``, or its children when it is a folder of datasets (see `expand_datasets`)."""
    children = _collection(path) if options.format in (None, "auto") else None
    if children is None:
        found.paths.append(path)
        return
    for child in children:
        if is_output_name(child.name):
            found.outputs.append(child)
            continue
        held_as = dataset_format(child)
        if held_as is None:
            found.skipped.append(child)
            continue
        found.paths.append(child)
        found.formats[str(child)] = held_as


def _collection(path: Path) -> list[Path] | None:
    """The children of a folder of datasets, else None: a folder that holds databases (LMDB
    environments, LevelDB databases: `Reader.database_folder`), or files that are datasets of
    more than one format (HDF5 files beside ``.npy`` files: no reader takes them as one dataset,
    and the one that takes the folder would pass over the rest), or files each of which is a
    dataset of its own (`Reader.files_are_datasets`: nanoGPT's ``train.bin`` and ``val.bin``), or
    folders that are splits: a training split beside an evaluation split (``train/`` and
    ``val/``: `scrub.paths.split_of`), which a scan compares (`split-leak`) and which the image
    folders' reader may not take as the classes of one dataset (`_one_dataset`). (Files named as
    splits, ``train.h5`` beside ``val.h5``, stay the files of one dataset where a reader takes
    them so: name them to compare them, ``data/*``.)"""
    databases = [cls for cls in map(reader_class, format_names(plugins=False)) if cls.database_folder]
    if not path.is_dir() or any(_sniffs(cls, path) for cls in databases):
        return None
    children = sorted(child for child in path.iterdir() if not child.name.startswith("."))
    if any(child.is_dir() and any(_sniffs(cls, child) for cls in databases) for child in children):
        return children
    if any(split_roles([child.name for child in children if child.is_dir()])) and not _one_dataset(path):
        return children  # train/ beside val/: splits
    endings = {name: reader_class(name).file_suffixes for name in format_names(plugins=False)}
    formats: set[str] = set()
    for child in children:  # a flat folder of images may hold a million: names, and a stat per format
        lowered = child.name.lower()
        for name, suffixes in endings.items():
            if suffixes and name not in formats and lowered.endswith(suffixes) and child.is_file():
                formats.add(name)
        if len(formats) > 1:
            return children
    if any(reader_class(name).files_are_datasets for name in formats):
        return children
    return None


def _one_dataset(path: Path) -> bool:
    """Whether a reader other than the image folders' takes ``path`` as one dataset whose parts
    are its folders (an MDS tree of indexes, a Hugging Face ``DatasetDict``): its splits are its
    own. The image folders' reader takes any folder, its sub-folders as classes, which splits
    are not."""
    return any(_sniffs(reader_class(name), path) for name in format_names(plugins=False) if name != "images")


def is_dataset(path: Path) -> bool:
    """Whether a child of a folder of datasets is one (`Reader.holds_dataset`: an image folder
    needs an image in it)."""
    return dataset_format(path) is not None


def dataset_format(path: Path) -> str | None:
    """The format of the first reader that holds ``path`` as a dataset, in the order
    `open_reader` sniffs them (scrub's own formats, the image folders' last), else None."""
    return next(
        (name for name in format_names(plugins=False) if _sniffs(reader_class(name), path, held=True)), None
    )


def _sniffs(cls: type[Reader], path: Any, held: bool = False) -> bool:
    """Whether ``cls`` takes ``path`` (``held``: as a child of a folder of datasets,
    `Reader.holds_dataset`); for an object of a bucket, a reader whose sniffing needs a local file
    (``os`` calls, memory maps) does not take it: it fails instead of answering."""
    sniff = cls.holds_dataset if held else cls.sniff
    if on_this_machine(path):
        return sniff(path)
    with remote_errors(path):
        try:
            return sniff(path)
        except (TypeError, NotImplementedError, AttributeError):
            return False
    return False  # not reached: an error is raised as one line


def _applicable(cls: type[Reader], path: Path, options: ReadOptions, origin: Callable[[str], str]) -> Reader:
    for name in options.given():
        if name not in cls.options_used:
            used = ", ".join(f"--{n.replace('_', '-')}" for n in sorted(cls.options_used)) or "none"
            raise UsageError(
                f"{origin(name.replace('_', '-'))}: does not apply to {path} ({cls.format}); "
                f"the {cls.format} reader's options are: {used}"
            )
    return cls(path, options)
