"""Parquet files, one or a folder of them (Hugging Face's ``data/train-00000-of-00004.parquet``):
the table's rows are the records (key: the image's ``path`` where an ``Image`` struct holds one,
else the row's position in its file, as for HDF5 rows; the index is always the row).

Columns are chosen from the schema, and the Hugging Face ``features`` stored in its metadata
where present (``--data-key``/``--label-key`` override):

* the data: an image column (Hugging Face's ``Image``: a struct of ``{bytes, path}``, or a binary
  column of encoded images) read as encoded images; else a numeric list column (``list``,
  ``large_list`` or ``fixed_size_list``, nested or not: ``Array2D``, embeddings) read as each
  row's values; else every numeric scalar column but the label, stacked into one row of
  numbers (a table of features: a null is a NaN, as pandas reads it);
* the label: the ``ClassLabel`` column (whose names declare the class range, so
  ``label-out-of-range`` runs without ``--num-classes``), else the first integer or float column
  named like a label (`LABEL_COLUMNS`).

A table of language-model records is read as such (`Carries.TOKENS`; no class labels), by the
first of: a list-of-integers ``input_ids`` column (with ``labels`` and ``attention_mask`` when
present: each row is a token record, its ids in the column's own dtype, which is recorded for
``token-dtype-overflow``); a chat ``messages`` (``conversations``) column; ``prompt`` and
``completion`` text columns; a ``text`` (``content``) column, where no numeric list column is
there to check instead. An image column comes first. ``--data-key`` names the ids or text column
when it is another one (a list-of-integers column is read as token ids beside a list ``labels``
or ``attention_mask`` column or a list ``--label-key``, else as numbers as before), ``--label-key``
the token labels. Rows are read as `scrub.readers.tokenfields` reads any record's fields; token
columns straight from Arrow's offsets and values, without a Python list per row.

Other columns (text, ids) are named in a note as not checked. Partitions are runs of whole row
groups (Parquet's unit of reading); each worker opens the file and reads only its row groups and
only the chosen columns. Equal-length numeric rows are checked as one vectorized batch.
Needs ``pyarrow`` (``pip install 'scrub[parquet]'``).
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from scrub.checks.base import Finding, make_issue, problem
from scrub.errors import UnusableDataset, UsageError, first_line
from scrub.formats import needs
from scrub.readers.base import DatasetInfo, Reader, shared_sniff
from scrub.readers.savedtodisk import damaged_descriptions, is_saved_to_disk, missing_data_file
from scrub.readers.tokenfields import ATTENTION, CHAT_FIELDS, IDS, LABELS, TEXT_FIELDS, fill_record
from scrub.readers.values import use_array
from scrub.records import Batch, BatchFacts, Carries, Record
from scrub.storage import Location, is_url, list_objects, location, open_binary, open_random, read_head

PARQUET_MAGIC = b"PAR1"
IMAGE_COLUMNS = ("image", "img", "images", "jpg", "jpeg", "png", "webp", "picture", "pixel_values")
#: `label_sample` reads the labels of at most this many files (the first, in order)
SAMPLED_FILES = 16
LABEL_COLUMNS = ("label", "labels", "target", "targets", "y", "class", "cls", "fine_label", "coarse_label")


def pyarrow_modules():
    """(pyarrow, pyarrow.parquet), or a one-line error naming the extra to install
    (`scrub.formats.needs`)."""
    pyarrow = needs("parquet")
    return pyarrow, importlib.import_module("pyarrow.parquet")


def is_parquet_file(path: Location) -> bool:
    try:
        return read_head(path, 4) == PARQUET_MAGIC
    except OSError:
        return False


def table_files(folder: Location, suffix: str = ".parquet") -> list[Path]:
    """The ``.parquet`` (or ``.arrow``) files in ``folder`` and its sub-folders (Hugging Face
    keeps them in ``data/``), by path; a prefix's objects (URLs) by key."""
    if is_url(folder):
        return [folder / key for key in _table_keys(folder, suffix)]
    return sorted(
        path
        for path in folder.rglob(f"*{suffix}")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )


def _table_keys(prefix: Location, suffix: str) -> list[str]:
    """The keys (relative to ``prefix``) of its ``suffix`` objects, hidden folders aside."""
    return [
        key
        for key in list_objects(prefix)
        if key.endswith(suffix) and not any(part.startswith(".") for part in key.split("/"))
    ]


def _opened(path: Location, random: bool = True) -> Any:
    """What pyarrow reads a table file from: a local file by its path (pyarrow's own file, or a
    memory map), an object through fsspec (`scrub.storage`: range requests, workers open it
    themselves)."""
    if not is_url(path):
        return str(path)
    return open_random(path) if random else open_binary(path)


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


def _table_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(suffix, path) of each table file below ``folder``, in the order a walk for that suffix
    alone meets them: as rglob, no hidden entry and no symlinked folder; and a folder whose name
    ends in a suffix is not entered for that suffix (a file's name is what names a table)."""
    folders: list[tuple[str, frozenset[str]]] = [(str(folder), frozenset())]
    while folders:
        directory, passed = folders.pop()
        with os.scandir(directory) as scan:
            entries = list(scan)  # no folder held open while the sniff looks at a file
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            if not name.endswith(TABLE_SUFFIXES):
                if entry.is_dir(follow_symlinks=False):
                    folders.append((entry.path, passed))
                continue
            named = next(suffix for suffix in TABLE_SUFFIXES if name.endswith(suffix))
            if named not in passed and entry.is_file():
                yield named, Path(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                folders.append((entry.path, passed | {named}))


def huggingface_features(schema: Any) -> dict[str, Any]:
    """The ``features`` Hugging Face ``datasets`` stores in the schema's metadata, or {}."""
    metadata = schema.metadata or {}
    try:
        document = json.loads(metadata[b"huggingface"])
        features = document["info"]["features"]
    except (KeyError, ValueError, TypeError):
        return {}
    return features if isinstance(features, dict) else {}


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
    def facts(path: Location) -> tuple[Any, list[int], dict[str, Any]]:
        """(schema, rows of each group, what the summary says of the file): only its footer is
        read (an object's: by a range request or two)."""
        _, parquet = pyarrow_modules()
        with parquet.ParquetFile(_opened(path)) as opened:
            metadata = opened.metadata
            sizes = [metadata.row_group(n).num_rows for n in range(metadata.num_row_groups)]
            described = {"rows": metadata.num_rows, "row_groups": metadata.num_row_groups}
            return opened.schema_arrow, sizes, {**described, "created_by": metadata.created_by}

    @staticmethod
    def groups(path: Location, wanted: Sequence[int], columns: list[str] | None) -> Iterator[tuple[int, Any]]:
        """(group, its table) of the groups ``wanted``, in order, only ``columns`` (None: all);
        an object's column chunks are fetched as coalesced range requests (``pre_buffer``), no
        other row group's."""
        _, parquet = pyarrow_modules()
        with parquet.ParquetFile(_opened(path), pre_buffer=is_url(path)) as opened:
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
    def facts(cls, path: Location) -> tuple[Any, list[int], dict[str, Any]]:
        """An object's batches are counted by reading them (Arrow IPC keeps no row counts in its
        footer): opening a remote Arrow file reads it once, read ahead in blocks."""

        with cls._source(path) as source:
            schema, batches, random_access = cls._batches(source)
            sizes = [batch.num_rows for batch in batches]
        described = {
            "rows": sum(sizes),
            "record_batches": len(sizes),
            "ipc": "file" if random_access else "stream",
        }
        return schema, sizes, described

    @staticmethod
    def _source(path: Location) -> Any:
        """A memory map of a file; an object as a stream read ahead in blocks (a random-access
        file's batches are read in order, a stream's must be)."""
        import pyarrow as pa

        return open_binary(path) if is_url(path) else pa.memory_map(str(path))

    @classmethod
    def groups(
        cls, path: Location, wanted: Sequence[int], columns: list[str] | None
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
class Columns:
    """What `ParquetReader.open` chose: the data column(s), how to read them, the label column."""

    #: "image": encoded images; "list": numeric list rows; "table": numeric scalar columns;
    #: "tokens": token ids (``data``) with their labels and mask; "text": the columns of texts
    #: (`scrub.readers.tokenfields.fill_record` reads each row's)
    kind: str
    data: tuple[str, ...]
    label: str | None
    #: a list column of fixed size (``fixed_size_list``): its rows are checked as one block
    fixed: bool = False
    #: a token table's labels and attention mask columns (None: it has none)
    token_labels: str | None = None
    attention: str | None = None


@dataclass(frozen=True)
class RowGroups:
    """A partition: row groups ``groups`` of one file, of ``sizes`` rows each, the first of which
    starts at row ``first_row`` of the file."""

    path: str
    source: str
    groups: tuple[int, ...]
    sizes: tuple[int, ...]
    first_row: int

    def __len__(self) -> int:
        return sum(self.sizes)


class ParquetReader(Reader[RowGroups]):
    format = "parquet"
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
        if is_url(path) and path.is_dir():  # a prefix: one listing (`open` reuses it)
            keys = _table_keys(path, cls.storage.suffix)
            return bool(keys) and cls.storage.is_file(path / keys[0])
        if path.is_dir():
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
        if is_url(path):  # a key below the prefix named (`table_files`)
            return path.name if path == self.path else str(path)[len(str(self.path).rstrip("/")) + 1 :]
        return path.name if self.path.is_file() else path.relative_to(self.path).as_posix()

    def _place(self, path: str) -> Location:
        """A partition's file: a local path, or an object this worker opens itself."""
        return location(path, self.options.storage) if is_url(path) else path

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
        for path in files:
            source = self.source_of(path)
            try:
                file_schema, sizes, described = storage.facts(path)
            except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
                reason = f"not a readable {storage.name} file ({first_line(error)})"
                if not alone or (is_url(path) and not isinstance(error, ValueError)):
                    # (an object's OSError may be the network's, not the file's: never a finding)
                    raise UnusableDataset(f"{path}: {reason}") from None
                unreadable.append(f"{source}: {reason}")  # `fix` sets it aside, whole
                info.issues.append(make_issue("unreadable-file", source, "*", None, Finding(reason)))
                continue
            if schema is None:
                schema = file_schema
                self.columns = self._choose(schema, info)
            if self.columns is not None and self.columns.kind == "tokens":
                dtype = _token_dtype(file_schema.field(self.columns.data[0]).type)
                if dtype is not None:
                    info.token_dtypes[source] = dtype
            elif not file_schema.remove_metadata().equals(schema.remove_metadata()):
                raise UnusableDataset(
                    f"{path}: its columns differ from {self.source_of(files[0])}'s: name the files "
                    f"('{self.path}/*{storage.suffix}') to scan each as a dataset of its own"
                )
            first = 0
            groups: list[int] = []
            for number in range(len(sizes)):
                groups.append(number)
                if sum(sizes[g] for g in groups) >= partition_size or number == len(sizes) - 1:
                    partitions.append(
                        RowGroups(str(path), source, tuple(groups), tuple(sizes[g] for g in groups), first)
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
        if self.columns.kind in ("tokens", "text"):  # token labels are not class labels
            self.provides = frozenset({Carries.TOKENS, Carries.SEQUENCES})
        if alone:  # `unreadable-file` runs
            self.provides = self.provides | {Carries.SEVERAL_FILES}
        # rows of numbers are known by their content across scans (as HDF5 rows); an image's
        # identity is its position (its bytes are hashed by the duplicate check already)
        self.positional_keys = self.columns.kind != "image"
        partitions = [p for p in partitions if len(p)]
        return info, partitions

    def _choose(self, schema: Any, info: DatasetInfo) -> Columns:
        import pyarrow as pa

        features = huggingface_features(schema)
        names = list(schema.names)

        def feature_type(name: str) -> str | None:
            feature = features.get(name)
            return feature.get("_type") if isinstance(feature, dict) else None

        def column(option: str, name: str) -> Any:
            if name not in names:
                raise UsageError(
                    f"--{option} {name}: {self.path} has no such column (it has {', '.join(names)})"
                )
            return schema.field(name).type

        language = self._language_model(schema, names, feature_type, column, pa)
        if language is not None:
            self._chose_language(language, names, info)
            return language
        label = self._label_column(schema, names, feature_type, column, pa)
        if label is not None and feature_type(label) == "ClassLabel":
            names_of = features[label].get("names") or []
            if names_of:
                info.classes = [str(name) for name in names_of]
                info.class_range = (0, len(names_of))
                info.notes.append(
                    f"labels: {label!r} is a ClassLabel of {len(names_of)} names: labels outside "
                    f"[0, {len(names_of)}) are label-out-of-range (-1, Hugging Face's 'no label', too)"
                )
        data_key = self.options.data_key
        if data_key is not None:
            found = _kind(column("data-key", data_key), pa)
            if found is None:
                raise UsageError(
                    f"--data-key {data_key}: the column holds {schema.field(data_key).type}: "
                    "not images or numbers"
                )
            chosen = Columns(found, (data_key,), label, is_fixed_list(schema.field(data_key).type))
        else:
            chosen = self._detect(schema, names, label, feature_type, pa)
        checked = set(chosen.data) | ({label} if label else set())
        others = [n for n in names if n not in checked]
        if others:
            info.notes.append(f"columns not checked: {', '.join(others)}")
        if label is None:
            info.notes.append(
                "labels: no label column found: label checks are not run (--label-key names one)"
            )
        self.chosen = {"data": list(chosen.data), "kind": chosen.kind, "label": label}
        return chosen

    def _chose_language(self, language: Columns, names: list[str], info: DatasetInfo) -> None:
        """Say which columns language-model records are read from, and which are not checked."""
        used = {*language.data, language.token_labels, language.attention} - {None}
        others = [n for n in names if n not in used]
        if others:
            info.notes.append(f"columns not checked: {', '.join(others)}")
        if language.kind == "tokens":
            said = f"token ids from {language.data[0]!r}" + "".join(
                f", {what} from {name!r}"
                for what, name in (("labels", language.token_labels), ("attention masks", language.attention))
                if name is not None
            )
        else:
            said = f"texts from {', '.join(map(repr, language.data))}"
        info.notes.append(f"language-model records: {said}")
        self.chosen = {
            "data": list(language.data),
            "kind": language.kind,
            "labels": language.token_labels,
            "attention_mask": language.attention,
        }

    def _label_column(self, schema: Any, names: list[str], feature_type, column, pa) -> str | None:
        """The label column: ``--label-key``'s (numeric, or an error), else a ``ClassLabel``
        feature, else the first numeric column of a usual label's name; None: unlabelled."""
        label = self.options.label_key
        if label is not None:
            kind = column("label-key", label)
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                raise UsageError(f"--label-key {label}: the column holds {kind}, not numeric labels")
            return label
        numeric = [n for n in LABEL_COLUMNS if n in names and _numeric(schema.field(n).type, pa)]
        return next((n for n in names if feature_type(n) == "ClassLabel"), None) or next(iter(numeric), None)

    def _language_model(self, schema: Any, names: list[str], feature_type, column, pa) -> Columns | None:
        """The columns of a table of language-model records (see the module's docstring), or None
        where the table is not one."""
        data_key, label_key = self.options.data_key, self.options.label_key

        def ints(name: str | None) -> bool:
            return name is not None and name in names and _integer_list(schema.field(name).type, pa)

        def text(name: str) -> bool:
            return name in names and _is_text(schema.field(name).type, pa)

        lists = [n for n in names if _kind(schema.field(n).type, pa) == "list"]
        if data_key is not None:
            kind = column("data-key", data_key)
            if _is_text(kind, pa):
                if label_key is not None:
                    raise UsageError(
                        f"--label-key {label_key}: the texts of {data_key!r} have no token labels "
                        "(their tokens are what the loss counts)"
                    )
                return Columns("text", (data_key,), None)
            beside = label_key is not None and _kind(column("label-key", label_key), pa) == "list"
            if not (ints(data_key) and (beside or ints(LABELS) or ints(ATTENTION) or data_key == IDS)):
                return None
            ids: str | None = data_key
        else:
            if self._image_columns(schema, names, None, feature_type, pa):
                return None
            ids = IDS if ints(IDS) else None
        if ids is not None:
            labels = label_key if label_key is not None else (LABELS if ints(LABELS) else None)
            if labels is not None and not ints(labels):
                raise UsageError(
                    f"--label-key {labels}: the column holds {column('label-key', labels)}, not token "
                    "labels (a list of integers)"
                )
            attention = ATTENTION if ints(ATTENTION) and ids != ATTENTION else None
            return Columns("tokens", (ids,), None, token_labels=labels, attention=attention)
        chosen: tuple[str, ...] | None = None
        chat = next((n for n in CHAT_FIELDS if n in names and _is_chat(schema.field(n).type, pa)), None)
        if chat is not None:
            chosen = (chat,)
        elif text("prompt") and text("completion"):
            chosen = ("prompt", "completion")
        elif not lists:
            chosen = next(((n,) for n in TEXT_FIELDS if text(n)), None)
        if chosen is None:
            return None
        if label_key is not None:
            raise UsageError(
                f"--label-key {label_key}: a table of texts ({', '.join(chosen)}) has no token labels "
                "(their tokens are what the loss counts)"
            )
        return Columns("text", chosen, None)

    def _image_columns(self, schema: Any, names: list[str], label: str | None, feature_type, pa) -> list[str]:
        """The image columns, in order (Hugging Face's ``Image`` features first)."""
        candidates = [n for n in names if n != label]
        return [n for n in candidates if feature_type(n) == "Image"] or [
            n for n in candidates if _kind(schema.field(n).type, pa) == "image" and (
                pa.types.is_struct(schema.field(n).type) or n.lower() in IMAGE_COLUMNS
            )
        ]  # fmt: skip

    def _detect(self, schema: Any, names: list[str], label: str | None, feature_type, pa) -> Columns:
        candidates = [n for n in names if n != label]
        images = self._image_columns(schema, names, label, feature_type, pa)
        if images:
            return Columns("image", (images[0],), label)
        lists = [n for n in candidates if _kind(schema.field(n).type, pa) == "list"]
        if lists:
            return Columns("list", (lists[0],), label, is_fixed_list(schema.field(lists[0]).type))
        scalars = tuple(n for n in candidates if _kind(schema.field(n).type, pa) == "table")
        if scalars:
            return Columns("table", scalars, label)
        raise UnusableDataset(
            f"{self.path}: no image or numeric column to check (columns: {', '.join(names)}); "
            "choose one with --data-key"
        )

    def label_sample(self, partitions: Sequence[RowGroups], most: int) -> np.ndarray | None:
        """The label column's first values in each file (of at most `SAMPLED_FILES`), ``most`` in
        all, in its stored type (integers with nulls come as floats, all integral)."""
        columns = self.columns
        if columns is None or columns.label is None or columns.kind in ("tokens", "text"):
            return None
        each_file: dict[str, RowGroups] = {}
        for partition in partitions:
            each_file.setdefault(partition.path, partition)  # a file's first partition
        firsts = list(each_file.values())[:SAMPLED_FILES]
        if not firsts:
            return None
        each = -(-most // len(firsts))
        parts = []
        for partition in firsts:
            place = self._place(partition.path)
            for _, table in self.storage.groups(place, partition.groups[:1], [columns.label]):
                parts.append(np.asarray(table.column(columns.label).to_numpy(zero_copy_only=False))[:each])
        numeric = [part for part in parts if part.dtype.kind in "biuf"]
        return np.concatenate(numeric) if numeric else None

    # -- reading (worker side) -------------------------------------------------------------

    def read(self, partition: RowGroups, start: int = 0, stop: int | None = None) -> Iterator[Record | Batch]:
        pyarrow_modules()
        columns = self.columns
        assert columns is not None
        wanted = list(columns.data) + [
            name for name in (columns.label, columns.token_labels, columns.attention) if name is not None
        ]
        stop = len(partition) if stop is None else min(stop, len(partition))
        firsts = dict(zip(partition.groups, itertools.accumulate((0, *partition.sizes))))
        needed = [
            group
            for group, size in zip(partition.groups, partition.sizes)
            if firsts[group] < stop and firsts[group] + size > start
        ]
        groups = self.storage.groups(self._place(partition.path), needed, wanted)
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
            yield from self._rows(table.slice(begin, end - begin), partition, offset + begin)

    def _rows(self, table: Any, partition: RowGroups, offset: int) -> Iterator[Record | Batch]:
        columns = self.columns
        assert columns is not None
        first_row = partition.first_row + offset
        if columns.kind == "tokens":
            yield from self._tokens(table, partition.source, first_row)
            return
        if columns.kind == "text":
            yield from self._texts(table, partition.source, first_row)
            return
        if columns.kind == "image":
            yield from self._images(table, partition.source, first_row)
            return
        if columns.kind == "table" or columns.fixed:  # one (n, k) block: checked vectorized
            floats = None
            if columns.label is not None:  # a null label reads as NaN, as pandas reads it
                floats = _floats(table.column(columns.label))
            if columns.kind == "table":
                block = np.column_stack([_floats(table.column(name)) for name in columns.data])
                named = BatchFacts(columns=tuple(columns.data))
                yield Batch(partition.source, first_row, offset, block, floats, named)
                return
            block = _fixed_rows(table.column(columns.data[0]))
            yield Batch(partition.source, first_row, offset, block, floats)
            return
        labels = self._labels(table)
        for row, values in enumerate(_list_rows(table.column(columns.data[0]))):
            record = Record(partition.source, str(first_row + row), first_row + row, None, labels[row])
            if values is None:
                record.payload = b""  # a null row: empty-record
            else:
                use_array(record, values)
                record.meta["shape"] = "list"  # rows of a list column may differ in length
            record.meta["label_known"] = columns.label is not None
            yield record

    def _images(self, table: Any, source: str, first_row: int) -> Iterator[Record]:
        columns = self.columns
        assert columns is not None
        cells = table.column(columns.data[0]).to_pylist()
        labels = self._labels(table)
        known = columns.label is not None
        for row, cell in enumerate(cells):
            record = Record(
                source,
                _image_key(cell, first_row + row),
                first_row + row,
                None,
                labels[row],
                {"kind": "image", "label_known": known},
            )
            if isinstance(cell, dict):  # Hugging Face's Image: {bytes, path}
                record.payload = cell.get("bytes") or b""
                if cell.get("path"):
                    record.meta["name"] = str(cell["path"])
            else:
                record.payload = cell or b""
            yield record

    def _tokens(self, table: Any, source: str, first_row: int) -> Iterator[Record]:
        """Token records, each row's ids, labels and mask views of the columns' values."""
        columns = self.columns
        assert columns is not None
        named = [
            (columns.data[0], None),
            (columns.token_labels, "token_labels"),
            (columns.attention, "attention_mask"),
        ]
        read = [(name, fact, _integer_rows(table.column(name))) for name, fact in named if name is not None]
        for row in range(table.num_rows):
            record = Record(source, str(first_row + row), first_row + row, None, None, {"label_known": False})
            payload = None
            for name, fact, (begins, ends, valid, holes, values) in read:
                if not valid[row]:
                    if fact is None:  # as `fill_record` words it
                        record.problems.append(
                            problem(record, "malformed-record", f"{name} is null, not a list of token ids")
                        )
                        break
                    continue  # no labels (no mask): as a row without the column
                if holes is not None and holes[row]:
                    record.problems.append(problem(record, "malformed-record", f"{name} holds a null"))
                    payload = None
                    break
                found = values[begins[row] : ends[row]]
                if fact is None:
                    payload = found
                else:
                    record.meta[fact] = found  # type: ignore[literal-required]
            if payload is not None:
                record.payload, record.meta["kind"] = payload, "tokens"
            yield record

    def _texts(self, table: Any, source: str, first_row: int) -> Iterator[Record]:
        """Text records: each row's fields, read as `fill_record` reads any record's."""
        columns = self.columns
        assert columns is not None
        cells = {name: table.column(name).to_pylist() for name in columns.data}
        data_key = self.options.data_key
        for row in range(table.num_rows):
            record = Record(source, str(first_row + row), first_row + row, None, None, {"label_known": False})
            fill_record(record, {name: cells[name][row] for name in columns.data}, data_key)
            yield record

    def _labels(self, table: Any) -> list:
        """The table's labels, one per row (None for a null; all None without a label column)."""
        label = self.columns.label if self.columns is not None else None
        return table.column(label).to_pylist() if label is not None else [None] * table.num_rows

    def members(self, partitions: Sequence[RowGroups]) -> Iterator[str]:
        for path in self.files():
            yield str(path)

    def locate(self, partition: RowGroups, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        if not offsets or self.columns is None or self.columns.kind != "image":
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


def _image_key(cell: Any, row: int) -> str:
    """An image row's key: the path Hugging Face's ``Image`` struct holds (what people call the
    image by), else the row's number in its file."""
    if isinstance(cell, dict) and cell.get("path"):
        return str(cell["path"])
    return str(row)


def _kind(kind: Any, pa) -> str | None:
    """How a column of this Arrow type is read as data: "image", "list", "table" or None."""
    if pa.types.is_struct(kind):
        names = [kind.field(i).name for i in range(kind.num_fields)]
        if (
            "bytes" in names
            and pa.types.is_binary(kind.field("bytes").type)
            or ("bytes" in names and pa.types.is_large_binary(kind.field("bytes").type))
        ):
            return "image"
        return None
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "image"
    leaf = kind
    depth = 0
    while pa.types.is_list(leaf) or pa.types.is_large_list(leaf) or pa.types.is_fixed_size_list(leaf):
        leaf = leaf.value_type
        depth += 1
    numeric = pa.types.is_integer(leaf) or pa.types.is_floating(leaf) or pa.types.is_boolean(leaf)
    if depth and numeric:
        return "list"
    if not depth and (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return "table"
    return None


def _integer_list(kind: Any, pa) -> bool:
    """A list (of any kind, not nested) of integers or booleans: token ids, labels, masks."""
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        return False
    return pa.types.is_integer(kind.value_type) or pa.types.is_boolean(kind.value_type)


def _is_text(kind: Any, pa) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _is_chat(kind: Any, pa) -> bool:
    """A list of structs: chat messages (their fields are judged per row)."""
    return bool(
        (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_struct(kind.value_type)
    )


def _token_dtype(kind: Any) -> str | None:
    """The NumPy name of a token list column's integer type ("uint16"), or None."""
    import pyarrow as pa

    value = kind.value_type
    if not pa.types.is_integer(value):
        return None
    return np.dtype(value.to_pandas_dtype()).name


def _integer_rows(
    column: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """(first, end, valid, holes, values) of an integer list column's rows: row ``i`` is
    ``values[first[i]:end[i]]`` in the column's own dtype, ``valid`` says which rows are not
    null, ``holes`` (None where there is none) which hold a null value. Straight from Arrow's
    offsets and values: no Python list per row."""
    import pyarrow as pa

    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    rows = len(array)
    valid = ~np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        begins = (np.arange(rows, dtype=np.int64) + array.offset) * size
        ends = begins + size
    else:
        offsets = np.asarray(array.offsets.to_numpy(), dtype=np.int64)
        begins, ends = offsets[:-1], offsets[1:]
    values = array.values
    holes = None
    if values.null_count:
        nulls = np.concatenate(([0], np.cumsum(values.is_null().to_numpy(zero_copy_only=False))))
        holes = nulls[ends] > nulls[begins]
        values = values.fill_null(0)
    leaf = values.to_numpy(zero_copy_only=False)
    if leaf.dtype == bool:
        leaf = leaf.astype(np.uint8)
    return begins, ends, valid, holes, leaf


def _floats(column: Any) -> np.ndarray:
    """A numeric column as float64, nulls as NaN."""
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


def is_fixed_list(kind: Any) -> bool:
    """A (nested) fixed-size list type: every row holds the same number of values."""
    import pyarrow as pa

    if not pa.types.is_fixed_size_list(kind):
        return False
    while pa.types.is_fixed_size_list(kind):
        kind = kind.value_type
    return not (pa.types.is_list(kind) or pa.types.is_large_list(kind))


def _fixed_rows(column: Any) -> np.ndarray:
    """A fixed-size list column's rows as one (n, k) array; a null row is all NaN."""
    rows = _row_ranges(column)
    begins, ends, valid, leaf = rows
    width = int(ends[0] - begins[0]) if len(begins) else 0
    block = np.asarray(leaf[begins[0] : begins[0] + width * len(begins)] if len(begins) else leaf[:0])
    block = block.reshape(len(begins), width)
    if not valid.all():
        block = block.astype(np.float64)
        block[~valid] = np.nan
    return block


def _list_rows(column: Any) -> list[np.ndarray | None]:
    """A numeric list column's rows, each as its flat values (None for a null row)."""
    begins, ends, valid, leaf = _row_ranges(column)
    return [np.asarray(leaf[b:e]) if ok else None for b, e, ok in zip(begins, ends, valid)]


def _row_ranges(column: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(first, end, valid) of each row's values in the column's leaf values, and those values
    (nulls as NaN), through any nesting of list types."""
    import pyarrow as pa

    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    begins = np.arange(len(array), dtype=np.int64)
    ends = begins + 1
    valid = ~np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    values = array
    while (
        pa.types.is_list(values.type)
        or pa.types.is_large_list(values.type)
        or pa.types.is_fixed_size_list(values.type)
    ):
        if pa.types.is_fixed_size_list(values.type):
            size = values.type.list_size
            base = values.offset
            begins, ends = (begins + base) * size, (ends + base) * size
        else:
            offsets = np.asarray(values.offsets.to_numpy(), dtype=np.int64)
            begins, ends = offsets[begins], offsets[ends]
        values = values.values
    leaf = values.to_numpy(zero_copy_only=False)
    if values.null_count:
        leaf = np.where(
            np.asarray(values.is_null().to_numpy(zero_copy_only=False)), np.nan, leaf.astype(np.float64)
        )
    return begins, ends, valid, leaf


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
        return super().sniff(path) or (not is_url(path) and path.is_dir() and is_saved_to_disk(path))

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[RowGroups]]:
        local = not is_url(self.path) and self.path.is_dir()
        if local and (missing := missing_data_file(self.path)) is not None:
            raise UnusableDataset(missing)
        info, partitions = super().open(partition_size)
        if local:
            for source, why in damaged_descriptions(self.path).items():
                info.issues.append(make_issue("unreadable-file", source, "*", None, Finding(why)))
                self.provides = self.provides | {Carries.SEVERAL_FILES}  # `unreadable-file` runs
        return info, partitions


def _numeric(kind: Any, pa: Any) -> bool:
    """Whether an Arrow type holds numbers a label can be (integers or floats)."""
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))
