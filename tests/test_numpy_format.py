""".npy files: rows are records, read through a memory map; `fix` writes .npy files that
`np.load` reads, and the cleaned copy trains (here: its rows are all finite) as the source's
good rows."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

import scrub
from scrub.readers import numpy as npy_reader
from scrub.readers.base import ReadOptions, open_reader


def faulty(rows=1000, width=8, dtype="float32") -> np.ndarray:
    data = np.random.default_rng(3).normal(size=(rows, width)).astype(dtype)
    data[7, 2] = np.nan
    data[100, 0] = np.inf
    data[500] = 0.0
    data[900, 1] = 70000.0
    return data


def test_rows_are_records_and_findings_name_them(tmp_path):
    path = tmp_path / "features.npy"
    np.save(path, faulty())
    result = scrub.scan(path, scheduler="sync")
    found = {(issue.key, issue.check) for issue in result.issues()}
    assert {("7", "nonfinite-data"), ("100", "nonfinite-data"), ("500", "zero-norm")} <= found
    assert ("900", "fp16-overflow") in found
    assert result.summary.records == 1000 and result.summary.dataset.format == "numpy"
    assert any("holds no label array" in note for note in result.summary.notes)


@pytest.mark.parametrize("order", ["C", "F"])
def test_partitions_cover_every_row_once(tmp_path, order):
    path = tmp_path / "x.npy"
    data = np.asfortranarray(faulty(5000)) if order == "F" else faulty(5000)
    np.save(path, data)
    reader = open_reader(path, ReadOptions())
    _, partitions = reader.open(700)
    seen = np.concatenate([batch.data.copy() for p in partitions for batch in reader.read(p)])
    assert np.array_equal(seen, data, equal_nan=True)
    assert [p.start for p in partitions] == list(range(0, 5000, 700))


def test_fix_writes_npy_files_np_load_reads(tmp_path):
    path = tmp_path / "features.npy"
    data = faulty()
    np.save(path, data)
    result = scrub.fix(path, quarantine=True, scheduler="sync")
    assert result.verified and result.report["kept"] == 998 and result.report["quarantined"] == 2
    clean, held = np.load(result.clean), np.load(result.quarantine / "features.npy")
    assert np.array_equal(clean, np.delete(data, [7, 100], axis=0))
    assert np.array_equal(held, data[[7, 100]], equal_nan=True)
    assert np.isfinite(clean).all() and clean.dtype == data.dtype
    assert np.array_equal(np.load(path), data, equal_nan=True)  # the source untouched
    assert scrub.scan(result.clean, scheduler="sync").summary.records_with_errors == 0


def test_big_rows_are_tested_in_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(npy_reader, "BLOCK_BYTES", 4096)
    path = tmp_path / "volumes.npy"
    data = np.arange(4 * 16**3, dtype=np.float32).reshape(4, 16, 16, 16)  # 16 KiB rows: 4 pieces each
    data[2, 15, 15, 15] = np.nan
    np.save(path, data)
    result = scrub.scan(path, scheduler="sync")
    issues = list(result.issues())
    assert [(i.key, i.check, i.details["first_position"]) for i in issues] == [("2", "nonfinite-data", 4095)]


@pytest.mark.slow  # over half a second: out of the quick subset
def test_object_arrays_are_never_unpickled(tmp_path):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    done = subprocess.run([sys.executable, "-m", "scrub", "scan", str(path)], capture_output=True, text=True)
    assert done.returncode == 2 and "never unpickled" not in done.stderr
    assert "an array of Python objects (object)" in done.stderr and len(done.stderr.splitlines()) == 1
    allowed = [sys.executable, "-m", "scrub", "scan", str(path), "--allow-pickle"]
    done = subprocess.run(allowed, capture_output=True, text=True)
    assert done.returncode == 2 and "--allow-pickle" in done.stderr  # does not apply: said, not ignored
    (tmp_path / "not.npy").write_bytes(b"\x93NUMPY" + pickle.dumps([1, 2]))
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", str(tmp_path / "not.npy")], capture_output=True, text=True
    )
    assert done.returncode == 2 and "not a readable NumPy array" in done.stderr


def test_a_folder_of_npy_files_is_one_record_per_file(tmp_path):
    """torchvision's DatasetFolder(root, loader=np.load) layout: class folders of .npy files."""
    root = tmp_path / "features"
    rng = np.random.default_rng(5)
    for number in range(8):
        array = rng.normal(size=(4, 6)).astype(np.float32)
        if number == 3:
            array[1, 2] = np.nan
        if number == 5:
            array[:] = 0.0
        (root / f"class{number % 2}").mkdir(parents=True, exist_ok=True)
        np.save(root / f"class{number % 2}" / f"{number}.npy", array)
    np.save(root / "class0" / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (root / "class1" / "notes.txt").write_text("not a record")
    result = scrub.scan(root, scheduler="sync")
    assert {(issue.key, issue.check) for issue in result.issues()} == {
        ("class1/3.npy", "nonfinite-data"),
        ("class1/5.npy", "zero-norm"),
        ("class0/objects.npy", "undecodable-record"),  # never unpickled
    }
    assert result.summary.records == 9 and result.summary.dataset.classes == ["class0", "class1"]
    assert any("each .npy file is one record" in note for note in result.summary.notes)
    fixed = scrub.fix(root, quarantine=True, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 7
    kept = sorted(p.relative_to(fixed.clean).as_posix() for p in fixed.clean.rglob("*") if p.is_file())
    assert kept == sorted([f"class{n % 2}/{n}.npy" for n in (0, 1, 2, 4, 5, 6, 7)] + ["class1/notes.txt"])
    for path in fixed.clean.rglob("*.npy"):  # byte for byte
        assert path.read_bytes() == (root / path.relative_to(fixed.clean)).read_bytes()


def test_npy_files_named_by_a_pattern_are_each_a_dataset_of_rows(tmp_path):
    for name in ("a.npy", "b.npy"):
        np.save(tmp_path / name, faulty(1000))
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", f"{tmp_path}/*.npy", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr  # both scanned: NaN rows in each


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_data_and_labels_are_checked_and_split_together(tmp_path, compressed):
    path = tmp_path / "train.npz"
    data = faulty(1000)[:300]  # NaN in row 7, Inf in row 100
    labels = np.arange(300) % 4
    labels[20] = 9  # out of range for 4 classes
    ids = np.arange(300) * 10  # per-row metadata: split with the rows
    classes = np.array(["a", "b", "c", "d"])  # not row-aligned: copied whole
    (np.savez_compressed if compressed else np.savez)(path, x=data, y=labels, ids=ids, classes=classes)
    mapped = npy_reader.load_array(path, "x")  # stored: mapped inside the archive, not loaded
    assert isinstance(mapped, np.memmap) != compressed and np.array_equal(mapped, data, equal_nan=True)
    result = scrub.scan(path, num_classes=4, scheduler="sync")
    found = {(issue.key, issue.check) for issue in result.issues()}
    assert {("7", "nonfinite-data"), ("100", "nonfinite-data"), ("20", "label-out-of-range")} <= found
    facts = result.summary.dataset.files["train.npz"]
    assert facts["data_key"] == "x" and facts["label_key"] == "y"
    assert any("ids" in note and "not checked" in note for note in result.summary.notes)
    fixed = scrub.fix(path, quarantine=True, num_classes=4, scheduler="sync")
    assert fixed.verified and fixed.report["quarantined"] == 3
    keep = np.setdiff1d(np.arange(300), [7, 20, 100])
    with np.load(fixed.clean) as clean, np.load(fixed.quarantine / "train.npz") as held:
        assert np.array_equal(clean["x"], data[keep]) and np.array_equal(clean["y"], labels[keep])
        assert np.array_equal(clean["ids"], ids[keep]) and np.array_equal(clean["classes"], classes)
        assert np.array_equal(held["ids"], ids[[7, 20, 100]])
    assert scrub.scan(fixed.clean, num_classes=4, scheduler="sync").summary.records_with_errors == 0


def test_an_npz_whose_data_array_is_unknown_says_which_it_holds(tmp_path):
    path = tmp_path / "odd.npz"
    np.savez(path, a=np.ones((3, 2)), b=np.ones(3))
    done = subprocess.run([sys.executable, "-m", "scrub", "scan", str(path)], capture_output=True, text=True)
    assert done.returncode == 2 and "It holds a, b; choose one with --data-key" in done.stderr
    result = scrub.scan(path, data_key="a", label_key="b", scheduler="sync")
    assert result.summary.records == 3 and result.summary.dataset.labelled


def features_and_labels(folder):
    """X.npy (200 x 8) and y.npy (200 class ids of 10): a NaN row 5, a 1e30 row 7, labels 12 (row 9)
    and -1 (row 11)."""
    rng = np.random.default_rng(0)
    data = rng.normal(size=(200, 8)).astype(np.float32)
    data[5, 2], data[7] = np.nan, 1e30
    labels = (np.arange(200) % 10).astype(np.int64)
    labels[9], labels[11] = 12, -1
    folder.mkdir(exist_ok=True)
    np.save(folder / "X.npy", data)
    np.save(folder / "y.npy", labels)
    return folder / "X.npy", folder / "y.npy"


def test_labels_in_a_npy_of_their_own_are_checked_and_split_with_the_rows(tmp_path):
    data, labels = features_and_labels(tmp_path / "d")
    result = scrub.scan(data, labels=labels, num_classes=10, scheduler="sync")
    errors = {(issue.index, issue.check) for issue in result.issues() if issue.severity.value == "error"}
    assert errors == {
        (5, "nonfinite-data"),
        (7, "square-overflow"),
        (9, "label-out-of-range"),
        (11, "label-out-of-range"),
    }
    fixed = scrub.fix(data, labels=labels, num_classes=10, quarantine=True, scheduler="sync")
    assert fixed.verified and fixed.clean == tmp_path / "d" / "X.clean"
    kept = np.setdiff1d(np.arange(200), [5, 7, 9, 11])
    clean_x, clean_y = np.load(fixed.clean / "X.npy"), np.load(fixed.clean / "y.npy")
    assert np.array_equal(clean_x, np.load(data)[kept]) and np.array_equal(clean_y, np.load(labels)[kept])
    held = fixed.quarantine / "X"
    assert np.array_equal(np.load(held / "y.npy"), np.load(labels)[[5, 7, 9, 11]])
    assert np.load(held / "X.npy").shape == (4, 8)
    rescan = scrub.scan(fixed.clean / "X.npy", labels=fixed.clean / "y.npy", num_classes=10, scheduler="sync")
    assert rescan.summary.records_with_errors == 0


def test_masks_in_a_npy_of_their_own_are_named_and_not_said_missing(tmp_path):
    """The notes name the --labels file of masks, and do not also say the data has no labels."""
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((6, 3, 4, 4)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.zeros((6, 4, 4), np.uint8))
    notes = scrub.scan(
        tmp_path / "x.npy", labels=tmp_path / "y.npy", num_classes=2, scheduler="sync"
    ).summary.notes
    assert f"labels: {tmp_path / 'y.npy'} holds (N, H, W) class maps: checked as segmentation masks" in notes
    assert not [note for note in notes if "holds no label array" in note]


@pytest.mark.slow
def test_labels_that_do_not_align_or_apply_are_one_line(tmp_path):
    from conftest import one_line_error

    data, labels = features_and_labels(tmp_path / "d")
    np.save(tmp_path / "short.npy", np.zeros(150, np.int64))
    said = one_line_error("scan", data, "--labels", tmp_path / "short.npy")
    assert "150 labels for the 200 rows of" in said and "one per row" in said
    assert "not a .npy file" in one_line_error("scan", data, "--labels", tmp_path / "missing.npy")
    said = one_line_error("scan", labels, "--num-classes", "10")  # y.npy scanned as data
    assert "y.npy holds one integer per row, as labels do" in said and f"--labels {labels}" in said
    np.save(tmp_path / "d" / "X2.npy", np.zeros((200, 8), np.float32))
    said = one_line_error("scan", str(tmp_path / "d" / "*.npy"), "--labels", labels)
    assert "the labels of one data file, and 2 datasets are named" in said


def test_a_pattern_that_names_the_labels_too_scans_the_data_with_them(tmp_path):
    from typer.testing import CliRunner

    from scrub.cli import app

    data, labels = features_and_labels(tmp_path / "d")
    result = CliRunner().invoke(
        app,
        ["scan", str(tmp_path / "d" / "*.npy"), "--labels", str(labels), "--num-classes", "10",
         "--manifest", str(tmp_path / "m.jsonl")],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "not scanned: 1 entry is the labels --labels reads with the data" in result.output
    assert result.output.count("label-out-of-range  label") == 2  # y.npy is not a dataset of its own


def test_the_cleaned_features_and_labels_train_without_nan(tmp_path):
    torch = pytest.importorskip("torch")
    data, labels = features_and_labels(tmp_path / "d")

    def broken_steps(x: np.ndarray, y: np.ndarray) -> int:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
        broken = 0
        for inputs, targets in torch.utils.data.DataLoader(dataset, batch_size=32):
            optimizer.zero_grad()
            try:
                loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            except IndexError:  # a label out of range, on the CPU
                broken += 1
                continue
            loss.backward()
            optimizer.step()
            broken += not torch.isfinite(loss)
        return broken

    assert broken_steps(np.load(data), np.load(labels)) > 0  # the source breaks training
    fixed = scrub.fix(data, labels=labels, num_classes=10, scheduler="sync")
    assert broken_steps(np.load(fixed.clean / "X.npy"), np.load(fixed.clean / "y.npy")) == 0
