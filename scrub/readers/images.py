"""Image datasets: a folder (class sub-folders, or flat) or a Caffe ImageData list file.

Layouts:

* class folders: every non-hidden sub-folder of the root is a class; its label is the folder's
  index in sorted order (as torchvision's ImageFolder numbers them); images anywhere below it
  belong to it. An image at the root itself has no class (`missing-label`).
* flat: a folder of images without sub-folders; no labels, so label checks are skipped.
* list file: ``relative/path.jpg 3`` per line, split on the last run of whitespace as Caffe
  does, or CSV/TSV rows (``path,label``, with or without a header: `scrub.readers.listfile`);
  paths relative to the list's folder or to ``--root``.

Files are recognised by extension; anything else (README.txt, .DS_Store) is skipped and counted.
Hidden folders (``.git``, ``.ipynb_checkpoints``) are skipped and counted. Symlinks are followed
only when they stay inside the dataset root; the rest are reported as `unsafe-path`, never read.

A folder may be a prefix of object storage (``s3://bucket/train``): the driver lists it in one
recursive listing, its "folders" are the keys' ``/``-separated parts (a folder with no object in
it does not exist there), and each worker fetches its partition's objects itself,
`scrub.storage.FETCH_CONCURRENCY` at a time, the next batch while the records of the last are
checked. Objects have no links: nothing is `unsafe-path` there. List files are read only from
this machine.
"""

from __future__ import annotations

import operator
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import xxhash

from scrub.checks.base import problem
from scrub.checks.images import IMAGE_EXTENSIONS
from scrub.errors import UnusableDataset, UsageError
from scrub.paths import extension, is_within
from scrub.readers.base import (
    CacheEntry,
    DatasetInfo,
    ReadAhead,
    Reader,
    extension_of,
    report_unreadable,
    split_records,
)
from scrub.readers.listfile import CAFFE, ListFormat, split_caffe_line
from scrub.readers.listfile import detect as detect_list_format
from scrub.readers.values import decode_value
from scrub.records import Carries, Record
from scrub.storage import (
    FETCH_CONCURRENCY,
    list_objects,
    on_this_machine,
    read_file_version,
    read_objects,
    storage_of,
)

SNIFF_LINES = 100
JPEG_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".jfif"})
#: One core's seconds to verify a typical image (a 256x256 JPEG: read, strict decode, checks;
#: docs/benchmarks.md), for `Reader.work_seconds`
IMAGE_SECONDS = 220e-6


class Entry(NamedTuple):
    """One image the dataset refers to, as listed by the driver (no file I/O yet).

    A named tuple: partitions of ~1000 entries are pickled to every worker, and tuples pickle
    several times faster than dataclasses.
    """

    # shadows tuple.index, which typeshed types as a method: the field has always been named so
    index: int  # type: ignore[assignment]
    key: str  # POSIX path relative to the root, as listed
    source: str
    label: int | float | str | None
    check_link: bool  # resolve symlinks before reading (list entries, symlinked files)
    unsafe: str | None = None  # why the entry points outside the root, found while listing


def parse_label(text: str | None) -> int | float | str | None:
    """A list file's label text as int, else float, else the text itself; None when absent."""
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


split_list_line = split_caffe_line  # Caffe's line format (see `scrub.readers.listfile`)


def _first_lines(path: Path) -> list[str]:
    """The first non-empty lines of a list file (enough to tell its format)."""
    with open(path, encoding="utf-8", newline="") as lines:
        return [line.rstrip("\r\n") for _, line in zip(range(SNIFF_LINES), (x for x in lines if x.strip()))]


def _extension(key: str) -> str:
    """A key's extension in lower case, as the listing and the image checks compare them."""
    return extension(key).lower()


def _has_image_extension(name: str) -> bool:
    return _extension(name) in IMAGE_EXTENSIONS


NPY_EXTENSION = ".npy"


def _has_record_extension(name: str) -> bool:
    """An image, or a ``.npy`` (the records of a folder of arrays, torchvision's
    ``DatasetFolder(root, loader=np.load)``)."""
    return _has_image_extension(name) or name.lower().endswith(NPY_EXTENSION)


_name = operator.attrgetter("name")  # a listing's sort key


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _in_hidden(key: str) -> bool:
    """Whether an object's key lies in a hidden folder (``.git/...``), as a walk skips them."""
    return any(_is_hidden(part) for part in key.split("/")[:-1])


def holds_a_file(folder: Path, wanted: Callable[[str], bool]) -> bool:
    """Whether a file whose name is ``wanted`` lies below ``folder``, hidden folders aside (stops
    at the first); in object storage, by one listing of the prefix (an image folder, and a YOLO
    or mask folder, which is then read from a local copy, `scrub.storage.staging`)."""
    for _, folders, files in storage_of(folder).walk(folder):
        folders[:] = [name for name in folders if not _is_hidden(name)]
        if any(wanted(name) for name in files):
            return True
    return False


def _what_it_holds(top: Sequence[os.DirEntry]) -> str:
    """What a folder with no image in it holds, for the error: a person sees at once that it is
    the wrong folder, or a folder of datasets none of which scrub recognized."""
    if not top:
        return " (the folder is empty)"
    from scrub.readers.base import is_dataset

    folders = [e.name + "/" for e in top if e.is_dir()]
    files = [e.name for e in top if not e.is_dir()]
    shown = (folders + files)[:6]
    more = len(top) - len(shown)
    datasets = [Path(e.path) for e in top if not e.is_dir() and is_dataset(Path(e.path))]
    verdict = "; none is a dataset scrub can read"
    if datasets:  # files each of which is a dataset (.npy): named, they are scanned in one run
        suffixes = {path.suffix for path in datasets}
        pattern = datasets[0].parent / (f"*{suffixes.pop()}" if len(suffixes) == 1 else "*")
        verdict = f"; {len(datasets)} of them are datasets: name them ('{pattern}') to scan them in one run"

    return (
        f"; it holds {len(folders)} folder(s) and {len(files)} file(s): {', '.join(shown)}"
        + (f" and {more} more" if more else "")
        + verdict
    )


class ImageReader(Reader[Sequence[Entry]]):
    format = "images"
    reads_objects = True  # through fsspec (`scrub.storage`)
    preferred_scheduler = "processes"
    forks_cleanly = True  # its scan holds a listing of files, no handle
    records_per_task = 1000
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.ARRAY})  # array: the pixels of float images
    options_used = frozenset({"root"})
    #: how a list file's lines are split (a folder's: Caffe's, unused)
    list_format: ListFormat = CAFFE
    #: the records are ``.npy`` files (a folder without images), loaded as arrays
    arrays: bool = False

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_dir():
            return True
        return path.is_file() and cls._looks_like_list(path)

    @classmethod
    def holds_dataset(cls, path: Path) -> bool:
        """A folder is an image dataset when an image lies below it (it sniffs any folder)."""
        return cls.holds_images(path) if path.is_dir() else cls.sniff(path)

    @staticmethod
    def holds_images(folder: Path) -> bool:
        """Whether an image lies anywhere below ``folder`` (stops at the first one)."""
        return holds_a_file(folder, _has_record_extension)

    @staticmethod
    def _looks_like_list(path: Path) -> bool:
        if not on_this_machine(path):  # list files are read from this machine only
            return False
        try:
            lines = _first_lines(path)
        except (OSError, UnicodeDecodeError):
            return False
        form = detect_list_format(path, lines)
        heads = [form.split(line)[0] for line in lines[1 if form.header is not None else 0 :]]
        return bool(heads) and sum(map(_has_image_extension, heads)) * 2 >= len(heads)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[Sequence[Entry]]]:
        if not on_this_machine(self.path) and self.path.is_dir():
            info, entries = self._list_prefix(self.path)
        elif not on_this_machine(self.path):
            raise UnusableDataset(
                f"{self.path}: not a folder of images (list files are read from this machine only)"
            )
        elif self.path.is_dir():
            info, entries = self._list_folder(self.path)
        elif self.path.is_file():
            info, entries = self._list_file(self.path)
        else:
            raise UnusableDataset(f"{self.path}: neither a folder of images nor a list file")
        if self.options.root is not None and not self.path.is_file():
            raise UsageError(
                f"--root: applies to list files; {self.path} is a folder (its images are below it)"
            )
        if entries and all(_extension(e.key) in JPEG_EXTENSIONS for e in entries):
            # JPEG holds 8-bit samples only: the numeric checks (for float and 16-bit images) cannot run
            self.provides = self.provides - {Carries.ARRAY}
        # as array readers do: a scan this small runs in this process (`scrub.scanning.run._plan`); from
        # the count of records, since their sizes would cost a stat each. Larger ones stay on
        # processes, whatever threads would save: only there is a decoder's crash or hang a
        # finding rather than the end of the scan (docs/internals.md)
        self.work_seconds = len(entries) * IMAGE_SECONDS
        # a folder's records are every file it lists (a list file is a member the workers do not
        # read; a bucket's objects are versioned by their listing)
        self.records_carry_versions = self.path.is_dir() and on_this_machine(self.path)
        self.root = info.root
        # the HTML report's thumbnails are files on this machine: none for a bucket's objects
        info.image_root = None if self.arrays or not on_this_machine(self.path) else info.root
        return info, split_records(entries, partition_size)

    # -- listing (driver side) -------------------------------------------------------------

    def _list_folder(self, root: Path) -> tuple[DatasetInfo, list[Entry]]:
        skipped: Counter[str] = Counter()
        real_root = os.path.realpath(root)
        try:
            top = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError as error:
            raise UnusableDataset(f"{root}: cannot list the folder: {error.strerror}") from None
        classes = [e.name for e in top if e.is_dir(follow_symlinks=False) and not _is_hidden(e.name)]
        labelled = bool(classes)
        class_of = {name: number for number, name in enumerate(classes)}
        entries: list[Entry] = []
        arrays: list[Entry] = []  # .npy files: the records of a folder that holds no image

        def add(relative: str, label, check_link: bool, unsafe: str | None = None) -> None:
            found = arrays if relative.lower().endswith(NPY_EXTENSION) else entries
            found.append(Entry(len(found), relative, relative, label, check_link, unsafe))

        def walk(directory: str, relative: str, label) -> None:
            with os.scandir(directory) as scan:
                items = sorted(scan, key=_name)
            prefix = f"{relative}/" if relative else ""
            for item in items:
                name = prefix + item.name
                if item.is_symlink():
                    target = os.path.realpath(item.path)
                    if not is_within(target, real_root):
                        add(name, label, False, f"symlink to {target}, outside the dataset root")
                    elif os.path.isdir(target):
                        skipped["symlinked folder (not followed)"] += 1
                    elif _has_record_extension(item.name):
                        add(name, label, True)
                    else:
                        skipped["non-image file"] += 1
                elif item.is_dir(follow_symlinks=False):
                    if _is_hidden(item.name):
                        skipped["hidden folder"] += 1
                    else:
                        walk(item.path, name, class_of.get(name, label) if not relative else label)
                elif _extension(item.name) in IMAGE_EXTENSIONS:  # most entries: no .npy test (`add`)
                    entries.append(Entry(len(entries), name, name, label, False))
                elif _has_record_extension(item.name):
                    add(name, label, False)
                else:
                    skipped["non-image file"] += 1

        walk(str(root), "", None)
        notes = []
        if not entries and arrays:
            entries = arrays
            self.arrays = True
            self.provides = frozenset(
                {Carries.ARRAY, Carries.BYTES, Carries.VALUES}
            )  # VALUES: a .npy that does not load
            notes.append(
                f"each .npy file is one record ({len(arrays)} of them, loaded without pickle); to "
                f"check the rows of each file instead, name them "
                f"('{root}/{'**/' if classes else ''}*.npy')"
            )
        elif arrays:
            skipped["non-image file"] += len(arrays)
        if not entries:
            raise UnusableDataset(f"{root}: no images found" + _what_it_holds(top))
        info = DatasetInfo(
            format=self.format,
            layout="class-folders" if labelled else "flat",
            root=str(root),
            labelled=labelled,
            records=len(entries),
            classes=classes or None,
            skipped=dict(skipped),
            notes=notes,
        )
        return info, entries

    def _list_prefix(self, prefix) -> tuple[DatasetInfo, list[Entry]]:
        """`_list_folder` of a prefix of object storage, from one recursive listing: the same
        classes, entries (in the order a walk of the same folder gives) and skipped counts."""
        skipped: Counter[str] = Counter()
        listing = list_objects(prefix)
        keys = sorted(listing, key=lambda key: key.split("/"))  # a walk's order: name by name
        hidden = {
            "/".join(parts[: n + 1])
            for parts in (key.split("/") for key in keys)
            for n in range(len(parts) - 1)
            if _is_hidden(parts[n]) and not any(_is_hidden(p) for p in parts[:n])
        }
        skipped["hidden folder"] += len(hidden)
        keys = [key for key in keys if not _in_hidden(key)]
        classes = sorted({key.split("/", 1)[0] for key in keys if "/" in key})
        class_of = {name: number for number, name in enumerate(classes)}
        entries: list[Entry] = []
        arrays: list[Entry] = []
        for key in keys:
            if not _has_record_extension(key.rsplit("/", 1)[-1]):
                skipped["non-image file"] += 1
                continue
            label = class_of[key.split("/", 1)[0]] if "/" in key else None
            found = arrays if key.lower().endswith(NPY_EXTENSION) else entries
            found.append(Entry(len(found), key, key, label, False))
        notes = []
        if not entries and arrays:
            entries = arrays
            self.arrays = True
            self.provides = frozenset({Carries.ARRAY, Carries.BYTES, Carries.VALUES})
            notes.append(
                f"each .npy file is one record ({len(arrays)} of them, loaded without pickle); to "
                f"check the rows of each file instead, name them ('{prefix}/{'**/' if classes else ''}*.npy')"
            )
        elif arrays:
            skipped["non-image file"] += len(arrays)
        if not entries:
            shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
            raise UnusableDataset(
                f"{prefix}: no images found"
                + (f"; it holds {len(keys)} object(s): {shown}" if keys else " (no object below it)")
            )
        info = DatasetInfo(
            format=self.format,
            layout="class-folders" if classes else "flat",
            root=str(prefix).rstrip("/"),
            labelled=bool(classes),
            records=len(entries),
            classes=classes or None,
            skipped={name: count for name, count in skipped.items() if count},
            notes=notes,
        )
        return info, entries

    def _list_file(self, list_path: Path) -> tuple[DatasetInfo, list[Entry]]:
        root = self.options.root or list_path.parent
        if not root.is_dir():
            raise UnusableDataset(f"{root}: the image root is not a folder")
        real_root = os.path.realpath(root)
        entries: list[Entry] = []
        try:
            self.list_format = form = detect_list_format(list_path, _first_lines(list_path))
            with open(list_path, encoding="utf-8", newline="") as lines:
                header = form.header is not None
                for line in lines:
                    if not line.strip():
                        continue
                    if header:  # the column names, not a record
                        header = False
                        continue
                    path_text, label_text = form.split(line)
                    key = path_text.replace("\\", "/")
                    while key.startswith("./"):
                        key = key[2:]
                    joined = os.path.normpath(os.path.join(real_root, key))
                    unsafe = (
                        None
                        if is_within(joined, real_root, itself=False)
                        else f"{path_text} resolves outside the dataset root"
                    )
                    entries.append(
                        Entry(len(entries), key, list_path.name, parse_label(label_text), True, unsafe)
                    )
        except UnicodeDecodeError:
            raise UnusableDataset(f"{list_path}: not a text list file (not UTF-8)") from None
        except OSError as error:
            raise UnusableDataset(f"{list_path}: cannot read: {error.strerror}") from None
        if not entries:
            raise UnusableDataset(f"{list_path}: the list file is empty")
        info = DatasetInfo(
            format=self.format,
            layout=DatasetInfo.LIST_FILE,
            root=str(root),
            labelled=True,
            records=len(entries),
        )
        info.files[list_path.name] = form.describe()
        if form.delimiter is not None and form.label_column is None:
            info.notes.append(f"{list_path.name}: no label column found: labels not checked")
        return info, entries

    # -- reading (worker side) -------------------------------------------------------------

    def read(self, partition: Sequence[Entry], start: int = 0, stop: int | None = None) -> Iterator[Record]:
        if not on_this_machine(self.path):
            yield from self._read_objects(partition[start:stop])
            return
        real_root = os.path.realpath(self.root)
        entries = partition[start:stop]
        prefix = os.path.join(self.root, "")  # os.path.join(root, key), joined once
        paths = [e.key if e.key.startswith("/") else prefix + e.key for e in entries]
        # a link is resolved and checked before it is read, never read ahead
        reading = ReadAhead(
            [p if e.unsafe is None and not e.check_link else None for p, e in zip(paths, entries)]
        )
        for number, entry in enumerate(entries):
            record = Record(entry.source, entry.key, entry.index, None, entry.label, {"kind": "image"})
            unsafe = entry.unsafe
            path = paths[number]
            if unsafe is None and entry.check_link:
                target = os.path.realpath(path)
                if not is_within(target, real_root, itself=False):
                    unsafe = f"resolves to {target}, outside the dataset root"
            if unsafe is not None:
                record.problems.append(problem(record, "unsafe-path", f"not read: {unsafe}", path=entry.key))
            elif entry.check_link:  # read now, never ahead: the link was checked just above
                try:
                    record.payload, size, mtime = read_file_version(path)
                    record.meta["file_version"] = (size, mtime)
                except OSError as error:
                    report_unreadable(record, error, entry.key, "missing-file")
                self._loaded(record)
            else:
                record.payload = reading.read(number, record, entry.key)
                if record.payload is not None:
                    record.meta["file_version"] = reading.version
                self._loaded(record)
            yield record

    def _loaded(self, record: Record) -> None:
        """A ``.npy`` record's array, once its bytes are read."""
        if record.payload is not None and self.arrays:
            del record.meta["kind"]  # an array, once it loads
            record.meta["raw"] = record.payload  # what `fix` copies
            decode_value(record, record.payload, "npy", False)
            del record.meta["label_known"]  # the folder's label, as for images

    def _read_objects(self, entries: Sequence[Entry]) -> Iterator[Record]:
        """A prefix's objects, `FETCH_CONCURRENCY` at a time; the next batch is fetched while
        the records of this one are checked (so at most that many requests are in flight)."""
        from concurrent.futures import ThreadPoolExecutor

        batches = [entries[at : at + FETCH_CONCURRENCY] for at in range(0, len(entries), FETCH_CONCURRENCY)]
        if not batches:
            return
        with ThreadPoolExecutor(1, thread_name_prefix="scrub-fetch") as fetcher:

            def fetch(batch: Sequence[Entry]):
                return fetcher.submit(read_objects, self.path, [entry.key for entry in batch])

            coming = fetch(batches[0])
            for number, batch in enumerate(batches):
                fetched = coming.result()
                if number + 1 < len(batches):
                    coming = fetch(batches[number + 1])
                for entry, data in zip(batch, fetched):
                    record = Record(
                        entry.source, entry.key, entry.index, None, entry.label, {"kind": "image"}
                    )
                    if isinstance(data, OSError):
                        report_unreadable(record, data, entry.key, "missing-file")
                    else:
                        record.payload = data
                        self._loaded(record)
                    yield record

    def members(self, partitions: Sequence[Sequence[Entry]]) -> Iterator[str]:
        if not on_this_machine(self.path):  # objects' URLs: the fingerprint versions them by their ETags
            for partition in partitions:
                for entry in partition:
                    yield f"{self.root}/{entry.key}"
            return
        if self.path.is_file():
            yield str(self.path)
        prefix = os.path.join(self.root, "")  # keys are relative: os.path.join(root, key), joined once
        for partition in partitions:
            for entry in partition:
                yield prefix + entry.key

    def label_sample(self, partitions: Sequence[Sequence[Entry]], most: int) -> Any:
        """The first ``most`` numeric labels of a list file, parsed at open (text labels are
        `non-integer-label`'s whatever the kind): as float64 where one is written as a float."""
        import numpy as np

        labels: list[int | float] = []
        for partition in partitions:
            for entry in partition:
                if isinstance(entry.label, (int, float)) and not isinstance(entry.label, bool):
                    labels.append(entry.label)
            if len(labels) >= most:
                break
        if not labels:
            return None
        floating = any(isinstance(label, float) for label in labels[:most])
        return np.array(labels[:most], dtype=np.float64 if floating else np.int64)

    def locate(self, partition: Sequence[Entry], offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition[o].source, partition[o].key, partition[o].index) for o in offsets]

    def cache_entries(self, partition: Sequence[Entry]) -> list[CacheEntry | None]:
        """A record's verdict depends on its bytes, its extension (`format-mismatch`) and its
        label; an entry that would not be read (outside the root) is never reused. A file is
        named by its stat; an object by the (size, ETag) its prefix's listing gave, without a
        request (as a shard's samples are)."""
        if not on_this_machine(self.path):
            return self._object_entries(partition)
        real_root = os.path.realpath(self.root)
        prefix = os.path.join(
            self.root, ""
        )  # the paths `members` gives, so the fingerprint can reuse their stats
        entries: list[CacheEntry | None] = []
        # a few distinct ones; by the label's type too: 1, 1.0 and True are one key of a dict
        contexts: dict[tuple[str, type, object], str] = {}
        for _, key, source, label, check_link, unsafe in partition:
            path = prefix + key
            if unsafe is not None or (
                check_link and not is_within(os.path.realpath(path), real_root, itself=False)
            ):
                entries.append(None)
                continue
            extension = extension_of(key)
            context = contexts.get((extension, type(label), label))
            if context is None:
                context = contexts[extension, type(label), label] = f"{extension}|{label!r}"
            entries.append((f"{source}\0{key}", path, context, None))
        return entries

    def _object_entries(self, partition: Sequence[Entry]) -> list[CacheEntry | None]:
        storage = storage_of(self.path)
        entries: list[CacheEntry | None] = []
        for _, key, source, label, _, unsafe in partition:
            url = f"{self.root}/{key}"
            version = storage.known_version(url)
            if unsafe is not None or version is None:  # (not listed: never reused)
                entries.append(None)
                continue
            identity = xxhash.xxh3_128_digest(f"{url}\0{version[0]}\0{version[1]}".encode())
            entries.append((f"{source}\0{key}", None, f"{extension_of(key)}|{label!r}", identity))
        return entries

    def subset(self, partition: Sequence[Entry], offsets: Sequence[int]) -> tuple[Entry, ...]:
        return tuple(partition[o] for o in offsets)
