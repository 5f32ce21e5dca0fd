"""NumPy ``.npy`` files: the rows of the array are the records (``X[i]``), as a
``torch.utils.data.TensorDataset(torch.from_numpy(np.load(path)))`` or a memory-mapped loader
serves them.

The file is memory-mapped (``np.load(mmap_mode="r")``, never read whole) and never unpickled: an
array of Python objects needs pickle to load, and loading a pickle runs arbitrary code; its dtype
is read from the header first, and such a file is refused (its rows are not numbers to check).
Partitions are row ranges of ~128 MiB (and at most 65,536 rows, like HDF5's); each worker maps
the file itself and copies blocks of ~4 MiB of rows into one reused buffer, which the vectorized
numeric checks test; a row larger than a block is tested in pieces of a block
(`scrub.records.Pieces`). A ``.npy`` holds no
labels: label checks do not run (said in the summary's notes).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scrub.errors import UnusableDataset, first_line
from scrub.readers.base import DatasetInfo, Reader
from scrub.readers.hdf5 import BLOCK_BYTES, PARTITION_BYTES, PARTITION_ROWS, round_up
from scrub.records import Batch, Pieces

NPY_MAGIC = b"\x93NUMPY"


@dataclass(frozen=True)
class NpyRows:
    """A partition: rows ``start:stop`` of the array in ``path``."""

    path: str
    source: str
    start: int
    stop: int
    block_rows: int  # rows copied at once
    big_rows: bool  # rows larger than a block: each is tested in pieces

    def __len__(self) -> int:
        return self.stop - self.start


def is_npy_file(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(6) == NPY_MAGIC
    except OSError:
        return False


def load_array(path: str | Path) -> np.ndarray:
    """The array of a ``.npy``, memory-mapped. Raises `UnusableDataset` with the reason (an
    array of Python objects included: it is never unpickled)."""
    try:
        with open(path, "rb") as file:  # the header says the dtype before anything is loaded
            version = np.lib.format.read_magic(file)
            header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            _, _, dtype = header(file)
        if dtype.hasobject:
            raise UnusableDataset(
                f"{path}: an array of Python objects ({dtype}): loading it would unpickle them, which "
                "runs arbitrary code, and scrub checks rows of numbers; not read"
            )
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, EOFError, ValueError, SyntaxError) as error:
        raise UnusableDataset(f"{path}: not a readable .npy file ({first_line(error)})") from None


class NumpyReader(Reader[NpyRows]):
    format = "numpy"
    preferred_scheduler = "processes"
    records_per_task = 0  # partitions are sized in bytes
    provides = frozenset({"array", "rows"})
    positional_keys = True

    @classmethod
    def sniff(cls, path: Path) -> bool:
        return path.is_file() and is_npy_file(path)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[NpyRows]]:
        array = load_array(self.path)
        if array.ndim == 0:
            raise UnusableDataset(f"{self.path}: a 0-d array (a single value), not rows of records")
        rows = array.shape[0]
        self.root = str(self.path.parent)
        row_bytes = max(1, int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize)
        block_rows = max(1, min(BLOCK_BYTES // row_bytes, 1 << 15))
        by_bytes = round_up(max(1, PARTITION_BYTES // row_bytes), block_rows)
        partition_rows = partition_size or min(by_bytes, round_up(PARTITION_ROWS, block_rows))
        source = self.path.name
        partitions = [
            NpyRows(
                str(self.path.resolve()),
                source,
                start,
                min(start + partition_rows, rows),
                block_rows,
                row_bytes > BLOCK_BYTES,
            )
            for start in range(0, rows, partition_rows)
        ]
        info = DatasetInfo(format=self.format, layout="file", root=self.root, labelled=False, records=rows)
        info.files[source] = {
            "dtype": str(array.dtype),
            "shape": list(array.shape),
            "fortran_order": bool(array.flags.f_contiguous and not array.flags.c_contiguous),
        }
        info.notes.append(f"labels: {source} is a .npy: it holds no labels, label checks are not run")
        return info, partitions

    def read(self, partition: NpyRows, start: int = 0, stop: int | None = None) -> Iterator[Batch]:
        array = load_array(partition.path)
        first = partition.start + start
        last = partition.stop if stop is None else partition.start + stop
        if partition.big_rows:
            for row in range(first, last):
                values = array[row]
                pieces = Pieces((1, *values.shape), array.dtype, functools.partial(_pieces, values))
                yield Batch(partition.source, row, row - partition.start, pieces)
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
            yield Batch(partition.source, begin, begin - partition.start, buffer[:count])

    def members(self, partitions: Sequence[NpyRows]) -> Iterator[str]:
        yield str(self.path)

    def locate(self, partition: NpyRows, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition.source, str(partition.start + o), partition.start + o) for o in offsets]


def _pieces(row: np.ndarray) -> Iterator[np.ndarray]:
    """A row's values in C order, a block at a time (copied: the map's pages are read once)."""
    flat = row.reshape(-1) if row.flags.c_contiguous else np.ascontiguousarray(row).reshape(-1)
    step = max(1, BLOCK_BYTES // max(1, row.dtype.itemsize))
    for begin in range(0, flat.size, step):
        yield np.array(flat[begin : begin + step])
