"""`fix` never "succeeds" at emptying a dataset for one dataset-wide reason: before, a
folder2lmdb-style LMDB (pickled values) fixed without --allow-pickle gave a cleaned copy of zero
records, "verified", exit 0, the hint only inside the manifest."""

from __future__ import annotations

import pickle
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import image_bytes
from test_lmdb import write_db


def run(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrub", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


def pickled_lmdb(path):
    items = [(f"{i:04d}".encode(), pickle.dumps((image_bytes(i, fmt="PNG"), i % 3))) for i in range(6)]
    keys = [key for key, _ in items]
    return write_db(path, [*items, (b"__keys__", pickle.dumps(keys)), (b"__len__", pickle.dumps(len(keys)))])


@pytest.mark.slow
def test_fix_refuses_an_lmdb_whose_every_value_is_pickled(tmp_path):
    source = pickled_lmdb(tmp_path / "train_lmdb")
    done = run("fix", source, "--quarantine", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and "every one of its 6 records would be set aside for undecodable-record" in lines[0]
    )
    assert "--allow-pickle" in lines[0] and "nothing was written" in lines[0]
    assert not (tmp_path / "train_lmdb.clean").exists() and not (tmp_path / "train_lmdb.quarantine").exists()
    scan = run("scan", source, cwd=tmp_path)
    assert scan.returncode == 1
    assert "every record is flagged by undecodable-record: the dataset is bad as a whole" in scan.stdout
    allowed = run("fix", source, "--allow-pickle", cwd=tmp_path)  # the hint followed: a real fix
    assert allowed.returncode == 0, allowed.stderr


def test_fix_refuses_a_shard_whose_every_row_is_nan_but_empties_one_bad_for_several_reasons(tmp_path):
    nan = tmp_path / "nan.h5"
    with h5py.File(nan, "w") as f:
        f["data"] = np.full((50, 4), np.nan, np.float32)
    done = run("fix", nan, cwd=tmp_path)
    assert done.returncode == 2 and "set aside for nonfinite-data" in done.stderr
    assert not (tmp_path / "nan.clean.h5").exists()

    mixed = tmp_path / "mixed.h5"  # every row bad, each for its own reason: emptied as asked
    data = np.ones((2, 4), np.float32)
    data[0, 0] = np.nan
    with h5py.File(mixed, "w") as f:
        f["data"] = data
        f["label"] = np.array([0.0, np.inf])
    done = run("fix", mixed, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with h5py.File(tmp_path / "mixed.clean.h5") as f:
        assert f["data"].shape == (0, 4)
