"""The storage interface: what readers, writers and the fix ask of the place a dataset lives.

Two implementations: `scrub.storage.local.LocalStorage` (this machine's file system, with its
fast paths: one ``open`` and ``read`` per small file, memory maps, the page cache's read-ahead)
and `scrub.storage.objects.ObjectStorage` (a bucket through fsspec: range requests with
read-ahead, one listing of a prefix rather than a request per folder, versions from the
listing's ETags). `scrub.storage.storage_of` picks the one a location belongs to; nothing
outside this package asks which it is. What differs between them and matters to a caller is
said as a capability (`Storage.local_path`: a name a library can open; `Storage.forks_cleanly`;
`Storage.requests_in_flight`), never as "is it a URL".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Any, Protocol

#: a dataset's location: a local `Path` or an object store's ``UPath``
Location = Any
#: fsspec's block for objects read as a stream (tar shards, JSON Lines): large enough that a
#: request's latency is small against its transfer, small enough that a partition's first record
#: comes quickly
STREAM_BLOCK = 8 << 20


def hidden(name: str) -> bool:
    """A name a walk leaves out by default: dot files and folders (``.git``, ``.cache``)."""
    return name.startswith(".")


class Publication(Protocol):
    """One output of ``fix`` (the cleaned copy, the quarantine), written on this machine and
    published whole or not at all: renamed into place from a temporary sibling on a disk
    (`scrub.fixing.outputs.StagedOutput`), copied into place from a staging prefix in a bucket
    (`scrub.storage.buckets.BucketOutput`). A killed run's leftovers are removed by the next."""

    destination: Location
    #: whether publishing sends the written files elsewhere (`upload`), or only renames them
    uploads: bool

    def exists(self) -> bool:
        """Whether something is at the destination already."""

    def check(self) -> None:
        """Refuse an existing destination unless forced; remove what dead runs left."""

    def stage(self) -> Path:
        """The local path the writer writes the output at."""

    @property
    def written_in(self) -> Path | None:
        """The folder on this machine the output is written in (its free space is checked)."""

    def upload(self) -> None:
        """Put the written output next to its destination, not yet in place."""

    def commit(self) -> None:
        """Put the output in place (replacing an old one when forced)."""

    def discard(self) -> None:
        """Remove what this run staged."""


class Storage(ABC):
    """One kind of place datasets live in."""

    #: whether a reader holding no open handle may be forked into worker processes (fsspec's
    #: asynchronous clients hold an event loop and sockets a fork does not carry over)
    forks_cleanly: bool = True
    #: how many independent reads are worth having in flight at once: each read of a file on
    #: this machine keeps a core busy, each request to a store mostly waits on its latency
    requests_in_flight: int = 1

    # -- names ---------------------------------------------------------------------------------

    @abstractmethod
    def local_path(self, path: Location) -> str | None:
        """The name a library that opens files by name (h5py, pyarrow's own files, memory maps,
        ``os`` calls, hard links, the HTML report's thumbnails) opens ``path`` by; None where
        there is none (an object: read it through this interface, or from a local copy,
        `scrub.storage.staging`)."""

    @abstractmethod
    def identity(self, path: Location) -> str:
        """What names ``path`` the same way from any working directory and on every run: its
        absolute real path, its URL. Caches, outputs and duplicates of an argument key by it."""

    @abstractmethod
    def relative(self, path: Location, root: Location) -> str:
        """``path``'s key below ``root`` with ``/`` separators (``data/train-0.parquet``)."""

    # -- reading -------------------------------------------------------------------------------

    @abstractmethod
    def read_bytes(self, path: Location) -> bytes:
        """A whole file or object."""

    @abstractmethod
    def read_range(self, path: Location, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end): one request for an object."""

    def read_head(self, path: Location, size: int) -> bytes:
        """The first ``size`` bytes (a format's magic number)."""
        return self.read_range(path, 0, size)

    @abstractmethod
    def open_stream(self, path: Location, block_size: int = STREAM_BLOCK) -> IO[bytes]:
        """A binary stream read from start to end (an object's in ``block_size`` ranges with
        read-ahead)."""

    @abstractmethod
    def open_random(self, path: Location, size: int | None = None) -> IO[bytes]:
        """A file for a reader that asks for exactly the ranges it needs (a Parquet footer, then
        its column chunks): an object's reads are each one request, without read-ahead.
        ``size``: its bytes where a listing gave them (an object's then need not be asked)."""

    @abstractmethod
    def open_range(
        self,
        path: Location,
        start: int = 0,
        end: int | None = None,
        block_size: int = STREAM_BLOCK,
        size: int | None = None,
    ) -> IO[bytes]:
        """A seekable stream positioned at ``start``, to be read mostly in ``[start, end)`` (a
        partition of a shard): an object fetches that range and little more. ``size``: the
        file's, where the caller knows it (a listing said): an object's is not asked again."""

    @abstractmethod
    def size(self, path: Location) -> int:
        """Bytes in a file or object."""

    @abstractmethod
    def version(self, path: Location) -> tuple[int, int | str]:
        """(size, version): what changes when a file or object is rewritten (a file's mtime in
        ns, an object's ETag or generation). The fingerprint and the result cache key by it."""

    def known_version(self, name: str) -> tuple[int, int | str] | None:
        """The (size, version) this run's listing gave ``name`` (a URL), without a request; None
        where none did (a file on this machine: ask `version`)."""
        return None

    # -- listing -------------------------------------------------------------------------------

    @abstractmethod
    def walk(self, folder: Location) -> Iterator[tuple[str, list[str], list[str]]]:
        """(folder relative to ``folder``, ``""`` for itself; its sub-folders' names; its files'
        names), top-down, names sorted: `os.walk`'s contract, removing a name from the
        sub-folders' list prunes it. An object store is walked from one listing of the prefix."""

    def files_below(self, folder: Location, skip: Callable[[str], bool] = hidden) -> Iterator[str]:
        """The keys of the files below ``folder``, recursively (``cat/1.jpg``), leaving out every
        name ``skip`` says (and what lies below such a folder); lazily, so that a caller
        looking for one stops the walk there."""
        for relative, folders, files in self.walk(folder):
            folders[:] = [name for name in folders if not skip(name)]
            for name in files:
                if not skip(name):
                    yield f"{relative}/{name}" if relative else name

    def files_in(self, folder: Location) -> list[str]:
        """The names of the files directly inside ``folder``."""
        for _, _, files in self.walk(folder):
            return files
        return []

    # -- publishing ----------------------------------------------------------------------------

    @abstractmethod
    def publish(
        self, destination: Location, *, force: bool, what: str, suffixes: tuple[str, ...] = ()
    ) -> Publication:
        """``destination`` (``what`` names it in messages: "cleaned copy") staged until committed;
        with ``suffixes``, the output is the files ``destination + suffix`` (a Megatron pair)."""

    def errors_as_one_line(self, path: Location) -> AbstractContextManager[None]:
        """A context in which what goes wrong reaching ``path`` is one line and exit 2 (a
        missing bucket or credential, an unreachable store), not a traceback; on this
        machine an ``OSError`` says what it is itself."""
        return nullcontext()

    @abstractmethod
    def forget(self, path: Location) -> None:
        """Drop what is remembered of listings and versions, so that a dataset opened again in
        the same process (the API, a rerun with ``--cache``) sees what was rewritten since."""
