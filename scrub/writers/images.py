"""Image datasets: the same folder tree, or a new list file plus the files it lists.

Files are copied byte for byte (``--link`` hard-links them instead where the file system
allows), keeping their modification times and permission bits. A class-folder tree keeps every
class folder, even one left empty, because a class's label is its folder's position in sorted
order: dropping ``bird/`` would silently relabel every class after it. Files that are not
records (``README.txt``) are copied into the cleaned copy; hidden folders are not.

A list file becomes ``OUT/LIST`` with the kept lines, in order, and the files under ``OUT``
at their paths relative to the image root, so the copy is self-contained; a line whose path
was absolute or not normalized is rewritten with the relative path, the label text unchanged.
Lines whose file could not be read (missing, or outside the root) go to the quarantine's list
verbatim, without a file.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from scrub import pipeline
from scrub.checks.images import IMAGE_EXTENSIONS
from scrub.errors import ScrubError, UnusableDataset
from scrub.fixing.ledger import Ledger, identity_seed
from scrub.fixing.outputs import new_file_mode
from scrub.readers.base import ReadOptions
from scrub.readers.images import Entry, ImageReader
from scrub.readers.listfile import ListFormat
from scrub.records import Record
from scrub.writers.base import Tally, Verdicts, Writer, link_again


class ImageWriter(Writer[ImageReader]):
    format = "images"
    links = True

    @property
    def listed(self) -> bool:
        return self.info.listed

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        """The partitions are copied by local worker processes (`CopyImages`), each file once;
        a list file's lines are written here, in the source's order."""
        tally = Tally()
        for target in (clean, quarantine):
            if target is not None:
                target.mkdir()
        partitions = self.dataset.partitions
        lines = self._list_lines() if self.listed else None
        items = [
            CopyItem(
                tuple(o for o, e in enumerate(partition) if verdicts.quarantined(e.source, e.index)),
                partition,
                tuple(next(lines) for _ in partition) if lines is not None else None,
            )
            for partition in partitions
        ]
        if not self.listed:
            tally.other_files = self._mirror_folders(clean, quarantine)
        work = CopyImages(self.reader, clean, quarantine, link)
        done: dict[int, Copied] = {}
        with contextlib.ExitStack() as open_lists:
            lists: dict[bool, TextIO] = {}  # the new list files (clean: False, quarantine: True)
            if self.listed:
                lists[False] = open_lists.enter_context(open(clean / self.source.name, "w", encoding="utf-8"))
                if quarantine is not None:
                    lists[True] = open_lists.enter_context(
                        open(quarantine / self.source.name, "w", encoding="utf-8")
                    )
                header = self.reader.list_format.header
                if header is not None:  # a CSV list's column names head both outputs
                    for output in lists.values():
                        output.write(header.rstrip("\r\n") + "\n")
            following = 0  # the next partition whose lines go out: lines keep the list's order

            def add(copied: Copied) -> None:
                nonlocal following
                tally.kept.merge(copied.kept)
                tally.quarantined.merge(copied.quarantined)
                tally.records_kept += copied.records_kept
                tally.records_quarantined += copied.records_quarantined
                done[copied.partition] = copied
                while following in done:
                    for quarantined, line in done[following].lines:
                        lists[quarantined].write(line + "\n")
                    done[following].lines = []
                    following += 1

            plan = pipeline.Plan.for_copies(self.run, len(items), fork=self.reader.forks_cleanly)
            pipeline.run(work, items, plan, add, _copy_failed)
        for number in range(len(items)):  # in the source's order
            tally.forced += done[number].forced
        return tally

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        reader = ImageReader(self.dataset_in(target), ReadOptions())
        try:
            _, partitions = reader.open(1000)
        except UnusableDataset:  # an empty output: nothing went to this side
            return ledger
        pipeline.run(
            TallyImages(reader),
            partitions,
            pipeline.Plan.for_copies(self.run, len(partitions), fork=reader.forks_cleanly),
            ledger.merge,
            _copy_failed,
        )
        return ledger

    def _list_lines(self) -> Iterator[str]:
        """The list file's record lines (non-empty, after a CSV header), in the reader's order."""
        header = self.reader.list_format.header is not None
        with open(self.source, encoding="utf-8", newline="") as lines:
            for line in lines:
                if line.strip():
                    if header:
                        header = False
                        continue
                    yield line.rstrip("\r\n")

    def _mirror_folders(self, clean: Path, quarantine: Path | None) -> int:
        """Create the class folders on both sides and every other folder in the cleaned copy;
        copy the files that are not records into the cleaned copy. Returns how many."""
        copied = 0
        root = self.reader.root
        for directory, folders, files in os.walk(root):
            folders[:] = sorted(f for f in folders if not f.startswith("."))
            relative = os.path.relpath(directory, root)
            if relative != ".":
                (clean / relative).mkdir(exist_ok=True)
                if quarantine is not None and os.sep not in relative:
                    (quarantine / relative).mkdir(exist_ok=True)
            for name in files:
                path = os.path.join(directory, name)
                extension = os.path.splitext(name)[1].lower()
                if (
                    name.startswith(".")
                    or extension in IMAGE_EXTENSIONS
                    or (self.reader.arrays and extension == ".npy")
                ):
                    continue
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                shutil.copy2(path, clean / relative / name)
                copied += 1
        return copied


@dataclass(frozen=True)
class CopyItem:
    """One partition to copy: the offsets of its quarantined records, its entries, and (list
    files) its lines."""

    quarantined: tuple[int, ...]
    entries: Sequence[Entry]
    lines: tuple[str, ...] | None

    def __len__(self) -> int:
        return len(self.entries)


@dataclass
class Copied:
    """What copying one partition did, tallied from the source side."""

    partition: int
    kept: Ledger = field(default_factory=Ledger)
    quarantined: Ledger = field(default_factory=Ledger)
    records_kept: int = 0
    records_quarantined: int = 0
    forced: list[str] = field(default_factory=list)
    #: (quarantined, line) of each record of a list file, in order
    lines: list[tuple[bool, str]] = field(default_factory=list)


@dataclass(frozen=True)
class CopyImages:
    """Copies one partition's files to the side each goes to (the `pipeline.Work` of `fix` for
    images): read, tallied, written, each file once. Partitions are independent and the ledger
    is a sum, so workers copy side by side instead of the scan's process copying every file (see
    docs/benchmarks.md, "Design measurements")."""

    reader: ImageReader
    clean: Path
    quarantine: Path | None
    link: bool

    def __call__(
        self, partition_no: int, item: CopyItem, start: int = 0, stop: int | None = None, on_record=None
    ) -> Copied:
        copied = Copied(partition_no)
        root, listed = self.reader.root, item.lines is not None
        quarantined_offsets = set(item.quarantined)
        folders: set[str] = set()  # made already: no need to ask the file system again
        for offset, record in enumerate(self.reader.read(item.entries, start, stop), start):
            if on_record is not None:
                on_record(offset)
            quarantined = offset in quarantined_offsets
            if record.payload is None and not quarantined:
                quarantined = True
                copied.forced.append(f"{record.key}: {record.problems[0].message}")
            relative = portable_key(root, record)
            seed = record_seed(relative, record)
            content = _content(record)
            if quarantined:
                copied.records_quarantined += 1
                copied.quarantined.add_record(seed, content)
            else:
                copied.records_kept += 1
                copied.kept.add_record(seed, content)
            target = self.quarantine if quarantined else self.clean
            if target is None:
                continue
            source_path = os.path.join(root, record.key)
            if content is not None:
                if relative.startswith(("../", "/")) or relative == "..":  # never write outside
                    raise ScrubError(f"{record.key}: resolves outside the image root {root}")
                _place(content, source_path, target / relative, self.link, folders)
            elif not listed:
                _keep_unreadable(record, source_path, target / relative)
            if listed:
                assert item.lines is not None
                line = _list_line(self.reader.list_format, item.lines[offset], relative, record)
                copied.lines.append((quarantined, line))
        return copied


@dataclass(frozen=True)
class TallyImages:
    """Tallies one partition of a written output, as `CopyImages` tallied the source (the
    `pipeline.Work` of `fix`'s verification for images: outputs are read back in parallel)."""

    reader: ImageReader

    def __call__(
        self,
        partition_no: int,
        partition: Sequence[Entry],
        start: int = 0,
        stop: int | None = None,
        on_record=None,
    ) -> Ledger:
        ledger = Ledger()
        for offset, record in enumerate(self.reader.read(partition, start, stop), start):
            if on_record is not None:
                on_record(offset)
            ledger.add_record(record_seed(portable_key(self.reader.root, record), record), _content(record))
        return ledger


def record_seed(relative: str, record: Record) -> int:
    """A record's identity in the ledgers: its path as written and its label. The source's tally
    (`CopyImages`) and the outputs' (`TallyImages`) must compute it alike."""
    return identity_seed(relative, repr(record.label))


def _copy_failed(partition_no: int, item: CopyItem | Sequence[Entry], offset: int, reason: str) -> Copied:
    """A worker died copying or reading back (no decoder runs there): fix stops, and the
    outputs it staged are removed."""
    entries = item.entries if isinstance(item, CopyItem) else item
    raise ScrubError(f"{entries[offset].key}: copying or verifying it ended its worker ({reason})")


def _list_line(form: ListFormat, line: str, relative: str, record: Record) -> str:
    """A record's line in an output: as it was, or with the path `fix` normalized."""
    if record.payload is None:
        return line
    if form.split(line)[0] == relative:
        return line
    return form.with_path(line, relative)


def _keep_unreadable(record: Record, source_path: str, destination: Path) -> None:
    """A folder entry that was never read: a symlink leaving the root is recreated (pointing
    to the same absolute target) so that the quarantine still lists it; anything else
    cannot be set aside without reading it."""
    if not os.path.islink(source_path):
        reason = record.problems[0].message if record.problems else "unreadable"
        raise ScrubError(f"{source_path}: {reason}; fix needs every file of a folder dataset readable")
    link_again(source_path, destination)


def portable_key(root: str, record: Record) -> str:
    """A record's path relative to the root, normalized (``./a/../b.jpg`` is ``b.jpg``), as it
    is written in the outputs; the listed path as is for a record that was never read."""
    key = record.key
    if record.payload is None or (not key.startswith(("/", "..")) and posixpath.normpath(key) == key):
        return key
    return os.path.relpath(os.path.normpath(os.path.join(root, record.key)), root).replace(os.sep, "/")


def _place(payload: bytes, source_path: str, destination: Path, link: bool, folders: set[str]) -> None:
    """Write a record's bytes (or hard-link its file), with the source's modification time and,
    when they differ from a new file's, its permission bits. ``folders`` caches the folders
    made so far (few), to skip asking the file system for each file."""
    target = str(destination)
    folder = os.path.dirname(target)
    if folder not in folders:
        os.makedirs(folder, exist_ok=True)
        folders.add(folder)
    try:
        if link:
            try:
                os.link(os.path.realpath(source_path), target)
                return
            except FileExistsError:
                raise
            except OSError:  # another file system, or links not allowed: copy instead
                pass
        with open(target, "xb") as file:
            file.write(payload)
            status = os.stat(source_path)
            if status.st_mode & 0o7777 != new_file_mode():
                os.fchmod(file.fileno(), status.st_mode & 0o7777)
    except FileExistsError:  # a list naming the same file twice: written already
        return
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))


def _content(record: Record) -> bytes | None:
    """The bytes of a record's file as read (a ``.npy`` record's payload is its loaded array)."""
    raw = record.meta.get("raw")
    return raw if raw is not None else record.payload
