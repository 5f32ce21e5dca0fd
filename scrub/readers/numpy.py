"""NumPy ``.npy`` and ``.npz`` files: the rows of the array are the records (``X[i]``), as a
``torch.utils.data.TensorDataset(torch.from_numpy(np.load(path)))`` or a memory-mapped loader
serves them. In an ``.npz`` the data array is ``--data-key`` or the first of `DATA_KEYS` it
holds, paired with a label array (``--label-key`` or the first of `LABEL_KEYS`) of as many rows,
as HDF5's data/label; a stored (uncompressed) member is memory-mapped inside the archive, a
compressed one is decompressed whole once per worker (as ``np.load(f)[key]`` does for its user).

The file is memory-mapped (``np.load(mmap_mode="r")``, never read whole) and never unpickled: an
array of Python objects needs pickle to load, and loading a pickle runs arbitrary code; its dtype
is read from the header first, and such a file is refused (its rows are not numbers to check).
Partitions are row ranges of ~128 MiB (and at most 65,536 rows, like HDF5's); each worker maps
the file itself and copies blocks of ~4 MiB of rows into one reused buffer, which the vectorized
numeric checks test; a row larger than a block is tested in pieces of a block
(`scrub.records.Pieces`). A ``.npy`` holds no labels: label checks do not run (said in the
summary's notes).
"""

from __future__ import annotations

import functools
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scrub.errors import UnusableDataset, UsageError, first_line
from scrub.readers.base import DatasetInfo, Reader
from scrub.readers.hdf5 import (
    BLOCK_BYTES,
    COMPRESSED_BYTES_PER_SECOND,
    PLAIN_BYTES_PER_SECOND,
    is_mask_array,
    row_partitioning,
)
from scrub.records import Batch, BatchFacts, Carries, Pieces

DATA_KEYS = ("data", "x", "X", "features", "inputs", "images", "arr_0")
LABEL_KEYS = ("label", "labels", "y", "Y", "target", "targets")
MASK_KEYS = ("mask", "masks", "seg", "segmentation")


@dataclass(frozen=True)
class NpyRows:
    """A partition: rows ``start:stop`` of the array in ``path`` (of ``member`` of an ``.npz``)."""

    path: str
    source: str
    start: int
    stop: int
    block_rows: int  # rows copied at once
    big_rows: bool  # rows larger than a block: each is tested in pieces
    member: str | None = None
    label_member: str | None = None
    masks: bool = False  # the labels are (N, H, W) segmentation masks
    label_path: str | None = None  # a .npy of labels of its own (--labels), else the data's file

    def __len__(self) -> int:
        return self.stop - self.start


def is_npy_file(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(6) == np.lib.format.MAGIC_PREFIX
    except OSError:
        return False


def _header(file) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) of the .npy data at ``file``'s position."""
    version = np.lib.format.read_magic(file)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(file)
    return np.lib.format.read_array_header_2_0(file)


def _refuse_objects(where: str, dtype: np.dtype) -> None:
    if dtype.hasobject:
        raise UnusableDataset(
            f"{where}: an array of Python objects ({dtype}): loading it would unpickle them, which "
            "runs arbitrary code, and scrub checks rows of numbers; not read"
        )


def load_array(path: str | Path, member: str | None = None) -> np.ndarray:
    """The array of a ``.npy`` (or of ``member`` of an ``.npz``), memory-mapped where it is stored
    as is. Raises `UnusableDataset` with the reason (an array of Python objects included: its
    dtype is read from the header first, and it is never unpickled)."""
    where = f"{path}:{member}" if member else str(path)
    try:
        if member is None:
            with open(path, "rb") as file:
                _refuse_objects(where, _header(file)[2])
            return np.load(path, mmap_mode="r", allow_pickle=False)
        return _npz_member(str(path), member, where)
    except (OSError, EOFError, ValueError, SyntaxError, KeyError, zipfile.BadZipFile) as error:
        raise UnusableDataset(f"{where}: not a readable NumPy array ({first_line(error)})") from None


@functools.lru_cache(maxsize=2)
def _npz_member(path: str, member: str, where: str) -> np.ndarray:
    """A member of an ``.npz``: mapped in place when stored, else decompressed whole (once per
    worker: the cache keeps the last two, the data and its labels)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member + ".npy")
        with archive.open(info) as file:
            shape, fortran, dtype = _header(file)
            _refuse_objects(where, dtype)
            header_bytes = file.tell()
        if info.compress_type != zipfile.ZIP_STORED:
            with archive.open(info) as file:  # from its start: read_array reads the header itself
                return np.lib.format.read_array(file, allow_pickle=False)
    with open(path, "rb") as raw:  # the member's data: after its local header, name and extra
        raw.seek(info.header_offset)
        local = raw.read(30)
        name_length, extra_length = (
            int.from_bytes(local[26:28], "little"),
            int.from_bytes(local[28:30], "little"),
        )
    offset = info.header_offset + 30 + name_length + extra_length + header_bytes
    if int(np.prod(shape)) == 0:
        return np.empty(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def npz_members(path: str | Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """An ``.npz``'s arrays: name -> (shape, dtype), from their headers."""
    members = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.endswith(".npy"):
                    with archive.open(name) as file:
                        shape, _, dtype = _header(file)
                    members[name[: -len(".npy")]] = (shape, dtype)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise UnusableDataset(f"{path}: not a readable .npz archive ({first_line(error)})") from None
    return members


def _compressed(path: Path) -> bool:
    """Whether an ``.npz`` stores a member compressed (``np.savez_compressed``)."""
    with zipfile.ZipFile(path) as archive:
        return any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist())


class NumpyReader(Reader[NpyRows]):
    format = "numpy"
    file_suffixes = (".npy", ".npz")
    preferred_scheduler = "threads"  # an .npz switches to processes in `open`
    records_per_task = 0  # partitions are sized in bytes
    provides = frozenset({Carries.ARRAY, Carries.ROWS})
    positional_keys = True
    options_used = frozenset({"data_key", "label_key", "labels"})

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if not path.is_file():
            return False
        return is_npy_file(path) or (path.suffix.lower() == ".npz" and zipfile.is_zipfile(path))

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[NpyRows]]:
        member = label_member = None
        notes: list[str] = []
        if is_npy_file(self.path):
            if self.options.data_key or self.options.label_key:
                raise UsageError("--data-key/--label-key: a .npy holds one array (they apply to .npz)")
            array = load_array(self.path)
        else:
            member, label_member, notes = self._choose_members()
            array = load_array(self.path, member)
        if array.ndim == 0:
            raise UnusableDataset(f"{self.path}: a 0-d array (a single value), not rows of records")
        rows = array.shape[0]
        self.root = str(self.path.parent)
        row_bytes = max(1, int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize)
        block_rows, partition_rows = row_partitioning(row_bytes, 1, partition_size)
        source = self.path.name
        label_member, label_path, label_hint = self._labels_chosen(array, member, label_member, notes)
        has_labels = label_member is not None or label_path is not None
        masks = has_labels and is_mask_array(load_array(label_path or self.path, label_member))
        if masks:
            self.provides = self.provides | {Carries.MASKS}
            named = repr(label_member) if label_member is not None else str(self.options.labels)
            notes.append(f"labels: {named} holds (N, H, W) class maps: checked as segmentation masks")
        partitions = [
            NpyRows(
                str(self.path.resolve()),
                source,
                start,
                min(start + partition_rows, rows),
                block_rows,
                row_bytes > BLOCK_BYTES,
                member,
                label_member,
                masks,
                label_path,
            )
            for start in range(0, rows, partition_rows)
        ]
        labelled = has_labels
        info = DatasetInfo(self.format, "file", self.root, labelled, rows, label_hint=label_hint)
        # as for HDF5: a memory-mapped .npy runs on threads (NumPy's reductions release the GIL),
        # an .npz on processes (each worker decompresses its members); small work in-process
        compressed = member is not None and _compressed(self.path)
        self.preferred_scheduler = "processes" if member is not None else "threads"
        self.work_seconds = (
            rows * row_bytes / (COMPRESSED_BYTES_PER_SECOND if compressed else PLAIN_BYTES_PER_SECOND)
        )
        info.files[source] = {
            **({"data_key": member, "label_key": label_member} if member is not None else {}),
            "dtype": str(array.dtype),
            "shape": list(array.shape),
            "fortran_order": bool(array.flags.f_contiguous and not array.flags.c_contiguous),
            **({"labels_file": label_path} if label_path is not None else {}),
        }
        info.notes += notes
        if labelled and not masks:
            shape = load_array(label_path or self.path, label_member).shape
            if len(shape) == 2 and shape[1] > 1:
                info.label_width = shape[1]
        elif not labelled:
            info.notes.append(f"labels: {source} holds no label array: label checks are not run")
        return info, partitions

    def _labels_chosen(
        self, array: np.ndarray, member: str | None, label_member: str | None, notes: list[str]
    ) -> tuple[str | None, str | None, str | None]:
        """(the archive's label member, the ``--labels`` file, a hint for a file that looks like
        labels scanned as data): ``--labels`` wins over the archive's labels, a label member of
        another length is not used, each said in ``notes``."""
        rows = array.shape[0]
        label_path = self._labels_file(rows)
        if label_path is not None:
            if label_member is not None:
                notes.append(f"labels: {self.options.labels} is used, not the archive's {label_member!r}")
            return None, label_path, None
        if label_member is not None and load_array(self.path, label_member).shape[0] != rows:
            notes.append(f"labels: {label_member!r} has not as many rows as {member!r}: not used")
            return None, None, None
        if member is None and array.ndim == 1 and array.dtype.kind in "iub" and self.path.stem in LABEL_KEYS:
            hint = (
                f"{self.path.name} holds one integer per row, as labels do: scanned as data here; to check "
                f"them as the labels of a data file, scan it with --labels {self.path}"
            )
            notes.append(hint)
            return label_member, None, hint
        return label_member, None, None

    def _labels_file(self, rows: int) -> str | None:
        """The ``--labels`` file, checked: a ``.npy`` of numbers with one row per data row."""
        named = self.options.labels
        if named is None:
            return None
        if self.options.label_key is not None:
            raise UsageError(f"--labels {named} and --label-key: name the labels once")
        if not Path(named).is_file() or not is_npy_file(Path(named)):
            raise UsageError(f"--labels {named}: not a .npy file")
        labels = load_array(named)
        if labels.ndim == 0 or labels.dtype.kind not in "biuf":
            raise UsageError(
                f"--labels {named}: holds {labels.dtype} of shape {labels.shape}, not labels per row"
            )
        if labels.shape[0] != rows:
            raise UsageError(
                f"--labels {named}: {labels.shape[0]:,} labels for the {rows:,} rows of {self.path}: "
                "they must be aligned, one per row"
            )
        return str(Path(named).resolve())

    def _choose_members(self) -> tuple[str, str | None, list[str]]:
        """The data and label arrays of an ``.npz``: the ones named by the options, else the first
        of the usual names (`DATA_KEYS`, `LABEL_KEYS`), else the only array."""
        members = npz_members(self.path)
        names = ", ".join(sorted(members)) or "none"
        data = self.options.data_key or next((k for k in DATA_KEYS if k in members), None)
        if data is None and len(members) == 1:
            data = next(iter(members))
        if data is None or data not in members:
            raise UnusableDataset(
                f"{self.path}: no data array {data!r} (it holds {names}); choose one with --data-key"
                if data
                else f"{self.path}: which array is the data? It holds {names}; choose one with --data-key"
            )
        label = self.options.label_key or next(
            (k for k in LABEL_KEYS + MASK_KEYS if k in members and k != data), None
        )
        if label is not None and label not in members:
            raise UnusableDataset(f"{self.path}: no label array {label!r} (it holds {names})")
        notes = []
        others = sorted(set(members) - {data, label})
        if others:
            notes.append(
                f"{self.path.name}: arrays not checked (neither data nor labels): {', '.join(others)}"
            )
        return data, label, notes

    def label_sample(self, partitions: Sequence[NpyRows], most: int) -> np.ndarray | None:
        """The first ``most`` labels (of the label array or the ``--labels`` file)."""
        first = partitions[0] if partitions else None
        if first is None or first.masks or (first.label_member is None and first.label_path is None):
            return None
        labels = load_array(first.label_path or first.path, first.label_member)
        return np.array(labels[:most])

    def read(self, partition: NpyRows, start: int = 0, stop: int | None = None) -> Iterator[Batch]:
        array = load_array(partition.path, partition.member)
        labels = (
            load_array(partition.label_path)
            if partition.label_path is not None
            else None
            if partition.label_member is None
            else load_array(partition.path, partition.label_member)
        )
        first = partition.start + start
        last = partition.stop if stop is None else partition.start + stop
        if partition.big_rows:
            for row in range(first, last):
                values = array[row]
                pieces = Pieces((1, *values.shape), array.dtype, functools.partial(_pieces, values))
                yield Batch(
                    partition.source,
                    row,
                    row - partition.start,
                    pieces,
                    *_labels(partition, labels, row, row + 1),
                )
            return
        buffer = np.empty((partition.block_rows, *array.shape[1:]), dtype=array.dtype)
        for begin in range(first, last, partition.block_rows):
            end = min(begin + partition.block_rows, last)
            count = end - begin
            try:
                buffer[:count] = array[begin:end]  # the pages are read here, once
            except OSError as error:
                raise UnusableDataset(
                    f"{partition.source}: rows {begin}-{end - 1} cannot be read ({error})"
                ) from None
            yield Batch(
                partition.source,
                begin,
                begin - partition.start,
                buffer[:count],
                *_labels(partition, labels, begin, end),
            )

    def members(self, partitions: Sequence[NpyRows]) -> Iterator[str]:
        yield str(self.path)
        if partitions and partitions[0].label_path is not None:
            yield partitions[0].label_path

    def locate(self, partition: NpyRows, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition.source, str(partition.start + o), partition.start + o) for o in offsets]


def _labels(
    partition: NpyRows, labels: np.ndarray | None, begin: int, end: int
) -> tuple[np.ndarray | None, BatchFacts]:
    """(labels, meta) of rows ``begin:end`` as a `Batch` carries them: class ids (n,) or label
    vectors (n, K) as float64, or (n, H, W) masks in the meta."""
    if labels is None:
        return None, {}
    if partition.masks:
        return None, {"masks": np.asarray(labels[begin:end])}
    block = np.asarray(labels[begin:end], dtype=np.float64)
    return (
        block.reshape(len(block), -1) if block.ndim > 1 and block[0].size > 1 else block.reshape(len(block))
    ), {}


def _pieces(row: np.ndarray) -> Iterator[np.ndarray]:
    """A row's values in C order, a block at a time (copied: the map's pages are read once)."""
    flat = row.reshape(-1) if row.flags.c_contiguous else np.ascontiguousarray(row).reshape(-1)
    step = max(1, BLOCK_BYTES // max(1, row.dtype.itemsize))
    for begin in range(0, flat.size, step):
        yield np.array(flat[begin : begin + step])
