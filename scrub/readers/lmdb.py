"""LMDB environments: Caffe `Datum`s, raw encoded images (LSUN style), `.npy` arrays.

The environment is opened read-only, with LMDB's default read-ahead (cold scans were many times
slower without it: see docs/benchmarks.md, "Design measurements"), and with its lock whenever
the lock file can be written: a reader then holds a slot in the lock table, and a writer
committing during the scan never reuses the pages of the snapshot the reader is on (read
transactions are MVCC snapshots and never block the writer).
Without the lock (a read-only lock file: read-only media), a live writer reuses those pages
under the reader, which then fails (``MDB_PAGE_NOTFOUND``) or aborts the process on an LMDB
assertion: the summary says it was read so. Partitions are key intervals: the driver walks the
keys once (keys only, which is quick) in one snapshot to pick split keys and count records; each
worker opens its own environment (py-lmdb refuses to open one twice in a process, and an environment
must not cross a fork) and walks its interval, up to the next partition's first key, with a
cursor in one snapshot of its own: every key of that snapshot is read once, by the partition
whose interval holds it, however the database changed since the listing. ``source`` is the
environment's path relative to the dataset root (its name), ``key`` the record's key (UTF-8 text
where valid, else ``hex:<hex>``), ``index`` its ordinal in key order (in the listing's snapshot:
approximate for keys a live writer added or removed since).

Each value is decoded by `scrub.readers.values` (``--lmdb-codec`` forces a codec).
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from scrub.checks.base import problem
from scrub.errors import UnusableDataset, UsageError, first_line
from scrub.manifest import encode_key
from scrub.readers.base import CacheEntry, DatasetInfo, Reader, extension_of, partition_size_for
from scrub.readers.values import (
    CODECS,
    METADATA_KEYS,
    DictFields,
    decode_value,
    dict_fields,
    values_carry_labels,
)
from scrub.records import Carries, Record
from scrub.storage import read_head

LMDB_MAGIC = 0xBEEFC0DE


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
    """An LMDB data file: its first meta page carries LMDB's magic number (a file's, or an
    object's, `scrub.storage.read_head`)."""
    try:
        head = read_head(path, 20)
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


def _close_environments() -> None:
    """Close this process's environments before it forks (they are opened again when next
    needed): LMDB forbids using an environment in a child, and a child that inherited the
    cache would use it. Between the listing and the scan's tasks no transaction is open."""
    for path in list(_ENVIRONMENTS):
        _forget(path)


if hasattr(os, "register_at_fork"):  # `LMDBReader.forks_cleanly`: workers forked from the scan
    os.register_at_fork(before=_close_environments)


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
    forks_cleanly = True  # the scan's environments are closed before a fork (`_close_environments`)
    records_per_task = 1000
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.ARRAY, Carries.VALUES})
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
        allow_pickle, fields = self.options.allow_pickle, self.fields  # an option's lookup, once
        for offset, key, value in self._walk(partition, start, stop, values=True):
            record = Record(partition.source, encode_key(key), _index(partition, offset), None)
            if value is None:  # deleted since the driver listed it
                record.problems.append(problem(record, "missing-file", f"no such key: {record.key}"))
            else:
                decode_value(record, bytes(value), codec, allow_pickle, fields)
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
