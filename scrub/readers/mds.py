"""MosaicML Streaming datasets (MDS): a folder holding ``index.json`` and the shards it lists
(``shard.00000.mds``, or compressed ``shard.00000.mds.zstd``), as ``streaming.MDSWriter`` writes
it; also a folder of such folders (one per split or per writer, each with its own ``index.json``),
or a merged ``index.json`` whose shards lie in sub-folders (``streaming.base.util.merge_index``).

A record is a sample. Its index and its key are the sample's position in the whole dataset
(``"1234"``), counted over the shards in the index's order (the indexes of a folder of folders in
the order of their paths), missing shards included: what ``StreamingDataset(local=...)[1234]``
returns, what a training loop that logs its sample indices calls it. Its ``source`` is the shard,
as the index names its uncompressed file (``shard.00003.mds``, ``train/shard.00003.mds``) whether
it is stored compressed or not.

A shard (``streaming/base/format/mds/writer.py``) is ``uint32 n``, ``uint32 offsets[n + 1]``,
the writer's JSON config, then the samples: each is the ``uint32`` sizes of its variable-size
columns, then its columns' bytes in the index's column order, each by its encoding
(``streaming/base/format/mds/encodings.py``). Only the columns a language-model record is read
by are decoded (`scrub.readers.tokenfields`): ``input_ids`` (or ``tokens``, llm-foundry's name,
or ``--data-key``) with ``labels`` and ``attention_mask``; else ``messages``, ``prompt`` and
``completion``, ``text``. A ``bytes`` column of token ids holds int64 values, as llm-foundry
writes and reads them; an ``ndarray:<dtype>`` one of fixed dtype records it for
`token-dtype-overflow`. Image columns are never decoded.

The ``pkl`` encoding unpickles, which runs arbitrary code: as LMDB's pickled values, a pickled
column that a record is read by is never unpickled without ``--allow-pickle``, and each such
record is `undecodable-record` with that hint. A sample whose bytes lie outside its shard (a
truncated copy, offsets past the end) or whose columns do not decode is `malformed-record`,
named by its index; the scan goes on. A shard the index lists but that is not there is one
`missing-file` finding for the shard (the others are scanned, and ``fix`` leaves it out of the
cleaned copy's index): a dataset whose download stopped half-way is still checked.

Partitions are runs of samples of one shard, read through a memory map; a compressed shard is
one partition, decompressed once by the worker that reads it (zstd needs ``zstandard``:
``pip install 'scrub[zstd]'``; gzip and bz2 are Python's own; Brotli and Snappy are refused with
one line).
"""

from __future__ import annotations

import bz2
import json
import math
import mmap
import os
import pickle
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from scrub.checks.base import Finding, make_issue, problem
from scrub.errors import UnusableDataset, UsageError, first_line
from scrub.readers.base import DatasetInfo, Reader
from scrub.readers.tokenfields import ATTENTION, CHAT_FIELDS, IDS, LABELS, TEXT_FIELDS, fill_record
from scrub.records import Carries, Record
from scrub.wording import agreeing, counted

INDEX = "index.json"
#: llm-foundry's name for a column of token ids (``convert_dataset_hf.py --concat_tokens``)
TOKENS = "tokens"
#: how many bytes of an ``index.json`` the sniff reads: the first shard's entry says "mds"
SNIFF_BYTES = 1 << 16
MDS_FORMAT = re.compile(rb'"format"\s*:\s*"mds"')
#: NDArray's dtype codes (``NDArray._int2value_dtype``) and shape dtypes
NDARRAY_DTYPES = {
    8: "uint8",
    9: "int8",
    16: "uint16",
    17: "int16",
    18: "float16",
    32: "uint32",
    33: "int32",
    34: "float32",
    64: "uint64",
    65: "int64",
    66: "float64",
}
SHAPE_DTYPES = ("uint8", "uint16", "uint32", "uint64")
SCALARS = {
    name: np.dtype(name)
    for name in (
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
    )
}
#: encodings whose values are images or lists of them: kept as their bytes, never decoded here
IMAGE_ENCODINGS = frozenset(
    {"pil", "jpeg", "png", "jpeg_array", "jpegarray", "list[pil]", "list[jpeg]", "list[png]"}
)
ENCODINGS = frozenset(
    {"bytes", "str", "int", "ndarray", "str_int", "str_float", "str_decimal", "json", "pkl", *SCALARS}
    | IMAGE_ENCODINGS
)
#: the compressions scrub reads (streaming's extension -> how to open it); others are refused
COMPRESSIONS = ("zstd", "gz", "bz2")
#: what reading and checking one sample costs a core (see docs/benchmarks.md): a dataset whose
#: work is small is scanned in the scan's own process (`Reader.work_seconds`)
SECONDS_PER_SAMPLE = 80e-6
#: how the samples' int64 token ids of a ``bytes`` column are read
BYTES_TOKEN_DTYPE = np.dtype("<i8")


def index_paths(root: Path) -> list[Path]:
    """The ``index.json`` files of a dataset folder: its own, else the topmost ones below it (a
    folder of splits or of writers' outputs), by path."""
    if (root / INDEX).is_file():
        return [root / INDEX]
    found: list[Path] = []
    for folder, children, files in os.walk(root):
        children[:] = sorted(child for child in children if not child.startswith("."))
        if INDEX in files and folder != str(root):
            found.append(Path(folder) / INDEX)
            children[:] = []  # its index covers what lies below it
    return sorted(found)


def is_mds_index(path: Path) -> bool:
    """Whether ``path`` is a streaming ``index.json`` of MDS shards (its first bytes say so)."""
    try:
        with open(path, "rb") as file:
            head = file.read(SNIFF_BYTES)
    except OSError:
        return False
    return b'"shards"' in head and MDS_FORMAT.search(head) is not None


@dataclass(frozen=True)
class Column:
    """One column of a shard, as its index describes it."""

    name: str
    encoding: str
    size: int | None  # fixed size in bytes, or None: the sample holds its size


@dataclass(frozen=True)
class Shard:
    """What the index says of one shard, and where its file is."""

    source: str  # the uncompressed file's path inside the dataset, as the index names it
    path: str  # the file read: the uncompressed one where present, else the compressed one
    compression: str | None  # of ``path``: None where it is the uncompressed file
    samples: int
    first: int  # the dataset-wide index of its first sample
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class SampleRange:
    """A partition: samples ``start:stop`` of one shard."""

    shard: Shard
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Roles:
    """Which columns a shard's records are read by (see the module's docstring)."""

    read: tuple[str, ...]  # the columns decoded, in the shard's column order
    data_key: str | None  # passed to `fill_record`: the ids' column where it is not input_ids


def parse_index(path: Path, root: Path) -> list[dict[str, Any]]:
    """The shard entries of an ``index.json``, each with ``_folder`` (the index's folder inside
    the dataset); one line when it is not one."""
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise UnusableDataset(f"{path}: not a readable index.json ({first_line(error)})") from None
    shards = document.get("shards") if isinstance(document, dict) else None
    if not isinstance(shards, list):
        raise UnusableDataset(f"{path}: not a streaming index.json (no list of shards)")
    folder = path.parent.relative_to(root).as_posix()
    entries = []
    for number, entry in enumerate(shards):
        if not isinstance(entry, dict) or entry.get("format") != "mds":
            kind = entry.get("format") if isinstance(entry, dict) else type(entry).__name__
            raise UnusableDataset(f"{path}: shard {number} is {kind!r}, not MDS: scrub reads MDS shards only")
        try:
            names, encodings, sizes = entry["column_names"], entry["column_encodings"], entry["column_sizes"]
            raw = entry["raw_data"]["basename"]
            samples = int(entry["samples"])
        except (KeyError, TypeError, ValueError) as error:
            raise UnusableDataset(f"{path}: shard {number} lacks {first_line(error)}") from None
        if not (len(names) == len(encodings) == len(sizes)) or samples < 0:
            raise UnusableDataset(f"{path}: shard {number} ({raw}): its column lists differ in length")
        entries.append({**entry, "_folder": "" if folder == "." else folder})
    return entries


def decompressor(compression: str, shown: str) -> Callable[[bytes], bytes]:
    """What decompresses a shard of ``compression`` (streaming's name, with a level or not:
    ``zstd:7``), or a one-line error. It gives as much as decompresses: a shard cut short gives
    the samples before the cut, and those after it are findings."""
    family = compression.split(":")[0]
    if family == "gz":
        return lambda data: _inflate(zlib.decompressobj(wbits=31), data, zlib.error)
    if family == "bz2":
        return lambda data: _inflate(bz2.BZ2Decompressor(), data, OSError)
    if family == "zstd":
        try:
            import zstandard
        except ImportError:
            raise UsageError(
                f"{shown}: reading zstd-compressed MDS shards needs zstandard: pip install 'scrub[zstd]' "
                "(or pip install zstandard)"
            ) from None
        return lambda data: _unzstd(zstandard, data)
    raise UnusableDataset(
        f"{shown}: {family}-compressed shards are not read (scrub reads {', '.join(COMPRESSIONS)}): "
        "let streaming decompress them (StreamingDataset leaves shard.*.mds beside them)"
    )


def _inflate(decompressor: Any, data: bytes, error: type[Exception]) -> bytes:
    try:
        return decompressor.decompress(data)
    except (error, EOFError, ValueError):
        return b""


def _unzstd(zstandard: Any, data: bytes) -> bytes:
    out = []
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    while True:
        try:
            chunk = reader.read(1 << 20)
        except zstandard.ZstdError:
            break
        if not chunk:
            break
        out.append(chunk)
    return b"".join(out)


class ShardBytes:
    """A shard's bytes (a memory map of the uncompressed file, or the decompressed bytes) and
    the byte range of each sample, checked against the file's end: shared by the reader and
    the writer, which copies each sample's bytes as they are."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self._map: mmap.mmap | None = None
        data: bytes | mmap.mmap
        if shard.compression is None:
            with open(shard.path, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size:
                    self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
                data = self._map if self._map is not None else b""
        else:
            with open(shard.path, "rb") as file:
                data = decompressor(shard.compression, shard.source)(file.read())
        self.data = data
        self.size = len(data)
        self.count = int.from_bytes(data[:4], "little") if self.size >= 4 else None
        self.table_end = 4 + 4 * ((self.count or 0) + 1)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None

    def __enter__(self) -> ShardBytes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spans(self, start: int, stop: int) -> list[tuple[int, int] | str]:
        """(begin, end) of samples ``start:stop`` within the shard, or why a sample cannot be read."""
        found: list[tuple[int, int] | str] = []
        if self.count is None:
            return [f"the shard holds {self.size} bytes: no sample table"] * (stop - start)
        end = min(4 * (2 + stop), self.size // 4 * 4)
        table = np.frombuffer(self.data[4 * (1 + start) : max(end, 4 * (1 + start))], dtype="<u4").astype(
            np.int64
        )
        for sample in range(start, stop):
            if sample >= self.count:
                found.append(
                    f"the shard's header lists {counted(self.count, 'sample')} and the index "
                    f"{self.shard.samples}: sample {sample} of the shard is not in it"
                )
                continue
            row = sample - start
            if row + 1 >= len(table):
                found.append(f"the shard ends ({self.size} bytes) inside its table of sample offsets")
                continue
            begin, end = int(table[row]), int(table[row + 1])
            if begin < self.table_end or end < begin or end > self.size:
                found.append(
                    f"its bytes {begin}..{end} lie outside the shard's {self.size} bytes "
                    "(a truncated or damaged shard)"
                )
                continue
            found.append((begin, end))
        return found

    def sample(self, span: tuple[int, int]) -> bytes:
        return bytes(self.data[span[0] : span[1]])


class Pickled(Exception):
    """A pickled column, not unpickled."""


def split_columns(data: bytes, columns: Sequence[Column]) -> dict[str, bytes]:
    """A sample's bytes cut into its columns' (MDSReader.decode_sample's layout); ValueError
    saying why they do not add up."""
    position = 0
    sizes = []
    for column in columns:
        if column.size is not None:
            sizes.append(column.size)
            continue
        if position + 4 > len(data):
            raise ValueError(f"the sample ({len(data)} bytes) ends inside its column sizes")
        sizes.append(int.from_bytes(data[position : position + 4], "little"))
        position += 4
    cut = {}
    for column, size in zip(columns, sizes):
        if position + size > len(data):
            raise ValueError(
                f"column {column.name} ({size} bytes at {position}) runs past the sample's {len(data)} bytes"
            )
        cut[column.name] = data[position : position + size]
        position += size
    return cut


def decode_column(column: Column, data: bytes, allow_pickle: bool, token_ids: bool = False) -> Any:
    """A column's value from its bytes, by its MDS encoding; ValueError saying why it does not
    decode, `Pickled` for a pickle not to unpickle. ``token_ids``: a ``bytes`` column holds int64
    token ids (llm-foundry's)."""
    base, _, config = column.encoding.partition(":")
    if base == "ndarray":
        return decode_ndarray(config, data)
    if base == "bytes":
        if not token_ids:
            return data
        if len(data) % BYTES_TOKEN_DTYPE.itemsize:
            raise ValueError(f"{len(data)} bytes are not a whole number of int64 token ids")
        return np.frombuffer(data, BYTES_TOKEN_DTYPE)
    if base == "str":
        return data.decode("utf-8")
    if base == "int":
        base = "int64"
    if base in SCALARS:
        dtype = SCALARS[base]
        if len(data) != dtype.itemsize:
            raise ValueError(f"{len(data)} bytes, not one {base}")
        return np.frombuffer(data, dtype.newbyteorder("<"))[0].item()
    if base in ("str_int", "str_float", "str_decimal"):
        text = data.decode("utf-8")
        try:
            return {"str_int": int, "str_float": float, "str_decimal": Decimal}[base](text)
        except InvalidOperation:
            raise ValueError(f"{text[:40]!r} is not a decimal number") from None
    if base == "json":
        return json.loads(data.decode("utf-8"))
    if base == "pkl":
        if not allow_pickle:
            raise Pickled(column.name)
        return pickle.loads(data)
    if column.encoding in IMAGE_ENCODINGS:
        return data
    raise ValueError(f"encoding {column.encoding!r} is not one MDS defines")


def decode_ndarray(config: str, data: bytes) -> np.ndarray:
    """streaming's NDArray encoding (``ndarray[:dtype[:shape]]``), checked where it trusts."""
    parts = config.split(":") if config else []
    dtype_name = parts[0] if parts else None
    shape: tuple[int, ...] | None = tuple(int(d) for d in parts[1].split(",")) if len(parts) > 1 else None
    position = 0
    if dtype_name is None:
        if not data:
            raise ValueError("no bytes: an ndarray without its dtype")
        dtype_name = NDARRAY_DTYPES.get(data[0])
        if dtype_name is None:
            raise ValueError(f"dtype code {data[0]} is not one of NDArray's")
        position = 1
    if shape is None:
        if position >= len(data):
            raise ValueError("the array ends before its shape")
        ndim, code = data[position] >> 2, data[position] & 3
        width = 1 << code
        position += 1
        if position + ndim * width > len(data):
            raise ValueError("the array ends inside its shape")
        shape = tuple(
            int(d) for d in np.frombuffer(data[position : position + ndim * width], SHAPE_DTYPES[code])
        )
        position += ndim * width
    dtype = np.dtype(dtype_name).newbyteorder("<")
    count = math.prod(shape)
    if len(data) - position != count * dtype.itemsize:
        raise ValueError(
            f"shape {shape} of {dtype_name} needs {count * dtype.itemsize} bytes, the column holds "
            f"{len(data) - position}"
        )
    return np.frombuffer(data, dtype, count, position).reshape(shape)


class MDSReader(Reader[SampleRange]):
    format = "mds"
    #: VALUES: a pickled column's finding (`undecodable-record`)
    provides = frozenset({Carries.TOKENS, Carries.SEQUENCES, Carries.VALUES})
    positional_keys = True
    options_used = frozenset({"allow_pickle", "data_key", "label_key"})

    #: the shards, in the dataset's order, and which columns each one's records are read by
    shards: tuple[Shard, ...] = ()
    roles: dict[tuple[Column, ...], Roles] = {}
    #: the ``index.json`` files read
    indexes: tuple[str, ...] = ()

    @classmethod
    def sniff(cls, path: Path) -> bool:
        """An ``index.json`` of MDS shards, a folder holding one, or a folder of such folders
        (looked for one level down: deeper trees are read with ``--format mds``)."""
        if path.is_file():
            return path.name == INDEX and is_mds_index(path)
        if not path.is_dir():
            return False
        if (path / INDEX).is_file():
            return is_mds_index(path / INDEX)
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    if (
                        not entry.name.startswith(".")
                        and entry.is_dir()
                        and os.path.isfile(os.path.join(entry.path, INDEX))
                    ):
                        return is_mds_index(Path(entry.path) / INDEX)
        except OSError:
            return False
        return False

    def dataset_root(self) -> Path:
        return self.path.parent if self.path.is_file() else self.path

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[SampleRange]]:
        root = self.dataset_root()
        indexes = [self.path] if self.path.is_file() else index_paths(root)
        if not indexes:
            raise UnusableDataset(f"{self.path}: no index.json in this folder or below it")
        self.root = str(root)
        self.indexes = tuple(str(path) for path in indexes)
        info = DatasetInfo(format=self.format, layout="shards", root=str(root), labelled=False, records=0)
        shards: list[Shard] = []
        first = 0
        for index in indexes:
            for entry in parse_index(index, root):
                shard = self._shard(entry, root, first, info)
                first += int(entry["samples"])
                if shard is not None:
                    shards.append(shard)
        if not shards and not info.issues:
            raise UnusableDataset(f"{self.path}: the index lists no shards")
        self.shards = tuple(shards)
        self.roles = {}
        for shard in shards:
            if shard.columns not in self.roles:
                self.roles[shard.columns] = self._roles(shard)
            self._describe(shard, info)
        partitions: list[SampleRange] = []
        for shard in shards:
            step = shard.samples if shard.compression else max(1, partition_size)
            for start in range(0, shard.samples, max(step, 1)):
                partitions.append(SampleRange(shard, start, min(start + step, shard.samples)))
        info.records = sum(len(p) for p in partitions)
        self.work_seconds = info.records * SECONDS_PER_SAMPLE
        info.notes.append(
            "keys: a sample's position in the whole dataset (StreamingDataset(local=...)[key]); "
            "source: its shard"
        )
        return info, partitions

    def _shard(self, entry: dict[str, Any], root: Path, first: int, info: DatasetInfo) -> Shard | None:
        folder = entry["_folder"]
        raw = entry["raw_data"]["basename"]
        source = f"{folder}/{raw}" if folder else raw
        raw_path = root / source
        zipped = entry.get("zip_data") or None
        columns = tuple(
            Column(str(name), str(encoding), None if size is None else int(size))
            for name, encoding, size in zip(
                entry["column_names"], entry["column_encodings"], entry["column_sizes"]
            )
        )
        if raw_path.is_file():
            path, compression = str(raw_path), None
        elif zipped and (root / folder / zipped["basename"]).is_file():
            path, compression = str(root / folder / zipped["basename"]), entry.get("compression") or "zstd"
            decompressor(compression, f"{source}")  # a compression not read: one line now
        else:
            wanted = f"{folder}/{zipped['basename']}" if zipped and folder else (zipped or {}).get("basename")
            named = source if not wanted else f"{source} (or {wanted})"
            info.issues.append(
                make_issue(
                    "missing-file",
                    source,
                    "*",
                    None,
                    Finding(
                        f"no such file: {named}: its {counted(int(entry['samples']), 'sample')} "
                        f"{agreeing(int(entry['samples']), 'is', 'are')} not read",
                        {"samples": int(entry["samples"])},
                    ),
                )
            )
            return None
        return Shard(source, path, compression, int(entry["samples"]), first, columns)

    def _roles(self, shard: Shard) -> Roles:
        names = [column.name for column in shard.columns]
        data_key, label_key = self.options.data_key, self.options.label_key
        for option, name in (("data-key", data_key), ("label-key", label_key)):
            if name is not None and name not in names:
                raise UsageError(
                    f"--{option} {name}: {shard.source} has no such column (it has {', '.join(names)})"
                )
        ids = data_key or next((name for name in (IDS, TOKENS) if name in names), None)
        if ids is not None:
            wanted = {ids, label_key or LABELS, ATTENTION}
        else:
            wanted = {*CHAT_FIELDS, "prompt", "completion", *TEXT_FIELDS} & set(names)
        if not wanted & set(names):
            raise UnusableDataset(
                f"{shard.source}: no column a language-model record is read by (input_ids, tokens, "
                f"messages, prompt/completion, text); it has {', '.join(names)}: choose one with --data-key"
            )
        read = tuple(name for name in names if name in wanted)
        return Roles(read, ids if ids not in (None, IDS) else data_key)

    def _describe(self, shard: Shard, info: DatasetInfo) -> None:
        roles = self.roles[shard.columns]
        info.files[shard.source] = {"samples": shard.samples, "compression": shard.compression}
        encodings = {column.name: column.encoding for column in shard.columns}
        ids = roles.data_key or IDS
        encoding = encodings.get(ids, "")
        parts = encoding.split(":")
        if parts[0] == "ndarray" and len(parts) > 1 and parts[1]:
            info.token_dtypes[shard.source] = parts[1]
        said = set(info.notes)
        others = [name for name in encodings if name not in roles.read]
        notes = []
        if others:
            notes.append(f"columns not checked: {', '.join(others)}")
        pickled = [name for name in roles.read if encodings[name] == "pkl"]
        if pickled and not self.options.allow_pickle:
            notes.append(
                f"columns {', '.join(pickled)} are pickled (MDS encoding pkl): not unpickled without "
                "--allow-pickle (unpickling runs arbitrary code)"
            )
        if encoding == "bytes":
            notes.append(f"column {ids} is bytes: read as int64 token ids, as llm-foundry writes them")
        info.notes.extend(note for note in notes if note not in said)

    # -- reading (worker side) -------------------------------------------------------------

    def read(self, partition: SampleRange, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        shard = partition.shard
        stop = len(partition) if stop is None else min(stop, len(partition))
        first, last = partition.start + start, partition.start + stop
        if first >= last:
            return
        roles = self.roles[shard.columns]
        # the options are looked up once: a format's own option is a lookup through the table
        reading = (bool(self.options.allow_pickle), self.options.label_key)
        try:
            opened = ShardBytes(shard)
        except OSError as error:
            for sample in range(first, last):
                record = self._record(shard, sample)
                record.problems.append(
                    problem(record, "malformed-record", f"{shard.source} cannot be read: {error.strerror}")
                )
                yield record
            return
        with opened:
            for sample, span in zip(range(first, last), opened.spans(first, last)):
                record = self._record(shard, sample)
                if isinstance(span, str):
                    record.problems.append(
                        problem(record, "malformed-record", f"sample {sample} of {shard.source}: {span}")
                    )
                else:
                    self._fill(record, opened.sample(span), shard, roles, reading)
                yield record

    def _record(self, shard: Shard, sample: int) -> Record:
        index = shard.first + sample
        return Record(shard.source, str(index), index, None)

    def _fill(
        self, record: Record, data: bytes, shard: Shard, roles: Roles, reading: tuple[bool, str | None]
    ) -> None:
        try:
            cut = split_columns(data, shard.columns)
        except ValueError as error:
            record.problems.append(problem(record, "malformed-record", str(error)))
            return
        fields: dict[str, Any] = {}
        ids = roles.data_key or IDS
        allow_pickle, label_key = reading
        token_columns = {ids, label_key or LABELS, ATTENTION}
        for column in shard.columns:
            if column.name not in roles.read:
                continue
            try:
                fields[column.name] = decode_column(
                    column, cut[column.name], allow_pickle, column.name in token_columns
                )
            except Pickled:
                record.problems.append(
                    problem(
                        record,
                        "undecodable-record",
                        f"column {column.name} is pickled (MDS encoding pkl), not unpickled: unpickling runs "
                        "arbitrary code (use --allow-pickle for trusted data)",
                    )
                )
                return
            except Exception as error:  # any decode error of a damaged value: a finding, never the end
                record.problems.append(
                    problem(
                        record,
                        "malformed-record",
                        f"column {column.name} ({column.encoding}) does not decode: {first_line(error)}",
                    )
                )
                return
        fill_record(record, fields, roles.data_key, label_key)

    def members(self, partitions: Sequence[SampleRange]) -> Iterator[str]:
        yield from self.indexes
        for shard in self.shards:
            yield shard.path

    def locate(self, partition: SampleRange, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        first = partition.shard.first + partition.start
        return [(partition.shard.source, str(first + offset), first + offset) for offset in offsets]
