"""Rows larger than a block are read and tested in pieces (`scrub.records.Pieces`): every per-row
test is a reduction over the pieces, and must say exactly what the test of the whole row says.

The block size is made small here so that small files have "big" rows; the same files scanned
with a block larger than their rows are the reference (the whole-row path of every other test).
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import scrub
from scrub.readers import hdf5
from scrub.readers.base import ReadOptions, open_reader
from scrub.writers import hdf5 as hdf5_writer

SMALL_BLOCK = 4 << 10  # 4 KiB: the rows below (10-40 KiB) come in 3 to 10 pieces


def faulty_rows(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Eight rows of ``shape``, each with its own fault, at positions inside later pieces."""
    rng = np.random.default_rng(7)
    data = rng.normal(size=(8, *shape)).astype(dtype)
    flat = data.reshape(8, -1)
    width = flat.shape[1]
    flat[0, width // 2 :] = 0.0  # zero pieces in a row that is not all zero
    flat[1, width - 3] = np.nan  # in the last piece
    flat[2, width // 2] = np.inf
    flat[2, width // 2 + 1] = -np.inf
    flat[2, width - 1] = np.nan
    flat[3, width // 3] = 70000.0  # fp16 overflow, in a middle piece
    flat[3, width - 2] = -1e5
    flat[4] = 0.0  # zero-norm: every piece zero
    flat[5, :] = 1e18  # square overflow only from the sum of every piece
    flat[6, 5] = 3e19  # square overflow from one value in the first piece, NaN later
    flat[6, width - 5] = np.nan
    return data


SHAPES = [
    ((5000,), None),  # 1-D rows, sliced flat
    ((40, 64), (1, 8, 64)),  # slabs of whole chunks along the row's first axis
    ((3, 32, 48), (1, 1, 16, 48)),  # one channel is a block: slabs along the second axis
    ((1, 80, 64), (1, 1, 16, 64)),  # a leading axis of one
]


def scan_lines(path: Path, manifest: Path) -> list[dict]:
    result = scrub.scan(path, manifest=manifest, scheduler="sync")
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    return sorted(lines, key=lambda line: (line["index"], line["check"])), result.summary


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("shape", "chunks"), SHAPES)
def test_pieces_find_what_whole_rows_find(tmp_path, monkeypatch, shape, chunks, dtype):
    data = faulty_rows(shape, dtype)
    if dtype == "float64":
        data.reshape(8, -1)[7, 9] = 1e39  # beyond float32: float32-overflow
    path = tmp_path / "rows.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data, chunks=(1, *(chunks or shape)[1:]) if chunks else None)
        f["label"] = np.arange(8) % 3
    whole, whole_summary = scan_lines(path, tmp_path / "whole.jsonl")
    monkeypatch.setattr(hdf5, "BLOCK_BYTES", SMALL_BLOCK)
    assert data[0].nbytes > SMALL_BLOCK
    read = []
    original = hdf5.HDF5Reader._read_in_pieces

    def counting(self, *args):
        for batch in original(self, *args):
            read.append(sum(1 for _ in batch.data.read()))
            yield batch

    monkeypatch.setattr(hdf5.HDF5Reader, "_read_in_pieces", counting)
    pieces, pieces_summary = scan_lines(path, tmp_path / "pieces.jsonl")
    assert len(read) >= 8 and min(read) >= 3  # every row was read in pieces (some again, for details)
    assert pieces == whole
    checks = {(line["index"], line["check"]) for line in whole}
    assert {(1, "nonfinite-data"), (2, "nonfinite-data"), (3, "fp16-overflow"), (4, "zero-norm")} <= checks
    assert {(5, "square-overflow"), (6, "square-overflow"), (6, "nonfinite-data")} <= checks
    if dtype == "float64":
        assert (7, "float32-overflow") in checks
    ours, theirs = pieces_summary.datasets["rows.h5"], whole_summary.datasets["rows.h5"]
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():  # min, max, mean of the finite values: sums differ in order
        assert ours[name] == (pytest.approx(value, rel=1e-6) if isinstance(value, float) else value), name
    assert pieces_summary.issues_by_check == whole_summary.issues_by_check


def test_a_big_row_is_held_a_piece_at_a_time(tmp_path, monkeypatch):
    """What the workers hold of a row: a piece, never the row (the buffer is sized by a piece)."""
    path = tmp_path / "volume.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.ones((2, 64, 64, 64), np.float32), chunks=(1, 8, 64, 64))
    monkeypatch.setattr(hdf5, "BLOCK_BYTES", 256 << 10)  # a row is 1 MiB: pieces of 8 x 64 x 64
    reader = open_reader(path, ReadOptions())
    _, partitions = reader.open(0)
    for batch in reader.read(partitions[0]):  # pieces are read while the reader is on their row
        assert batch.data.shape == (1, 64, 64, 64)
        pieces = [piece.nbytes for piece in batch.data.read()]
        assert pieces == [256 << 10] * 4  # slabs of 16 x 64 x 64 float32: two chunks each


@pytest.mark.parametrize(("shape", "chunks"), SHAPES[1:3])
def test_fix_copies_big_rows_in_slabs_and_verifies_them(tmp_path, monkeypatch, shape, chunks):
    """`fix` of rows larger than a block: the cleaned copy holds the good rows, the quarantine
    the bad ones (with their source rows), byte for byte, and verification passes; h5py reads
    both."""
    data = faulty_rows(shape, "float32")
    source = tmp_path / "rows.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("data", data=data, chunks=(1, *chunks[1:]))
        f["label"] = np.arange(8) % 3
    monkeypatch.setattr(hdf5, "BLOCK_BYTES", SMALL_BLOCK)
    monkeypatch.setattr(hdf5_writer, "BLOCK_BYTES", SMALL_BLOCK)
    slabs = []
    original = hdf5.row_slabs

    def counting(*args):
        for where, slab in original(*args):
            slabs.append(slab.nbytes)
            yield where, slab

    monkeypatch.setattr(hdf5_writer, "row_slabs", counting)
    result = scrub.fix(source, quarantine=True, scheduler="sync")
    assert result.verified and result.report["kept"] == 4 and result.report["quarantined"] == 4
    assert slabs and max(slabs) <= SMALL_BLOCK  # written and tallied a slab at a time
    bad = [1, 2, 5, 6]  # the errors; 3 (fp16) and 4 (zero) are warnings
    good = [0, 3, 4, 7]
    with h5py.File(result.clean) as clean, h5py.File(result.quarantine / "rows.h5") as held:
        np.testing.assert_array_equal(clean["data"][:], data[good])
        np.testing.assert_array_equal(clean["label"][:], np.arange(8)[good] % 3)
        np.testing.assert_array_equal(held["data"][:], data[bad])
        assert held["data"].chunks == clean["data"].chunks == (1, *chunks[1:])
