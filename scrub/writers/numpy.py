"""NumPy ``.npy`` and ``.npz`` files: a new ``.npy`` of the kept rows, in order, with the source's
dtype and row shape (C order), written through a memory map a block at a time; the quarantine
holds a ``.npy`` of the set-aside rows, in source order (the manifest names each by its index).
An ``.npz`` becomes an ``.npz`` with the same arrays, compressed if the source's were: those
with as many rows as the data array (the data, its labels, per-row metadata) split row by row,
the others copied whole into both; its arrays are loaded whole, as ``np.load(f)[key]`` does.
A ``.npy`` with its labels in a ``.npy`` of their own (``--labels``) becomes a folder holding both
under their own names (``X.clean/X.npy`` and ``X.clean/y.npy``), split row by row together.
`np.load` reads every output. Rows are checksummed as HDF5 rows are
(`scrub.fixing.ledger.row_digests`), over every row-aligned array."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from scrub.fixing.ledger import Ledger, identity_seed, row_digests, row_values
from scrub.readers.hdf5 import BLOCK_BYTES
from scrub.readers.numpy import NumpyReader, is_npy_file, load_array, npz_members
from scrub.writers.base import Tally, Verdicts, Writer


class NumpyWriter(Writer[NumpyReader]):
    format = "numpy"

    @property
    def labels_file(self) -> Path | None:
        """The ``--labels`` file the data was read with, if any: it is split with the rows."""
        named = self.info.files.get(self.source.name, {}).get("labels_file")
        return Path(named) if named else None

    @property
    def output_is_folder(self) -> bool:
        return self.labels_file is not None or super().output_is_folder

    def clean_name(self) -> str:
        return f"{self.source.stem}.clean" if self.labels_file is not None else super().clean_name()

    def quarantine_name(self) -> str:
        return self.base_name() if self.labels_file is not None else super().quarantine_name()

    def dataset_in(self, target: Path) -> Path:
        return target / self.source.name if self.labels_file is not None else super().dataset_in(target)

    def _files(self, target: Path) -> list[tuple[Path, Path]]:
        """(source, output) of each ``.npy`` split row by row: the data, and its labels file."""
        if self.labels_file is None:
            return [(self.source, target)]
        return [(self.source, target / self.source.name), (self.labels_file, target / self.labels_file.name)]

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        if not is_npy_file(self.source):
            return self._write_npz(verdicts, clean, quarantine)
        tally = Tally()
        if self.labels_file is not None:
            for folder in (clean, quarantine):
                if folder is not None:
                    folder.mkdir()
        sides = {False: self._files(clean)} | (
            {True: self._files(quarantine)} if quarantine is not None else {}
        )
        arrays = [load_array(source) for source, _ in sides[False]]
        rows = len(arrays[0])
        bad = self._bad_rows(verdicts, rows)
        keep = np.ones(rows, dtype=bool)
        keep[bad] = False
        counts = {False: int(keep.sum()), True: len(bad)}
        outputs = {
            side: [_new_like(target, array, counts[side]) for (_, target), array in zip(files, arrays)]
            for side, files in sides.items()
        }
        seed = identity_seed(self.source.name)
        cursors = {False: 0, True: 0}
        for begin, blocks in _aligned_blocks(arrays):
            mask = keep[begin : begin + len(blocks[0])]
            values = row_values(
                seed, np.arange(begin, begin + len(blocks[0])), [row_digests(block) for block in blocks]
            )
            tally.kept.add_values(values[mask])
            tally.quarantined.add_values(values[~mask])
            for side, chosen in ((False, mask), (True, ~mask)):
                taken = int(chosen.sum())
                if side in outputs and taken:
                    for output, block in zip(outputs[side], blocks):
                        output[cursors[side] : cursors[side] + taken] = block[chosen]
                cursors[side] += taken
        for written in outputs.values():
            for output in written:
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
        written = [load_array(output) for _, output in self._files(target)]
        if any(len(array) != len(origin) for array in written):  # a row lost or added: no match
            ledger.add_values(np.zeros(1, np.uint64))
            return ledger
        seed = identity_seed(self.source.name)
        for begin, blocks in _aligned_blocks(written):
            indices = origin[begin : begin + len(blocks[0])]
            ledger.add_values(row_values(seed, indices, [row_digests(block) for block in blocks]))
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


def _aligned_blocks(arrays: list[np.ndarray]) -> Iterator[tuple[int, list[np.ndarray]]]:
    """The same consecutive rows of each of ``arrays`` (of as many rows), ~``BLOCK_BYTES`` of
    the widest at a time, copied out of their maps."""
    row_bytes = max(max(1, int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize) for a in arrays)
    step = max(1, BLOCK_BYTES // row_bytes)
    for begin in range(0, len(arrays[0]), step):
        yield begin, [np.array(array[begin : begin + step]) for array in arrays]
