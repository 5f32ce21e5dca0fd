"""NumPy ``.npy`` and ``.npz`` files: a new ``.npy`` of the kept rows, in order, with the source's
dtype and row shape (C order), written through a memory map a block at a time; the quarantine
holds a ``.npy`` of the set-aside rows, in source order (the manifest names each by its index).
An ``.npz`` becomes an ``.npz`` with the same arrays, compressed if the source's were: those
with as many rows as the data array (the data, its labels, per-row metadata) split row by row,
the others copied whole into both; its arrays are loaded whole, as ``np.load(f)[key]`` does.
`np.load` reads every output. Rows are checksummed as HDF5 rows are
(`scrub.ledger.row_digests`), over every row-aligned array."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from scrub.ledger import Ledger, identity_seed, row_digests, row_values
from scrub.readers.hdf5 import BLOCK_BYTES
from scrub.readers.numpy import is_npy_file, load_array, npz_members
from scrub.writers.base import Tally, Verdicts, Writer


class NumpyWriter(Writer):
    format = "numpy"

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        if not is_npy_file(self.source):
            return self._write_npz(verdicts, clean, quarantine)
        tally = Tally()
        array = load_array(self.source)
        bad = self._bad_rows(verdicts, len(array))
        keep = np.ones(len(array), dtype=bool)
        keep[bad] = False
        outputs = {False: _new_like(clean, array, int(keep.sum()))}
        if quarantine is not None:
            outputs[True] = _new_like(quarantine, array, len(bad))
        cursors = {False: 0, True: 0}
        seed = identity_seed(self.source.name)
        for begin, block in _blocks(array):
            mask = keep[begin : begin + len(block)]
            values = row_values(seed, np.arange(begin, begin + len(block)), [row_digests(block)])
            tally.kept.add_values(values[mask])
            tally.quarantined.add_values(values[~mask])
            for side, rows in ((False, block[mask]), (True, block[~mask])):
                if side in outputs and len(rows):
                    outputs[side][cursors[side] : cursors[side] + len(rows)] = rows
                cursors[side] += len(rows)
        for output in outputs.values():
            output.flush()
        outputs.clear()  # unmapped: the files are complete
        tally.records_kept, tally.records_quarantined = cursors[False], cursors[True]
        return tally

    def _write_npz(self, verdicts: Verdicts, clean: Path, quarantine: Path | None) -> Tally:
        tally = Tally()
        arrays, aligned = self._npz_arrays(self.source)
        rows = len(arrays[aligned[0]])
        bad = self._bad_rows(verdicts, rows)
        keep = np.ones(rows, dtype=bool)
        keep[bad] = False
        with zipfile.ZipFile(self.source) as archive:
            compressed = any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist())
        save = np.savez_compressed if compressed else np.savez
        for side, target, mask in ((False, clean, keep), (True, quarantine, ~keep)):
            if target is not None:
                split: dict[str, Any] = {
                    name: a[mask] if name in aligned else a for name, a in arrays.items()
                }
                with open(target, "wb") as file:
                    save(file, **split)
            tally.other_files += (len(arrays) - len(aligned)) * (not side)
        values = _row_values(self.source.name, np.arange(rows), [arrays[name] for name in aligned])
        tally.kept.add_values(values[keep])
        tally.quarantined.add_values(values[~keep])
        tally.records_kept, tally.records_quarantined = int(keep.sum()), len(bad)
        return tally

    def _npz_arrays(self, path: Path) -> tuple[dict[str, np.ndarray], list[str]]:
        """Every array of an ``.npz`` (whole), and the names of those aligned with the data's rows
        (the data first)."""
        data = self.info.files[self.source.name]["data_key"]
        arrays = {name: np.asarray(load_array(path, name)) for name in npz_members(path)}
        rows = len(arrays[data])
        aligned = [data] + sorted(n for n, a in arrays.items() if n != data and a.ndim and len(a) == rows)
        return arrays, aligned

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not target.exists():
            return ledger
        if not is_npy_file(self.source):
            arrays, aligned = self._npz_arrays(target)
            source_rows = self.info.records
            bad = self._bad_rows(verdicts, source_rows)
            origin = bad if side == "quarantine" else np.setdiff1d(np.arange(source_rows), bad)
            if len(arrays[aligned[0]]) != len(origin):
                ledger.add_values(np.zeros(1, np.uint64))
                return ledger
            ledger.add_values(_row_values(self.source.name, origin, [arrays[name] for name in aligned]))
            return ledger
        source_rows = len(load_array(self.source))
        bad = self._bad_rows(verdicts, source_rows)
        origin = bad if side == "quarantine" else np.setdiff1d(np.arange(source_rows), bad)
        written = load_array(target)
        if len(written) != len(origin):  # a row lost or added: the sums cannot match
            ledger.add_values(np.zeros(1, np.uint64))
        seed = identity_seed(self.source.name)
        for begin, block in _blocks(written):
            indices = origin[begin : begin + len(block)]
            ledger.add_values(row_values(seed, indices, [row_digests(block[: len(indices)])]))
        return ledger

    def _bad_rows(self, verdicts: Verdicts, rows: int) -> np.ndarray:
        source = self.source.name
        if source in verdicts.files:
            return np.arange(rows)
        bad = np.array(sorted(index for name, index in verdicts.records if name == source), dtype=np.int64)
        return bad[bad < rows]


def _row_values(name: str, indices: np.ndarray, arrays: list[np.ndarray]) -> np.ndarray:
    """The ledger values of rows ``indices`` whose contents are the rows of ``arrays``."""
    seed = identity_seed(name)
    return row_values(seed, indices.astype(np.int64), [row_digests(np.ascontiguousarray(a)) for a in arrays])


def _new_like(path: Path, array: np.ndarray, rows: int) -> np.memmap:
    """A new ``.npy`` at ``path`` of ``rows`` rows shaped and typed like ``array``'s."""
    return np.lib.format.open_memmap(path, mode="w+", dtype=array.dtype, shape=(rows, *array.shape[1:]))


def _blocks(array: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Consecutive rows of ``array``, ~``BLOCK_BYTES`` at a time, copied out of the map."""
    row_bytes = max(1, int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize)
    step = max(1, BLOCK_BYTES // row_bytes)
    for begin in range(0, len(array), step):
        yield begin, np.array(array[begin : begin + step])
