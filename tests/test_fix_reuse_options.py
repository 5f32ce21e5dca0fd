"""`fix --manifest` reads the records as the reused scan read them: the reading options its scan
record holds (`--max-length` of a token file, `--data-key`/`--label-key`, `--format`) are taken
where not given again, with a note saying so; one given otherwise is refused, and
`--allow-pickle` is never taken over unasked. Through the real command line on real files."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import h5py
import numpy as np
from conftest import image_bytes
from test_lmdb import write_db
from typer.testing import CliRunner

from scrub.cli import app

runner = CliRunner()


def run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def test_fix_of_a_token_file_takes_max_length_from_the_scan(tmp_path):
    ids = np.random.default_rng(0).integers(0, 1000, 10 * 64 + 1).astype(np.uint16)
    ids[3 * 64 + 5] = 1100  # window 3: out of a 1,000 vocabulary
    ids.tofile(tmp_path / "train.bin")
    scanned = run(
        "scan", tmp_path / "train.bin", "--max-length", 64, "--vocab-size", 1000, "--scheduler", "sync"
    )
    assert scanned.exit_code == 1, scanned.output
    fixed = run("fix", tmp_path / "train.bin", "--manifest", "train.bin.scrub.jsonl", "--scheduler", "sync")
    assert fixed.exit_code == 0, fixed.output
    assert "--max-length 64" in fixed.output and "(its scan record)" in fixed.output  # said, not silent
    clean = np.fromfile(tmp_path / "train.clean.bin", dtype=np.uint16)
    windows = [ids[i * 64 : (i + 1) * 64] for i in range(11)]
    assert np.array_equal(clean, np.concatenate([w for i, w in enumerate(windows) if i != 3]))
    other = run(
        "fix", tmp_path / "train.bin", "--manifest", "train.bin.scrub.jsonl", "--max-length", 32, "--force"
    )
    assert other.exit_code == 2
    assert "--max-length: train.bin.scrub.jsonl was scanned with max-length = 64, not 32" in other.output


def test_fix_of_an_hdf5_file_takes_its_data_and_label_keys_from_the_scan(tmp_path):
    data = np.ones((6, 4), np.float32)
    data[2, 1] = np.nan
    with h5py.File(tmp_path / "set.h5", "w") as file:
        file["inputs"] = data
        file["targets"] = np.arange(6) % 2
        file["other"] = np.zeros((6, 4), np.float32)  # two data-like datasets: the keys must be named
    scanned = run(
        "scan", tmp_path / "set.h5", "--data-key", "inputs", "--label-key", "targets", "--scheduler", "sync"
    )
    assert scanned.exit_code == 1, scanned.output
    fixed = run("fix", tmp_path / "set.h5", "--manifest", "set.h5.scrub.jsonl", "--scheduler", "sync")
    assert fixed.exit_code == 0, fixed.output
    assert "--data-key inputs" in fixed.output and "--label-key targets" in fixed.output
    with h5py.File(tmp_path / "set.clean.h5") as clean:
        assert clean["inputs"].shape == (5, 4) and np.isfinite(clean["inputs"][()]).all()
        assert list(clean["targets"][()]) == [0, 1, 1, 0, 1]
    # the note on what was taken goes beside the others, never in their place
    sided = run(
        "fix", tmp_path / "set.h5", "--manifest", "set.h5.scrub.jsonl", "--leak-side", "train", "--force"
    )
    assert sided.exit_code == 0, sided.output
    assert "--data-key inputs" in sided.output and "--leak-side train: not used on" in sided.output


def test_allow_pickle_is_not_taken_from_the_scan(tmp_path):
    db = write_db(
        tmp_path / "db",
        [(b"a", pickle.dumps((image_bytes(1)[:200], 3))), (b"b", pickle.dumps((image_bytes(2), 1)))],
    )
    scanned = run("scan", db, "--allow-pickle", "--scheduler", "sync")
    assert scanned.exit_code == 1, scanned.output
    record = json.loads(Path("db.scrub.scan.json").read_text())
    assert record["reading"]["allow_pickle"] is True
    unasked = run("fix", db, "--manifest", "db.scrub.jsonl", "--scheduler", "sync")
    assert unasked.exit_code == 2 and "does not describe" in unasked.output  # read otherwise: refused
    asked = run("fix", db, "--manifest", "db.scrub.jsonl", "--allow-pickle", "--scheduler", "sync")
    assert asked.exit_code == 0, asked.output
