"""A dataset's fingerprint: does a manifest still describe the dataset in front of us?

`scrub fix --manifest M` acts on an earlier scan's verdicts, so it must refuse them when they
belong to another dataset or the dataset changed since. The fingerprint hashes what a reader
reads (the format, the reading options that decide what a record is) and, for every file the
records come from, its path relative to the root, size and modification time. A stat per file
is cheap (see docs/benchmarks.md, "Design measurements") where hashing the contents would cost a
second read of the dataset; like ``make`` and ``rsync``, it trusts that a changed file has a new
mtime or size. It is taken when the dataset is opened, before any record is read (a file changed
afterwards makes ``fix`` refuse the scan), or, where each record is a file of its own whose
read reports the ``fstat`` it made (`Reader.records_carry_versions`), from those reads after the
scan: the version of the very bytes verified, with no ``stat`` before the first task.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import xxhash

from scrub.errors import UnusableDataset
from scrub.readers.base import Reader
from scrub.storage import location, storage_of


def fingerprint(
    reader: Reader,
    partitions: list,
    root: str | Path,
    known: Mapping[str, tuple[int, int | str]] | None = None,
    read: Iterator[tuple[int, int] | None] | None = None,
) -> dict[str, Any]:
    """``{"digest", "files", "bytes"}`` of the dataset ``reader`` opened; ``known`` holds the
    (size, mtime_ns) of paths already stat-ed (by the result cache's lookups), ``read`` those of
    each member in order as a scan's reads found them (None: not read; see
    `Reader.records_carry_versions`)."""
    known = known or {}
    digest = xxhash.xxh3_128()
    digest.update(repr(sorted(reader.options.recorded(reader.format).items())).encode())
    files = total = 0
    prefix = os.path.join(str(root), "")
    cut = len(prefix)
    storage = storage_of(reader.path)
    local = storage.local_path(reader.path) is not None  # members named by paths: stat-ed as they are
    lines: list[str] = []  # hashed in blocks: one update per file costs more than the stat it follows
    for path in reader.members(partitions):
        facts: tuple[int, int | str] | tuple[str] | None = (  # (size, version) or ("absent",)
            next(read) if read is not None else known.get(path)
        )
        if facts is None:  # a file's (size, mtime_ns); an object's size and ETag (or generation)
            try:  # an object the listing named: no request, and no `UPath` made (~90 µs each)
                facts = storage.known_version(path) or storage.version(
                    path if local else location(path, reader.options.storage)
                )
            except (OSError, UnusableDataset):
                facts = ("absent",)
        relative = path[cut:] if path.startswith(prefix) else os.path.relpath(path, root)
        if len(facts) == 2:
            size, version = facts
            total += size
            lines.append(f"{relative}\0({size!r}, {version!r})\n")  # the pair's repr, built directly
        else:
            lines.append(f"{relative}\0{facts!r}\n")
        files += 1
        if len(lines) == 4096:
            digest.update(os.fsencode("".join(lines)))
            lines.clear()
    digest.update(os.fsencode("".join(lines)))
    return {"digest": digest.hexdigest(), "files": files, "bytes": total}
