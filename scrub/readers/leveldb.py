"""LevelDB databases: Caffe's other backend (``convert_imageset --backend leveldb``).

Values are decoded as LMDB's are (`scrub.readers.values.decode_value`: Caffe ``Datum``s, raw
encoded images, ``.npy`` values, pickles only with ``--allow-pickle``), keys are records in key
order, and the metadata keys loaders use (``__keys__``, ``__len__``, ``num-samples``) are
skipped, as for LMDB. Read with `plyvel` (``pip install 'scrub[leveldb]'``).

LevelDB has no read-only mode: opening a database replays its log and writes a new manifest,
and only one process may hold it open (its ``LOCK``). So scrub never opens the source: it opens
a copy made of hard links to the source's table files (which LevelDB never changes once
written) and copies of its small mutable files (``CURRENT``, ``MANIFEST-*``, the log), in a
scratch folder removed after the scan; across file systems, the table files are copied too. The
source stays byte for byte as it was, and a writer that holds it open is not disturbed: the
copy is the state its files were in (a log cut mid-record is recovered as LevelDB recovers a
crash). The copy is opened once, in the scan's own process, and its partitions (key intervals,
as LMDB's) are read by threads through one snapshot.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrub.errors import UnusableDataset, UsageError, first_line
from scrub.fixing.outputs import scratch_folder
from scrub.formats import needs
from scrub.manifest import encode_key
from scrub.readers.base import DatasetInfo, Reader
from scrub.readers.values import (
    CODECS,
    METADATA_KEYS,
    DictFields,
    decode_value,
    dict_fields,
    values_carry_labels,
)
from scrub.records import Carries, Record


@dataclass(frozen=True)
class KeySpan:
    """A partition: the records from key ``first`` (inclusive) to ``end`` (exclusive; None: to
    the last), ``count`` of them, the first of which has index ``first_index``."""

    path: str
    source: str
    first: bytes
    count: int
    first_index: int
    end: bytes | None

    def __len__(self) -> int:
        return self.count


def is_leveldb(path: Path) -> bool:
    """A LevelDB folder: ``CURRENT`` naming a ``MANIFEST-*`` beside it."""
    current = path / "CURRENT"
    try:
        name = current.read_text(encoding="ascii", errors="replace").strip() if current.is_file() else ""
    except OSError:
        return False
    return name.startswith("MANIFEST-") and (path / name).is_file()


_OPEN: dict[str, tuple[Any, Any]] = {}  # path -> (database, snapshot), this process's
_LOCK = threading.Lock()


def plyvel_module():
    """plyvel, or a one-line error naming the extra that installs it (`scrub.formats.needs`)."""
    return needs("leveldb")


def open_database(path: str) -> tuple[Any, Any]:
    """This process's handle and snapshot of (a linked copy of) the database at ``path``."""
    plyvel = plyvel_module()
    with _LOCK:
        opened = _OPEN.get(path)
        if opened is None:
            copy = _linked_copy(Path(path))
            try:
                database = plyvel.DB(copy, create_if_missing=False)
            except plyvel.Error as error:
                shutil.rmtree(copy, ignore_errors=True)
                raise UnusableDataset(
                    f"{path}: the LevelDB database is damaged ({first_line(error)})"
                ) from None
            _COPIES[path] = copy
            opened = _OPEN[path] = (database, database.snapshot())
        return opened


def close_database(path: str) -> None:
    with _LOCK:
        opened = _OPEN.pop(path, None)
        copy = _COPIES.pop(path, None)
    if opened is not None:
        opened[1].close()
        opened[0].close()
    if copy is not None:
        shutil.rmtree(copy, ignore_errors=True)


_COPIES: dict[str, str] = {}
#: files LevelDB rewrites or appends to: copied; the rest (``*.ldb``, ``*.sst``) never change
_MUTABLE = ("CURRENT", "MANIFEST-", ".log", "LOG")


def _linked_copy(source: Path) -> str:
    """A scratch folder holding the database's files: links to its table files, copies of
    the rest (without its LOCK). A table file the source's writer deletes meanwhile (a
    compaction) makes the copy retry."""
    for _ in range(5):
        copy = scratch_folder("leveldb")
        try:
            for entry in sorted(source.iterdir()):
                if not entry.is_file() or entry.name == "LOCK":
                    continue
                target = os.path.join(copy, entry.name)
                if entry.name.startswith(_MUTABLE) or entry.name.endswith(_MUTABLE):
                    shutil.copyfile(entry, target)
                else:
                    try:
                        os.link(entry, target)
                    except OSError:  # another file system, or links not allowed: a copy
                        shutil.copyfile(entry, target)
            return copy
        except FileNotFoundError:  # compacted away between the listing and the link
            shutil.rmtree(copy, ignore_errors=True)
        except OSError as error:
            shutil.rmtree(copy, ignore_errors=True)
            raise UnusableDataset(f"{source}: cannot read the LevelDB files ({error.strerror})") from None
    raise UnusableDataset(f"{source}: the LevelDB database kept changing while its files were read")


class LevelDBReader(Reader[KeySpan]):
    format = "leveldb"
    database_folder = True
    preferred_scheduler = "threads"
    in_one_process = True
    records_per_task = 1000
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.ARRAY, Carries.VALUES})
    options_used = frozenset({"lmdb_codec", "allow_pickle", "data_key", "label_key"})
    #: the pickled dict fields --data-key/--label-key name
    fields: DictFields = (None, None)

    @classmethod
    def sniff(cls, path: Path) -> bool:
        return path.is_dir() and is_leveldb(path)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[KeySpan]]:
        codec = self.options.lmdb_codec or "auto"
        if codec not in CODECS:
            raise UsageError(f"--lmdb-codec {codec!r}: choose one of {', '.join(CODECS)}")
        self.fields = dict_fields(self.options)
        if not is_leveldb(self.path):
            raise UnusableDataset(f"{self.path}: not a LevelDB database (no CURRENT naming a MANIFEST)")
        path = str(self.path.resolve())
        close_database(path)  # a database from an earlier scan in this process: a new snapshot
        _, snapshot = open_database(path)
        source = self.path.resolve().name
        starts: list[tuple[bytes, int]] = []
        skipped = count = 0
        first: bytes | None = None
        for key in snapshot.iterator(include_value=False):
            if key in METADATA_KEYS:
                skipped += 1
                continue
            if first is None:
                first = key
            count += 1
            if count == partition_size:
                starts.append((first, count))
                first, count = None, 0
        if first is not None:
            starts.append((first, count))
        partitions = [
            KeySpan(
                path,
                source,
                key,
                size,
                number * partition_size,
                starts[number + 1][0] if number + 1 < len(starts) else None,
            )
            for number, (key, size) in enumerate(starts)
        ]
        info = DatasetInfo(
            format=self.format,
            layout="database",
            root=str(self.path.parent),
            labelled=self._labelled(partitions, codec),
            records=sum(len(p) for p in partitions),
            skipped={"metadata key": skipped} if skipped else {},
        )
        info.files[source] = {"codec": codec, "snapshot": "a linked copy of its files, read in one snapshot"}
        return info, partitions

    def _labelled(self, partitions: Sequence[KeySpan], codec: str, sample: int = 64) -> bool:
        if not partitions:
            return False
        values = (value for _, _, value in self._walk(partitions[0], 0, sample, values=True))
        return values_carry_labels(values, codec, self.options.allow_pickle, self.fields)

    def _walk(
        self, partition: KeySpan, start: int, stop: int | None, values: bool
    ) -> Iterator[tuple[int, bytes, bytes]]:
        _, snapshot = open_database(partition.path)
        stop = sys.maxsize if stop is None else stop
        offset = 0
        for item in snapshot.iterator(start=partition.first, stop=partition.end, include_value=values):
            key, value = item if values else (item, b"")
            if key in METADATA_KEYS:
                continue
            if offset >= stop:
                return
            if offset >= start:
                yield offset, key, value
            offset += 1

    def read(self, partition: KeySpan, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        codec = self.options.lmdb_codec or "auto"
        allow_pickle, fields = self.options.allow_pickle, self.fields  # an option's lookup, once
        for offset, key, value in self._walk(partition, start, stop, values=True):
            record = Record(partition.source, encode_key(key), partition.first_index + offset, None)
            decode_value(record, value, codec, allow_pickle, fields)
            yield record

    def close(self) -> None:
        close_database(str(self.path.resolve()))

    def members(self, partitions: Sequence[KeySpan]) -> Iterator[str]:
        for path in sorted(self.path.iterdir()):
            if (
                path.is_file()
                and path.name != "LOCK"
                and path.name != "LOG"
                and not path.name.startswith("LOG.")
            ):
                yield str(path)

    def locate(self, partition: KeySpan, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        wanted = set(offsets)
        found = {
            offset: (partition.source, encode_key(key), partition.first_index + offset)
            for offset, key, _ in self._walk(
                partition, min(offsets, default=0), max(offsets, default=-1) + 1, values=False
            )
            if offset in wanted
        }
        return [
            found.get(o) or (partition.source, f"#{partition.first_index + o}", partition.first_index + o)
            for o in offsets
        ]
