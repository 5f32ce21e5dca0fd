"""Object storage through fsspec: `Storage` over a bucket's objects (``s3://``, ``gs://``,
``az://``, ``hf://``, ``memory://``...), named by `upath.UPath` locations that carry their storage
options to the workers that open them.

A prefix is listed once (`list_objects`: one paginated listing, not a request per folder), and the
listing's (size, ETag) of each object serves `ObjectStorage.version` without a request per object.
A stream is read in `STREAM_BLOCK` ranges with read-ahead, a partition of a shard by its byte
range (`RangeFile`), a table file's column chunks by exactly the ranges it asks for; small
objects (images) are fetched dozens at a time (`read_objects`), as each mostly waits on the
store's latency.
"""

from __future__ import annotations

import errno
import io
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import IO, Any, cast

from scrub.storage.base import STREAM_BLOCK, Location, Publication, Storage
from scrub.storage.buckets import BucketOutput
from scrub.storage.remote import first_words, remote_errors

#: objects a worker fetches at once where each record is an object of its own (image folders):
#: a small object's GET is mostly the store's latency (tens of ms on S3) where checking it takes
#: a fraction of a ms, so a worker needs dozens in flight to keep its core busy; 64 per worker
#: keeps a machine's workers (cores x 64) far under what a bucket serves (S3: 5,500 GETs/s per
#: prefix, more across prefixes) and under the open sockets a process may hold
FETCH_CONCURRENCY = 64
#: how long a prefix's listing is reused (`list_objects`): sniffing a prefix and opening it list
#: it once; each opening of a dataset forgets the listings before (`Storage.forget`)
LISTING_SECONDS = 30.0
#: what `RangeFile` fetches past its range's end at a time: a partition's walk reads the header
#: after its last sample to know that sample is whole, and no more
PAST_END_BLOCK = 64 << 10
#: shards (or other objects) a driver walks side by side, each waiting on its requests
WALKERS = 8


class ObjectStorage(Storage):
    forks_cleanly = False  # fsspec's asynchronous clients hold an event loop and sockets
    requests_in_flight = WALKERS

    def local_path(self, path: Location) -> None:
        return None

    def identity(self, path: Location) -> str:
        return str(path).rstrip("/")

    def relative(self, path: Location, root: Location) -> str:
        return str(path)[len(str(root).rstrip("/")) + 1 :]

    def read_bytes(self, path: Location) -> bytes:
        with remote_errors(path):
            return bytes(path.read_bytes())

    def read_range(self, path: Location, start: int, length: int) -> bytes:
        with remote_errors(path):
            try:
                return bytes(path.fs.cat_file(path.path, start=start, end=start + length))
            except OSError as error:  # S3's 416: the range starts at or past the end (a file's read: b"")
                if error.errno != errno.EINVAL or "range" not in str(error).lower():
                    raise
                return b""

    def open_stream(self, path: Location, block_size: int = STREAM_BLOCK) -> IO[bytes]:
        with remote_errors(path):
            return cast(
                IO[bytes], path.fs.open(path.path, "rb", block_size=block_size, cache_type="readahead")
            )

    def open_random(self, path: Location, size: int | None = None) -> IO[bytes]:
        """With ``size`` (the driver's listing's), a worker's reads are GETs only: fsspec's file
        would ask the store for the object's details (a HEAD) before its first range, and
        s3fs's reads ask for them too, to compare ETags, where the details are known (as the
        WebDataset ranges, read with ``cat_file``, never compare)."""
        known = {"size": size} if size is not None else {}
        with remote_errors(path):
            opened = path.fs.open(path.path, "rb", cache_type="none", **known)
        if size is not None and getattr(opened, "_details", "") is None:
            opened.details = {"name": path.path, "size": size, "type": "file"}
        return cast(IO[bytes], opened)

    def open_range(
        self,
        path: Location,
        start: int = 0,
        end: int | None = None,
        block_size: int = STREAM_BLOCK,
        size: int | None = None,
    ) -> IO[bytes]:
        size = self.size(path) if size is None else size
        stop = size if end is None else min(end, size)
        return cast(IO[bytes], RangeFile(path, size, start, stop, block_size))

    def size(self, path: Location) -> int:
        listed = _LISTED_VERSIONS.get(str(path))  # this run's listing (`forget` drops it)
        if listed is not None:
            return listed[0]
        with remote_errors(path):
            return int(path.fs.size(path.path))

    def version(self, path: Location) -> tuple[int, int | str]:
        listed = _LISTED_VERSIONS.get(str(path))
        if listed is not None:
            return listed
        with remote_errors(path):
            info = path.fs.info(path.path)
        return version_of(info)

    def known_version(self, name: str) -> tuple[int, int | str] | None:
        return _LISTED_VERSIONS.get(name)

    def walk(self, folder: Location) -> Iterator[tuple[str, list[str], list[str]]]:
        """From one listing of the prefix (`list_objects`): its folders are the keys' parents."""
        tree: dict[str, tuple[set[str], list[str]]] = {"": (set(), [])}
        for key in list_objects(folder):
            parent, _, name = key.rpartition("/")
            tree.setdefault(parent, (set(), []))[1].append(name)
            while parent:  # every folder above it holds the next one down
                above, _, child = parent.rpartition("/")
                children = tree.setdefault(above, (set(), []))[0]
                if child in children:
                    break
                children.add(child)
                parent = above
        pending = [""]
        while pending:
            relative = pending.pop()
            below, files = sorted(tree[relative][0]), sorted(tree[relative][1])
            yield relative, below, files  # the caller may prune ``below``
            pending += [f"{relative}/{name}" if relative else name for name in reversed(below)]

    def publish(
        self, destination: Location, *, force: bool, what: str, suffixes: tuple[str, ...] = ()
    ) -> Publication:
        return BucketOutput(destination, force=force, what=what, suffixes=suffixes)

    def errors_as_one_line(self, path: Location) -> AbstractContextManager[None]:
        return remote_errors(path)

    def forget(self, path: Location) -> None:
        path.fs.invalidate_cache()
        _LISTINGS.clear()  # scrub's own (`list_objects`)
        _LISTED_VERSIONS.clear()


def version_of(info: Mapping[str, Any]) -> tuple[int, str]:
    """(size, version) of an object from what its store says of it (`stat_version`), as a
    listing gives it too."""
    version = info.get("ETag") or info.get("etag") or info.get("generation") or info.get("mtime")
    version = version or info.get("LastModified") or info.get("last_modified") or ""
    return int(info.get("size") or 0), str(version).strip('"')


#: URL -> (size, version) of the objects the latest listings found (`list_objects`): the
#: fingerprint's `stat_version` of a folder of a million objects then costs no request per object
_LISTED_VERSIONS: dict[str, tuple[int, str]] = {}
#: prefix URL -> (when, its listing): reused for `LISTING_SECONDS`
_LISTINGS: dict[str, tuple[float, dict[str, int]]] = {}


def list_objects(prefix: Location) -> dict[str, int]:
    """Every object below ``prefix``, recursively, by its key relative to the prefix (``cat/1.jpg``)
    -> its size, in key order: one listing of the whole prefix (paginated by the store), not a
    request per folder. An object that is the prefix itself (a file) is not in it."""
    url = str(prefix).rstrip("/")
    known = _LISTINGS.get(url)
    if known is not None and time.monotonic() - known[0] < LISTING_SECONDS:
        return known[1]
    with remote_errors(prefix):
        found = prefix.fs.find(prefix.path, detail=True)
    base = prefix.path.rstrip("/") + "/"
    scheme = url.split("://", 1)[0]
    listing: dict[str, int] = {}
    for name in sorted(found):
        info = found[name]
        if info.get("type") == "directory" or not name.startswith(base) or name.endswith("/"):
            continue  # folder markers (zero-byte ``key/`` objects) hold no record
        size, version = version_of(info)
        listing[name[len(base) :]] = size
        _LISTED_VERSIONS[f"{scheme}://{name}"] = (size, version)
    if len(_LISTINGS) > 16:
        _LISTINGS.clear()
    _LISTINGS[url] = (time.monotonic(), listing)
    return listing


def missing_objects(places: Sequence[Location]) -> list[Location]:
    """The objects or prefixes of ``places`` that do not exist, found by listing each folder they
    are in once (a listing the file system keeps, so it also answers what their openings ask
    about them, `scrub.storage.listings_of_this_run`), not by asking about each: a pattern of 200
    shards costs its prefix's listing, not 200 requests. One the listing does not show is asked
    about on its own."""
    listed: dict[str, set[str]] = {}
    for place in places:
        parent = place.parent
        if str(parent) not in listed:
            try:
                listed[str(parent)] = {name.rstrip("/") for name in parent.fs.ls(parent.path, detail=False)}
            except FileNotFoundError:
                listed[str(parent)] = set()
    return [
        place
        for place in places
        if place.path.rstrip("/") not in listed[str(place.parent)] and not place.exists()
    ]


def read_objects(
    prefix: Location, keys: Sequence[str], concurrency: int = FETCH_CONCURRENCY
) -> list[bytes | OSError]:
    """The objects ``prefix/key`` of each of ``keys``, fetched at most ``concurrency`` at a time
    (over the store's asynchronous client where it has one); an object that cannot be read is
    the OSError saying why (FileNotFoundError when it is gone), for its record's problem."""
    base = prefix.path.rstrip("/")
    paths = [f"{base}/{key}" for key in keys]
    if not paths:
        return []
    fs = prefix.fs
    # ``cat_ranges``, not ``cat``: ``cat`` would take a key holding ``[`` or ``*`` for a glob
    bound = {"batch_size": concurrency} if getattr(fs, "async_impl", False) else {}
    with remote_errors(prefix):
        found = fs.cat_ranges(paths, None, None, on_error="return", **bound)
    results: list[bytes | OSError] = []
    for value in found:
        if isinstance(value, BaseException) and not isinstance(value, OSError):
            value = OSError(errno.EIO, first_words(value))
        elif isinstance(value, OSError) and value.strerror is None:
            value = type(value)(errno.EIO, first_words(value))
        results.append(value)
    return results


class RangeFile(io.RawIOBase):
    """An object read by ranges with one range of read-ahead (see `open_range`)."""

    def __init__(self, path: Location, size: int, start: int, end: int, block_size: int) -> None:
        super().__init__()
        self.location, self.size, self.end, self.block_size = path, size, end, max(block_size, 1 << 16)
        self.position = start
        self.buffer, self.buffer_start = b"", start
        self.ahead: tuple[int, int, Future[bytes]] | None = None
        self.executor: ThreadPoolExecutor | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self.size - self.position
        parts = []
        while size > 0 and self.position < self.size:
            if not 0 <= self.position - self.buffer_start < len(self.buffer):
                self._fill(size)
                if not 0 <= self.position - self.buffer_start < len(self.buffer):
                    break  # the object is shorter than it was
            at = self.position - self.buffer_start
            piece = self.buffer[at : at + size]
            parts.append(piece)
            self.position += len(piece)
            size -= len(piece)
        return b"".join(parts)

    def readinto(self, view: Any) -> int:
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def _fill(self, wanted: int) -> None:
        """Make the buffer a block that holds the current position: the read-ahead block where
        it holds it (a walk over headers may seek past the current block's end), else one fetched
        now; then ask for the block after it."""
        start = self.position
        ahead, self.ahead = self.ahead, None
        if ahead is not None and ahead[0] <= start < ahead[1]:
            with remote_errors(self.location):
                self.buffer = ahead[2].result()
            self.buffer_start = ahead[0]
        else:
            if ahead is not None:
                ahead[2].cancel()
            if start < self.end:
                stop = min(self.end, start + max(self.block_size, wanted))
            else:
                stop = min(self.size, start + max(PAST_END_BLOCK, wanted))
            self.buffer, self.buffer_start = self._fetch(start, stop), start
        stop = self.buffer_start + len(self.buffer)
        if stop < self.end:
            if self.executor is None:
                self.executor = ThreadPoolExecutor(1, thread_name_prefix="scrub-read-ahead")
            until = min(self.end, stop + self.block_size)
            self.ahead = (stop, until, self.executor.submit(self._fetch, stop, until))

    def _fetch(self, start: int, stop: int) -> bytes:
        with remote_errors(self.location):
            return bytes(self.location.fs.cat_file(self.location.path, start=start, end=stop))

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.executor = None
        self.buffer, self.ahead = b"", None
        super().close()
