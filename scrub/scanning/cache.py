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
line, the XXH3-128 of the payload, and the payload (msgpack): a row per record, stored as
columns (keys; stats, context and outcome numbers as arrays; each distinct outcome once), so an
unchanged record costs its ``stat`` and a comparison in an array, not an object, and a rerun that
changed nothing leaves the file as it is. A file whose hash does not match, or that does not
parse, is ignored with a note and rewritten: never trusted. When a dataset has
no file yet (a copy in a new place), the newest file of the same scope serves for content
matches. Writes go to a temporary sibling renamed into place; the temporary files of a run that
died are removed by the next one; DIR keeps the `MAX_FILES` most recently used files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import msgpack
import numpy as np
import xxhash

from scrub.errors import ScrubError
from scrub.fixing.outputs import PREFIX_MARK, process_alive, write_atomically
from scrub.paths import beyond_most_recent, modified
from scrub.storage import same_place

if TYPE_CHECKING:
    from scrub.readers.base import CacheEntry

MAGIC = b"scrub-cache 3\n"
SUFFIX = ".scrubcache"
MAX_FILES = 64
NO_STAT = (-1, -1, -1)  # a record that is not a file of its own (an LMDB value)

#: one record's identity as the next snapshot stores it: (key, (size, mtime_ns, inode), context,
#: content hash or None where the worker's digest of the record's bytes is its content)
Identity = tuple[str, tuple[int, int, int], str, "bytes | None"]


@dataclass
class PartitionLookup:
    """One partition's records, split into reused results and records to scan."""

    #: offsets of the records whose stored result is reused, and their rows in the snapshot
    hits: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    misses: list[int] = field(default_factory=list)  # offsets to scan
    #: offset -> identity of each record whose row the next snapshot cannot carry over as it is:
    #: the records to scan, and those reused by their content under another name or stat
    identities: dict[int, Identity] = field(default_factory=dict)


class OtherVersion(ValueError):
    """A cache file of another layout (the magic line's number): not damage, but not readable."""


class Stored(NamedTuple):
    """A cache file's columns: a row per record."""

    columns: list[str]  # the dataset checks' ids, in the order of ``values``
    profiles: list[bytes]  # each distinct outcome once
    keys: list[str]
    stats: np.ndarray  # (rows, 3) int64: size, mtime_ns, inode
    contents: list[bytes]
    contexts: list[str]  # each distinct context once
    context_codes: np.ndarray  # a row's context, as its place in ``contexts``
    profile_numbers: np.ndarray  # a row's outcome, as its place in ``profiles``
    values: list[list]  # per dataset-check column, a value per row


class Snapshot:
    """The stored results of one scope and dataset, as columns: a row per record, its numbers
    in arrays (so that an unchanged record costs its stat and a comparison, not an object), its
    outcome a number in a table of the distinct outcomes (most clean records share one)."""

    def __init__(self, stored: Stored) -> None:
        (
            self.columns,
            self.profiles,
            self.keys,
            self.stats,
            self.contents,
            self.contexts,
            self.context_codes,
            self.profile_numbers,
            self.values,
        ) = stored
        self.by_key = dict(zip(self.keys, range(len(self.keys))))
        self.code_of = {context: code for code, context in enumerate(self.contexts)}
        self._by_content: dict[tuple[bytes | None, str], int] | None = None

    def by_content(self, content: bytes | None, context: str) -> int | None:
        if self._by_content is None:
            self._by_content = {
                (content, self.contexts[code]): row
                for row, (content, code) in enumerate(zip(self.contents, self.context_codes.tolist()))
            }
        return self._by_content.get((content, context))

    @classmethod
    def read(cls, path: Path) -> "Snapshot":
        """Parse and verify a cache file; `ValueError` when it is damaged."""
        data = path.read_bytes()
        if data.startswith(MAGIC[: MAGIC.index(b" ") + 1]) and not data.startswith(MAGIC):
            raise OtherVersion("written by another version of scrub")
        if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 16:
            raise ValueError("not a scrub cache file")
        digest, payload = data[len(MAGIC) : len(MAGIC) + 16], data[len(MAGIC) + 16 :]
        if xxhash.xxh3_128_digest(payload) != digest:
            raise ValueError("its checksum does not match its content")
        try:
            document = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            keys = document["keys"]
            snapshot = cls(
                Stored(
                    document["columns"],
                    document["profiles"],
                    keys,
                    np.frombuffer(document["stats"], "<i8").reshape(-1, 3),
                    document["contents"],
                    document["contexts"],
                    np.frombuffer(document["context_codes"], "<i4"),
                    np.frombuffer(document["profile_numbers"], "<i4"),
                    document["values"],
                )
            )
        except Exception as error:
            raise ValueError(f"it does not parse ({type(error).__name__})") from None
        rows = len(keys)
        if not (
            len(snapshot.stats) == len(snapshot.contents) == len(snapshot.context_codes) == rows
            and len(snapshot.profile_numbers) == rows
            and all(len(column) == rows for column in snapshot.values)
            and len(snapshot.values) == len(snapshot.columns)
        ):
            raise ValueError("its columns differ in length")
        return snapshot


def holds_results(directory: Path | None) -> bool:
    """Whether a cache folder holds any results (else a scan will read everything: start the
    workers early, as without a cache)."""
    return directory is not None and any(Path(directory).glob(f"*{SUFFIX}"))


def write_file(path: Path, stored: Stored) -> None:
    """Write a cache file atomically (a temporary sibling named after this process, renamed)."""
    document: dict[str, Any] = stored._asdict()
    document["stats"] = np.ascontiguousarray(stored.stats, "<i8").tobytes()
    document["context_codes"] = np.ascontiguousarray(stored.context_codes, "<i4").tobytes()
    document["profile_numbers"] = np.ascontiguousarray(stored.profile_numbers, "<i4").tobytes()
    payload = msgpack.packb(document, use_bin_type=True)
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
        where = same_place(dataset)  # a file: its real path; an object: its URL
        name = xxhash.xxh3_64_hexdigest(os.fsencode(where))
        self.path = self.directory / f"{scope}-{name}{SUFFIX}"
        self.notes: list[str] = []
        self.snapshot: Snapshot | None = None
        self.source: Path | None = None  # the file the snapshot came from
        self.hits = self.misses = 0
        #: path -> (size, mtime_ns) of every file the lookups stat-ed (the fingerprint reuses them)
        self.stats: dict[str, tuple[int, int]] = {}
        #: the next snapshot: the rows of this one carried over as they are, then new rows
        self._kept: list[np.ndarray] = []
        self._profiles: dict[bytes, int] = {}
        self._contexts: dict[str, int] = {}
        self._new: list[tuple[str, tuple[int, int, int], bytes, int, int, list]] = []
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ScrubError(f"--cache {directory}: cannot create it: {error.strerror}") from None
        _remove_dead_temporaries(self.directory)
        self._load()

    def _load(self) -> None:
        candidates = [self.path] if self.path.is_file() else []
        if not candidates:  # a dataset new here (a copy): the newest file of the scope, for content matches
            same_scope = sorted(self.directory.glob(f"{self.scope}-*{SUFFIX}"), key=modified, reverse=True)
            candidates = same_scope[:1]
        for candidate in candidates:
            try:
                snapshot = Snapshot.read(candidate)
            except (OSError, ValueError) as error:
                what = f"was {error}" if isinstance(error, OtherVersion) else f"is damaged ({error})"
                self.notes.append(
                    f"cache: {candidate} {what}: ignored, every record was scanned, and it is rewritten"
                )
                continue
            if snapshot.columns != self.columns:
                continue  # another set of dataset checks: results are not comparable
            self.snapshot, self.source = snapshot, candidate

    def lookup(self, entries: Sequence[CacheEntry | None], usable: bool = True) -> PartitionLookup:
        """Split one partition's records: ``entries[offset]`` is (key, file path, context,
        content hash), or None for a record that is never cached; a record with a content hash
        (an LMDB value) is looked up by it, one with a path by its stat first.
        ``usable=False`` stores results without reusing any.

        A file's stat is compared with its stored row's in arrays, after one pass that only
        stats: the records found unchanged are never made objects."""
        found = PartitionLookup()
        snapshot = self.snapshot if usable else None
        by_key = snapshot.by_key if snapshot is not None else {}
        code_of = snapshot.code_of if snapshot is not None else {}
        offsets: list[int] = []  # the files stat-ed, in order
        stats: list[tuple[int, int, int]] = []
        rows: list[int] = []
        codes: list[int] = []
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
                    found.hits.append(offset)
                    found.rows.append(row)
                continue
            try:
                status = os.stat(path)
            except OSError:
                found.misses.append(offset)
                continue
            stat = (status.st_size, status.st_mtime_ns, status.st_ino)
            self.stats[path] = stat[:2]
            offsets.append(offset)
            stats.append(stat)
            rows.append(by_key.get(key, -1))
            codes.append(code_of.get(context, -1))
        if offsets:
            self._split_by_stat(found, entries, offsets, stats, rows, codes, snapshot)
        if found.hits and any(a > b for a, b in zip(found.hits, found.hits[1:])):  # values and files mixed
            pairs = sorted(zip(found.hits, found.rows))
            found.hits, found.rows = [offset for offset, _ in pairs], [row for _, row in pairs]
        self.hits += len(found.hits)
        self.misses += len(found.misses)
        return found

    def _split_by_stat(
        self,
        found: PartitionLookup,
        entries: Sequence[CacheEntry | None],
        offsets: list[int],
        stats: list[tuple[int, int, int]],
        rows: list[int],
        codes: list[int],
        snapshot: Snapshot | None,
    ) -> None:
        """Hits where the stored row of the same key has the same stat and context; the others
        by their content (renamed, copied, touched files), else misses."""
        if snapshot is not None and len(snapshot.keys):
            row_array = np.asarray(rows, np.int64)
            known = row_array >= 0
            stored = np.where(known, row_array, 0)
            same = (
                known
                & (snapshot.stats[stored] == np.asarray(stats, np.int64)).all(axis=1)
                & (snapshot.context_codes[stored] == np.asarray(codes, np.int64))
            )
            same_list = same.tolist()
        else:
            same_list = [False] * len(offsets)
        hits: list[tuple[int, int]] = []
        for offset, stat, row, unchanged in zip(offsets, stats, rows, same_list):
            if unchanged:
                hits.append((offset, row))
                continue
            key, path, context, _ = entries[offset]  # type: ignore[misc]
            found.identities[offset] = (key, stat, context, None)
            content_row = self._by_content(snapshot, path, context) if snapshot is not None else None
            if content_row is None:
                found.misses.append(offset)
            else:
                hits.append((offset, content_row))
        found.hits.extend(offset for offset, _ in hits)
        found.rows.extend(row for _, row in hits)

    @staticmethod
    def _by_content(snapshot: Snapshot, path: str | None, context: str) -> int | None:
        """The row of any stored record with this file's bytes (the fallback to a stat)."""
        assert path is not None
        try:
            with open(path, "rb") as file:
                content = xxhash.xxh3_128_digest(file.read())
        except OSError:
            return None
        return snapshot.by_content(content, context)

    # -- results back into the scan ----------------------------------------------------------

    def reused(self, lookup: PartitionLookup) -> np.ndarray:
        """The snapshot rows of ``lookup``'s hits (aligned with ``lookup.hits``), kept for the
        next file: a row found under its own key and stat is carried over as it is."""
        snapshot = self.snapshot
        rows = np.asarray(lookup.rows, np.int64)
        if not lookup.hits:
            return rows
        assert snapshot is not None  # hits come from one
        moved = [number for number, offset in enumerate(lookup.hits) if offset in lookup.identities]
        if not moved:
            self._kept.append(rows)
            return rows
        carried = np.ones(len(rows), bool)
        carried[moved] = False
        self._kept.append(rows[carried])
        for number in moved:  # the stored result under this record's own identity
            row = int(rows[number])
            key, stat, context, _ = lookup.identities[lookup.hits[number]]
            profile = snapshot.profiles[int(snapshot.profile_numbers[row])]
            values = [column[row] for column in snapshot.values]
            self.store(key, stat, snapshot.contents[row], context, profile, values)
        return rows

    def store(
        self, key: str, stat: tuple[int, int, int], content: bytes, context: str, profile: bytes, values: list
    ) -> None:
        number = self._profiles.setdefault(profile, len(self._profiles))
        code = self._contexts.setdefault(context, len(self._contexts))
        self._new.append((key, stat, content, code, number, values))

    def save(self) -> None:
        """Write this scan's results (reused and new), and keep DIR to `MAX_FILES` files."""
        try:
            if self._unchanged():  # the file would be written again as it is: mark it used
                os.utime(self.path)
            else:
                write_file(self.path, self._next_snapshot())
        except OSError as error:
            self.notes.append(
                f"cache: cannot write {self.path}: {error.strerror}; the next scan will not reuse this one"
            )
            return
        for stale in beyond_most_recent(self.directory.glob(f"*{SUFFIX}"), MAX_FILES):
            stale.unlink(missing_ok=True)

    def _unchanged(self) -> bool:
        """Whether this scan reused every row of this dataset's own file, in its order, and
        found nothing else: the next file is that one."""
        snapshot = self.snapshot
        if snapshot is None or self.source != self.path or self._new:
            return False
        kept = np.concatenate(self._kept) if self._kept else np.zeros(0, np.int64)
        return len(kept) == len(snapshot.keys) and bool((kept == np.arange(len(kept))).all())

    def _next_snapshot(self) -> Stored:
        """The columns of the next file: the rows carried over, then the new ones; outcomes and
        contexts renumbered to the ones still used."""
        old = self.snapshot
        kept = np.concatenate(self._kept) if self._kept else np.zeros(0, np.int64)
        new = self._new
        profiles: list[bytes] = list(old.profiles) if old is not None else []
        contexts: list[str] = list(old.contexts) if old is not None else []
        profile_at = {profile: number for number, profile in enumerate(profiles)}
        context_at = {context: code for code, context in enumerate(contexts)}
        own_profiles = sorted(self._profiles, key=self._profiles.__getitem__)
        own_contexts = sorted(self._contexts, key=self._contexts.__getitem__)
        profile_map = np.array([profile_at.setdefault(p, len(profile_at)) for p in own_profiles], np.int64)
        context_map = np.array([context_at.setdefault(c, len(context_at)) for c in own_contexts], np.int64)
        profiles = sorted(profile_at, key=profile_at.__getitem__)
        contexts = sorted(context_at, key=context_at.__getitem__)
        if old is not None and len(kept):
            keys = [old.keys[row] for row in kept.tolist()]
            contents = [old.contents[row] for row in kept.tolist()]
            values = [[column[row] for row in kept.tolist()] for column in old.values]
            stats = [old.stats[kept]]
            codes = [old.context_codes[kept].astype(np.int64)]
            numbers = [old.profile_numbers[kept].astype(np.int64)]
        else:
            keys, contents, values = [], [], [[] for _ in self.columns]
            stats, codes, numbers = [], [], []
        if new:
            keys += [row[0] for row in new]
            stats.append(np.array([row[1] for row in new], np.int64).reshape(-1, 3))
            contents += [row[2] for row in new]
            codes.append(context_map[np.array([row[3] for row in new], np.int64)])
            numbers.append(profile_map[np.array([row[4] for row in new], np.int64)])
            for number, column in enumerate(values):
                column += [row[5][number] for row in new]
        stat_array = np.concatenate(stats) if stats else np.zeros((0, 3), np.int64)
        code_array = np.concatenate(codes) if codes else np.zeros(0, np.int64)
        number_array = np.concatenate(numbers) if numbers else np.zeros(0, np.int64)
        # only the outcomes and contexts some row still has
        used_profiles, number_array = np.unique(number_array, return_inverse=True)
        used_contexts, code_array = np.unique(code_array, return_inverse=True)
        return Stored(
            self.columns,
            [profiles[n] for n in used_profiles.tolist()],
            keys,
            stat_array,
            contents,
            [contexts[c] for c in used_contexts.tolist()],
            code_array,
            number_array,
            values,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "dir": str(self.directory),
            "file": str(self.path),
            "reused": self.hits,
            "scanned": self.misses,
            "from": str(self.source) if self.source is not None else None,
        }


def _remove_dead_temporaries(directory: Path) -> None:
    """Temporary files (`temporary_file`'s ``.NAME.scrub-PID-XXXX.tmp``) of any cache file of
    DIR whose run is no longer running (`temporary_file` sweeps only its own file's)."""
    for temporary in directory.glob(f".*{SUFFIX}{PREFIX_MARK}*.tmp"):
        try:
            pid = int(temporary.name.split(SUFFIX + PREFIX_MARK, 1)[1].split("-", 1)[0])
        except (IndexError, ValueError):
            continue
        # this run has written none yet: one with its pid is a dead run's whose pid was reused
        if pid == os.getpid() or not process_alive(pid) or time.time() - modified(temporary) > 86400:
            temporary.unlink(missing_ok=True)
