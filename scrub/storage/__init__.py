"""Datasets where they live: a path on this machine, or a URL of object storage (``s3://``,
``gs://``, ``az://``, ``hf://``, ``memory://``...) through fsspec.

One interface (`scrub.storage.base.Storage`: open, ranged reads, a version, listing, staged
publishing) with two implementations, `scrub.storage.local` and `scrub.storage.objects`;
`storage_of` gives a location's. Only this package tells a URL from a path: readers, writers and
the fix ask the interface, and ask a capability where the two differ (`Storage.local_path`).

A URL becomes a `universal_pathlib` ``UPath``, which has the ``pathlib`` interface readers
already use (``exists``, ``is_dir``, ``/``) and carries its storage options (endpoint,
credentials' profile...) with it when a reader is pickled to a worker: each worker opens the
objects itself, and no shared file system is needed. ``file://`` URLs are plain paths.
Credentials come from where the SDKs look for them (the environment, ``~/.aws``, ...) unless
``storage-options`` says otherwise; the options are never recorded in a manifest or a summary
(they may hold secrets).

The functions below are the interface's, for one location: `read_bytes(path)` is
``storage_of(path).read_bytes(path)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path, PurePath
from typing import IO, Any, TypeGuard, TypeVar

from scrub.errors import UsageError
from scrub.paths import is_within
from scrub.storage.base import STREAM_BLOCK, Location, Publication, Storage
from scrub.storage.local import LocalStorage, read_file, read_file_version
from scrub.storage.objects import (
    FETCH_CONCURRENCY,
    PAST_END_BLOCK,
    ObjectStorage,
    RangeFile,
    first_words,
    list_objects,
    missing_objects,
    read_objects,
    remote_errors,
    version_of,
)

__all__ = [
    "FETCH_CONCURRENCY",
    "PAST_END_BLOCK",
    "STREAM_BLOCK",
    "Location",
    "Publication",
    "RangeFile",
    "Storage",
    "first_words",
    "forget_listings",
    "is_location",
    "list_objects",
    "listings_of_this_run",
    "location",
    "missing_objects",
    "object_size",
    "on_this_machine",
    "open_binary",
    "open_random",
    "open_range",
    "overlapping",
    "read_bytes",
    "read_file",
    "read_file_version",
    "read_head",
    "read_objects",
    "read_range",
    "remote_errors",
    "same_place",
    "side_by_side",
    "stat_version",
    "storage_of",
    "version_of",
]

#: ``scheme://`` at the start of an argument: a URL, not a path
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

LOCAL = LocalStorage()
OBJECTS = ObjectStorage()


def is_url(text: str | PurePath | Any) -> bool:
    """Whether ``text`` names an object by URL (``file://`` names a local path): which
    implementation a location belongs to (`storage_of`), asked nowhere outside this package."""
    if not isinstance(text, (str, PurePath)) and hasattr(text, "protocol"):
        return getattr(text, "protocol", "") not in ("", "file", "local")
    return bool(URL.match(str(text))) and not str(text).startswith("file://")


def storage_of(path: str | PurePath | Any) -> Storage:
    """The storage ``path`` (a path, a URL, a ``UPath``) lives in."""
    return OBJECTS if is_url(path) else LOCAL


def on_this_machine(path: str | PurePath | Any) -> bool:
    """Whether ``path`` has a name a library that opens files by name can open
    (`Storage.local_path`)."""
    return storage_of(path).local_path(path) is not None


def same_place(path: str | PurePath | Any) -> str:
    """What names ``path`` from anywhere (`Storage.identity`)."""
    return storage_of(path).identity(path)


def overlapping(first: str | PurePath | Any, second: str | PurePath | Any) -> bool:
    """Whether two places are one, or one lies inside the other (by `same_place`: symlinks
    resolved on a disk, keys in a bucket); places in different storages never overlap."""
    if storage_of(first) is not storage_of(second):
        return False
    a, b = same_place(first), same_place(second)
    return is_within(a, b) or is_within(b, a)


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
    return storage_of(path).read_bytes(path)


def open_binary(path: Location, block_size: int = STREAM_BLOCK) -> IO[bytes]:
    return storage_of(path).open_stream(path, block_size)


def open_random(path: Location, size: int | None = None) -> IO[bytes]:
    return storage_of(path).open_random(path, size)


def open_range(
    path: Location,
    start: int = 0,
    end: int | None = None,
    block_size: int = STREAM_BLOCK,
    size: int | None = None,
) -> IO[bytes]:
    return storage_of(path).open_range(path, start, end, block_size, size)


def read_range(path: Location, start: int, length: int) -> bytes:
    return storage_of(path).read_range(path, start, length)


def read_head(path: Location, size: int) -> bytes:
    return storage_of(path).read_head(path, size)


def object_size(path: Location) -> int:
    return storage_of(path).size(path)


def stat_version(path: Location) -> tuple[int, int | str]:
    return storage_of(path).version(path)


def forget_listings(path: Location) -> None:
    """Forget what this process listed, and the versions listed, where ``path`` is: an object
    rewritten since is seen as it is now. Inside `listings_of_this_run`, only the first time for
    each store: the run's datasets then share what it lists."""
    forgotten = _RUN_FORGOT.get()
    if forgotten is not None:
        store = (type(storage_of(path)).__name__, id(getattr(path, "fs", None)))
        if store in forgotten:
            return
        forgotten.add(store)
    storage_of(path).forget(path)


#: inside `listings_of_this_run`: the stores whose listings the run forgot (type, file system)
_RUN_FORGOT: ContextVar[set[tuple[str, int]] | None] = ContextVar("scrub_run_forgot", default=None)


@contextmanager
def listings_of_this_run() -> Iterator[None]:
    """One run of one or several datasets (a brace pattern of shards, several URLs): what earlier
    runs in this process listed is forgotten once per store, at its first listing or opening
    (`forget_listings`), and every dataset's opening then shares what the run lists: a pattern's
    objects are listed with their prefix once, not asked about one by one. Nested, the outer
    run's listings are kept."""
    if _RUN_FORGOT.get() is not None:
        yield
        return
    token = _RUN_FORGOT.set(set())
    try:
        yield
    finally:
        _RUN_FORGOT.reset(token)


T = TypeVar("T")
R = TypeVar("R")


def side_by_side(function: Callable[[T], R], items: Sequence[T], where: Location) -> list[R]:
    """``function`` of each item, in order: as many at a time, on threads, as the storage of
    ``where`` keeps requests in flight (`Storage.requests_in_flight`: objects' reads, each mostly
    waiting on the store), else one after another (a disk's)."""
    workers = min(storage_of(where).requests_in_flight, len(items))
    if workers <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(function, items))
