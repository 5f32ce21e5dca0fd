"""Incremental rescans (``--cache DIR``): per-record results reused for records that did not change.

A nightly scan of a dataset that barely changed should cost what changed. After a scan, the
cache holds, for every record a reader can name by a file (image folders and list files), what
the checks made of it: its issues, its share of the statistics, and the values the dataset
checks collected from it. The next scan takes those results for every record whose identity
and content are unchanged and reads, decodes and checks only the others; the dataset checks
(duplicates, the dominant mode, label outliers) are then judged over the whole dataset as
always, so their verdicts are exactly a full scan's.

**Which results are reused.** A record's result is reused when its content and everything its
verdict depends on are the same:

* the content: the file's (size, mtime_ns, inode) is the one recorded with its content hash
  (the fast path: one ``stat``); otherwise the file is read and hashed (XXH3-128) and the
  result of any record with those bytes is taken, so renamed files and ``cp -a``/``rsync``
  copies still hit;
* the record's context: its file extension and its label (``format-mismatch`` and the label
  checks judge them);
* the scope: scrub's version, the format and reading options, every option that changes a
  verdict (``--num-classes``, ``--precision``, ``--select``, ...), whether the dataset is
  labelled, and the checks that run. Another scope is another cache file.

**What is never reused**: a record the reader flags while reading (``unsafe-path``), a file
that cannot be stat-ed (``missing-file``), a record that crashed or hung its decoder. With
``--dummy-loss`` the replay reads every record, so no result is reused (they are still stored).

**Files**: one per (scope, dataset) under DIR, ``<scope>-<dataset>.scrubcache``: a magic
line, the XXH3-128 of the payload, and the payload (msgpack). A file whose hash does not match,
or that does not parse, is ignored with a note and rewritten: never trusted. When a dataset has
no file yet (a copy in a new place), the newest file of the same scope serves for content
matches. Writes go to a temporary sibling renamed into place; the temporary files of a run that
died are removed by the next one; DIR keeps the `MAX_FILES` most recently used files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import xxhash

from scrub.errors import ScrubError
from scrub.outputs import PREFIX_MARK, process_alive, write_atomically
from scrub.storage import is_url

MAGIC = b"scrub-cache 1\n"
SUFFIX = ".scrubcache"
MAX_FILES = 64
NO_STAT = (-1, -1, -1)  # a record that is not a file of its own (an LMDB value)

#: one record's reusable result, as stored: (key, size, mtime_ns, inode, content, context,
#: profile number, column values aligned with the file's column ids)
Row = list


@dataclass
class Hit:
    """A record of this scan whose stored result is reused."""

    offset: int
    row: int  # in the snapshot it came from


@dataclass
class PartitionLookup:
    """One partition's records, split into reused results and records to scan."""

    hits: list[Hit] = field(default_factory=list)
    misses: list[int] = field(default_factory=list)  # offsets to scan
    #: offset -> (key, stat, context, content) of every cacheable record (for the next snapshot);
    #: content is None where the worker's digest of the record's bytes is its content (files)
    identities: dict[int, tuple[str, tuple[int, int, int], str, bytes | None]] = field(default_factory=dict)


class Snapshot:
    """The stored results of one scope and dataset, indexed for lookups."""

    def __init__(self, columns: list[str], profiles: list[bytes], rows: list[Row]) -> None:
        self.columns = columns
        self.profiles = profiles
        self.rows = rows
        self.by_key = {row[0]: i for i, row in enumerate(rows)}
        self._by_content: dict[tuple[bytes | None, str], int] | None = None

    def by_content(self, content: bytes | None, context: str) -> int | None:
        if self._by_content is None:
            self._by_content = {(row[4], row[5]): i for i, row in enumerate(self.rows)}
        return self._by_content.get((content, context))

    @classmethod
    def read(cls, path: Path) -> "Snapshot":
        """Parse and verify a cache file; `ValueError` when it is damaged."""
        data = path.read_bytes()
        if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 16:
            raise ValueError("not a scrub cache file")
        digest, payload = data[len(MAGIC) : len(MAGIC) + 16], data[len(MAGIC) + 16 :]
        if xxhash.xxh3_128_digest(payload) != digest:
            raise ValueError("its checksum does not match its content")
        try:
            document = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            columns, profiles, rows = document["columns"], document["profiles"], document["rows"]
        except Exception as error:
            raise ValueError(f"it does not parse ({type(error).__name__})") from None
        return cls(columns, profiles, rows)


def holds_results(directory: Path | None) -> bool:
    """Whether a cache folder holds any results (else a scan will read everything: start the
    workers early, as without a cache)."""
    return directory is not None and any(Path(directory).glob(f"*{SUFFIX}"))


def write_file(path: Path, columns: list[str], profiles: list[bytes], rows: list[Row]) -> None:
    """Write a cache file atomically (a temporary sibling named after this process, renamed)."""
    payload = msgpack.packb({"columns": columns, "profiles": profiles, "rows": rows}, use_bin_type=True)
    write_atomically(path, MAGIC + xxhash.xxh3_128_digest(payload) + payload)


def scope_digest(parts: Any) -> str:
    """The hash of everything that must match for a stored result to be reused."""
    return xxhash.xxh3_64_hexdigest(repr(parts).encode())


class ResultCache:
    """Lookups before a scan, storage after it (driver side only: workers never open it)."""

    def __init__(self, directory: Path, scope: str, dataset: Path, columns: Sequence[str]) -> None:
        self.directory = Path(directory)
        self.scope = scope
        self.columns = list(columns)
        where = str(dataset) if is_url(dataset) else os.path.realpath(dataset)  # a bucket's: its URL
        name = xxhash.xxh3_64_hexdigest(os.fsencode(where))
        self.path = self.directory / f"{scope}-{name}{SUFFIX}"
        self.notes: list[str] = []
        self.snapshot: Snapshot | None = None
        self.source: Path | None = None  # the file the snapshot came from
        self.hits = self.misses = 0
        #: path -> (size, mtime_ns) of every file the lookups stat-ed (the fingerprint reuses them)
        self.stats: dict[str, tuple[int, int]] = {}
        self._profiles: dict[bytes, int] = {}
        self._rows: list[Row] = []
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ScrubError(f"--cache {directory}: cannot create it: {error.strerror}") from None
        _remove_dead_temporaries(self.directory)
        self._load()

    def _load(self) -> None:
        candidates = [self.path] if self.path.is_file() else []
        if not candidates:  # a dataset new here (a copy): the newest file of the scope, for content matches
            same_scope = sorted(self.directory.glob(f"{self.scope}-*{SUFFIX}"), key=_mtime, reverse=True)
            candidates = same_scope[:1]
        for candidate in candidates:
            try:
                snapshot = Snapshot.read(candidate)
            except (OSError, ValueError) as error:
                self.notes.append(
                    f"cache: {candidate} is damaged ({error}): ignored, every record was scanned, "
                    "and it is rewritten"
                )
                continue
            if snapshot.columns != self.columns:
                continue  # another set of dataset checks: results are not comparable
            self.snapshot, self.source = snapshot, candidate

    def lookup(
        self, entries: Sequence[tuple[str, str | None, str, bytes | None] | None], usable: bool = True
    ) -> PartitionLookup:
        """Split one partition's records: ``entries[offset]`` is (key, file path, context,
        content hash), or None for a record that is never cached; a record with a content hash
        (an LMDB value) is looked up by it, one with a path by its stat first.
        ``usable=False`` stores results without reusing any."""
        found = PartitionLookup()
        snapshot = self.snapshot if usable else None
        for offset, entry in enumerate(entries):
            if entry is None:
                found.misses.append(offset)
                continue
            key, path, context, content = entry
            if path is None:
                found.identities[offset] = (key, NO_STAT, context, content)
                row = snapshot.by_content(content, context) if snapshot is not None else None
                if row is None:
                    found.misses.append(offset)
                else:
                    found.hits.append(Hit(offset, row))
                continue
            try:
                status = os.stat(path)
            except OSError:
                found.misses.append(offset)
                continue
            stat = (status.st_size, status.st_mtime_ns, status.st_ino)
            self.stats[path] = stat[:2]
            found.identities[offset] = (key, stat, context, None)
            if snapshot is None:
                found.misses.append(offset)
                continue
            row = snapshot.by_key.get(key)
            if row is not None:
                stored = snapshot.rows[row]
                if (stored[1], stored[2], stored[3]) == stat and stored[5] == context:
                    found.hits.append(Hit(offset, row))
                    continue
            try:  # the fallback: the same bytes under any name (renamed, copied, touched)
                with open(path, "rb") as file:
                    content = xxhash.xxh3_128_digest(file.read())
            except OSError:
                found.misses.append(offset)
                continue
            row = snapshot.by_content(content, context)
            if row is None:
                found.misses.append(offset)
            else:
                found.hits.append(Hit(offset, row))
        self.hits += len(found.hits)
        self.misses += len(found.misses)
        return found

    # -- results back into the scan ----------------------------------------------------------

    def reused(self, lookup: PartitionLookup) -> Iterable[tuple[int, bytes, list]]:
        """(offset, profile, column values) of each reused result, and keep them for the next file."""
        rows = self.snapshot.rows if self.snapshot is not None else []
        profiles = self.snapshot.profiles if self.snapshot is not None else []
        for hit in lookup.hits:
            stored = rows[hit.row]
            key, stat, context, _ = lookup.identities[hit.offset]
            self.store(key, stat, stored[4], context, profiles[stored[6]], stored[7])
            yield hit.offset, profiles[stored[6]], stored[7]

    def store(
        self, key: str, stat: tuple[int, int, int], content: bytes, context: str, profile: bytes, values: list
    ) -> None:
        number = self._profiles.setdefault(profile, len(self._profiles))
        self._rows.append([key, *stat, content, context, number, values])

    def save(self) -> None:
        """Write this scan's results (reused and new), and keep DIR to `MAX_FILES` files."""
        profiles = [profile for profile, _ in sorted(self._profiles.items(), key=lambda item: item[1])]
        try:
            write_file(self.path, self.columns, profiles, self._rows)
        except OSError as error:
            self.notes.append(
                f"cache: cannot write {self.path}: {error.strerror}; the next scan will not reuse this one"
            )
            return
        files = sorted(self.directory.glob(f"*{SUFFIX}"), key=_mtime, reverse=True)
        for stale in files[MAX_FILES:]:
            stale.unlink(missing_ok=True)

    def describe(self) -> dict[str, Any]:
        return {
            "dir": str(self.directory),
            "file": str(self.path),
            "reused": self.hits,
            "scanned": self.misses,
            "from": str(self.source) if self.source is not None else None,
        }


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _remove_dead_temporaries(directory: Path) -> None:
    """Temporary files (`temporary_file`'s ``.NAME.scrub-PID-XXXX.tmp``) of any cache file of
    DIR whose run is no longer running (`temporary_file` sweeps only its own file's)."""
    for temporary in directory.glob(f".*{SUFFIX}{PREFIX_MARK}*.tmp"):
        try:
            pid = int(temporary.name.split(SUFFIX + PREFIX_MARK, 1)[1].split("-", 1)[0])
        except (IndexError, ValueError):
            continue
        # this run has written none yet: one with its pid is a dead run's whose pid was reused
        if pid == os.getpid() or not process_alive(pid) or time.time() - _mtime(temporary) > 86400:
            temporary.unlink(missing_ok=True)
