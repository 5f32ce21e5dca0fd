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
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import IO, Any

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
    return _version(info)


def _version(info: Mapping[str, Any]) -> tuple[int, str]:
    """(size, version) of an object from what its store says of it (`stat_version`)."""
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
        size, version = _version(info)
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
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(descriptor).st_size
        data = os.read(descriptor, size + 1)
        if len(data) == size:  # a regular file's read stops short only at its end
            return data
        parts = [data]
        while data:
            data = os.read(descriptor, 1 << 20)
            parts.append(data)
        return b"".join(parts)
    finally:
        os.close(descriptor)
