"""Datasets where they live: a path on this machine, or a URL of object storage (``s3://``,
``gs://``, ``az://``, ``hf://``, ``memory://``...) through fsspec.

A URL becomes a `universal_pathlib` ``UPath``, which has the ``pathlib`` interface readers
already use (``exists``, ``is_dir``, ``iterdir``, ``open``, ``stat``, ``/``) and carries its
storage options (endpoint, credentials' profile...) with it when a reader is pickled to a
worker: each worker opens the objects itself, and no shared file system is needed. ``file://``
URLs are plain paths. Credentials come from where the SDKs look for them (the environment,
``~/.aws``, ...) unless ``storage-options`` says otherwise; the options are never recorded in a
manifest or a summary (they may hold secrets).

Readers read through the functions below (`read_bytes`, `open_binary`, `stat_version`) so that a
local file keeps its fast path (one ``open`` and ``read``, memory maps) and an object gets range
reads with read-ahead.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import IO, Any, TypeGuard, cast

from scrub.errors import UnusableDataset, UsageError

#: ``scheme://`` at the start of an argument: a URL, not a path
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: fsspec's block for objects read as a stream (tar shards, JSON Lines): large enough that a
#: request's latency is small against its transfer, small enough that a partition's first record
#: comes quickly
STREAM_BLOCK = 8 << 20

#: objects a worker fetches at once where each record is an object of its own (image folders):
#: a small object's GET is mostly the store's latency (tens of ms on S3) where checking it takes
#: a fraction of a ms, so a worker needs dozens in flight to keep its core busy; 64 per worker
#: keeps a machine's workers (cores x 64) far under what a bucket serves (S3: 5,500 GETs/s per
#: prefix, more across prefixes) and under the open sockets a process may hold
FETCH_CONCURRENCY = 64
#: how long a prefix's listing is reused (`list_objects`): sniffing a prefix and opening it list
#: it once, a later scan lists it again
LISTING_SECONDS = 30.0

#: a dataset's location: a local path or an object store's `UPath`
Location = Any


def is_url(text: str | PurePath | Any) -> bool:
    """Whether ``text`` names an object by URL (``file://`` names a local path)."""
    if not isinstance(text, (str, PurePath)) and hasattr(text, "protocol"):
        return getattr(text, "protocol", "") not in ("", "file", "local")
    return bool(URL.match(str(text))) and not str(text).startswith("file://")


def is_location(value: object) -> TypeGuard[Location]:
    """Whether ``value`` names one place (a path, a URL, a `UPath`), not a sequence of them."""
    return isinstance(value, (str, PurePath)) or hasattr(value, "protocol")


def location(text: str | PurePath | Any, storage_options: Mapping[str, Any] | None = None) -> Location:
    """``text`` as a `Path`, or as a ``UPath`` with ``storage_options`` when it is a URL."""
    if not isinstance(text, (str, PurePath)):
        return text  # a UPath already
    if str(text).startswith("file://"):
        return Path(str(text)[len("file://") :])
    if not is_url(text):
        return Path(text)
    try:
        from upath import UPath
    except ImportError:
        raise UsageError(
            f"{text}: reading object storage needs universal_pathlib and fsspec: pip install 'scrub[cloud]'"
        ) from None
    protocol = str(text).split("://", 1)[0]
    options = dict(storage_options or {})
    nested = options.pop(protocol, None)  # a [storage-options.s3] table: for that protocol only
    options = {k: v for k, v in options.items() if not (isinstance(v, Mapping) and _is_protocol(k))}
    if isinstance(nested, Mapping):
        options |= dict(nested)
    if protocol in ("s3", "s3a"):  # botocore's pool (10 connections) would cap `read_objects`
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("max_pool_connections", FETCH_CONCURRENCY)
        options["config_kwargs"] = config
    try:
        return UPath(str(text), **options)
    except (ImportError, ValueError) as error:  # an unknown protocol, or its library missing
        raise UsageError(f"{text}: {error}") from None


def _is_protocol(name: str) -> bool:
    """Whether a storage-options table is another protocol's (``{"gs": {...}}``), not an option
    whose value is a table (s3fs's ``client_kwargs``, ``config_kwargs``)."""
    from fsspec.registry import known_implementations, registry  # type: ignore[import-untyped]

    return name in known_implementations or name in registry


def read_bytes(path: Location) -> bytes:
    """A whole file or object."""
    if is_url(path):
        with remote_errors(path):
            return path.read_bytes()
    return read_file(os.fspath(path))


def open_binary(path: Location, block_size: int = STREAM_BLOCK) -> IO[bytes]:
    """A file or object as a binary stream; an object's is read in ``block_size`` ranges with
    read-ahead, as a reader walking it from start to end needs."""
    if is_url(path):
        with remote_errors(path):
            return path.fs.open(path.path, "rb", block_size=block_size, cache_type="readahead")
    return open(path, "rb")


def stat_version(path: Location) -> tuple[int, int | str]:
    """(size, version) of a file or object: its mtime in ns locally; an object's ETag (S3, Azure)
    or generation (GCS), else its modification time: what changes when it is rewritten. The
    fingerprint and the result cache key objects by it as they key files by ``stat``."""
    if not is_url(path):
        status = os.stat(path)
        return status.st_size, status.st_mtime_ns
    listed = _LISTED_VERSIONS.get(str(path))
    if listed is not None:
        return listed
    with remote_errors(path):
        info = path.fs.info(path.path)
    return version_of(info)


def version_of(info: Mapping[str, Any]) -> tuple[int, str]:
    """(size, version) of an object from what its store says of it (`stat_version`), as a
    listing gives it too."""
    version = info.get("ETag") or info.get("etag") or info.get("generation") or info.get("mtime")
    version = version or info.get("LastModified") or info.get("last_modified") or ""
    return int(info.get("size") or 0), str(version).strip('"')


def read_head(path: Location, size: int) -> bytes:
    """The first ``size`` bytes of a file or object (a format's magic number): one range
    request for an object."""
    if is_url(path):
        with remote_errors(path):
            return bytes(path.fs.cat_file(path.path, start=0, end=size))
    with open(path, "rb") as file:
        return file.read(size)


def open_random(path: Location) -> IO[bytes]:
    """A file or object for random access by a reader that asks for exactly the ranges it needs
    (a Parquet footer, then only the column chunks of its row groups): an object's reads are
    each one range request, without read-ahead (a block read ahead would be a row group not
    wanted)."""
    if is_url(path):
        with remote_errors(path):
            return path.fs.open(path.path, "rb", cache_type="none")
    return open(path, "rb")


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


@contextmanager
def remote_errors(path: Location) -> Iterator[None]:
    """Object-store errors as one line: a missing credential, bucket or object is an unusable
    dataset (exit 2), not a traceback."""
    try:
        yield
    except (UnusableDataset, UsageError):
        raise
    except FileNotFoundError:
        raise UnusableDataset(f"{path}: no such object or bucket") from None
    except TypeError as error:  # an option the store's filesystem does not take
        if "keyword argument" not in str(error):
            raise
        raise UsageError(f"storage-options: {first_words(error)}") from None
    except Exception as error:  # the SDKs' own error types vary by store and version
        name = type(error).__name__
        if isinstance(error, PermissionError) or "Credential" in name or "AccessDenied" in str(error):
            raise UnusableDataset(
                f"{path}: access denied or no credentials ({first_words(error)}): set them as the "
                "SDK expects (AWS_ACCESS_KEY_ID..., ~/.aws) or in storage-options"
            ) from None
        if isinstance(error, OSError) or "Endpoint" in name or "Connect" in name:
            raise UnusableDataset(f"{path}: cannot reach the object store ({first_words(error)})") from None
        raise


def first_words(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def read_file(path: str) -> bytes:
    """A whole file by one open, one fstat and (usually) one read: ``open(path, "rb").read()``
    costs more a file (its buffer and a last read to find the end), a sizeable share of reading a
    small JPEG from the page cache (see docs/benchmarks.md, "Design measurements"). A file that
    grows or shrinks meanwhile is read to its end."""
    return read_file_version(path)[0]


def read_file_version(path: str, opened: int | None = None) -> tuple[bytes, int, int]:
    """`read_file`, and the (size, mtime_ns) its ``fstat`` gave: the version of the file the bytes
    were read from, as `scrub.scanning.fingerprint` records it, without a ``stat`` of its own.
    ``opened``: a descriptor of ``path`` opened earlier (`scrub.readers.base.will_need` keeps the
    one it announced a cold file with: an open and a close less a file), read and closed here if
    it is a regular file; anything else is opened again by its path, as if it had not been."""
    if opened is not None:
        try:
            status = os.fstat(opened)
            if stat.S_ISREG(status.st_mode):
                return _read_opened(opened, status)
        finally:
            os.close(opened)
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        return _read_opened(descriptor, os.fstat(descriptor))
    finally:
        os.close(descriptor)


def _read_opened(descriptor: int, status: os.stat_result) -> tuple[bytes, int, int]:
    size = status.st_size
    data = os.read(descriptor, size + 1)
    if len(data) == size:  # a regular file's read stops short only at its end
        return data, size, status.st_mtime_ns
    parts = [data]
    while data:
        data = os.read(descriptor, 1 << 20)
        parts.append(data)
    return b"".join(parts), size, status.st_mtime_ns


# -- byte ranges of objects (shards read by partition) ------------------------------------------

#: what `open_range` fetches past its range's end at a time: a partition's walk reads the header
#: after its last sample to know that sample is whole, and no more
PAST_END_BLOCK = 64 << 10


def object_size(path: Location) -> int:
    """The size of a file or object, in bytes."""
    if not is_url(path):
        return os.stat(path).st_size
    with remote_errors(path):
        return int(path.fs.size(path.path))


def open_range(
    path: Location, start: int = 0, end: int | None = None, block_size: int = STREAM_BLOCK
) -> IO[bytes]:
    """A file or object as a seekable binary stream positioned at ``start``, to be read mostly in
    ``[start, end)`` (``end`` None: to its end). A local file is a plain file. An object is
    fetched in ``block_size`` ranges that stop at ``end``, the next one requested while the
    current one is consumed (read-ahead), so that a worker reading one partition of a shard
    reads that partition's bytes and little more; reads past ``end`` fetch `PAST_END_BLOCK`."""
    if not is_url(path):
        file = open(path, "rb")  # noqa: SIM115 - the caller closes it
        file.seek(start)
        return file
    with remote_errors(path):
        size = int(path.fs.size(path.path))
    return cast(IO[bytes], RangeFile(path, size, start, size if end is None else min(end, size), block_size))


def read_range(path: Location, start: int, length: int) -> bytes:
    """``length`` bytes of a file or object from ``start`` (fewer at its end): one request."""
    if not is_url(path):
        with open(path, "rb") as file:
            file.seek(start)
            return file.read(length)
    with remote_errors(path):
        return bytes(path.fs.cat_file(path.path, start=start, end=start + length))


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


def forget_listings(path: Location) -> None:
    """Drop what fsspec remembers of the store's listings (sizes, ETags), so that a dataset
    opened again in the same process (the API, a rerun with ``--cache``) sees objects rewritten
    since, as a new process would."""
    if is_url(path):
        path.fs.invalidate_cache()
        _LISTINGS.clear()  # scrub's own, of image folders (`list_objects`)
        _LISTED_VERSIONS.clear()
