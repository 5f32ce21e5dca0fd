"""LMDB environments: Caffe `Datum`s, raw encoded images (LSUN style), `.npy` arrays.

The environment is opened read-only, with LMDB's default read-ahead (cold scans were 7–20x
slower without it), and with its lock whenever the lock file can be written: a reader then holds
a slot in the lock table, and a writer committing during the scan never reuses the pages of the
snapshot the reader is on (read transactions are MVCC snapshots and never block the writer).
Without the lock (a read-only lock file: read-only media), a live writer reuses those pages
under the reader, which then fails (``MDB_PAGE_NOTFOUND``) or aborts the process on an LMDB
assertion: the summary says it was read so. Partitions are key intervals: the driver walks the
keys once (keys only, ~5 M/s) in one snapshot to pick split keys and count records; each worker
opens its own environment (py-lmdb refuses to open one twice in a process, and an environment
must not cross a fork) and walks its interval, up to the next partition's first key, with a
cursor in one snapshot of its own: every key of that snapshot is read once, by the partition
whose interval holds it, however the database changed since the listing. ``source`` is the
environment's path relative to the dataset root (its name), ``key`` the record's key (UTF-8 text
where valid, else ``hex:<hex>``), ``index`` its ordinal in key order (in the listing's snapshot:
approximate for keys a live writer added or removed since).

Each value is decoded by the first codec that recognises it (``--lmdb-codec`` forces one):

* ``image``: encoded image bytes, by magic number (JPEG, PNG, GIF, BMP, WebP, TIFF);
* ``npy``: ``np.save`` output (loaded with ``allow_pickle=False``);
* ``datum``: a Caffe ``Datum``: encoded image bytes with a label, raw uint8 CHW ``data``
  (BGR), or ``float_data``;
* pickled values are never unpickled unless ``--allow-pickle`` (unpickling runs arbitrary
  code): they are ``undecodable-record``s with a hint.

Keys that loaders use for metadata (``__keys__``, ``__len__``, ``num-samples``) are skipped.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from scrub.checks.base import Finding, make_issue, problem
from scrub.errors import UnusableDataset, UsageError, first_line
from scrub.manifest import encode_key
from scrub.readers.base import CacheEntry, DatasetInfo, Reader, ReadOptions, extension_of, partition_size_for
from scrub.readers.caffe_datum import DatumError, looks_like_datum, parse_datum
from scrub.records import Record, Severity

LMDB_MAGIC = 0xBEEFC0DE
METADATA_KEYS = frozenset({b"__keys__", b"__len__", b"num-samples"})
CODECS = ("auto", "datum", "image", "npy", "pickle")
IMAGE_MAGIC = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
IMAGE_FIRST_BYTES = frozenset([magic[0] for magic, _ in IMAGE_MAGIC] + [ord("R")])  # R: RIFF (WEBP)
PICKLE_PROTOCOLS = frozenset(range(2, 6))
NPY_MAGIC = np.lib.format.MAGIC_PREFIX
#: First bytes of a Datum's fields (tag = field number << 3 | wire type): a value starting with
#: one is parsed as a Datum, so that a damaged one says why it does not parse.
DATUM_TAGS = frozenset({0x08, 0x10, 0x18, 0x22, 0x28, 0x32, 0x35, 0x38})


@dataclass(frozen=True)
class KeyRange:
    """A partition: the records from key ``first`` (inclusive) to key ``end`` (exclusive; None:
    to the last), ``count`` of them when the driver listed them."""

    path: str
    subdir: bool
    source: str
    first: bytes
    count: int
    first_index: int
    end: bytes | None = None

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class KeyList:
    """A partition of chosen records (the ones a result cache could not answer for): their keys,
    and their offsets in the `KeyRange` they come from."""

    path: str
    subdir: bool
    source: str
    keys: tuple[bytes, ...]
    first_index: int  # the KeyRange's
    offsets: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.keys)


def is_lmdb_file(path: Path) -> bool:
    """An LMDB data file: its first meta page carries LMDB's magic number."""
    try:
        with open(path, "rb") as file:
            head = file.read(20)
    except OSError:
        return False
    return len(head) == 20 and struct.unpack_from("<I", head, 16)[0] == LMDB_MAGIC


def check_not_truncated(data_file: Path) -> None:
    """Refuse a data file shorter than its newest meta page says: LMDB maps the file, and reading
    a page past its end kills the process with SIGBUS instead of raising an error."""
    try:
        with open(data_file, "rb") as file:
            first = file.read(4096)
            page_size = struct.unpack_from("<I", first, 40)[0] if len(first) >= 160 else 0
            if page_size < 512 or page_size & (page_size - 1):
                raise UnusableDataset(f"{data_file}: not an LMDB data file (no valid meta page)")
            file.seek(page_size)
            second = file.read(160)
    except OSError as error:
        raise UnusableDataset(f"{data_file}: cannot read: {error.strerror}") from None
    metas = []
    for page in (first, second):
        if len(page) >= 152 and struct.unpack_from("<I", page, 16)[0] == LMDB_MAGIC:
            last_page, transaction = struct.unpack_from("<QQ", page, 136)
            metas.append((transaction, last_page))
    if not metas:
        raise UnusableDataset(f"{data_file}: not an LMDB data file (no valid meta page)")
    _, last_page = max(metas)
    needed = (last_page + 1) * page_size
    size = data_file.stat().st_size
    if size < needed:
        raise UnusableDataset(f"{data_file}: truncated LMDB data file ({size:,} of {needed:,} bytes)")


_ENVIRONMENTS: dict[str, Any] = {}


def lock_file(path: str, subdir: bool) -> Path:
    """Where LMDB keeps an environment's lock table."""
    return Path(path) / "lock.mdb" if subdir else Path(path + "-lock")


def can_lock(path: str, subdir: bool) -> bool:
    """Whether a reader can take a slot in the environment's lock table: its lock file exists
    and can be written. A missing one is not created (nothing is added to a source): no process
    has the environment open with a lock then, writers included."""
    lock = lock_file(path, subdir)
    return lock.is_file() and os.access(lock, os.R_OK | os.W_OK)


def open_environment(path: str, subdir: bool):
    """This process's one environment for ``path`` (py-lmdb allows only one per process)."""
    import lmdb

    environment = _ENVIRONMENTS.get(path)
    if environment is None:
        try:
            environment = lmdb.open(
                path,
                subdir=subdir,
                readonly=True,
                lock=can_lock(path, subdir),
                readahead=True,
                max_dbs=0,
                max_readers=512,
            )
        except lmdb.Error as error:
            raise UnusableDataset(f"{path}: not a readable LMDB environment ({first_line(error)})") from None
        _ENVIRONMENTS[path] = environment
    return environment


def begin(environment):
    """A read transaction: a snapshot of the newest commit. A writer that grew the map since
    the environment was opened makes LMDB refuse it (``MDB_MAP_RESIZED``): the new size is
    adopted, as LMDB's documentation says to, and the transaction begun again."""
    import lmdb

    try:
        return environment.begin()
    except lmdb.MapResizedError:
        environment.set_mapsize(0)
        return environment.begin()


def _forget(path: str) -> None:
    environment = _ENVIRONMENTS.pop(path, None)
    if environment is not None:
        environment.close()


class LMDBReader(Reader[KeyRange | KeyList]):
    format = "lmdb"
    database_folder = True
    preferred_scheduler = "processes"
    records_per_task = 1000
    provides = frozenset({"image", "bytes", "array", "values"})
    options_used = frozenset({"lmdb_codec", "allow_pickle", "data_key", "label_key"})
    #: the pickled dict fields --data-key/--label-key name
    fields: DictFields = (None, None)
    worker_imports = ("lmdb",)

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_dir():
            return (path / "data.mdb").is_file()
        return path.is_file() and is_lmdb_file(path)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[KeyRange | KeyList]]:
        import lmdb

        codec = self.options.lmdb_codec or "auto"
        if codec not in CODECS:
            raise UsageError(f"--lmdb-codec {codec!r}: choose one of {', '.join(CODECS)}")
        self.fields = dict_fields(self.options)
        if self.path.is_dir() and not (self.path / "data.mdb").is_file():
            raise UnusableDataset(f"{self.path}: not an LMDB environment (no data.mdb)")
        subdir = self.path.is_dir()
        if not subdir and not is_lmdb_file(self.path):
            raise UnusableDataset(f"{self.path}: not an LMDB data file")
        check_not_truncated(self.path / "data.mdb" if subdir else self.path)
        path = str(self.path.resolve())
        source = self.path.resolve().name
        _forget(path)  # a stale environment from an earlier scan in this process
        environment = open_environment(path, subdir)
        starts: list[tuple[bytes, int]] = []  # (first key, count) of each partition
        skipped = 0
        count = 0
        first: bytes | None = None
        try:
            with begin(environment) as transaction:
                snapshot = transaction.id()
                partition_size = partition_size_for(transaction.stat()["entries"], partition_size)
                for key in transaction.cursor().iternext(keys=True, values=False):
                    if key in METADATA_KEYS:
                        skipped += 1
                        continue
                    if first is None:
                        first = bytes(key)
                    count += 1
                    if count == partition_size:
                        starts.append((first, count))
                        first, count = None, 0
                entries = transaction.stat()["entries"]
        except lmdb.Error as error:
            raise UnusableDataset(
                f"{self.path}: the LMDB environment is damaged ({first_line(error)})"
            ) from None
        if first is not None:
            starts.append((first, count))
        partitions: list[KeyRange | KeyList] = [
            KeyRange(path, subdir, source, key, size, number * partition_size, _next_key(starts, number))
            for number, (key, size) in enumerate(starts)
        ]
        records = sum(len(p) for p in partitions)
        info = DatasetInfo(
            format=self.format,
            layout="environment" if subdir else "file",
            root=str(self.path.parent),
            labelled=self._labelled(partitions, codec),
            records=records,
            skipped={"metadata key": skipped} if skipped else {},
            snapshots=True,
        )
        self._listed = (info, snapshot)  # for `locate`, when the database changed since
        locked = can_lock(path, subdir)
        info.files[source] = {"entries": entries, "codec": codec, "snapshot": snapshot, "locked": locked}
        if not locked and lock_file(path, subdir).exists():
            info.notes.append(
                f"{source}: read without LMDB's lock (its lock file cannot be written: read-only "
                "media?): a writer committing during the scan can make it fail"
            )
        return info, partitions

    def _labelled(self, partitions: Sequence[KeyRange | KeyList], codec: str, sample: int = 64) -> bool:
        """Whether the values carry labels (Datums, unpickled tuples): judged on the first few."""
        if not partitions:
            return False
        values = (value for _, _, value in self._walk(partitions[0], 0, sample, values=True))
        return values_carry_labels(values, codec, self.options.allow_pickle, self.fields)

    def _walk(self, partition: KeyRange | KeyList, start: int, stop: int | None, values: bool):
        import lmdb

        environment = open_environment(partition.path, partition.subdir)
        if stop is None:  # a key range to its end key, however many records it holds now
            stop = len(partition) if isinstance(partition, KeyList) else sys.maxsize
        try:
            with begin(environment) as transaction:
                if isinstance(partition, KeyList):
                    for offset in range(start, min(stop, len(partition))):
                        key = partition.keys[offset]
                        yield offset, key, transaction.get(key) if values else None
                    return
                cursor = transaction.cursor()
                if not cursor.set_range(partition.first):
                    return
                offset = 0
                items = (
                    cursor.iternext(keys=True, values=True)
                    if values
                    else ((k, None) for k in cursor.iternext(keys=True, values=False))
                )
                end = partition.end
                for key, value in items:
                    if key in METADATA_KEYS:
                        continue
                    if offset >= stop or (end is not None and key >= end):
                        return
                    if offset >= start:
                        yield offset, bytes(key), value
                    offset += 1
        except lmdb.Error as error:
            raise UnusableDataset(
                f"{partition.source}: the LMDB environment is damaged ({first_line(error)})"
            ) from None

    def read(
        self, partition: KeyRange | KeyList, start: int = 0, stop: int | None = None
    ) -> Iterator[Record]:
        codec = self.options.lmdb_codec or "auto"
        for offset, key, value in self._walk(partition, start, stop, values=True):
            record = Record(partition.source, encode_key(key), _index(partition, offset), None)
            if value is None:  # deleted since the driver listed it
                record.problems.append(problem(record, "missing-file", f"no such key: {record.key}"))
            else:
                decode_value(record, bytes(value), codec, self.options.allow_pickle, self.fields)
            yield record

    def cache_entries(self, partition: KeyRange | KeyList) -> list[CacheEntry | None]:
        """A value's verdict depends on its bytes and its key's extension (`format-mismatch`):
        the driver hashes every value (a cursor pass, no decoding) and looks the hashes up."""
        entries: list[CacheEntry | None] = []
        for _, key, value in self._walk(partition, 0, None, values=True):
            name = encode_key(key)
            entries.append(
                (f"{partition.source}\0{name}", None, extension_of(name), xxhash.xxh3_128_digest(value))
            )
        return entries

    def subset(self, partition: KeyRange | KeyList, offsets: Sequence[int]) -> KeyList:
        wanted = set(offsets)
        keys = [key for offset, key, _ in self._walk(partition, 0, None, values=False) if offset in wanted]
        return KeyList(
            partition.path,
            partition.subdir,
            partition.source,
            tuple(keys),
            partition.first_index,
            tuple(offsets),
        )

    def close(self) -> None:
        _forget(str(self.path.resolve()))  # else this process cannot open the environment again

    def members(self, partitions: Sequence[KeyRange | KeyList]) -> Iterator[str]:
        yield str(self.path / "data.mdb" if self.path.is_dir() else self.path)

    def locate(self, partition: KeyRange | KeyList, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        wanted = set(offsets)
        found = {
            offset: (partition.source, encode_key(key), _index(partition, offset))
            for offset, key, _ in self._walk(
                partition, min(offsets, default=0), max(offsets, default=-1) + 1, values=False
            )
            if offset in wanted
        }
        if len(found) < len(wanted) or self._changed():
            self._say_positions_moved(partition.source)
        # a position past the end of its range now (records removed since): named by its index
        return [found.get(offset) or _by_index(partition, offset) for offset in offsets]

    def _changed(self) -> bool:
        """Whether a writer committed since the keys were listed."""
        listed = getattr(self, "_listed", None)
        if listed is None:
            return False
        environment = open_environment(str(self.path.resolve()), self.path.is_dir())
        return environment.info()["last_txnid"] != listed[1]

    def _say_positions_moved(self, source: str) -> None:
        info, snapshot = self._listed
        note = (
            f"{source}: the database changed during the scan (listed at transaction "
            f"{snapshot:,}): the records dataset checks flag (duplicate, shape-mismatch, outliers) "
            "are named by their position, looked up after the scan, and may be off by the records "
            "added or removed before them (#N: a position past the end of its range)"
        )
        if note not in info.notes:
            info.notes.append(note)


def _by_index(partition: KeyRange | KeyList, offset: int) -> tuple[str, str, int]:
    index = _index(partition, offset)
    return partition.source, f"#{index}", index


def _next_key(starts: list[tuple[bytes, int]], number: int) -> bytes | None:
    return starts[number + 1][0] if number + 1 < len(starts) else None


def _index(partition: KeyRange | KeyList, offset: int) -> int:
    """A record's index in the dataset from its offset in a partition."""
    if isinstance(partition, KeyList):
        return partition.first_index + partition.offsets[offset]
    return partition.first_index + offset


def values_carry_labels(
    values: Iterable, codec: str, allow_pickle: bool | None, fields: DictFields = (None, None)
) -> bool:
    """Whether key-value records carry labels (Datums, unpickled tuples), judged on ``values``
    (a database's first few): shared by the LMDB and LevelDB readers."""
    for value in values:
        record = Record("", "", 0, None)
        decode_value(record, bytes(value), codec, bool(allow_pickle), fields)
        if record.meta.get("label_known"):
            return True
    return False


#: the data and label fields of pickled dict values that --data-key/--label-key name (None: the
#: first of the usual names, `DICT_DATA_FIELDS` and `DICT_LABEL_FIELDS`)
DictFields = tuple[str | None, str | None]


def dict_fields(options: ReadOptions) -> DictFields:
    """The dict fields the options name; naming one needs --allow-pickle (only unpickled values
    have fields), else it is an error rather than an option that silently does nothing."""
    fields = (options.data_key, options.label_key)
    if fields != (None, None) and not options.allow_pickle:
        given = "--data-key" if options.data_key else "--label-key"
        raise UsageError(
            f"{given}: names a field of pickled dict values, which are read only with --allow-pickle"
        )
    return fields


def decode_value(
    record: Record, value: bytes, codec: str, allow_pickle: bool, fields: DictFields = (None, None)
) -> None:
    """Set the record's payload, kind and label from an LMDB value, or a problem saying why not.

    A value that carries no label (an image, an array, an undecodable value) is marked
    ``label_known=False``: its label is not missing, there is none to have.
    """
    record.meta["label_known"] = False
    if not value:
        record.payload = value  # empty-record
        return
    if codec in ("auto", "image") and _image_format(value):
        record.payload, record.meta["kind"] = value, "image"
        return
    if codec in ("auto", "npy") and value.startswith(NPY_MAGIC):
        _decode_npy(record, value)
        return
    if codec in ("auto", "pickle") and len(value) > 1 and value[0] == 0x80 and value[1] in PICKLE_PROTOCOLS:
        _decode_pickle(record, value, allow_pickle, fields)
        return
    if codec == "datum" or (codec == "auto" and (value[0] in DATUM_TAGS or looks_like_datum(value))):
        try:
            _use_datum(record, parse_datum(value))
        except DatumError as error:
            record.problems.append(problem(record, "undecodable-record", f"Datum does not parse: {error}"))
        return
    expected = "any known codec" if codec == "auto" else f"codec {codec!r}"
    record.problems.append(
        problem(
            record,
            "undecodable-record",
            f"{len(value)} bytes that {expected} does not understand",
            head=value[:8].hex(),
        )
    )


def _image_format(value: bytes) -> str | None:
    if value[0] not in IMAGE_FIRST_BYTES:  # a Datum, an array, a pickle: no magic to try
        return None
    for magic, name in IMAGE_MAGIC:
        if value.startswith(magic):
            return name
    if value[:4] == b"RIFF" and value[8:12] == b"WEBP":
        return "WEBP"
    return None


def _decode_npy(record: Record, value: bytes) -> None:
    try:
        array = np.load(io.BytesIO(value), allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        record.problems.append(
            problem(record, "undecodable-record", f".npy bytes do not load: {first_line(error)}")
        )
        return
    use_array(record, array)


#: Fields of a pickled dict value that hold the record's data, and its label, in the order tried.
DICT_DATA_FIELDS = ("img", "image", "jpg", "jpeg", "png", "webp", "data", "bytes", "x", "input", "array")
DICT_LABEL_FIELDS = ("label", "labels", "target", "targets", "cls", "class", "y")


def _dict_fields(value: dict, given: DictFields) -> tuple[str, str | None] | None:
    """(data field, label field or None) of a pickled dict value: the given ones, else by the
    usual names."""
    data = given[0] or next(
        (name for name in DICT_DATA_FIELDS if isinstance(value.get(name), (bytes, bytearray, np.ndarray))),
        None,
    )
    if data is None or data not in value:
        return None
    if given[1] is not None:
        return data, given[1]
    return data, next((name for name in DICT_LABEL_FIELDS if name in value), None)


def _decode_pickle(
    record: Record, value: bytes, allow_pickle: bool, given: DictFields = (None, None)
) -> None:
    if not allow_pickle:
        record.problems.append(
            problem(
                record,
                "undecodable-record",
                "pickled value, not unpickled: unpickling runs arbitrary code (use --allow-pickle for "
                "trusted data)",
            )
        )
        return
    try:
        obj = pickle.loads(value)
    except Exception as error:
        record.problems.append(problem(record, "undecodable-record", f"pickle does not load: {error!r}"))
        return
    label = None
    if isinstance(obj, dict):  # {'img': image bytes, 'label': 3} and its variants
        fields = _dict_fields(obj, given)
        if fields is None:
            names = ", ".join(sorted(map(str, obj)))[:200]
            looked = given[0] or ", ".join(DICT_DATA_FIELDS)
            record.problems.append(
                problem(
                    record,
                    "undecodable-record",
                    f"unpickled a dict with fields {names}: none is image bytes or an array "
                    f"(looked for {looked})",
                )
            )
            return
        data_field, label_field = fields
        obj = (obj[data_field], obj.get(label_field)) if label_field is not None else obj[data_field]
    if isinstance(obj, tuple) and len(obj) == 2:  # folder2lmdb style: (image bytes, label)
        obj, label = obj
        record.meta["label_known"] = True
        record.label = label if isinstance(label, (int, float, str)) or label is None else str(label)
    if isinstance(obj, (bytes, bytearray)):
        known = record.meta["label_known"]
        decode_value(record, bytes(obj), "auto", allow_pickle=False)
        record.label = label if record.label is None else record.label
        record.meta["label_known"] = known or record.meta["label_known"]
    elif isinstance(obj, np.ndarray):
        use_array(record, obj)
    else:
        record.problems.append(
            problem(
                record, "undecodable-record", f"unpickled a {type(obj).__name__}, not image bytes or an array"
            )
        )


def _use_datum(record: Record, datum) -> None:
    record.label = datum.label
    record.meta["label_known"] = True
    record.meta["codec"] = "datum"
    if datum.encoded:
        if datum.data:
            record.payload, record.meta["kind"] = datum.data, "image"
        else:
            record.payload = b""
        return
    array = datum.array()
    if array is None:
        size = len(datum.data) or len(datum.float_data)
        shape = (datum.channels, datum.height, datum.width)
        if not size:
            record.payload = b""  # empty-record
            return
        record.problems.append(
            make_issue(
                "shape-mismatch",
                record.source,
                record.key,
                record.index,
                Finding(
                    f"Datum holds {size} values but channels x height x width = {shape}",
                    {"values": size, "channels": shape[0], "height": shape[1], "width": shape[2]},
                    Severity.ERROR,
                ),
            )
        )
        return
    use_array(record, array)


def use_array(record: Record, array: np.ndarray) -> None:
    """Make ``array`` the record's payload (numbers only: another dtype is a problem)."""
    if array.dtype.kind not in "biufc":
        record.problems.append(
            problem(record, "undecodable-record", f"array of dtype {array.dtype}, not numbers")
        )
        return
    record.payload, record.meta["kind"] = array, "array"
    record.meta["shape"] = "x".join(map(str, array.shape))  # uint8 data and float_data batch alike
