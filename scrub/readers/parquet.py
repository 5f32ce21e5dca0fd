"""Parquet files, one or a folder of them (Hugging Face's ``data/train-00000-of-00004.parquet``),
and Arrow IPC files (`ArrowReader`): the table containers. The table's rows are the records (key:
the image's ``path`` where an ``Image`` struct holds one, else the row's position in its file, as
for HDF5 rows; the index is always the row). What the columns hold, which are read and how a row
becomes a record is the content interpreter's, `scrub.readers.tablecontents`: this module lists
the files, checks their schemas agree, and reads slices of their tables.

Partitions are runs of whole row groups (Parquet's unit of reading); each worker opens the file and
reads only its row groups and only the chosen columns. Needs ``pyarrow`` (``pip install
'scrub[parquet]'``).
"""

from __future__ import annotations

import importlib
import io
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from scrub.checks.base import Finding, make_issue
from scrub.errors import UnusableDataset, first_line
from scrub.formats import needs
from scrub.readers.base import DatasetInfo, Reader, shared_sniff
from scrub.readers.savedtodisk import damaged_descriptions, is_saved_to_disk, missing_data_file
from scrub.readers.tablecontents import Columns, TableRows, choose_columns
from scrub.records import Batch, Carries, Record
from scrub.storage import (
    Location,
    location,
    on_this_machine,
    open_binary,
    open_random,
    read_head,
    side_by_side,
    storage_of,
)
from scrub.storage.memo import current_memo, packed_array, unpacked_array

PARQUET_MAGIC = b"PAR1"
#: an object's footer up to this size (serialized) travels with its partitions (`RowGroups.footer`)
FOOTER_CARRIED = 256 << 10
#: `label_sample` reads the labels of at most this many files (the first, in order)
SAMPLED_FILES = 16


def pyarrow_modules():
    """(pyarrow, pyarrow.parquet), or a one-line error naming the extra to install
    (`scrub.formats.needs`)."""
    pyarrow = needs("parquet")
    return pyarrow, importlib.import_module("pyarrow.parquet")


def is_parquet_file(path: Location) -> bool:
    """Whether the file starts as Parquet does (what this version of it did, from the memo:
    `scrub.storage.memo`)."""
    return current_memo().remembered("parquet-head", path, lambda: _starts_as_parquet(path))


def _starts_as_parquet(path: Location) -> bool:
    try:
        return read_head(path, 4) == PARQUET_MAGIC
    except OSError:
        return False


def table_files(folder: Location, suffix: str = ".parquet") -> list[Path]:
    """The ``.parquet`` (or ``.arrow``) files in ``folder`` and its sub-folders (Hugging Face
    keeps them in ``data/``), hidden ones aside, by path (a prefix's objects: from one listing)."""
    keys = [key for key in storage_of(folder).files_below(folder) if key.endswith(suffix)]
    return [folder.joinpath(*key.split("/")) for key in sorted(keys, key=lambda key: key.split("/"))]


def _opened(path: Location, random: bool = True, size: int | None = None) -> Any:
    """What pyarrow reads a table file from: a local file by its path (pyarrow's own file, or a
    memory map), an object through fsspec (`scrub.storage`: range requests, workers open it
    themselves; ``size``, where the listing gave it, spares asking it)."""
    local = storage_of(path).local_path(path)
    if local is not None:
        return local
    return open_random(path, size) if random else open_binary(path)


def first_table_file(folder: Path, suffix: str) -> Path | None:
    """A ``suffix`` file of those `table_files` lists (any one: the sniff reads one), found
    without listing the whole tree: the sniff runs on every folder given, and listing a large
    folder of images with `table_files` cost twice this walk for every suffix, and this walk
    stops at the first table (see docs/benchmarks.md, "Design measurements"). The Parquet and
    Arrow sniffs of one opening share one walk (`shared_sniff`)."""
    return shared_sniff(("table files", str(folder)), lambda: _TableWalk(folder)).first(suffix)


class _TableWalk:
    """A walk below a folder for the first file of each table suffix, that goes only as far as
    the suffixes asked for so far need: the second sniff resumes it where the first stopped."""

    def __init__(self, folder: Path) -> None:
        self.found: dict[str, Path] = {}
        self.walking = _table_files(folder)

    def first(self, suffix: str) -> Path | None:
        if suffix not in self.found:
            for found, path in self.walking:
                self.found.setdefault(found, path)
                if found == suffix:
                    break
        return self.found.get(suffix)


def _table_files(folder: Location) -> Iterator[tuple[str, Location]]:
    """(suffix, path) of each table file below ``folder``, in the order a walk for that suffix
    alone meets them: no hidden entry and no symlinked folder; and a folder whose name ends in
    a suffix is not entered for that suffix (a file's name is what names a table)."""
    passed: dict[str, frozenset[str]] = {"": frozenset()}  # folder -> the suffixes its path has
    for relative, folders, files in storage_of(folder).walk(folder):
        folders[:] = [name for name in folders if not name.startswith(".")]
        here = passed.pop(relative, frozenset())
        for name in folders:
            named = _table_suffix(name)
            passed[f"{relative}/{name}" if relative else name] = here | {named} if named else here
        for name in files:
            named = _table_suffix(name)
            if named is not None and named not in here and not name.startswith("."):
                yield named, folder.joinpath(*relative.split("/"), name) if relative else folder / name


def _table_suffix(name: str) -> str | None:
    return next((suffix for suffix in TABLE_SUFFIXES if name.endswith(suffix)), None)


class ParquetStorage:
    """Parquet files: row groups are the units of reading."""

    name = "Parquet"
    suffix = ".parquet"
    unit = "row group"
    #: a file that does not open is an `unreadable-file` finding and the others are read: each
    #: Parquet file stands alone (a loader given the folder reads every file it finds)
    files_stand_alone = True

    @staticmethod
    def is_file(path: Location) -> bool:
        return is_parquet_file(path)

    @staticmethod
    def facts(path: Location, size: int | None = None) -> tuple[Any, list[int], dict[str, Any], Any]:
        """(schema, rows of each group, what the summary says of the file, its footer where the
        partitions carry it): only its footer is read (an object's: by a range request or two).
        An object's footer, when small, travels with its partitions (`RowGroups.footer`): the
        label sample and the workers then fetch column chunks only, not the footer again."""
        _, parquet = pyarrow_modules()
        with parquet.ParquetFile(_opened(path, size=size)) as opened:
            metadata = opened.metadata
            sizes = [metadata.row_group(n).num_rows for n in range(metadata.num_row_groups)]
            described = {"rows": metadata.num_rows, "row_groups": metadata.num_row_groups}
            carried = not on_this_machine(path) and metadata.serialized_size <= FOOTER_CARRIED
            described = {**described, "created_by": metadata.created_by}
            return opened.schema_arrow, sizes, described, metadata if carried else None

    @staticmethod
    def groups(
        path: Location,
        wanted: Sequence[int],
        columns: list[str] | None,
        footer: Any = None,
        size: int | None = None,
    ) -> Iterator[tuple[int, Any]]:
        """(group, its table) of the groups ``wanted``, in order, only ``columns`` (None: all);
        an object's column chunks are fetched as coalesced range requests (``pre_buffer``), no
        other row group's (nor its footer, where the partition carries it)."""
        _, parquet = pyarrow_modules()
        source = _opened(path, size=size)
        with parquet.ParquetFile(source, metadata=footer, pre_buffer=not on_this_machine(path)) as opened:
            for group in wanted:
                yield group, opened.read_row_group(group, columns=columns)


class ArrowStorage:
    """Arrow IPC files (Hugging Face's ``save_to_disk`` ``data-00000-of-00001.arrow``, Feather
    v2): record batches are the units of reading, through a memory map (a batch not wanted is
    never read)."""

    name = "Arrow"
    suffix = ".arrow"
    unit = "record batch"
    #: a file that does not open makes the dataset unusable: a ``save_to_disk`` folder's
    #: ``state.json`` names every file, and ``load_from_disk`` of a copy without one fails
    files_stand_alone = False

    @staticmethod
    def is_file(path: Location) -> bool:
        try:
            head = read_head(path, 8)
        except OSError:
            return False
        return head.startswith(b"ARROW1") or head[:4] == b"\xff\xff\xff\xff"

    @staticmethod
    def _batches(source: Any) -> tuple[Any, Iterator[Any], bool]:
        """(schema, the batches, whether it is the random-access file format)."""
        import pyarrow as pa

        try:
            reader = pa.ipc.open_file(source)
            return reader.schema, (reader.get_batch(n) for n in range(reader.num_record_batches)), True
        except pa.ArrowInvalid:
            source.seek(0)
            stream = pa.ipc.open_stream(source)
            return stream.schema, iter(stream), False

    @classmethod
    def facts(cls, path: Location, size: int | None = None) -> tuple[Any, list[int], dict[str, Any], Any]:
        """An object's batches are counted by reading them (Arrow IPC keeps no row counts in its
        footer): opening a remote Arrow file reads it once, read ahead in blocks. No footer
        travels with the partitions."""

        with cls._source(path) as source:
            schema, batches, random_access = cls._batches(source)
            sizes = [batch.num_rows for batch in batches]
        described = {
            "rows": sum(sizes),
            "record_batches": len(sizes),
            "ipc": "file" if random_access else "stream",
        }
        return schema, sizes, described, None

    @staticmethod
    def _source(path: Location) -> Any:
        """A memory map of a file; an object as a stream read ahead in blocks (a random-access
        file's batches are read in order, a stream's must be)."""
        import pyarrow as pa

        local = storage_of(path).local_path(path)
        return open_binary(path) if local is None else pa.memory_map(local)

    @classmethod
    def groups(
        cls,
        path: Location,
        wanted: Sequence[int],
        columns: list[str] | None,
        footer: Any = None,
        size: int | None = None,
    ) -> Iterator[tuple[int, Any]]:
        import pyarrow as pa

        wanted_set = set(wanted)
        with cls._source(path) as source:
            _, batches, _ = cls._batches(source)
            for number, batch in enumerate(batches):
                if number in wanted_set:
                    table = pa.Table.from_batches([batch])
                    yield number, table.select(columns) if columns is not None else table
                if number >= max(wanted, default=-1):
                    return


#: the suffixes that name table files, walked for at once (`first_table_file`)
TABLE_SUFFIXES = (ParquetStorage.suffix, ArrowStorage.suffix)


@dataclass(frozen=True)
class RowGroups:
    """A partition: row groups ``groups`` of one file, of ``sizes`` rows each, the first of which
    starts at row ``first_row`` of the file."""

    path: str
    source: str
    groups: tuple[int, ...]
    sizes: tuple[int, ...]
    first_row: int
    #: the file's footer (pyarrow's ``FileMetaData``) where the driver read it from an object
    #: (`ParquetStorage.facts`): a worker then fetches the column chunks only
    footer: Any = field(default=None, compare=False, repr=False)
    #: the file's bytes, as the driver's listing gave them (an object's: not asked again)
    size: int | None = None

    def __len__(self) -> int:
        return sum(self.sizes)


class ParquetReader(Reader[RowGroups]):
    format = "parquet"
    reads_objects = True  # through fsspec (`scrub.storage`)
    file_suffixes = (".parquet",)
    records_per_task = 2000
    positional_keys = True
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.ARRAY, Carries.ROWS})
    options_used = frozenset({"data_key", "label_key"})
    worker_imports = ("pyarrow.parquet", "PIL.Image")

    #: how the files are read: Parquet's row groups, or Arrow IPC's record batches
    storage: ClassVar[type[ParquetStorage] | type[ArrowStorage]] = ParquetStorage
    columns: Columns | None = None
    #: the columns chosen, as the summary's ``dataset.files`` says them
    chosen: dict[str, Any] = {}

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_file():
            return path.suffix.lower() == cls.storage.suffix and cls.storage.is_file(path)
        if path.is_dir():  # a prefix of a bucket: from one listing (`open` reuses it)
            try:
                found = first_table_file(path, cls.storage.suffix)
            except OSError:
                return False
            if found is None:
                return False
            # the first file met may be the damaged one of many: then any other of the format's
            return cls.storage.is_file(found) or any(
                cls.storage.is_file(other) for other in table_files(path, cls.storage.suffix)
            )
        return False

    def files(self) -> list[Path]:
        return [self.path] if self.path.is_file() else table_files(self.path, self.storage.suffix)

    def source_of(self, path: Path) -> str:
        return path.name if path == self.path else storage_of(self.path).relative(path, self.path)

    def _place(self, path: str) -> Location:
        """A partition's file: a local path, or an object this worker opens itself."""
        return location(path, self.options.storage)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[RowGroups]]:
        pyarrow_modules()
        storage = self.storage
        files = self.files()
        if not files:
            raise UnusableDataset(f"{self.path}: no {storage.suffix} files in this folder")
        self.root = str(self.path.parent if self.path.is_file() else self.path)
        info = DatasetInfo(format=self.format, layout="table", root=self.root, labelled=False, records=0)
        partitions: list[RowGroups] = []
        schema = None
        alone = storage.files_stand_alone and len(files) > 1  # one may be unreadable alone
        unreadable: list[str] = []  # why each file that does not open does not
        for path, (size, facts) in zip(files, self._facts(files)):
            source = self.source_of(path)
            if isinstance(facts, (OSError, ValueError)):  # pyarrow's ArrowInvalid is a ValueError
                error = facts
                reason = f"not a readable {storage.name} file ({first_line(error)})"
                if not alone or (not on_this_machine(path) and not isinstance(error, ValueError)):
                    # (an object's OSError may be the network's, not the file's: never a finding)
                    raise UnusableDataset(f"{path}: {reason}") from None
                unreadable.append(f"{source}: {reason}")  # `fix` sets it aside, whole
                info.issues.append(make_issue("unreadable-file", source, "*", None, Finding(reason)))
                continue
            file_schema, sizes, described, footer = facts
            if schema is None:
                schema = file_schema
                self.columns, self.chosen = choose_columns(schema, self.options, self.path, info)
            assert self.columns is not None
            dtype = self.columns.ids_dtype(file_schema)  # each file's ids in its own dtype
            if dtype is not None:
                info.token_dtypes[source] = dtype
            if not self.columns.schemas_agree(schema, file_schema):
                raise UnusableDataset(
                    f"{path}: its columns differ from {self.source_of(files[0])}'s: name the files "
                    f"('{self.path}/*{storage.suffix}') to scan each as a dataset of its own"
                )
            first = 0
            groups: list[int] = []
            for number in range(len(sizes)):
                groups.append(number)
                if sum(sizes[g] for g in groups) >= partition_size or number == len(sizes) - 1:
                    chosen = tuple(sizes[g] for g in groups)
                    partitions.append(
                        RowGroups(str(path), source, tuple(groups), chosen, first, footer, size)
                    )
                    first += sum(sizes[g] for g in groups)
                    groups = []
            info.records += sum(sizes)
            info.files[source] = {**self.chosen, **described}
        if schema is None:  # not one file opened: nothing to scan
            raise UnusableDataset(
                f"{self.path}: none of its {len(files)} {storage.name} files can be read ({unreadable[0]}"
                + (f"; and {len(unreadable) - 1} more" if len(unreadable) > 1 else "")
                + ")"
            )
        assert self.columns is not None
        info.labelled = self.columns.label is not None
        # a table of numbers is checked a block of rows at a time in NumPy, which threads share
        # (faster than processes, which each import pyarrow: docs/benchmarks.md, "Reading")
        if self.columns.kind == "table":
            self.preferred_scheduler = "threads"
        if self.columns.language:  # token labels are not class labels
            self.provides = frozenset({Carries.TOKENS, Carries.SEQUENCES})
        if alone:  # `unreadable-file` runs
            self.provides = self.provides | {Carries.SEVERAL_FILES}
        # rows of numbers are known by their content across scans (as HDF5 rows); an image's
        # identity is its position (its bytes are hashed by the duplicate check already)
        self.positional_keys = self.columns.keyed_by_position
        partitions = [p for p in partitions if len(p)]
        return info, partitions

    def _facts(self, files: list[Path]) -> list[tuple[int | None, Any]]:
        """(its bytes where it is an object, its `facts` or the OSError or ValueError they raised)
        of each file: objects' side by side, as each waits on its requests; a file's facts from
        the memo where an earlier ``--cache`` run read this version of its footer."""
        memo, storage = current_memo(), self.storage  # (a thread of the pool does not see the opening's)

        def facts_of(path: Path) -> tuple[int | None, Any]:
            try:
                size = None if on_this_machine(path) else storage_of(path).size(path)  # listed
                learn = partial(storage.facts, path, size)
                return size, memo.remembered(
                    f"{storage.suffix}-facts", path, learn, "", _dump_facts, _load_facts
                )
            except (OSError, ValueError) as error:
                return None, error

        return side_by_side(facts_of, files, self.path)

    def label_sample(self, partitions: Sequence[RowGroups], most: int) -> np.ndarray | None:
        """The label column's first values in each file (of at most `SAMPLED_FILES`), ``most`` in
        all, in its stored type (integers with nulls come as floats, all integral)."""
        columns = self.columns
        if columns is None or columns.label is None or columns.language:
            return None
        each_file: dict[str, RowGroups] = {}
        for partition in partitions:
            each_file.setdefault(partition.path, partition)  # a file's first partition
        firsts = list(each_file.values())[:SAMPLED_FILES]
        if not firsts:
            return None
        each, label, memo = -(-most // len(firsts)), columns.label, current_memo()

        def labels_of(partition: RowGroups) -> np.ndarray | None:
            """A file's first ``each`` labels (from the memo while the file is unchanged)."""

            def read() -> np.ndarray | None:
                place = self._place(partition.path)
                found = self.storage.groups(
                    place, partition.groups[:1], [label], partition.footer, partition.size
                )
                parts = [np.asarray(t.column(label).to_numpy(zero_copy_only=False))[:each] for _, t in found]
                numeric = [part for part in parts if part.dtype.kind in "biuf"]  # (not texts: no classes)
                return np.concatenate(numeric) if numeric else None

            extra = f"{each}|{columns}|{partition.groups[:1]}"
            place = self._place(partition.path)
            return memo.remembered("table-labels", place, read, extra, packed_array, unpacked_array)

        numeric = [part for part in side_by_side(labels_of, firsts, self.path) if part is not None]
        return np.concatenate(numeric) if numeric else None

    # -- reading (worker side) -------------------------------------------------------------

    def read(self, partition: RowGroups, start: int = 0, stop: int | None = None) -> Iterator[Record | Batch]:
        pyarrow_modules()
        columns = self.columns
        assert columns is not None
        wanted = list(columns.data) + [
            name for name in (columns.label, columns.token_labels, columns.attention) if name is not None
        ]
        rows = TableRows(columns, self.options.data_key)  # how the chosen columns make records
        stop = len(partition) if stop is None else min(stop, len(partition))
        firsts = dict(zip(partition.groups, itertools.accumulate((0, *partition.sizes))))
        needed = [
            group
            for group, size in zip(partition.groups, partition.sizes)
            if firsts[group] < stop and firsts[group] + size > start
        ]
        groups = self.storage.groups(
            self._place(partition.path), needed, wanted, partition.footer, partition.size
        )
        while True:
            try:
                group, table = next(groups)
            except StopIteration:
                return
            except (OSError, ValueError) as error:
                raise UnusableDataset(
                    f"{partition.source}: {self.storage.unit}s cannot be read ({first_line(error)})"
                ) from None
            offset = firsts[group]
            begin, end = max(start - offset, 0), min(stop - offset, table.num_rows)
            piece = table.slice(begin, end - begin)
            yield from rows.rows(
                piece, partition.source, partition.first_row + offset + begin, offset + begin
            )

    def partition_entry(self, partition: RowGroups) -> tuple[Location, str] | None:
        """A partition's result depends on its file's bytes, its row groups (its records' keys and
        indices are their rows in the file) and how the table is read (its columns, what its
        records carry): kept whole by ``--cache`` (`scrub.scanning.wholes`)."""
        carried = sorted(str(carries) for carries in self.provides)
        extra = f"{partition.groups}|{partition.first_row}|{self.columns}|{carried}"
        return self._place(partition.path), extra

    def members(self, partitions: Sequence[RowGroups]) -> Iterator[str]:
        for path in self.files():
            yield str(path)

    def locate(self, partition: RowGroups, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        if not offsets or self.columns is None or self.columns.keyed_by_position:
            return [
                (partition.source, str(partition.first_row + o), partition.first_row + o) for o in offsets
            ]
        # an image's key is its path where the table holds one: read the rows' cells (one pass
        # over the rows between the first and the last offset; dataset checks name few records)
        wanted = set(offsets)
        found = {
            record.index - partition.first_row: (record.source, record.key, record.index)
            for record in self.read(partition, min(wanted), max(wanted) + 1)
            if isinstance(record, Record) and record.index - partition.first_row in wanted
        }
        return [found[offset] for offset in offsets]


def _dump_facts(facts: tuple[Any, list[int], dict[str, Any], Any]) -> list:
    """A file's `facts` as msgpack holds them (`scrub.storage.memo`): the schema in Arrow's IPC
    form, the footer as a metadata-only Parquet file (``_metadata``'s form)."""
    schema, sizes, described, footer = facts
    held = None
    if footer is not None:
        buffer = io.BytesIO()
        footer.write_metadata_file(buffer)
        held = buffer.getvalue()
    return [schema.serialize().to_pybytes(), list(sizes), described, held]


def _load_facts(held: list) -> tuple[Any, list[int], dict[str, Any], Any]:
    import pyarrow as pa

    schema, sizes, described, footer = held
    _, parquet = pyarrow_modules()
    metadata = parquet.read_metadata(io.BytesIO(footer)) if footer is not None else None
    return pa.ipc.read_schema(pa.py_buffer(schema)), list(sizes), dict(described), metadata


class ArrowReader(ParquetReader):
    """Arrow IPC files (see `ArrowStorage`): the same columns and checks as Parquet's; a Hugging
    Face ``save_to_disk`` folder's description files are checked as ``load_from_disk`` reads
    them (`scrub.readers.savedtodisk`)."""

    format = "arrow"
    file_suffixes = (".arrow",)
    storage = ArrowStorage

    @classmethod
    def sniff(cls, path: Path) -> bool:
        # a save_to_disk folder whose data files are gone is still one: `open` says what is missing
        return super().sniff(path) or (on_this_machine(path) and path.is_dir() and is_saved_to_disk(path))

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[RowGroups]]:
        local = on_this_machine(self.path) and self.path.is_dir()
        if local and (missing := missing_data_file(self.path)) is not None:
            raise UnusableDataset(missing)
        info, partitions = super().open(partition_size)
        if local:
            for source, why in damaged_descriptions(self.path).items():
                info.issues.append(make_issue("unreadable-file", source, "*", None, Finding(why)))
                self.provides = self.provides | {Carries.SEVERAL_FILES}  # `unreadable-file` runs
        return info, partitions
