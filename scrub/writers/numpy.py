"""NumPy ``.npy`` files: a new ``.npy`` of the kept rows, in order, with the source's dtype and
row shape (C order), written through a memory map a block at a time; the quarantine holds a
``.npy`` of the set-aside rows, in source order (the manifest names each by its index).
`np.load` reads both. Rows are checksummed as HDF5 rows are (`scrub.ledger.row_digests`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from scrub.ledger import Ledger, identity_seed, row_digests, row_values
from scrub.readers.hdf5 import BLOCK_BYTES
from scrub.readers.numpy import load_array
from scrub.writers.base import Tally, Verdicts, Writer


class NumpyWriter(Writer):
    format = "numpy"

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
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

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not target.exists():
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


def _new_like(path: Path, array: np.ndarray, rows: int) -> np.memmap:
    """A new ``.npy`` at ``path`` of ``rows`` rows shaped and typed like ``array``'s."""
    return np.lib.format.open_memmap(path, mode="w+", dtype=array.dtype, shape=(rows, *array.shape[1:]))


def _blocks(array: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Consecutive rows of ``array``, ~``BLOCK_BYTES`` at a time, copied out of the map."""
    row_bytes = max(1, int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize)
    step = max(1, BLOCK_BYTES // row_bytes)
    for begin in range(0, len(array), step):
        yield begin, np.array(array[begin : begin + step])
