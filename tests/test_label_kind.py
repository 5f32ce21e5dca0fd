"""Labels that are regression targets, and `fix`'s safety nets (issue 38, points 1 and 3).

Before: an HDF5 file of float32 regression targets gave 4,094 `non-integer-label` errors, `fix`
kept only the two corrupt 1.4e19 targets, NumPy warned about a cast on stderr and the label
histogram held -9223372036854775808; a uint16 token file for a 100,000-token vocabulary was
"fixed" into an empty file with exit 0. Every test runs the real CLI on real files.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from scrub.cli import app

runner = CliRunner()
CORRUPT = (1000, 3000)  # the rows whose target is 1.4e19


def cli(*args):
    """The CLI in this process, any RuntimeWarning (NumPy's "invalid value encountered in cast")
    raised instead of printed: a warning that reaches the user fails the run."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return runner.invoke(app, [str(a) for a in args])


def targets(rows: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """(data, float32 regression targets), two targets corrupted to 1.4e19 (finite, integral,
    their square finite in float32: no absolute limit catches them)."""
    rng = np.random.default_rng(38)
    data = rng.normal(size=(rows, 16)).astype(np.float32)
    label = (data @ rng.normal(size=16)).astype(np.float32)
    label[[r for r in CORRUPT if r < rows]] = 1.4e19
    return data, label


def regression_h5(path):
    data, label = targets()
    with h5py.File(path, "w") as file:
        file["data"], file["label"] = data, label
    return path


def summary(path) -> dict:
    return json.loads(path.read_text())


def issues(manifest) -> list[dict]:
    return [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]


def test_regression_targets_in_hdf5_are_values_and_fix_keeps_the_good_rows(tmp_path):
    source = regression_h5(tmp_path / "train.h5")
    done = cli(
        "scan",
        source,
        "--scheduler",
        "sync",
        "--manifest",
        tmp_path / "m.jsonl",
        "--json",
        tmp_path / "s.json",
    )
    assert done.exit_code == 1, done.output
    found = issues(tmp_path / "m.jsonl")
    assert {(i["check"], i["index"]) for i in found} == {("label-magnitude-outlier", r) for r in CORRUPT}
    scanned = summary(tmp_path / "s.json")
    assert scanned["issues"]["by_check"].get("non-integer-label") is None  # the class checks did not run
    assert "label-outlier" not in scanned["checks"] and "label-overflow" in scanned["checks"]
    assert "labels" not in scanned["stats"]  # no histogram of class ids for values
    note = next(n for n in scanned["notes"] if n.startswith("labels: read as continuous values"))
    assert "4,094 of the 4,096 finite labels sampled are not integers" in note
    assert "--label-kind class" in note and note in done.output

    fixed = cli("fix", source, "--scheduler", "sync", "--quarantine")
    assert fixed.exit_code == 0, fixed.output
    with h5py.File(tmp_path / "train.clean.h5") as clean:
        assert clean["label"].shape == (4094,) and np.abs(clean["label"][:]).max() < 1e3
    with h5py.File(tmp_path / "train.quarantine" / "train.h5") as held:
        assert held["label"][:].tolist() == [float(np.float32(1.4e19))] * 2


def test_label_kind_class_reproduces_the_class_checks_without_a_warning_and_fix_refuses(tmp_path):
    source = regression_h5(tmp_path / "train.h5")
    done = cli("scan", source, "--label-kind", "class", "--scheduler", "sync", "--json", tmp_path / "s.json")
    assert done.exit_code == 1, done.output  # no RuntimeWarning: it would have raised
    scanned = summary(tmp_path / "s.json")
    assert scanned["issues"]["by_check"]["non-integer-label"] == 4094
    assert "label-magnitude-outlier" not in scanned["checks"]
    assert scanned["stats"].get("labels", {}) == {}  # 1.4e19 is no int64: not counted as garbage
    assert not any(n.startswith("labels: read as") for n in scanned["notes"])

    refused = cli("fix", source, "--label-kind", "class", "--scheduler", "sync")
    assert refused.exit_code == 2
    line = refused.output.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert "non-integer-label alone would set aside 4,094 of its 4,096 records (99.9%;" in line
    assert "--label-kind value" in line and "--allow-majority" in line and "nothing was written" in line
    assert not (tmp_path / "train.clean.h5").exists()

    allowed = cli("fix", source, "--label-kind", "class", "--allow-majority", "--scheduler", "sync")
    assert allowed.exit_code == 0, allowed.output
    with h5py.File(tmp_path / "train.clean.h5") as clean:  # the old result, asked for
        assert clean["label"][:].tolist() == [float(np.float32(1.4e19))] * 2


def test_integral_float_labels_stay_class_ids(tmp_path):
    """Caffe stores class ids as float32: they stay classes, a stray 3.5 a non-integer-label."""
    labels = (np.arange(600) % 10).astype(np.float32)
    labels[7] = 3.5
    source = tmp_path / "classes.h5"
    with h5py.File(source, "w") as file:
        file["data"], file["label"] = np.ones((600, 4), np.float32), labels
    done = cli("scan", source, "--scheduler", "sync", "--json", tmp_path / "s.json")
    scanned = summary(tmp_path / "s.json")
    assert done.exit_code == 1 and scanned["issues"]["by_check"]["non-integer-label"] == 1
    assert scanned["stats"]["labels"]["7"] == 59 and "label-overflow" not in scanned["checks"]


def test_a_large_share_of_fractions_reads_as_classes_with_a_note(tmp_path):
    """30% fractional: the ambiguous case. Class ids (the majority), and a note naming the option."""
    labels = (np.arange(1000) % 5).astype(np.float64)
    labels[::3] += 0.5
    source = tmp_path / "mixed.h5"
    with h5py.File(source, "w") as file:
        file["data"], file["label"] = np.ones((1000, 2)), labels
    assert cli("scan", source, "--scheduler", "sync", "--json", tmp_path / "s.json").exit_code == 1
    scanned = summary(tmp_path / "s.json")
    assert scanned["issues"]["by_check"]["non-integer-label"] == 334
    note = next(n for n in scanned["notes"] if n.startswith("labels: read as class ids although"))
    assert "334 of the 1,000 finite labels sampled are not integers" in note and "--label-kind value" in note
    as_values = cli(
        "scan", source, "--label-kind", "value", "--scheduler", "sync", "--json", tmp_path / "v.json"
    )
    assert as_values.exit_code == 0, as_values.output
    assert "non-integer-label" not in summary(tmp_path / "v.json")["checks"]


def test_value_labels_in_numpy_get_overflow_and_nonfinite_checks(tmp_path):
    data, label = targets(2000)
    label = label.astype(np.float64)
    label[[5, 6]] = [3e20, np.nan]  # a square beyond float32, a NaN
    np.savez(tmp_path / "train.npz", x=data, y=label)
    done = cli("scan", tmp_path / "train.npz", "--scheduler", "sync", "--manifest", tmp_path / "m.jsonl")
    assert done.exit_code == 1, done.output
    found = {(i["check"], i["index"]) for i in issues(tmp_path / "m.jsonl")}
    assert ("label-overflow", 5) in found and ("nonfinite-label", 6) in found
    assert ("label-magnitude-outlier", 1000) in found
    assert not any(check in ("non-integer-label", "label-outlier") for check, _ in found)
    # in float16, a target of 70,000 cannot be held
    small = np.linspace(-1, 1, 2000) + 0.001
    small[9] = 70000.5
    np.save(tmp_path / "X.npy", data)
    np.save(tmp_path / "y.npy", small)
    half = cli(
        "scan", tmp_path / "X.npy", "--labels", tmp_path / "y.npy", "--precision", "float16",
        "--scheduler", "sync", "--manifest", tmp_path / "h.jsonl",
    )  # fmt: skip
    assert half.exit_code == 1, half.output
    assert {(i["check"], i["index"]) for i in issues(tmp_path / "h.jsonl")} == {("label-overflow", 9)}


def test_value_labels_in_parquet(tmp_path):
    data, label = targets(3000)
    table = pa.table({**{f"f{k}": data[:, k] for k in range(4)}, "target": label})
    pq.write_table(table, tmp_path / "train.parquet", row_group_size=700)
    done = cli("scan", tmp_path / "train.parquet", "--scheduler", "sync", "--manifest", tmp_path / "m.jsonl")
    assert done.exit_code == 1, done.output
    assert {(i["check"], i["index"]) for i in issues(tmp_path / "m.jsonl")} == {
        ("label-magnitude-outlier", r) for r in CORRUPT if r < 3000
    }
    assert "labels: read as continuous values" in done.output


@pytest.mark.slow
def test_the_decision_is_the_same_for_every_partition(tmp_path):
    """Many small partitions on processes: the kind is decided before them, once."""
    source = regression_h5(tmp_path / "train.h5")
    command = ["scan", str(source), "--partition-size", "256", "--scheduler", "threads", "--workers", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "scrub", *command, "--manifest", str(tmp_path / "m.jsonl")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "RuntimeWarning" not in done.stderr and "Warning" not in done.stderr
    assert {i["check"] for i in issues(tmp_path / "m.jsonl")} == {"label-magnitude-outlier"}


def test_label_kind_that_cannot_apply_is_an_error(tmp_path):
    source = regression_h5(tmp_path / "train.h5")
    both = cli("scan", source, "--label-kind", "value", "--num-classes", "10")
    assert both.exit_code == 2 and "continuous labels have no classes" in both.output
    with h5py.File(tmp_path / "bare.h5", "w") as file:
        file["data"] = np.ones((10, 2))
    bare = cli("scan", tmp_path / "bare.h5", "--label-kind", "value")
    assert bare.exit_code == 2 and "has no labels to judge" in bare.output
    wrong = cli("scan", source, "--label-kind", "sometimes")
    assert wrong.exit_code == 2


def test_majority_refusal_counts_records_and_its_override(tmp_path):
    data = np.ones((10, 3), np.float32)
    data[:6, 0] = np.nan  # 6 of 10 rows NaN: nonfinite-data alone sets most aside
    with h5py.File(tmp_path / "most.h5", "w") as file:
        file["data"] = data
    refused = cli("fix", tmp_path / "most.h5", "--scheduler", "sync")
    assert refused.exit_code == 2
    assert "nonfinite-data alone would set aside 6 of its 10 records (60.0%;" in refused.output
    assert not (tmp_path / "most.clean.h5").exists()
    allowed = cli("fix", tmp_path / "most.h5", "--scheduler", "sync", "--allow-majority")
    assert allowed.exit_code == 0, allowed.output
    with h5py.File(tmp_path / "most.clean.h5") as clean:
        assert clean["data"].shape == (4, 3)
    data[5, 0] = 1.0  # half exactly: not more than half, fixed as asked
    with h5py.File(tmp_path / "half.h5", "w") as file:
        file["data"] = data
    assert cli("fix", tmp_path / "half.h5", "--scheduler", "sync").exit_code == 0


def test_fix_refuses_a_token_file_whose_dtype_cannot_hold_the_vocabulary(tmp_path):
    folder = tmp_path / "nano100k"
    folder.mkdir()
    np.random.default_rng(0).integers(0, 65535, size=20000).astype(np.uint16).tofile(folder / "train.bin")
    scanned = cli("scan", folder / "train.bin", "--vocab-size", "100000", "--max-length", "256")
    assert scanned.exit_code == 1 and "re-tokenize into uint32" in scanned.output
    refused = cli("fix", folder / "train.bin", "--vocab-size", "100000", "--max-length", "256")
    assert refused.exit_code == 2, refused.output
    line = refused.output.strip()
    assert len(line.splitlines()) == 1
    assert "every one of its 79 records would be set aside for token-dtype-overflow" in line
    assert "re-tokenize into uint32" in line and "nothing was written" in line
    assert not (folder / "train.clean.bin").exists()
    # --allow-majority does not make an empty copy a fix
    again = cli(
        "fix", folder / "train.bin", "--vocab-size", "100000", "--max-length", "256", "--allow-majority"
    )
    assert again.exit_code == 2 and not (folder / "train.clean.bin").exists()
    # a vocabulary uint16 holds: a real fix
    kept = cli("fix", folder / "train.bin", "--vocab-size", "65536", "--max-length", "256")
    assert kept.exit_code == 0, kept.output
    assert (folder / "train.clean.bin").stat().st_size == 40000


@pytest.mark.slow
def test_a_dataset_wide_finding_in_one_of_several_files_counts_that_files_records(tmp_path):
    """A folder of two HDF5 files, one with more rows of labels than of data (row-count-mismatch,
    key `*`): its whole file is set aside; when that file holds most of the rows, refused."""
    big = tmp_path / "shards"
    big.mkdir()
    with h5py.File(big / "a.h5", "w") as file:
        file["data"], file["label"] = np.ones((30, 2)), np.zeros(31)
    with h5py.File(big / "b.h5", "w") as file:
        file["data"], file["label"] = np.ones((10, 2)), np.zeros(10)
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "fix", str(big)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert "row-count-mismatch alone would set aside 30 of its 40 records (75.0%;" in done.stderr
    assert "RuntimeWarning" not in done.stderr


def test_value_labels_in_a_list_file(tmp_path):
    """A Caffe list of images with float targets: sampled from the list, read as values."""
    from conftest import image_bytes

    (tmp_path / "img").mkdir()
    lines = []
    for i in range(12):
        (tmp_path / "img" / f"{i}.png").write_bytes(image_bytes(i, fmt="PNG"))
        lines.append(f"img/{i}.png {'3e20' if i == 4 else 'nan' if i == 5 else 0.1 + i / 7}")
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    done = cli("scan", tmp_path / "train.txt", "--scheduler", "sync", "--manifest", tmp_path / "m.jsonl")
    assert done.exit_code == 1, done.output
    found = {(i["check"], i["key"]) for i in issues(tmp_path / "m.jsonl")}
    assert found == {
        ("label-overflow", "img/4.png"),
        ("label-magnitude-outlier", "img/4.png"),
        ("nonfinite-label", "img/5.png"),
    }
    assert "labels: read as continuous values" in done.output


def test_vectors_of_regression_targets_are_values_not_label_vectors(tmp_path):
    """(N, 3) targets with values far outside [0, 1]: not one-hot, multi-label or soft targets."""
    rng = np.random.default_rng(2)
    targets3 = rng.normal(scale=5, size=(500, 3))
    targets3[7, 1], targets3[9, 2] = 3e20, 1e9
    with h5py.File(tmp_path / "vec.h5", "w") as file:
        file["data"], file["label"] = rng.normal(size=(500, 4)), targets3
    done = cli("scan", tmp_path / "vec.h5", "--scheduler", "sync", "--manifest", tmp_path / "m.jsonl")
    assert done.exit_code == 1, done.output
    assert {(i["check"], i["index"]) for i in issues(tmp_path / "m.jsonl")} == {
        ("label-overflow", 7),
        ("label-magnitude-outlier", 7),
        ("label-magnitude-outlier", 9),
    }
    assert "499 of the 500 label vectors sampled hold a value outside [0, 1]" in done.output
    as_classes = cli(
        "scan",
        tmp_path / "vec.h5",
        "--label-kind",
        "class",
        "--scheduler",
        "sync",
        "--manifest",
        tmp_path / "c.jsonl",
    )
    assert {i["check"] for i in issues(tmp_path / "c.jsonl")} == {"invalid-label-vector"}
    assert as_classes.exit_code == 1
