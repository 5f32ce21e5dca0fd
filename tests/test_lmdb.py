"""LMDB: each codec, each planted fault, keys, partitions, and the error paths."""

from __future__ import annotations

import io
import pickle
import subprocess
import sys

import lmdb
import numpy as np
import pytest
from conftest import SAMPLES, findings, image_bytes

import scrub
from scrub.errors import UnusableDataset
from scrub.readers.caffe_datum import datum_class

DATUM_DB = {
    ("00000008_img/008.jpg", "corrupt-image"),
    ("00000009_img/009.jpg", "label-outlier"),
    ("00000014_raw", "shape-mismatch"),
    ("00000016_float", "nonfinite-data"),
    ("00000017_float", "fp16-overflow"),
    ("00000018_float", "zero-norm"),
    ("00000020_bad", "undecodable-record"),
    ("00000021_empty", "empty-record"),
}


def write_db(path, items, subdir=True):
    environment = lmdb.open(str(path), subdir=subdir, map_size=64 << 20)
    with environment.begin(write=True) as transaction:
        for key, value in items:
            transaction.put(key, value)
    environment.close()
    return path


def datum(**fields) -> bytes:
    return datum_class()(**fields).SerializeToString()


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize("scheduler", ["sync", "processes", "threads"])
def test_datum_sample_finds_every_planted_problem(scheduler):
    result = scrub.scan(SAMPLES / "lmdb" / "datum_lmdb", scheduler=scheduler, partition_size=5, workers=2)
    assert findings(result) == DATUM_DB
    assert result.summary.records == 22  # __len__ is metadata
    assert result.summary.dataset.skipped == {"metadata key": 1}
    shape = next(i for i in result.issues() if i.check == "shape-mismatch")
    assert shape.severity == scrub.Severity.ERROR and shape.details["values"] == 100


def test_datum_sample_with_num_classes():
    result = scrub.scan(SAMPLES / "lmdb" / "datum_lmdb", num_classes=10)
    assert ("00000009_img/009.jpg", "label-out-of-range") in findings(result)


def test_lsun_and_npy_samples():
    lsun = scrub.scan(SAMPLES / "lmdb" / "lsun_lmdb")
    assert findings(lsun) == {
        ("f" * 40, "corrupt-image"),
        ("e" * 40, "duplicate"),
        ("d" * 40, "undecodable-record"),
    }
    pickled = next(i for i in lsun.issues() if i.check == "undecodable-record")
    assert "--allow-pickle" in pickled.message
    arrays = scrub.scan(SAMPLES / "lmdb" / "npy.lmdb")  # a single-file environment
    assert findings(arrays) == {
        ("sample-0001", "nonfinite-data"),
        ("sample-0002", "zero-norm"),
        ("sample-0006", "undecodable-record"),
        ("sample-0007", "float32-overflow"),
        ("sample-0007", "fp16-overflow"),
        ("sample-0007", "magnitude-outlier"),
    }
    assert arrays.summary.dataset.layout == "file"


def test_keys_that_are_not_utf8_are_hex(tmp_path):
    db = write_db(tmp_path / "db", [(b"\xff\xfebad", b""), (b"ok", image_bytes(1))])
    assert findings(scrub.scan(db)) == {("hex:fffe626164", "empty-record")}


def test_pickle_needs_allow_pickle(tmp_path):
    value = pickle.dumps((image_bytes(1)[:200], 3))
    db = write_db(tmp_path / "db", [(b"a", value), (b"b", pickle.dumps((image_bytes(2), 1)))])
    assert findings(scrub.scan(db)) == {("a", "undecodable-record"), ("b", "undecodable-record")}
    allowed = scrub.scan(db, allow_pickle=True)
    assert findings(allowed) == {("a", "corrupt-image")}
    assert allowed.summary.stats["labels"] == {1: 1, 3: 1}


def test_forced_codec(tmp_path):
    db = write_db(
        tmp_path / "db",
        [
            (b"a", npy(np.array([[[1.0, 2.0, 3.0]]]))),
            (b"b", datum(channels=1, height=1, width=3, float_data=[1, 2, 3], label=0)),
        ],
    )
    assert findings(scrub.scan(db, lmdb_codec="npy")) == {("b", "undecodable-record")}
    assert findings(scrub.scan(db)) == set()


def test_partitions_cover_every_record_once_and_locate_keys(tmp_path):
    items = [(f"{i:05d}".encode(), npy(np.full(4, float(i)))) for i in range(103)]
    items[57] = (items[57][0], npy(np.array([1.0, np.nan])))
    db = write_db(tmp_path / "db", items)
    for size in (1, 10, 103, 500):
        result = scrub.scan(db, partition_size=size, scheduler="sync")
        assert result.summary.records == 103
        assert [(i.key, i.index) for i in result.issues() if i.check == "nonfinite-data"] == [("00057", 57)]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.mkdir(), "not a dataset scrub can read"),
        (
            lambda p: (p.mkdir(), (p / "data.mdb").write_bytes(b"\x00" * 100)),
            "not a readable LMDB environment",
        ),
    ],
)
def test_unusable_environments_exit_2(tmp_path, make, message):
    path = tmp_path / "db"
    make(path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrub",
            "scan",
            str(path),
            "--format",
            "lmdb" if "LMDB" in message else "auto",
            "--manifest",
            str(tmp_path / "m.jsonl"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_truncated_data_file_exits_2(tmp_path):
    items = [(f"{i:05d}".encode(), npy(np.random.default_rng(i).normal(size=2000))) for i in range(200)]
    db = write_db(tmp_path / "db", items)
    data = (db / "data.mdb").read_bytes()
    (db / "data.mdb").write_bytes(data[: len(data) // 3])
    with pytest.raises(UnusableDataset):
        scrub.scan(db)
    result = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", str(db), "--manifest", str(tmp_path / "m.jsonl")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_scanning_never_modifies_or_locks_the_environment(tmp_path):
    import hashlib

    db = write_db(tmp_path / "db", [(b"a", image_bytes(1))])
    (db / "lock.mdb").unlink()
    before = hashlib.sha256((db / "data.mdb").read_bytes()).hexdigest()
    scrub.scan(db, scheduler="processes", workers=2, partition_size=1)
    assert hashlib.sha256((db / "data.mdb").read_bytes()).hexdigest() == before
    assert not (db / "lock.mdb").exists()  # opened with lock=False: no lock file, no lock taken


def test_the_scans_environments_are_closed_before_it_forks(tmp_path):
    """Workers forked from a scan (`LMDBReader.forks_cleanly`) must not inherit its open
    environment: LMDB forbids using one in a child, and the child would find it cached."""
    path = write_db(tmp_path / "db", [(b"a", npy(np.zeros(2, np.float32)))])
    script = f"""
import os
from scrub.readers import lmdb as reader
reader.open_environment({str(path)!r}, True)
assert reader._ENVIRONMENTS
pid = os.fork()
if pid == 0:
    os._exit(3 if reader._ENVIRONMENTS else 0)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), len(reader._ENVIRONMENTS))
with reader.begin(reader.open_environment({str(path)!r}, True)) as transaction:  # opened again
    print(transaction.get(b"a") is not None)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "0", "True"]
