"""HDF5: the reader's input forms, every numeric check, the error paths, chunk edges."""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import SAMPLES, findings

import scrub
from scrub.errors import UnusableDataset
from scrub.readers.base import ReadOptions, open_reader

TRAIN = {
    ("3", "nonfinite-data"),
    ("10", "nonfinite-data"),
    ("30", "fp16-overflow"),
    ("30", "magnitude-outlier"),
    ("40", "zero-norm"),
    ("90", "square-overflow"),
    ("90", "fp16-overflow"),
    ("90", "magnitude-outlier"),
    ("50", "nonfinite-label"),
    ("70", "non-integer-label"),
}
OUTLIERS = {("60", "label-outlier"), ("80", "label-outlier")}
OUT_OF_RANGE = {("60", "label-out-of-range"), ("80", "label-out-of-range")}


def write_h5(path, data, label=None, chunks=None, **datasets):
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data, chunks=chunks)
        if label is not None:
            file.create_dataset("label", data=label)
        for name, value in datasets.items():
            file.create_dataset(name, data=value)
    return path


@pytest.mark.parametrize("scheduler", ["sync", "processes", "threads"])
def test_sample_file_finds_every_planted_problem_on_every_scheduler(scheduler):
    result = scrub.scan(SAMPLES / "hdf5" / "train.h5", scheduler=scheduler, partition_size=32, workers=2)
    assert findings(result) == TRAIN | OUTLIERS
    assert result.summary.records == 200
    assert {i.source for i in result.issues()} == {"train.h5"}


def test_sample_with_num_classes_reports_out_of_range():
    result = scrub.scan(SAMPLES / "hdf5" / "train.h5", num_classes=10)
    assert findings(result) == TRAIN | OUT_OF_RANGE


@pytest.mark.parametrize("path", ["train_list.txt", "."])
def test_list_file_and_folder_cover_both_files(path):
    result = scrub.scan(SAMPLES / "hdf5" / path)
    keyed = {(i.source, i.key, i.check) for i in result.issues()}
    assert keyed == {("train.h5", k, c) for k, c in TRAIN | OUTLIERS} | {
        ("val.h5", "*", "row-count-mismatch")
    }
    assert result.summary.records == 200 + 49  # val.h5: the rows both datasets have
    assert result.summary.dataset.layout == ("list-file" if path.endswith(".txt") else "folder")


def test_summary_has_per_dataset_statistics():
    summary = scrub.scan(SAMPLES / "hdf5" / "train.h5").summary.to_dict()
    stats = summary["datasets"]["train.h5"]
    assert stats["data"] == {
        "dtype": "float32",
        "shape": [200, 3, 8, 8],
        "chunks": [32, 3, 8, 8],
        "compression": None,
    }
    assert stats["max"] == np.float32(1e20) and stats["nonfinite_values"] == 3
    assert stats["finite_values"] == 200 * 192 - 3
    assert (
        summary["stats"]["labels"][8000] == 1 and summary["stats"]["labels"][0] == 16
    )  # 50, 60, 70, 80 were relabelled


def test_flagged_rows_match_a_reference_at_every_chunk_edge(tmp_path):
    rng = np.random.default_rng(7)
    data = rng.normal(size=(1000, 5, 7)).astype(np.float32)
    bad = rng.choice(1000, 40, replace=False)
    for row in bad:
        data[row].flat[rng.integers(0, 35)] = rng.choice([np.nan, np.inf, -np.inf])
    edges = [0, 63, 64, 127, 128, 999]
    for row in edges:
        data[row].flat[0] = np.nan
    zero = [5, 64, 998]
    data[zero] = 0
    data[200, 0, 0], data[200, 0, 1] = 3e38, 3e38  # the float32 row sum overflows: finite all the same
    data[201, 0, 0], data[201, 0, 1] = 1.0, -1.0  # sums to 0 but is not all zero
    data[201, 1:] = 0
    path = write_h5(tmp_path / "d.h5", data, chunks=(64, 5, 7))
    result = scrub.scan(path, partition_size=128, scheduler="processes", workers=2)
    reference_nonfinite = set(np.flatnonzero(~np.isfinite(data).reshape(1000, -1).all(axis=1)).tolist())
    reference_zero = set(np.flatnonzero(~data.reshape(1000, -1).any(axis=1)).tolist())
    flagged = findings(result)
    assert {int(k) for k, c in flagged if c == "nonfinite-data"} == reference_nonfinite
    assert {int(k) for k, c in flagged if c == "zero-norm"} == reference_zero - reference_nonfinite
    assert ("200", "fp16-overflow") in flagged and ("201", "zero-norm") not in flagged


def test_nonfinite_details(tmp_path):
    data = (
        np.ones((4, 6), dtype=np.float64) * np.arange(1, 7) + np.arange(4)[:, None]
    )  # distinct, not constant
    data[1, [2, 4]] = np.nan
    data[1, 5] = -np.inf
    result = scrub.scan(write_h5(tmp_path / "d.h5", data))
    (issue,) = list(result.issues())
    assert issue.details == {"nan": 2, "posinf": 0, "neginf": 1, "first_position": 2}
    assert issue.key == "1" and issue.index == 1


def test_integer_data_and_label_shapes(tmp_path):
    data = np.zeros((6, 4), dtype=np.uint16) + np.arange(7, 11, dtype=np.uint16)  # not constant-row
    data[:, 0] += np.arange(6, dtype=np.uint16)  # nor a row repeated (`duplicate`)
    data[2, 1] = 65535  # beyond float16's largest finite value
    labels = np.array([[0], [1], [2], [3], [12], [1]], dtype=np.int64)  # shape (N, 1)
    result = scrub.scan(write_h5(tmp_path / "d.h5", data, labels), num_classes=10)
    assert findings(result) == {
        ("2", "fp16-overflow"),
        ("2", "magnitude-outlier"),
        ("4", "label-out-of-range"),
    }


def test_custom_keys_and_unlabelled_files(tmp_path):
    data = np.ones((5, 3), dtype=np.float32) * np.arange(1, 4, dtype=np.float32)  # not constant-row
    data += np.arange(5, dtype=np.float32)[:, None]  # nor a row repeated (`duplicate`)
    data[4] = np.nan
    path = write_h5(tmp_path / "d.h5", np.zeros((1, 1)), features=data, targets=np.arange(5.0))
    result = scrub.scan(path, data_key="features", label_key="targets")
    assert findings(result) == {("4", "nonfinite-data")}
    assert result.summary.dataset.labelled
    unlabelled = scrub.scan(write_h5(tmp_path / "u.h5", data))
    assert not unlabelled.summary.dataset.labelled and "missing-label" not in unlabelled.summary.checks


def test_empty_rows_are_empty_records(tmp_path):
    result = scrub.scan(write_h5(tmp_path / "d.h5", np.zeros((3, 0), dtype=np.float32)))
    assert findings(result) == {("0", "empty-record"), ("1", "empty-record"), ("2", "empty-record")}


def test_links_outside_the_root_are_reported_and_not_read(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    write_h5(tmp_path / "outside.h5", np.full((3, 2), np.nan))
    write_h5(root / "inside.h5", np.ones((3, 2)) * [1, 2] + [[0], [1], [2]])  # not constant, not repeated
    with h5py.File(root / "external.h5", "w") as file:
        file["data"] = h5py.ExternalLink("../outside.h5", "data")
    with h5py.File(root / "followed.h5", "w") as file:
        file["data"] = h5py.ExternalLink("inside.h5", "data")
    layout = h5py.VirtualLayout(shape=(3, 2), dtype="f8")
    layout[:] = h5py.VirtualSource(str(tmp_path / "outside.h5"), "data", shape=(3, 2))
    with h5py.File(root / "virtual.h5", "w") as file:
        file.create_virtual_dataset("data", layout)
    with h5py.File(root / "rawfile.h5", "w") as file:
        file.create_dataset("data", shape=(3, 2), dtype="f8", external=[(str(tmp_path / "raw.bin"), 0, 48)])
    result = scrub.scan(root)
    assert {(i.source, i.key, i.check) for i in result.issues()} == {
        ("external.h5", "*", "unsafe-path"),
        ("virtual.h5", "*", "unsafe-path"),
        ("rawfile.h5", "*", "unsafe-path"),
        # followed.h5 links inside.h5's rows, read first: the dataset holds each row twice
        *(("inside.h5", str(row), "duplicate") for row in range(3)),
    }
    assert result.summary.records == 6  # followed.h5 and inside.h5


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "scrub", "scan", *map(str, args)], capture_output=True, text=True
    )


def _truncated(path):
    path.write_bytes(SAMPLES.joinpath("hdf5", "train.h5").read_bytes()[:5000])


def _not_hdf5(path):
    path.write_bytes(b"this is not HDF5 at all" * 10)


def _without_data(path):
    write_h5(path, np.zeros((2, 2)), other=np.zeros(2))
    with h5py.File(path, "a") as file:
        del file["data"]


@pytest.mark.parametrize(
    "make, message",
    [
        (_truncated, "bad.h5: not a readable HDF5 file"),
        (_not_hdf5, "bad.h5: not a readable HDF5 file"),
        (_without_data, "bad.h5: no dataset 'data' (datasets: other); choose one with --data-key"),
    ],
)
def test_unusable_files_exit_2_with_one_line(tmp_path, make, message):
    path = tmp_path / "bad.h5"
    make(path)
    result = run_cli(path, "--manifest", tmp_path / "m.jsonl")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    with pytest.raises(UnusableDataset):
        scrub.scan(path)


def test_missing_label_key_named_explicitly_is_an_error(tmp_path):
    path = write_h5(tmp_path / "d.h5", np.zeros((2, 2)))
    result = run_cli(path, "--label-key", "y", "--manifest", tmp_path / "m.jsonl")
    assert result.returncode == 2 and "no dataset 'y' (datasets: data)" in result.stderr


def test_source_is_never_modified(tmp_path):
    import hashlib

    path = write_h5(tmp_path / "d.h5", np.full((10, 3), np.nan))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    scrub.scan(path, scheduler="processes", workers=2, partition_size=2)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_damaged_chunk_makes_the_file_unusable(tmp_path):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset(
            "data", data=np.ones((4000, 256), np.float32), chunks=(100, 256), compression="gzip"
        )
    damaged = bytearray(path.read_bytes())
    middle = len(damaged) // 2
    damaged[middle : middle + 4000] = bytes(4000)  # same size: only the compressed chunks break
    path.write_bytes(bytes(damaged))
    result = run_cli(path, "--manifest", tmp_path / "m.jsonl")
    assert result.returncode == 2, result.stderr
    assert "d.h5: rows" in result.stderr and "cannot be read" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_scheduler_follows_the_size_and_the_compression(tmp_path):
    """Small work runs in the scan's own process (a pool costs more than it saves); with a pool,
    an uncompressed file runs on threads (h5py reads under its lock, NumPy checks in parallel)
    and a compressed one on processes (decompression under h5py's lock would use one core)."""
    rows = np.random.default_rng(0).normal(size=(256, 16)).astype(np.float32)
    with h5py.File(tmp_path / "plain.h5", "w") as file:
        file.create_dataset("data", data=rows, chunks=(64, 16))
    with h5py.File(tmp_path / "gzip.h5", "w") as file:
        file.create_dataset("data", data=rows, chunks=(64, 16), compression="gzip")
    assert scrub.scan(tmp_path / "plain.h5").summary.scheduler == "sync"
    assert scrub.scan(tmp_path / "plain.h5", workers=2, partition_size=64).summary.scheduler == "threads"
    assert scrub.scan(tmp_path / "gzip.h5", workers=2, partition_size=64).summary.scheduler == "processes"
    reader = open_reader(tmp_path / "gzip.h5", ReadOptions())
    reader.open(64)
    assert reader.work_seconds == pytest.approx(rows.nbytes / 0.2e9)


def plain_runs(file, data, first, last):
    """Where the reader preads rows ``first:last`` from, or None where HDF5 reads them."""
    from scrub.readers.hdf5 import plain_layout

    layout = plain_layout(file, data)
    return None if layout is None else layout.runs(first, last)


def _read_all(path, partition_size):
    """Every row the reader yields, in order, and whether each partition took the pread path."""

    reader = open_reader(path, ReadOptions())
    _, partitions = reader.open(partition_size)
    rows, direct = [], []
    for partition in partitions:
        with h5py.File(partition.path, "r") as file:
            direct.append(plain_runs(file, file["data"], partition.start, partition.stop) is not None)
        rows += [np.array(batch.data) for batch in reader.read(partition)]
    return np.concatenate(rows), direct


def _write_layout(path, layout, values):
    """``values`` stored as ``layout`` says: a way HDF5 can lay rows out in a file."""
    with h5py.File(path, "w", userblock_size=512 if layout == "userblock" else 0) as file:
        if layout in ("contiguous", "userblock"):
            file.create_dataset("data", data=values)
        elif layout in ("chunked", "ragged-end"):
            file.create_dataset("data", data=values, chunks=(7, *values.shape[1:]))
        elif layout == "out-of-order":  # chunks allocated last first: runs that are not in row order
            data = file.create_dataset(
                "data", shape=values.shape, dtype=values.dtype, chunks=(8, *values.shape[1:])
            )
            for start in reversed(range(0, len(values), 8)):
                data[start : start + 8] = values[start : start + 8]
        elif layout == "split-rows":  # chunks that cut rows in two: only HDF5 reassembles them
            file.create_dataset("data", data=values, chunks=(8, 1, values.shape[2]))
        elif layout == "gzip":
            file.create_dataset("data", data=values, chunks=(8, *values.shape[1:]), compression="gzip")
        elif layout == "unallocated":  # chunks never written read as the fill value
            data = file.create_dataset(
                "data", shape=values.shape, dtype=values.dtype, chunks=(8, *values.shape[1:]), fillvalue=7
            )
            data[:8] = values[:8]
        elif layout == "big-endian":
            file.create_dataset(
                "data", data=values.astype(values.dtype.newbyteorder(">")), chunks=(8, *values.shape[1:])
            )


@pytest.mark.parametrize(
    ("layout", "direct"),
    [
        ("contiguous", True),
        ("chunked", True),
        ("ragged-end", True),
        ("out-of-order", True),
        ("split-rows", False),
        ("gzip", False),
        ("unallocated", False),
        ("big-endian", False),
        ("userblock", False),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.bool_])
def test_rows_read_with_pread_equal_what_h5py_reads(tmp_path, layout, direct, dtype):
    """Rows stored as plain bytes are read by one pread per block, bypassing HDF5; everything
    else goes through h5py. Either way the rows are h5py's own, at every partition edge."""
    values = (np.random.default_rng(1).normal(size=(61, 2, 3)) * 100).astype(dtype)
    path = tmp_path / f"{layout}.h5"
    _write_layout(path, layout, values)
    with h5py.File(path, "r") as file:
        expected = file["data"][()]
    for partition_size in (5, 16, 1000):
        rows, took = _read_all(path, partition_size)
        assert rows.dtype.newbyteorder("=") == expected.dtype.newbyteorder("=")
        np.testing.assert_array_equal(rows, expected)
        direct = direct or (layout == "big-endian" and dtype is np.bool_)  # a byte has no byte order
        assert all(took) if direct else not any(took)


@pytest.mark.parametrize("layout", ["contiguous", "out-of-order"])
def test_rows_read_where_python_has_no_preadv_are_the_same(tmp_path, monkeypatch, layout):
    """Where Python has no ``os.preadv``, plain rows are read by ``os.pread`` and copied into the
    block: the same rows (before, such a system failed on the first block)."""
    values = (np.random.default_rng(2).normal(size=(61, 2, 3)) * 100).astype(np.float32)
    path = tmp_path / f"{layout}.h5"
    _write_layout(path, layout, values)
    monkeypatch.delattr(os, "preadv", raising=False)
    for partition_size in (5, 16, 1000):
        rows, took = _read_all(path, partition_size)
        np.testing.assert_array_equal(rows, values)
        assert all(took)


def test_truncated_file_is_left_to_hdf5(tmp_path):
    """A file cut short inside its data: the pread path is not taken (the bytes are not there),
    and the scan ends with HDF5's own one-line error rather than a crash or short rows."""
    path = tmp_path / "cut.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=np.ones((4096, 64), np.float32), chunks=(256, 64))
        file.create_dataset("tail", data=np.zeros(16))  # metadata after the data, kept
    size = path.stat().st_size
    with h5py.File(path, "r") as file:
        data = file["data"]
        last = data.id.get_chunk_info_by_coord((4096 - 256, 0)).byte_offset
    with open(path, "r+b") as file:
        file.truncate(last + 100)
    assert path.stat().st_size < size
    try:
        with h5py.File(path, "r") as file:
            assert plain_runs(file, file["data"], 0, 4096) is None
    except OSError:  # HDF5 may refuse to open it at all: the reader's error path, tested elsewhere
        pass


def test_chunk_addresses_of_a_file_rewritten_in_place_are_not_reused(tmp_path):
    """The chunk addresses a process remembers are checked against the file's first and last
    chunks: a file rewritten in place (same inode, same size, times within one clock tick) with
    its chunks in another order is read where its rows now are."""
    from scrub.readers.hdf5 import _same_ends, chunk_addresses

    values = np.arange(64 * 4, dtype=np.float32).reshape(64, 4)
    path = tmp_path / "again.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=values, chunks=(8, 4))
    with h5py.File(path, "r") as file:
        remembered = chunk_addresses(file["data"], 16)
        assert len(remembered) == 8 and _same_ends(file["data"], remembered)
    _write_layout(path, "out-of-order", values[::-1].copy())  # chunks of 8 rows, allocated last first
    with h5py.File(path, "r") as file:
        assert not _same_ends(file["data"], remembered)
    rows, took = _read_all(path, 16)
    assert all(took) and rows.tolist() == values[::-1].tolist()
