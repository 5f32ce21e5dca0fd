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

import os
import re
from collections.abc import Iterator, Mapping
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
    options = {k: v for k, v in options.items() if not isinstance(v, Mapping)}
    if isinstance(nested, Mapping):
        options |= dict(nested)
    try:
        return UPath(str(text), **options)
    except (ImportError, ValueError) as error:  # an unknown protocol, or its library missing
        raise UsageError(f"{text}: {error}") from None


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
    with remote_errors(path):
        info = path.fs.info(path.path)
    version = info.get("ETag") or info.get("etag") or info.get("generation") or info.get("mtime")
    version = version or info.get("LastModified") or info.get("last_modified") or ""
    return int(info.get("size") or 0), str(version).strip('"')


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
