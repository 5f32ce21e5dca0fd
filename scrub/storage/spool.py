"""Objects read once: copies the driver makes of the objects it must read whole while opening a
dataset, for the workers to read instead of the objects.

A WebDataset shard's samples are counted by walking its tar headers before the shard can be cut
into numbered partitions; in a bucket that walk fetches the whole shard (its headers lie between
every member), and then the workers fetched it again for their partitions. With a `Spool` the
walk fetches each shard once, with one GET, into local scratch, walks the copy, and the shard's
partitions name the copy, which the workers (processes or threads of this machine, or a cluster
on it) read from the page cache. The dataset is still what its objects are: partitions, findings,
the fingerprint, the result cache and the memo name the object and its listed version; only
where the bytes are read from changes.

The copies hold at most `ROOM_SHARE` of the scratch disk's free space (less `SPARE_BYTES`), and
at most `MOST_BYTES`: all of them are fetched before the scan starts (its partitions are counted
from them), so a dataset of terabytes would fill a disk and wait long before its first record.
An object beyond that is read where it is, twice, and the summary says how many were. The
folder is named after this process (`scrub.fixing.outputs.scratch_folder`): removed when the
dataset is closed, at the latest when this process exits, or by the next run when this one was
killed.
"""

from __future__ import annotations

import shutil
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from scrub.storage import Location, location, remote_errors, storage_of
from scrub.storage.staging import SPARE_BYTES
from scrub.wording import byte_size, counted

#: the share of the scratch disk's free space a run's copies may take (the rest is the user's)
ROOM_SHARE = 0.5
#: the most bytes a run's copies take, whatever the disk's room
MOST_BYTES = 64 << 30


class Spool:
    """Local copies of the objects one opening reads whole (see the module's docstring)."""

    def __init__(self) -> None:
        #: the scratch folder of the copies, made by the first (an opening that copies nothing
        #: makes none)
        self.folder: Path | None = None
        self.room = 0
        self.copied = self.copied_bytes = 0
        self.left = self.left_bytes = 0  # objects that did not fit
        self._lock = threading.Lock()
        self._taken: dict[str, Path] = {}
        self._refused: set[str] = set()

    def _made(self) -> Path:
        """The folder of the copies (made now, under the lock, when it is the first)."""
        if self.folder is None:
            from scrub.fixing.outputs import scratch_folder

            self.folder = Path(scratch_folder("spool"))
            free = shutil.disk_usage(self.folder).free
            self.room = max(0, min(int(free * ROOM_SHARE), free - SPARE_BYTES, MOST_BYTES))
            # `remove` removes it when the dataset is closed; this is the net for a caller that
            # drops it (at the latest when this process exits), and the next run's for a killed one
            weakref.finalize(self, shutil.rmtree, self.folder, True)
        return self.folder

    def take(self, place: Location) -> Path | None:
        """A local copy of the object ``place``, fetched now with one request (or the one taken
        before); None where it is on this machine already, or would not fit (it is then read
        where it is)."""
        storage = storage_of(place)
        if storage.local_path(place) is not None:
            return None
        size = storage.size(place)  # the listing's: no request
        with self._lock:
            if str(place) in self._taken or str(place) in self._refused:
                return self._taken.get(str(place))
            folder = self._made()
            if self.copied_bytes + size > self.room:
                self._refused.add(str(place))
                self.left += 1
                self.left_bytes += size
                return None
            self.copied += 1
            self.copied_bytes += size
            copy = folder / f"{len(self._taken):06d}-{place.name}"  # the name tells compression
            self._taken[str(place)] = copy
        try:
            with remote_errors(place):
                place.fs.get_file(place.path, str(copy))
        except BaseException:
            copy.unlink(missing_ok=True)
            with self._lock:
                del self._taken[str(place)]
                self.copied -= 1
                self.copied_bytes -= size
            raise
        return copy

    def copy_of(self, place: Location) -> Path | None:
        """Where `take` copied ``place`` (None: it did not)."""
        return self._taken.get(str(place))

    def remove(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self._taken.clear()

    @property
    def note(self) -> str | None:
        """What the summary says of the copies: where they were read, and which did not fit."""
        said = []
        if self.copied:
            said.append(
                f"{counted(self.copied, 'object')} ({byte_size(self.copied_bytes)}) read once into local "
                "scratch and scanned there (removed after the run)"
            )
        if self.left:
            said.append(
                f"{counted(self.left, 'object')} ({byte_size(self.left_bytes)}) did not fit in "
                f"{byte_size(self.room)} of scratch and {'was' if self.left == 1 else 'were'} read twice "
                "(opening, then scanning): set TMPDIR to a disk with more room (copies take at most "
                f"half its free space and {byte_size(MOST_BYTES)})"
            )
        return "; ".join(said) or None


_CURRENT: ContextVar[Spool | None] = ContextVar("scrub_spool", default=None)


@contextmanager
def spooling(spool: Spool | None) -> Iterator[None]:
    """Make ``spool`` the one `current_spool` gives while a dataset is opened."""
    token = _CURRENT.set(spool)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_spool() -> Spool | None:
    """The spool of the opening under way, if it keeps copies (see `spooling`)."""
    return _CURRENT.get()


def read_once(place: Location, spool: Spool | None) -> Location:
    """Where the opening reads ``place`` whole: the local copy ``spool`` makes of it (one
    request), else ``place`` itself (a file, no spool, or no room for a copy)."""
    copy = spool.take(place) if spool is not None else None
    return place if copy is None else copy


def copy_carried(place: Location, spool: Spool | None) -> str | None:
    """What a partition of ``place`` carries for its worker to read: the path of the copy
    ``spool`` made of it (`read_once`), else None."""
    copy = spool.copy_of(place) if spool is not None else None
    return None if copy is None else str(copy)


def read_from(path: str, copy: str | None, storage_options: Mapping[str, Any] | None) -> Location:
    """Where a worker reads a partition of ``path``: the copy it carries (`copy_carried`), else
    the file or object."""
    return Path(copy) if copy is not None else location(path, storage_options)
