"""What a reader learned of a file or object at one version, kept for the next run.

A nightly ``scan --cache DIR`` of a dataset that did not change should cost what listing it
costs. The result cache (`scrub.scanning.cache`) spares reading records whose results it holds,
but a reader learns things on opening too: a WebDataset shard's samples and where each
partition starts (a walk over the shard's headers, which in a bucket fetches the shard), the
kind of records its first samples are. A `Memo` keeps each such fact with the version of the
file it was learned from (`scrub.storage.base.Storage.version`: size + mtime locally, size +
ETag in a bucket, from the listing, so asking costs no request), and gives it back while that
version is unchanged: the file is not read again to learn it.

One file per dataset in DIR, ``memo-<digest of the dataset's place>.scrubmemo``: a magic line,
the XXH3-128 of the payload, the payload (msgpack: key -> [version, value]). It holds the facts
this run used, so a file that left the dataset leaves the memo. A file whose hash does not match,
or that does not parse, is ignored (and rewritten): never trusted. Written atomically, and only
when something changed; DIR keeps the `MAX_FILES` most recently used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import numpy as np
import xxhash

from scrub.errors import ScrubError, UnusableDataset
from scrub.paths import beyond_most_recent
from scrub.storage import Location, same_place, storage_of

MAGIC = b"scrub-memo 1\n"
SUFFIX = ".scrubmemo"
#: memo files DIR keeps, the most recently used (as it keeps result files)
MAX_FILES = 64

T = TypeVar("T")


class Memo:
    """Facts learned of files at their versions: those of the last run (read from ``path``),
    and those this run used (written back by `save`). With no ``path``, nothing is kept: every
    fact is learned again, as without ``--cache``."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.reused = 0
        self.learned = 0
        self._old: dict[str, list] = _read(path) if path is not None else {}
        #: what the file holds now: the last run's facts, then what a `save` wrote (a scan saves
        #: again after its opening did, with the partitions' results it kept)
        self._saved = self._old
        self._new: dict[str, list] = {}

    @property
    def directory(self) -> Path | None:
        """The ``--cache`` directory this memo is kept in (None: it keeps nothing)."""
        return self.path.parent if self.path is not None else None

    @classmethod
    def for_dataset(cls, directory: Path | None, dataset: Location) -> Memo:
        """The memo of ``dataset`` in the cache directory (none without one)."""
        if directory is None:
            return cls()
        name = xxhash.xxh3_64_hexdigest(os.fsencode(same_place(dataset)))
        return cls(Path(directory) / f"memo-{name}{SUFFIX}")

    def remembered(
        self,
        kind: str,
        place: Location,
        learn: Callable[[], T],
        extra: str = "",
        dump: Callable[[T], Any] = lambda value: value,
        load: Callable[[Any], T] = lambda value: value,
        also: Sequence[Location] = (),
    ) -> T:
        """What ``learn`` learns of ``place`` (a file or object): from the last run where the
        place's version is the one it was learned at, else learned now and kept. ``extra``: what
        else the fact depends on (a partition size); ``also``: the other files it is learned
        from (the first samples of a dataset may span several), whose versions must be unchanged
        too; ``dump`` and ``load`` turn it into what msgpack holds (lists, dicts, numbers,
        strings, bytes) and back. The versions are taken before learning: a file rewritten
        meanwhile is learned again next time."""
        if self.path is None:
            return learn()
        held, version = self._held(kind, place, extra, also)
        if held is not None:
            return load(held[1])
        value = learn()
        if version is not None:  # (None: it says what is wrong with the file itself)
            self.keep(kind, place, extra, version, dump(value))
        return value

    def recall(self, kind: str, place: Location, extra: str = "") -> tuple[Any, list | None]:
        """What was kept of ``place`` (`keep`) at the version it has now, else None; and that
        version, taken now, for `keep` (None where it cannot be taken, or nothing is kept). For
        a fact learned later than asked for (a partition's result, after the scan)."""
        if self.path is None:
            return None, None
        held, version = self._held(kind, place, extra)
        return (held[1] if held is not None else None), version

    def keep(self, kind: str, place: Location, extra: str, version: list, value: Any) -> None:
        """Keep ``value`` (as msgpack holds it) of ``place`` at ``version`` (`recall`'s)."""
        self._new[_key(kind, place, extra)] = [version, value]
        self.learned += 1

    def _held(
        self, kind: str, place: Location, extra: str, also: Sequence[Location] = ()
    ) -> tuple[list | None, list | None]:
        """([version, fact] kept at the versions the places have now, marked used; else None),
        and those versions (None where one cannot be taken)."""
        try:
            version = [_version(one) for one in (place, *also)]
        except (OSError, UnusableDataset):
            return None, None
        key = _key(kind, place, extra)
        held = self._old.get(key)
        if held is None or held[0] != version:
            return None, version
        self._new[key] = held
        self.reused += 1
        return held, version

    @contextmanager
    def in_use(self) -> Iterator[Memo]:
        """This memo as `current_memo` (a sniff, which runs before any reader exists, asks it so)."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def save(self) -> str | None:
        """Keep what this run used for the next one; a note where it cannot be written."""
        if self.path is None or not (self._new or self._saved):
            return None
        from scrub.fixing.outputs import write_atomically

        payload = msgpack.packb(self._new, use_bin_type=True)
        try:
            if self._new == self._saved:  # as it is: marked used
                os.utime(self.path)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(self.path, MAGIC + xxhash.xxh3_128_digest(payload) + payload, "cache file")
                self._saved = dict(self._new)
        except (OSError, ScrubError) as error:
            return f"cache: cannot write {self.path} ({error}): the next scan learns its files again"
        for stale in beyond_most_recent(self.path.parent.glob(f"memo-*{SUFFIX}"), MAX_FILES):
            stale.unlink(missing_ok=True)
        return None


def _key(kind: str, place: Location, extra: str) -> str:
    return f"{kind}\0{same_place(place)}\0{extra}"


def _version(place: Location) -> list:
    """``place``'s version as the memo compares it: its storage's, and a local file's inode (a
    file replaced by another of its size and mtime, as ``rsync -t`` leaves one)."""
    storage = storage_of(place)
    version = list(storage.version(place))
    local = storage.local_path(place)
    if local is not None:
        version.append(os.stat(local).st_ino)
    return version


#: the memo of the dataset being opened (`Memo.in_use`); elsewhere (a worker) one that keeps nothing
_CURRENT: ContextVar[Memo | None] = ContextVar("scrub_memo", default=None)
#: what `current_memo` is outside an opening: it keeps nothing (`Memo.remembered` learns)
_NOTHING = Memo()


def packed_array(values: np.ndarray | None) -> list | None:
    """An array (of numbers, bytes or strings: not objects) as msgpack holds it: its dtype, shape
    and bytes; None as None."""
    if values is None:
        return None
    return [values.dtype.str, list(values.shape), np.ascontiguousarray(values).tobytes()]


def unpacked_array(held: list | None) -> np.ndarray | None:
    """`packed_array`'s array (a writable copy), or None."""
    if held is None:
        return None
    dtype, shape, data = held
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()


def current_memo() -> Memo:
    """The memo of the dataset being opened, or one that keeps nothing."""
    return _CURRENT.get() or _NOTHING


def _read(path: Path) -> dict[str, list]:
    """A memo file's facts; nothing where it is missing, damaged or of another layout."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    payload = data[len(MAGIC) + 16 :]
    if not data.startswith(MAGIC) or data[len(MAGIC) : len(MAGIC) + 16] != xxhash.xxh3_128_digest(payload):
        return {}
    try:
        facts = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException):
        return {}
    return facts if isinstance(facts, dict) else {}
