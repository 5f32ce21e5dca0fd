"""What a table's columns hold, and how its rows become records: the content interpreter of the
table containers (`scrub.readers.parquet`: Parquet row groups, Arrow record batches), which list
files and read slices of tables and know nothing of what the columns hold.

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

Other columns (text, ids) are named in a note as not checked. Equal-length numeric rows are
checked as one vectorized batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from scrub.checks.base import problem
from scrub.errors import UnusableDataset, UsageError
from scrub.readers.base import DatasetInfo
from scrub.readers.tokenfields import ATTENTION, CHAT_FIELDS, IDS, LABELS, TEXT_FIELDS, fill_record
from scrub.readers.values import use_array
from scrub.records import Batch, BatchFacts, Record

IMAGE_COLUMNS = ("image", "img", "images", "jpg", "jpeg", "png", "webp", "picture", "pixel_values")
LABEL_COLUMNS = ("label", "labels", "target", "targets", "y", "class", "cls", "fine_label", "coarse_label")


def huggingface_features(schema: Any) -> dict[str, Any]:
    """The ``features`` Hugging Face ``datasets`` stores in the schema's metadata, or {}."""
    metadata = schema.metadata or {}
    try:
        document = json.loads(metadata[b"huggingface"])
        features = document["info"]["features"]
    except (KeyError, ValueError, TypeError):
        return {}
    return features if isinstance(features, dict) else {}


@dataclass(frozen=True)
class Columns:
    """What `choose_columns` chose of a table: the data column(s), how to read them, the label
    column; what its records carry follows from it."""

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

    @property
    def language(self) -> bool:
        """Language-model records (token ids or texts): their labels are tokens, not classes."""
        return self.kind in ("tokens", "text")

    def ids_dtype(self, schema: Any) -> str | None:
        """The NumPy name of the token ids' integer type in a file of this ``schema`` ("uint16"),
        for `token-dtype-overflow`; None for columns of other kinds."""
        return token_dtype(schema.field(self.data[0]).type) if self.kind == "tokens" else None

    def schemas_agree(self, first: Any, other: Any) -> bool:
        """Whether a file of schema ``other`` reads as the first file (``first``) does: the same
        columns, metadata aside; token ids are read by name whatever else the files hold."""
        return self.kind == "tokens" or bool(other.remove_metadata().equals(first.remove_metadata()))

    @property
    def keyed_by_position(self) -> bool:
        """Whether a record's key is its row (an image's is the path its cell holds, if any)."""
        return self.kind != "image"


def choose_columns(schema: Any, options: Any, path: Any, info: DatasetInfo) -> tuple[Columns, dict[str, Any]]:
    """The columns a table's records are read from (see the module's docstring), with its
    notes and class names in ``info``; and what was chosen, for the summary's ``files``."""
    chooser = _Chooser(options, path)
    return chooser.choose(schema, info), chooser.chosen


class _Chooser:
    """`choose_columns`'s steps: what the options name (``--data-key``, ``--label-key``), the
    path its messages name, and what was chosen, for the summary (``chosen``)."""

    def __init__(self, options: Any, path: Any) -> None:
        self.options, self.path = options, path
        self.chosen: dict[str, Any] = {}

    def choose(self, schema: Any, info: DatasetInfo) -> Columns:
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


class TableRows:
    """How a slice of a table becomes records, by what its chosen columns hold (`Columns.kind`):
    one method a kind, so a container of tables (Parquet row groups, Arrow record batches) reads
    every kind alike and branches on none."""

    def __init__(self, columns: Columns, data_key: str | None) -> None:
        self.columns, self.data_key = columns, data_key

    def rows(self, table: Any, source: str, first_row: int, offset: int) -> Iterator[Record | Batch]:
        """The records of a slice of a table whose first row is ``first_row`` of its file and
        ``offset`` of its partition, as the columns' kind reads them."""
        kind = "fixed" if self.columns.kind == "list" and self.columns.fixed else self.columns.kind
        return getattr(self, f"_{kind}")(table, source, first_row, offset)

    def _table(self, table: Any, source: str, first_row: int, offset: int) -> Iterator[Batch]:
        """Numeric scalar columns stacked into one (n, k) block: checked vectorized."""
        block = np.column_stack([_floats(table.column(name)) for name in self.columns.data])
        named = BatchFacts(columns=tuple(self.columns.data))
        yield Batch(source, first_row, offset, block, self._float_labels(table), named)

    def _fixed(self, table: Any, source: str, first_row: int, offset: int) -> Iterator[Batch]:
        """A fixed-size list column's rows as one (n, k) block: checked vectorized."""
        yield Batch(
            source,
            first_row,
            offset,
            _fixed_rows(table.column(self.columns.data[0])),
            self._float_labels(table),
        )

    def _float_labels(self, table: Any) -> np.ndarray | None:
        """The label column as floats (a null label reads as NaN, as pandas reads it)."""
        return _floats(table.column(self.columns.label)) if self.columns.label is not None else None

    def _list(self, table: Any, source: str, first_row: int, offset: int) -> Iterator[Record]:
        """A numeric list column's rows, each a record of its own values."""
        columns = self.columns
        labels = self._labels(table)
        for row, values in enumerate(_list_rows(table.column(columns.data[0]))):
            record = Record(source, str(first_row + row), first_row + row, None, labels[row])
            if values is None:
                record.payload = b""  # a null row: empty-record
            else:
                use_array(record, values)
                record.meta["shape"] = "list"  # rows of a list column may differ in length
            record.meta["label_known"] = columns.label is not None
            yield record

    def _image(self, table: Any, source: str, first_row: int, offset: int) -> Iterator[Record]:
        """Encoded images, keyed by the path a Hugging Face ``Image`` cell holds."""
        columns = self.columns
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

    def _tokens(self, table: Any, source: str, first_row: int, offset: int) -> Iterator[Record]:
        """Token records, each row's ids, labels and mask views of the columns' values."""
        columns = self.columns
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

    def _text(self, table: Any, source: str, first_row: int, offset: int) -> Iterator[Record]:
        """Text records: each row's fields, read as `fill_record` reads any record's."""
        columns = self.columns
        cells = {name: table.column(name).to_pylist() for name in columns.data}
        data_key = self.data_key
        for row in range(table.num_rows):
            record = Record(source, str(first_row + row), first_row + row, None, None, {"label_known": False})
            fill_record(record, {name: cells[name][row] for name in columns.data}, data_key)
            yield record

    def _labels(self, table: Any) -> list:
        """The table's labels, one per row (None for a null; all None without a label column)."""
        label = self.columns.label
        return table.column(label).to_pylist() if label is not None else [None] * table.num_rows


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


def token_dtype(kind: Any) -> str | None:
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


def _numeric(kind: Any, pa: Any) -> bool:
    """Whether an Arrow type holds numbers a label can be (integers or floats)."""
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))
