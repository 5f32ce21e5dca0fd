"""`duplicate` inside one dataset for every record kind: array rows (HDF5, NumPy), token
sequences (JSON Lines, Hugging Face token columns, a Megatron store), each file written by its
own library or layout; the identities a batch makes equal those its records make alone; `fix`
with `duplicate=error` sets the later copies aside, the copy loads, and it rescans clean."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_megatron import write_pair

import scrub
from scrub.checks.splits import (
    array_identity,
    array_row_identities,
    content_identity,
    token_row_identities,
    tokens_identity,
)
from scrub.readers import hdf5
from scrub.records import Batch, Record, TokenRows

#: rows (by position) planted as copies of earlier rows
COPIES = {7: 2, 19: 5, 23: 2}


def rows(count: int = 30, seed: int = 3) -> np.ndarray:
    data = np.random.default_rng(seed).normal(size=(count, 16)).astype(np.float32)
    for copy, first in COPIES.items():
        data[copy] = data[first]
    return data


def sequences(count: int = 30, seed: int = 4) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    made = [rng.integers(1, 1000, int(rng.integers(3, 20))).tolist() for _ in range(count)]
    for copy, first in COPIES.items():
        made[copy] = list(made[first])
    made[11] = made[12] = []  # empty sequences are empty-sequence's, never duplicates
    return made


def write_hdf5(folder: Path) -> Path:
    with h5py.File(folder / "train.h5", "w") as f:
        f["data"] = rows()
        f["label"] = np.arange(30) % 3
    return folder / "train.h5"


def write_numpy(folder: Path) -> Path:
    np.save(folder / "features.npy", rows())
    return folder / "features.npy"


def write_jsonl(folder: Path) -> Path:
    path = folder / "sft.jsonl"
    path.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in sequences()))
    return path


def write_token_columns(folder: Path) -> Path:
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    datasets.Dataset.from_dict({"input_ids": sequences()}).save_to_disk(str(folder / "sft"))
    return folder / "sft"


def write_megatron(folder: Path) -> Path:
    write_pair(folder / "corpus_text_document", [[np.asarray(ids, np.int64)] for ids in sequences()])
    return folder / "corpus_text_document"


FORMATS: dict[str, Callable[[Path], Path]] = {
    "hdf5": write_hdf5,
    "numpy": write_numpy,
    "jsonl": write_jsonl,
    "token-columns": write_token_columns,
    "megatron": write_megatron,
}


def duplicates(result) -> dict[int, int]:
    """Each flagged record's index, with its first copy's."""
    return {i.index: i.details["first"]["index"] for i in result.issues() if i.check == "duplicate"}


@pytest.mark.parametrize("name", list(FORMATS))
def test_rows_and_sequences_repeated_inside_a_dataset_are_duplicates(name, tmp_path):
    path = FORMATS[name](tmp_path)
    result = scrub.scan(path, vocab_size=1000, scheduler="threads")
    assert "duplicate" in result.summary.checks
    assert duplicates(result) == COPIES
    flagged = next(i for i in result.issues() if i.check == "duplicate")
    assert flagged.message.startswith("same content as ")


@pytest.mark.parametrize("name", ["hdf5", "megatron"])
def test_fix_sets_the_later_copies_aside_and_the_copy_rescans_clean(name, tmp_path):
    path = FORMATS[name](tmp_path)
    out = tmp_path / ("clean.h5" if name == "hdf5" else "clean")
    fixed = scrub.fix(path, out=out, check_severity=["duplicate=error"], vocab_size=1000)
    assert fixed.verified
    if name == "hdf5":
        with h5py.File(fixed.clean) as f:  # h5py reads the copy: every distinct row once
            kept = f["data"][:]
        assert len(kept) == 30 - len(COPIES)
        assert len({row.tobytes() for row in kept}) == len(kept)
    rescan = scrub.scan(fixed.clean, vocab_size=1000)
    assert duplicates(rescan) == {}


def test_a_sequences_identity_does_not_depend_on_its_stores_dtype():
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    made = {tokens_identity(np.array(ids, dtype)) for dtype in ("uint16", "int32", "int64", "<u4", ">i8")}
    assert len(made) == 1
    wide = [3, 70000, 1]  # beyond uint16: hashed as int64, still whatever the dtype
    assert len({tokens_identity(np.array(wide, dtype)) for dtype in ("int32", "int64", "uint32")}) == 1
    assert tokens_identity(np.array(wide, np.int64)) not in made
    assert tokens_identity(np.zeros(0, np.int64)) is None


@pytest.mark.parametrize("dtype", ["uint16", "int32", "int64"])
def test_a_flat_stores_batch_makes_each_sequences_own_identity(dtype):
    rng = np.random.default_rng(9)
    limit = 1 << 16 if dtype == "uint16" else 1 << 20  # ids beyond uint16 where the dtype holds them
    made = [rng.integers(0, limit, int(rng.integers(0, 30))).astype(dtype) for _ in range(200)]
    bounds = np.concatenate([[0], np.cumsum([len(s) for s in made])]).astype(np.int64)
    batch = token_row_identities(TokenRows(np.concatenate(made), bounds))
    alone = [tokens_identity(s) or b"" for s in made]
    assert batch.tobytes() == np.array(alone, "S16").tobytes()  # (S16 drops a value's trailing zeros)
    assert sum(1 for s in made if not len(s)) == sum(1 for value in alone if value == b"")


def test_an_array_batch_makes_each_rows_own_identity_and_a_records_alike():
    data = np.random.default_rng(1).normal(size=(12, 3, 5))
    batch = array_row_identities(Batch("x", 0, 0, data))
    assert batch.tobytes() == np.array([array_identity(row) for row in data], "S16").tobytes()
    record = Record("x", "0", 0, data[0].copy(), meta={"kind": "array"})
    assert content_identity(record) == batch[0]
    assert array_identity(data[0].astype(np.float32)) != batch[0]  # another dtype: other values
    assert array_identity(data[0].reshape(5, 3)) != batch[0]  # another shape: other values


def test_rows_read_in_pieces_are_compared_as_whole_rows(tmp_path, monkeypatch):
    data = np.random.default_rng(2).normal(size=(6, 40, 64)).astype(np.float32)
    data[4] = data[1]
    path = tmp_path / "volumes.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data, chunks=(1, 8, 64))
    whole = duplicates(scrub.scan(path, scheduler="sync"))
    monkeypatch.setattr(hdf5, "BLOCK_BYTES", 4 << 10)  # a row of 10 KiB: read in pieces
    assert duplicates(scrub.scan(path, scheduler="sync")) == whole == {4: 1}


def test_identities_sharing_their_first_eight_bytes_are_still_grouped_exactly():
    from scrub.checks.dataset import _grouping_order

    made = [b"A" * 8 + b"x" * 8, b"A" * 8 + b"y" * 8, b"A" * 8 + b"x" * 8, b"B" * 16, b"A" * 8 + b"y" * 8]
    identities = np.array(made, "S16")
    ordered = identities[_grouping_order(identities)].tolist()
    assert sorted(ordered) == sorted(made)
    runs = [value for n, value in enumerate(ordered) if n == 0 or value != ordered[n - 1]]
    assert len(runs) == 3  # each identity in one run
    plain = np.array([b"C" * 16, b"B" * 16, b"C" * 16], "S16")
    assert _grouping_order(plain).tolist() == [1, 0, 2]  # stable inside a group
