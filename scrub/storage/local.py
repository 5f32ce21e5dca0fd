"""This machine's file system: `Storage` over ``os`` calls, with its fast paths (one ``open``,
``fstat`` and ``read`` per small file; the kernel's read-ahead for streams)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from scrub.storage.base import STREAM_BLOCK, Location, Publication, Storage


class LocalStorage(Storage):
    def local_path(self, path: Location) -> str:
        return os.fspath(path)

    def identity(self, path: Location) -> str:
        return os.path.realpath(path)

    def relative(self, path: Location, root: Location) -> str:
        return os.path.relpath(path, root).replace(os.sep, "/")

    def read_bytes(self, path: Location) -> bytes:
        return read_file(os.fspath(path))

    def read_range(self, path: Location, start: int, length: int) -> bytes:
        with open(path, "rb") as file:
            file.seek(start)
            return file.read(length)

    def open_stream(self, path: Location, block_size: int = STREAM_BLOCK) -> IO[bytes]:
        return open(path, "rb", buffering=min(block_size, 1 << 20))

    def open_random(self, path: Location, size: int | None = None) -> IO[bytes]:
        return open(path, "rb")

    def open_range(
        self,
        path: Location,
        start: int = 0,
        end: int | None = None,
        block_size: int = STREAM_BLOCK,
        size: int | None = None,
    ) -> IO[bytes]:
        file = open(path, "rb")  # noqa: SIM115 - the caller closes it
        file.seek(start)
        return file

    def size(self, path: Location) -> int:
        return os.stat(path).st_size

    def version(self, path: Location) -> tuple[int, int]:
        status = os.stat(path)
        return status.st_size, status.st_mtime_ns

    def forget(self, path: Location) -> None:
        """Nothing is remembered of a disk: every ``stat`` and listing asks it again."""

    def walk(self, folder: Location) -> Iterator[tuple[str, list[str], list[str]]]:
        top = os.fspath(folder)
        for directory, folders, files in os.walk(top):
            folders.sort()
            relative = os.path.relpath(directory, top)
            yield ("" if relative == "." else relative.replace(os.sep, "/")), folders, sorted(files)

    def publish(
        self, destination: Location, *, force: bool, what: str, suffixes: tuple[str, ...] = ()
    ) -> Publication:
        from scrub.fixing.outputs import StagedOutput  # the fix's, beside its scratch space

        return StagedOutput(Path(destination), force=force, what=what, suffixes=suffixes)


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
