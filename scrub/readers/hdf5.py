"""HDF5 datasets: one file, a folder of files, or a Caffe HDF5Data source list.

Rows of the ``data`` dataset are records (``--data-key``), paired by position with the rows of
the labels: ``--label-key``, else the first of ``label``, ``labels``, ``y``, ``target``,
``targets`` that the file has (a file with none is unlabelled). Labels of shape ``(N,)`` or
``(N, 1)`` are class ids; ``(N, K)`` are label vectors (one-hot, multi-label or soft targets);
other shapes (masks) are not checked, and the summary's notes say so. ``source`` is the file
relative to the dataset root, ``key`` the row index as a decimal string, ``index`` the same
integer.

Partitions are chunk-aligned row ranges of ~``PARTITION_BYTES``. Each worker opens the file
itself, read-only, and reads whole chunks (blocks of ~``BLOCK_BYTES``) into one reused buffer,
so peak memory does not depend on the file's size. h5py serializes every HDF5 call behind one
lock, so threads do not read or decompress in parallel: the preferred scheduler is processes.

Links that leave the dataset root are never followed: an external link, a virtual dataset or
external raw storage whose target lies outside the root is reported as `unsafe-path` (key
``*``) and that file is not read. External raw storage is always reported: HDF5 resolves it
against the working directory, not the file.

A file of a folder or list that does not open (not HDF5, truncated, without the data dataset)
is `unreadable-file` (key ``*``) and the other files are read; the writer sets it aside whole.
Only when no file opens is the dataset unusable.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scrub.checks.base import Finding, make_issue
from scrub.errors import UnusableDataset, first_line
from scrub.paths import is_within
from scrub.readers.base import DatasetInfo, Reader
from scrub.records import Batch, BatchFacts, Carries, Issue, Pieces

HDF5_EXTENSIONS = (".h5", ".hdf5", ".he5", ".hdf")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
PARTITION_BYTES = 128 << 20
#: Rows per partition, at most, whatever their width: a partition of a broken shard may flag
#: every row, and its findings travel back to the driver together (a manifest line each), so
#: narrow rows are split by count too (16-byte rows: 8 million rows by bytes alone).
PARTITION_ROWS = 1 << 16
#: Rows per block, at most: a block's findings are objects, far larger than their manifest lines,
#: until they are encoded (sizes: docs/benchmarks.md, "Design measurements").
BLOCK_ROWS = 1 << 15
BLOCK_BYTES = 4 << 20  # L3-resident: faster than 8 MiB (docs/benchmarks.md, "Design measurements")
SNIFF_LINES = 100
#: Names tried, in order, for the labels when ``--label-key`` is not given.
LABEL_KEYS = ("label", "labels", "y", "target", "targets")
#: Names tried after `LABEL_KEYS`: (N, H, W) segmentation masks paired with the data's rows.
MASK_KEYS = ("mask", "masks", "seg", "segmentation")


@dataclass(frozen=True)
class RowRange:
    """A partition: rows ``start:stop`` of the data (and label) dataset of one file."""

    path: str  # absolute path of the file, as the driver resolved it
    source: str
    start: int
    stop: int
    block_rows: int  # rows read at once: a whole number of chunks
    label_key: str | None  # the labels dataset of this file, None when it is unlabelled
    label_width: int = 0  # K for (N, K) label vectors, 0 for class ids
    #: the labels are (N, H, W) segmentation masks (`scrub.checks.masks`), not class ids
    masks: bool = False
    #: rows larger than a block are read in pieces: (the row axis sliced, its indices a piece)
    pieces: tuple[int, int] | None = None

    def __len__(self) -> int:
        return self.stop - self.start


def is_mask_array(labels) -> bool:
    """Labels that are segmentation masks: (N, H, W) integers, one class id per pixel."""
    shape = getattr(labels, "shape", None)
    return shape is not None and len(shape) == 3 and np.dtype(labels.dtype).kind in "iub"


def is_hdf5_file(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            head = file.read(8)
    except OSError:
        return False
    return head == HDF5_SIGNATURE or path.suffix.lower() in HDF5_EXTENSIONS


#: Bytes of a chunked dataset one core reads and checks per second, uncompressed (read by pread)
#: and compressed (gzip: the decompression's); measured, see docs/benchmarks.md, "Design
#: measurements".
PLAIN_BYTES_PER_SECOND = 3.5e9
COMPRESSED_BYTES_PER_SECOND = 0.2e9


#: `label_sample` reads the labels of at most this many files (the first, in order)
SAMPLED_FILES = 16


class HDF5Reader(Reader[RowRange]):
    format = "hdf5"
    #: threads: h5py reads under its lock and the checks' NumPy reductions run in parallel
    #: (faster than processes at every size measured); a compressed file goes to processes
    #: (see `open`), since decompression under h5py's lock runs on one core at a time
    preferred_scheduler = "threads"
    records_per_task = 0  # partitions are sized in bytes, see PARTITION_BYTES
    provides = frozenset({Carries.ARRAY, Carries.ROWS})
    options_used = frozenset({"data_key", "label_key"})
    positional_keys = True
    worker_imports = ("h5py",)
    file_suffixes = HDF5_EXTENSIONS
    #: (uncompressed, compressed) bytes of the data rows of the files opened
    _data_bytes: tuple[int, int] = (0, 0)

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_dir():
            return any(p.suffix.lower() in HDF5_EXTENSIONS and p.is_file() for p in path.iterdir())
        if not path.is_file():
            return False
        if is_hdf5_file(path):
            return True
        return bool(cls._list_lines(path))

    @staticmethod
    def _list_lines(path: Path) -> list[str]:
        """The lines of an HDF5Data source list, or [] when ``path`` is not one."""
        try:
            with open(path, encoding="utf-8") as text:
                lines = [line.strip() for _, line in zip(range(100_000), text) if line.strip()]
        except (OSError, UnicodeDecodeError):
            return []
        head = lines[:SNIFF_LINES]
        if not head or sum(line.lower().endswith(HDF5_EXTENSIONS) for line in head) * 2 < len(head):
            return []
        return lines

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[RowRange]]:
        import h5py  # noqa: F401 - imported where used: the image reader never pays for it

        self._data_bytes = (0, 0)
        data_key = self.options.data_key or "data"
        if self.path.is_dir():
            root, layout = self.path, "folder"
            files = sorted(p for p in self.path.iterdir() if p.is_file() and is_hdf5_file(p))
            listed = [(p.name, p) for p in files]
        elif is_hdf5_file(self.path):
            root, layout = self.path.parent, "file"
            listed = [(self.path.name, self.path)]
        else:
            root, layout = self.path.parent, DatasetInfo.LIST_FILE
            listed = [(line, root / line) for line in self._list_lines(self.path)]
        if not listed:
            raise UnusableDataset(f"{self.path}: no HDF5 files found")
        self.layout, self.root = layout, str(root)
        self.listed = [(source, str(path)) for source, path in listed]
        real_root = os.path.realpath(root)
        info = DatasetInfo(format=self.format, layout=layout, root=str(root), labelled=False, records=0)
        partitions: list[RowRange] = []
        any_labels = False
        labels_seen: dict[str, list[str]] = {}  # label key -> the files it was read from
        unreadable: list[str] = []  # why each file that does not open does not
        read = 0  # files opened and split into rows
        if len(listed) > 1:  # a file of them may be unreadable alone (`unreadable-file`)
            self.provides = self.provides | {Carries.SEVERAL_FILES}
        for source, path in listed:
            target = os.path.realpath(path)
            if not is_within(target, real_root):
                info.issues.append(
                    _dataset_issue(
                        "unsafe-path", source, f"not read: {source} resolves outside the dataset root"
                    )
                )
                continue
            if not os.path.isfile(target):
                info.issues.append(_dataset_issue("missing-file", source, f"no such file: {source}"))
                continue
            try:
                opened = self._open_file(
                    target, source, data_key, real_root, info, partition_size, labels_seen
                )
            except UnusableDataset as error:
                if len(listed) == 1:
                    raise
                unreadable.append(str(error))  # the others are read; `fix` sets this one aside
                reason = str(error).removeprefix(f"{source}: ")  # the finding's source names it
                info.issues.append(_dataset_issue("unreadable-file", source, reason))
                continue
            if opened is not None:
                read += 1
                rows, has_labels, ranges = opened
                info.records += rows
                any_labels |= has_labels
                partitions += ranges
        if unreadable and not read:  # nothing left to scan: the dataset is unusable
            raise UnusableDataset(
                f"{self.path}: none of its {len(listed)} HDF5 files can be read ({unreadable[0]}"
                + (f"; and {len(unreadable) - 1} more" if len(unreadable) > 1 else "")
                + ")"
            )
        info.labelled = any_labels
        plain, compressed = self._data_bytes
        self.preferred_scheduler = "processes" if compressed else "threads"
        self.work_seconds = plain / PLAIN_BYTES_PER_SECOND + compressed / COMPRESSED_BYTES_PER_SECOND
        widths = {p.label_width for p in partitions if p.label_key is not None}
        if len(widths) > 1:
            raise UnusableDataset(f"{self.path}: the files' labels differ in shape (widths {sorted(widths)})")
        info.label_width = (widths.pop() or None) if widths else None
        for key, sources in labels_seen.items():
            if key != "label" and self.options.label_key is None:
                info.notes.append(
                    f"labels: read from {key!r} ({_files(sources)}); --label-key chooses another dataset"
                )
        return info, partitions

    def _label_key(self, file, data_key: str, source: str) -> str | None:
        """The labels dataset: ``--label-key`` (which must exist), else the first usual name of
        labels, else of masks."""
        if self.options.label_key is not None:
            if self.options.label_key not in file:
                raise _no_dataset(file, source, self.options.label_key)
            return self.options.label_key
        return next((key for key in LABEL_KEYS + MASK_KEYS if key != data_key and key in file), None)

    def _open_file(self, path, source, data_key, real_root, info, partition_size, labels_seen):
        import h5py

        try:
            file = h5py.File(path, "r")
        except OSError as error:
            raise UnusableDataset(f"{source}: not a readable HDF5 file ({first_line(error)})") from None
        with file:
            label_key = self._label_key(file, data_key, source)
            unsafe = _unsafe_links(
                file, (data_key,) + ((label_key,) if label_key else ()), os.path.dirname(path), real_root
            )
            if unsafe:
                for message in unsafe:
                    info.issues.append(_dataset_issue("unsafe-path", source, message))
                return None
            if data_key not in file:
                raise _no_dataset(file, source, data_key, "; choose one with --data-key")
            data = file[data_key]
            if not isinstance(data, h5py.Dataset) or data.shape is None or len(data.shape) == 0:
                raise UnusableDataset(f"{source}: {data_key!r} is not an array dataset with rows")
            rows = data.shape[0]
            label, masks, label_width = self._labels_of(file, label_key, source, info)
            has_labels = label is not None
            if has_labels:
                labels_seen.setdefault(label_key, []).append(source)
            if has_labels and label.shape[0] != rows:
                info.issues.append(
                    _dataset_issue(
                        "row-count-mismatch",
                        source,
                        f"{data_key!r} has {rows} rows but {label_key!r} has {label.shape[0]}",
                        data_rows=rows,
                        label_rows=label.shape[0],
                    )
                )
                rows = min(rows, label.shape[0])
            info.files[source] = {
                "data": _describe(data),
                **({"mask" if masks else "label": _describe(label)} if has_labels else {}),
            }
            labelling = (label_key if has_labels else None, label_width, masks)
            ranges = self._row_ranges(path, source, data, rows, partition_size, labelling)
            return rows, has_labels, ranges

    def _labels_of(
        self, file: Any, label_key: str | None, source: str, info: DatasetInfo
    ) -> tuple[Any, bool, int]:
        """(the labels dataset, whether it holds masks, K of (N, K) label vectors else 0) of a
        file; None for labels that are neither class ids, vectors nor masks (said in a note)."""
        import h5py

        label: Any = file.get(label_key) if label_key else None
        masks = is_mask_array(label)
        has_labels = masks or (
            isinstance(label, h5py.Dataset) and label.shape is not None and len(label.shape) in (1, 2)
        )
        if has_labels and label.dtype.kind not in "biuf":
            raise UnusableDataset(f"{source}: labels {label_key!r} are {label.dtype}, not numbers")
        if label is not None and not has_labels:
            shape = (
                "x".join(map(str, label.shape)) if isinstance(label, h5py.Dataset) and label.shape else "?"
            )
            info.notes.append(
                f"labels: {source}: {label_key!r} has shape {shape}, neither class ids (N,) nor "
                "label vectors (N, K): not checked"
            )
            return None, False, 0
        label_width = label.shape[1] if has_labels and len(label.shape) == 2 and label.shape[1] > 1 else 0
        if masks:
            self.provides = self.provides | {Carries.MASKS}
            info.notes.append(
                f"labels: {source}: {label_key!r} holds (N, H, W) class maps: checked as segmentation masks"
            )
        return label, masks, label_width

    def _row_ranges(
        self,
        path: str,
        source: str,
        data: Any,
        rows: int,
        partition_size: int,
        labelling: tuple[str | None, int, bool],
    ) -> list[RowRange]:
        """A file's partitions (``labelling``: its labels' key, width and whether they are masks),
        its rows' bytes counted as plain or compressed (`work_seconds`)."""
        row_bytes = max(1, row_bytes_of(data))
        filtered = data.id.get_create_plist().get_nfilters() > 0  # gzip, lzf, blosc, ...
        plain, compressed = self._data_bytes
        self._data_bytes = (
            (plain, compressed + rows * row_bytes) if filtered else (plain + rows * row_bytes, compressed)
        )
        chunk_rows = data.chunks[0] if data.chunks else 1
        block_rows, partition_rows = row_partitioning(row_bytes, chunk_rows, partition_size)
        pieces = piece_plan(data.shape, data.chunks, data.dtype.itemsize) if row_bytes > BLOCK_BYTES else None
        step = min(block_rows, partition_rows)
        return [
            RowRange(path, source, start, min(start + partition_rows, rows), step, *labelling, pieces)
            for start in range(0, rows, partition_rows)
        ]

    def label_sample(self, partitions: Sequence[RowRange], most: int) -> np.ndarray | None:
        """The first labels of each labelled file (of at most `SAMPLED_FILES`), ``most`` in all."""
        import h5py

        files = list(dict.fromkeys((p.path, p.label_key) for p in partitions if p.label_key and not p.masks))
        files = files[:SAMPLED_FILES]
        if not files:
            return None
        each = -(-most // len(files))
        parts = []
        for path, key in files:
            try:
                with h5py.File(path, "r") as file:
                    parts.append(np.asarray(file[key][:each]))
            except OSError:  # a damaged chunk: the scan says so, record by record
                continue
        return np.concatenate(parts) if parts else None

    def read(self, partition: RowRange, start: int = 0, stop: int | None = None) -> Iterator[Batch]:
        import h5py

        first = partition.start + start
        last = partition.stop if stop is None else partition.start + stop
        with h5py.File(partition.path, "r") as file:
            data = file[self.options.data_key or "data"]
            label = file[partition.label_key] if partition.label_key else None
            if partition.pieces is not None:
                yield from self._read_in_pieces(partition, data, label, first, last)
                return
            width = (partition.label_width,) if partition.label_width else ()
            labels = (
                np.empty((partition.block_rows, *width), dtype=np.float64)
                if label is not None and not partition.masks
                else None
            )
            for begin, end, rows in _data_blocks(
                file, data, partition.source, first, last, partition.block_rows
            ):
                count = end - begin
                meta: BatchFacts = {}
                try:
                    if partition.masks and label is not None:  # (n, H, W) class maps, as stored
                        meta["masks"] = np.asarray(label[begin:end])
                    elif labels is not None:
                        assert label is not None  # labels are allocated only for a labelled file
                        labels[:count] = np.asarray(label[begin:end], dtype=np.float64).reshape(count, *width)
                except OSError as error:  # a damaged chunk: the file cannot be trusted as a whole
                    raise UnusableDataset(
                        f"{partition.source}: rows {begin}-{end - 1} cannot be read ({first_line(error)})"
                    ) from None
                yield Batch(
                    partition.source,
                    begin,
                    begin - partition.start,
                    rows,
                    None if labels is None else labels[:count],
                    meta,
                )

    def _read_in_pieces(self, partition: RowRange, data, label, first: int, last: int) -> Iterator[Batch]:
        """Rows larger than a block, one `Batch` each, whose data are `Pieces`: slabs of whole
        chunks along one row axis, read into one reused buffer, so memory follows the block
        size, not the row's (a 512^3 float32 volume is 512 MiB a row)."""
        plan = partition.pieces
        assert plan is not None
        row_shape = data.shape[1:]
        buffer = _buffer(slab_shape(data.shape, plan), data.dtype)
        width = (partition.label_width,) if partition.label_width else ()

        def read(row: int) -> Iterator[np.ndarray]:
            try:
                for _, slab in row_slabs(data, row, plan, buffer):
                    yield slab.reshape(-1)
            except OSError as error:
                raise UnusableDataset(
                    f"{partition.source}: row {row} cannot be read ({first_line(error)})"
                ) from None

        for row in range(first, last):
            labels, meta = None, BatchFacts()
            if label is not None and partition.masks:
                meta["masks"] = np.asarray(label[row : row + 1])
            elif label is not None:
                labels = np.asarray(label[row : row + 1], dtype=np.float64).reshape(1, *width)
            pieces = Pieces((1, *row_shape), data.dtype, functools.partial(read, row))
            yield Batch(partition.source, row, row - partition.start, pieces, labels, meta)

    def members(self, partitions: Sequence[RowRange]) -> Iterator[str]:
        if self.layout == DatasetInfo.LIST_FILE:
            yield str(self.path)
        for _, path in self.listed:
            yield path

    def locate(self, partition: RowRange, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition.source, str(partition.start + o), partition.start + o) for o in offsets]


def _data_blocks(
    file, data, source: str, first: int, last: int, block_rows: int
) -> Iterator[tuple[int, int, np.ndarray]]:
    """(begin, end, rows) blocks of rows ``first:last``, read into this thread's reused buffer by
    `read_rows`: one ``pread`` a stretch of plain bytes (`plain_layout`), else HDF5.

    HDF5's own read of plain bytes costs more than a ``pread`` (its selection and copy, a large
    share of a scan). A memory map saves the copy but pays as much in page faults, and populated
    at once it serializes threads on the process's memory map (see docs/benchmarks.md, and
    "Design measurements" there).
    """
    buffer = _buffer((block_rows, *data.shape[1:]), data.dtype)
    layout = plain_layout(file, data)
    for begin in range(first, last, block_rows):
        end = min(begin + block_rows, last)
        rows = buffer[: end - begin]
        try:
            if rows.size:
                read_rows(data, layout, begin, end, rows)
        except OSError as error:  # a damaged chunk: the file cannot be trusted as a whole
            raise UnusableDataset(
                f"{source}: rows {begin}-{end - 1} cannot be read ({first_line(error)})"
            ) from None
        yield begin, end, rows


def read_rows(data, layout: PlainLayout | None, begin: int, end: int, into: np.ndarray) -> None:
    """Rows ``begin:end`` of ``data`` into the C-contiguous array ``into``: by ``pread`` on
    HDF5's own descriptor (sec2: pread leaves its position alone) where ``layout``
    (`plain_layout`) says they are stored as plain bytes, else by HDF5."""
    runs = None if layout is None or begin >= end else layout.runs(begin, end)
    if layout is None or runs is None:
        data.read_direct(into, np.s_[begin:end], np.s_[0 : end - begin])
        return
    for first, last, offset in runs:
        read_at(layout.descriptor, offset, into[first - begin : last - begin])


def row_bytes_of(data) -> int:
    """The bytes of one row of an h5py dataset (of its data: a variable-length one's handles)."""
    return int(np.prod(data.shape[1:], dtype=np.int64)) * data.dtype.itemsize


def read_at(descriptor: int, offset: int, into: np.ndarray) -> None:
    """Fill the C-contiguous array ``into`` with the bytes stored at ``offset``."""
    target = memoryview(into.reshape(-1).view(np.uint8).data)
    preadv = getattr(os, "preadv", None)  # into the buffer, without a copy: not on every system
    done = 0
    while done < target.nbytes:
        if preadv is not None:
            got = preadv(descriptor, [target[done:]], offset + done)
        else:  # a system without preadv: read, then copy
            data = os.pread(descriptor, target.nbytes - done, offset + done)
            got = len(data)
            target[done : done + got] = data
        if got == 0:
            raise OSError(f"the file ends {target.nbytes - done} bytes short of the block at {offset}")
        done += got


#: Element kinds whose stored bytes are their values (bool, integers, floats)
PLAIN_KINDS = frozenset("biuf")


@dataclass(frozen=True)
class PlainLayout:
    """Where a dataset's rows lie in its file as plain bytes (see `plain_layout`)."""

    descriptor: int  # HDF5's own file descriptor (the sec2 driver's)
    row_bytes: int
    file_size: int
    offset: int | None  # contiguous storage: where row 0 starts
    chunk_rows: int = 0
    addresses: np.ndarray | None = None  # chunked storage: each chunk's offset, by chunk number

    def runs(self, first: int, last: int) -> list[tuple[int, int, int]] | None:
        """(first row, end row, file offset) of each stretch of rows ``first:last`` stored one
        after the other; None when some lie beyond the end of the file (a truncated file: HDF5
        reports it)."""
        runs: list[tuple[int, int, int]] = []
        row_bytes = self.row_bytes
        if self.offset is not None:
            runs.append((first, last, self.offset + first * row_bytes))
        else:
            assert self.addresses is not None
            step = self.chunk_rows
            for chunk in range(first // step, -(-last // step)):
                begin, end = max(first, chunk * step), min(last, (chunk + 1) * step)
                offset = int(self.addresses[chunk]) + (begin - chunk * step) * row_bytes
                if runs and runs[-1][2] + (begin - runs[-1][0]) * row_bytes == offset:
                    runs[-1] = (runs[-1][0], end, runs[-1][2])
                else:
                    runs.append((begin, end, offset))
        if any(offset + (end - begin) * row_bytes > self.file_size for begin, end, offset in runs):
            return None
        return runs


def plain_layout(file, data) -> PlainLayout | None:
    """Where ``data``'s rows lie in ``file`` when they are stored as plain bytes, or None when
    only HDF5 can read them: filters (compression, shuffle, checksums), chunks that split rows,
    unallocated storage (read as the fill value), external or virtual storage, a user block, a
    driver other than the default one, non-native byte order, compound or variable-length
    types. Ask once per dataset: its h5py properties are slow to ask."""
    import h5py

    dtype = data.dtype
    if dtype.kind not in PLAIN_KINDS or not dtype.isnative or dtype.fields is not None:
        return None
    if file.driver != "sec2":  # the others' handle is not a file descriptor (core: memory)
        return None
    plist = data.id.get_create_plist()
    if plist.get_nfilters() or plist.get_external_count() or data.is_virtual or file.userblock_size:
        return None
    row_bytes = row_bytes_of(data)
    descriptor = file.id.get_vfd_handle()
    status = os.fstat(descriptor)
    layout = plist.get_layout()
    if layout == h5py.h5d.CONTIGUOUS:
        offset = data.id.get_offset()
        return None if offset is None else PlainLayout(descriptor, row_bytes, status.st_size, offset)
    if layout != h5py.h5d.CHUNKED or tuple(data.chunks[1:]) != tuple(data.shape[1:]):
        return None
    key = (file.filename, data.name, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
    addresses = _CHUNK_ADDRESSES.get(key)
    if addresses is not None and not _same_ends(data, addresses):  # rewritten within a clock tick
        addresses = None
    if addresses is None:
        if len(_CHUNK_ADDRESSES) >= 64:
            _CHUNK_ADDRESSES.clear()
        addresses = _CHUNK_ADDRESSES[key] = chunk_addresses(data, row_bytes)
    if addresses is None or not len(addresses):
        return None
    return PlainLayout(descriptor, row_bytes, status.st_size, None, data.chunks[0], addresses)


#: (file, dataset, inode, size, mtime, ctime) -> `chunk_addresses`, per process; an empty array
#: for a dataset HDF5 must read itself
_CHUNK_ADDRESSES: dict[tuple, np.ndarray] = {}


def _same_ends(data, addresses: np.ndarray) -> bool:
    """Whether the first and last chunks are still where ``addresses`` says (two lookups): a file
    rewritten in place keeps its inode, and its times move in clock ticks of a few ms."""
    if not len(addresses):
        return True
    zeros = (0,) * (len(data.shape) - 1)
    rows = data.chunks[0]
    if -(-data.shape[0] // rows) != len(addresses):
        return False
    return all(
        data.id.get_chunk_info_by_coord((chunk * rows, *zeros)).byte_offset == addresses[chunk]
        for chunk in (0, len(addresses) - 1)
    )


def chunk_addresses(data, row_bytes: int) -> np.ndarray:
    """The file offset of each chunk of a dataset chunked in whole rows, by chunk number; empty
    when a chunk is unallocated (HDF5 reads the fill value), filtered or not of full size.
    Walked once per file and process, which is much cheaper than a lookup per chunk (see
    docs/benchmarks.md, "Design measurements")."""
    chunk_rows = data.chunks[0]
    count = -(-data.shape[0] // chunk_rows)
    addresses = np.full(count, -1, np.int64)
    full = chunk_rows * row_bytes

    def note(stored) -> None:
        if stored.byte_offset is not None and not stored.filter_mask and stored.size == full:
            addresses[stored.chunk_offset[0] // chunk_rows] = stored.byte_offset

    if hasattr(data.id, "chunk_iter"):  # HDF5 >= 1.12.3
        data.id.chunk_iter(note)
    else:
        zeros = (0,) * (len(data.shape) - 1)
        for chunk in range(count):
            note(data.id.get_chunk_info_by_coord((chunk * chunk_rows, *zeros)))
    return addresses[:0] if (addresses < 0).any() else addresses


_BUFFERS = threading.local()


def _buffer(shape: tuple, dtype) -> np.ndarray:
    """One block buffer per worker thread, reused across partitions: a fresh 8 MiB array costs
    ~2,000 page faults each time it is first written. Per thread, never shared: under the
    threads scheduler two partitions are read at once."""
    key = (shape, np.dtype(dtype).str)
    if getattr(_BUFFERS, "key", None) != key:
        _BUFFERS.key, _BUFFERS.array = key, np.empty(shape, dtype=dtype)
    return _BUFFERS.array


def row_slabs(
    data, row: int, plan: tuple[int, int], buffer: np.ndarray
) -> Iterator[tuple[tuple, np.ndarray]]:
    """The slabs of one row of an h5py dataset, by `piece_plan`: (where in the row, the slab
    read into ``buffer``: valid until the next)."""
    axis, span = plan
    row_shape = data.shape[1:]
    for outer in np.ndindex(*row_shape[: axis - 1]):
        for begin in range(0, row_shape[axis - 1], span):
            count = min(span, row_shape[axis - 1] - begin)
            where = (*outer, slice(begin, begin + count))
            data.read_direct(buffer, (row, *where), np.s_[0:count])
            yield where, buffer[:count]


def slab_shape(shape: tuple, plan: tuple[int, int]) -> tuple[int, ...]:
    """The shape of the largest slab of a row (a buffer for `row_slabs`)."""
    axis, span = plan
    return (span, *shape[axis + 1 :])


def piece_plan(shape: tuple, chunks: tuple | None, itemsize: int) -> tuple[int, int]:
    """How to read a row larger than a block in pieces: (axis, span). Pieces are slabs of
    ``span`` indices along that axis of the row (1 = the row's first), one index of each axis
    before it at a time: each slab is contiguous in C order, and the slabs of a row follow each
    other in its flat order. The axis is the first whose one index holds at most a block; the
    span is a whole number of chunks along it, about a block's worth."""
    row_shape = shape[1:]
    axis = next(
        (a for a in range(1, len(row_shape) + 1) if int(np.prod(row_shape[a:])) * itemsize <= BLOCK_BYTES),
        len(row_shape),
    )
    index_bytes = max(1, int(np.prod(row_shape[axis:])) * itemsize)
    chunk = chunks[axis] if chunks else 1
    span = max(chunk, (BLOCK_BYTES // index_bytes) // chunk * chunk)
    return axis, min(span, row_shape[axis - 1])


def _files(sources: list[str]) -> str:
    return sources[0] if len(sources) == 1 else f"{len(sources)} files"


def row_partitioning(row_bytes: int, chunk_rows: int, partition_size: int) -> tuple[int, int]:
    """(rows read at once, rows per partition) for rows of ``row_bytes``: a block of about
    ``BLOCK_BYTES`` and at most ``BLOCK_ROWS`` rows, a partition of about ``PARTITION_BYTES`` and
    at most ``PARTITION_ROWS`` (``partition_size`` rows when given), each a whole number of
    chunks (of blocks). Shared by the array readers (HDF5, NumPy)."""
    block_rows = round_up(max(1, min(BLOCK_BYTES // row_bytes, BLOCK_ROWS)), chunk_rows)
    by_bytes = round_up(max(1, PARTITION_BYTES // row_bytes), block_rows)
    return block_rows, partition_size or min(by_bytes, round_up(PARTITION_ROWS, block_rows))


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _dataset_issue(check: str, source: str, message: str, **details: Any) -> Issue:
    return make_issue(check, source, "*", None, Finding(message, details))


def _no_dataset(file, source: str, key: str, hint: str = "") -> UnusableDataset:
    names = ", ".join(sorted(_datasets(file))) or "none"
    return UnusableDataset(f"{source}: no dataset {key!r} (datasets: {names}){hint}")


def _datasets(file) -> list[str]:
    import h5py

    names: list[str] = []
    file.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
    return names


def _describe(dataset) -> dict[str, Any]:
    return {
        "dtype": str(dataset.dtype),
        "shape": list(dataset.shape),
        "chunks": list(dataset.chunks) if dataset.chunks else None,
        "compression": dataset.compression,
    }


def _unsafe_links(file, keys: Sequence[str], directory: str, real_root: str) -> list[str]:
    """Why the datasets we would read point outside the dataset root (empty when they do not)."""
    import h5py

    problems = []
    for key in keys:
        link = file.get(key, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            target = os.path.realpath(os.path.join(directory, link.filename))
            if not is_within(target, real_root):
                problems.append(f"{key!r} is an external link to {link.filename}, outside the dataset root")
                continue
        try:
            dataset = file.get(key)
        except (KeyError, OSError) as error:
            problems.append(f"{key!r} cannot be opened: {first_line(error)}")
            continue
        if not isinstance(dataset, h5py.Dataset):
            continue
        if dataset.external:
            problems.append(
                f"{key!r} keeps its data in external files ({dataset.external[0][0]!s}), not read"
            )
        if dataset.is_virtual:
            for source in dataset.virtual_sources():
                if source.file_name == ".":
                    continue
                target = os.path.realpath(os.path.join(directory, source.file_name))
                if not is_within(target, real_root):
                    problems.append(
                        f"{key!r} is a virtual dataset reading {source.file_name}, outside the dataset root"
                    )
    return problems
