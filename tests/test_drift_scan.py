"""Drift through the real scan: two nights of real files (HDF5 rows, an image folder, token
JSON Lines), the second scanned with ``--baseline`` the first's manifest. Each planted shift is
found with its feature named, the same data (and its bootstrap resamples) raises nothing, what
cannot be compared is a note, and `fix` sets no record aside for a drift."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import h5py
import jsonschema
import numpy as np
import pytest
from conftest import image_bytes, manifest_lines, write
from typer.testing import CliRunner

import scrub
from scrub.checks.drift import NOT_RECORDS
from scrub.cli import app

FEATURES = 8


def rows(n: int = 2_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = rng.normal(0, 1, size=(n, FEATURES)).astype(np.float32)
    labels = rng.choice(4, size=n, p=[0.4, 0.3, 0.2, 0.1]).astype(np.int64)
    return data, labels


def hdf5(path: Path, data: np.ndarray, labels: np.ndarray | None = None) -> Path:
    with h5py.File(path, "w") as file:
        file["data"] = data
        if labels is not None:
            file["label"] = labels
    return path


def night(tmp_path: Path, name: str, dataset: Path, baseline: Path | None = None, **options):
    """Scan ``dataset`` into ``NAME.scrub.jsonl`` (against ``baseline``, a manifest)."""
    manifest = tmp_path / f"{name}.scrub.jsonl"
    extra = {"baseline": baseline} if baseline is not None else {}
    return scrub.scan(dataset, manifest=manifest, **extra, **options), manifest


def drifted(result) -> set[tuple[str, str]]:
    return {(found["check"], found["feature"]) for found in result.summary.drift}


@pytest.fixture
def first_night(tmp_path):
    """Last night's HDF5 rows, scanned: (its data, labels, manifest)."""
    data, labels = rows()
    _, manifest = night(tmp_path, "monday", hdf5(tmp_path / "monday.h5", data, labels))
    return data, labels, manifest


def test_the_same_data_raises_no_drift(tmp_path, first_night):
    data, labels, manifest = first_night
    result, _ = night(tmp_path, "tuesday", hdf5(tmp_path / "tuesday.h5", data, labels), manifest)
    assert result.summary.drift == []
    assert not any(note.startswith("drift:") for note in result.summary.notes), result.summary.notes


def test_a_mean_moved_by_two_standard_deviations_is_found_in_hdf5_rows(tmp_path, first_night):
    data, labels, manifest = first_night
    moved = data.copy()
    moved[:, 3] += 2 * moved[:, 3].std()
    result, tonight = night(tmp_path, "tuesday", hdf5(tmp_path / "tuesday.h5", moved, labels), manifest)
    assert ("value-drift", "arrays.8.features.3") in drifted(result)
    assert {feature for _, feature in drifted(result)} <= {"arrays.8.features.3", "arrays.8.row"}
    (line,) = [
        line for line in manifest_lines(tonight) if line["details"].get("feature") == "arrays.8.features.3"
    ]
    assert line["key"] == "*" and line["index"] is None and line["severity"] == "warning"
    assert line["details"]["distance"] > line["details"]["threshold"]
    assert "Jensen-Shannon distance" in line["message"] and line["status"] == "new"
    assert result.summary.records_with_errors == 0 and result.summary.records_with_warnings == 0
    assert result.exit_code("error") == 0  # drift warns; a nightly job fails on it when told


def test_a_class_removed_and_a_share_moved_are_label_drift(tmp_path, first_night):
    data, labels, manifest = first_night
    kept = labels != 2
    removed, _ = night(tmp_path, "removed", hdf5(tmp_path / "removed.h5", data[kept], labels[kept]), manifest)
    assert ("label-drift", "labels.classes") in drifted(removed)
    (found,) = [f for f in removed.summary.drift if f["feature"] == "labels.classes"]
    assert "class 2" in found["message"]
    moved_labels = labels.copy()
    zeros = np.flatnonzero(labels == 0)
    moved_labels[zeros[: int(len(zeros) * 0.3)]] = 3  # class 0's share 40% -> 28%
    moved, _ = night(tmp_path, "moved", hdf5(tmp_path / "moved.h5", data, moved_labels), manifest)
    assert drifted(moved) == {("label-drift", "labels.classes")}
    assert (
        "class 0's share" in moved.summary.drift[0]["message"]
        or "class 3's share" in moved.summary.drift[0]["message"]
    )


def test_a_dtype_change_is_an_error_that_quarantines_nothing(tmp_path, first_night):
    data, labels, manifest = first_night
    result, _ = night(
        tmp_path, "tuesday", hdf5(tmp_path / "tuesday.h5", data.astype(np.float64), labels), manifest
    )
    assert drifted(result) == {("dtype-change", "arrays.8.dtypes")}
    assert result.exit_code("error") == 1  # a dtype change fails the nightly job
    assert result.summary.records_with_errors == 0  # and names no record to quarantine


def test_a_third_of_the_records_gone(tmp_path, first_night):
    data, labels, manifest = first_night
    left = len(data) * 2 // 3
    result, _ = night(
        tmp_path, "tuesday", hdf5(tmp_path / "tuesday.h5", data[:left], labels[:left]), manifest
    )
    assert drifted(result) == {("record-count-change", "records")}
    assert "1,333 tonight, 2,000 in the baseline (-33.4%" in result.summary.drift[0]["message"]


def test_thresholds_and_ignore(tmp_path, first_night):
    data, labels, manifest = first_night
    left = len(data) * 2 // 3
    path = hdf5(tmp_path / "tuesday.h5", data[:left], labels[:left])
    quiet, _ = night(tmp_path, "a", path, manifest, drift_threshold=["records=0.5"])
    assert ("record-count-change", "records") not in drifted(quiet)
    ignored, _ = night(tmp_path, "b", path, manifest, ignore=["record-count-change"])
    assert ("record-count-change", "records") not in drifted(ignored)
    raised, _ = night(tmp_path, "c", path, manifest, check_severity=["record-count-change=error"])
    assert raised.summary.drift[0]["severity"] == "error" and raised.exit_code("error") == 1


def test_images_resized_to_half(tmp_path):
    def folder(root: Path, size: int) -> Path:
        for index in range(30):
            write(root / f"c{index % 2}" / f"{index}.png", image_bytes(index, fmt="PNG", size=size))
        return root

    _, manifest = night(tmp_path, "monday", folder(tmp_path / "monday", 48))
    result, _ = night(tmp_path, "tuesday", folder(tmp_path / "tuesday", 24), manifest)
    assert {("size-drift", "images.width"), ("size-drift", "images.height")} <= drifted(result)
    (width,) = [f for f in result.summary.drift if f["feature"] == "images.width"]
    assert "mean 24 tonight, 48 in the baseline (range 24..24, baseline 48..48)" in width["message"]


def test_token_lengths_doubled(tmp_path):
    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 60, size=300)

    def tokens(path: Path, scale: int) -> Path:
        with path.open("w") as file:
            for length in lengths:
                ids = rng.integers(0, 1000, size=int(length) * scale).tolist()
                file.write(json.dumps({"input_ids": ids}) + "\n")
        return path

    _, manifest = night(tmp_path, "monday", tokens(tmp_path / "monday.jsonl", 1))
    result, _ = night(tmp_path, "tuesday", tokens(tmp_path / "tuesday.jsonl", 2), manifest)
    assert ("length-drift", "tokens.length") in drifted(result)


def test_fix_sets_no_record_aside_for_a_drift_and_says_so(tmp_path, first_night):
    data, labels, manifest = first_night
    path = hdf5(tmp_path / "tuesday.h5", data.astype(np.float64), labels)
    result, tonight = night(tmp_path, "tuesday", path, manifest)
    assert result.summary.drift
    fixed = scrub.fix(path, manifest=tonight, out=tmp_path / "clean.h5")
    assert fixed.report["kept"] == len(data) and fixed.report["quarantined"] == 0
    assert any("dtype-change (1) concern the dataset as a whole" in note for note in fixed.report["notes"])


def test_a_baseline_without_a_profile_is_a_note(tmp_path, first_night):
    data, labels, manifest = first_night
    record = manifest.with_name(manifest.stem + ".scan.json")
    document = json.loads(record.read_text())
    document.pop("profile", None)
    record.write_text(json.dumps(document))
    path = hdf5(tmp_path / "tuesday.h5", data[:100], labels[:100])
    result, _ = night(tmp_path, "tuesday", path, manifest)
    assert result.summary.drift is None
    assert any("holds no profile" in note for note in result.summary.notes), result.summary.notes
    record.unlink()
    result, _ = night(tmp_path, "wednesday", path, manifest)
    assert any("scan record" in note and "is missing" in note for note in result.summary.notes)


def test_without_a_profile_tonight_drift_is_a_note(tmp_path, first_night):
    data, labels, manifest = first_night
    result, _ = night(
        tmp_path, "tuesday", hdf5(tmp_path / "tuesday.h5", data, labels), manifest, profile=False
    )
    assert result.summary.drift is None
    assert any("this scan built no profile" in note for note in result.summary.notes)


def test_several_datasets_are_matched_by_path(tmp_path):
    data, labels = rows(1_000)
    first, second = hdf5(tmp_path / "a.h5", data, labels), hdf5(tmp_path / "b.h5", data, labels)
    _, manifest = night(tmp_path, "monday", [first, second])
    hdf5(second, data[:500], labels[:500])
    result, _ = night(tmp_path, "tuesday", [first, second], manifest)
    assert [(f["dataset"], f["check"]) for f in result.summary.drift] == [
        (str(second), "record-count-change")
    ]
    assert [part.drift for part in result.summary.parts][0] == []
    schema = json.loads(resources.files("scrub.schemas").joinpath("summary.schema.json").read_text())
    jsonschema.validate(result.summary.to_dict(), schema)  # the whole's drift and each part's


def test_the_console_prints_each_drift(tmp_path, first_night, monkeypatch):
    data, labels, manifest = first_night
    monkeypatch.chdir(tmp_path)
    path = hdf5(tmp_path / "tuesday.h5", data[: len(data) * 2 // 3], labels[: len(data) * 2 // 3])
    outcome = CliRunner().invoke(
        app, ["scan", str(path), "--baseline", str(manifest), "--drift-threshold", "records=0.2"]
    )
    assert outcome.exit_code == 0, outcome.output
    assert "drift from the baseline (1 finding):" in outcome.output
    assert (
        " record-count-change  records: 1,333 tonight, 2,000 in the baseline (-33.4%; the threshold is 20%)"
        in outcome.output
    )
    outcome = CliRunner().invoke(app, ["scan", str(path), "--drift-threshold", "records=0.2"])
    assert outcome.exit_code == 2 and "give --baseline" in outcome.output


def test_twenty_bootstrap_resamples_raise_nothing(tmp_path):
    """Resamples (with replacement) of the same 1,000 rows, each scanned against the original:
    no drift at the default thresholds (~0.7 s: kept among the quick tests)."""
    data, labels = rows(1_000, seed=1)
    _, manifest = night(tmp_path, "original", hdf5(tmp_path / "original.h5", data, labels))
    rng = np.random.default_rng(7)
    for number in range(20):
        picked = rng.integers(0, len(data), len(data))
        path = hdf5(tmp_path / f"resample{number}.h5", data[picked], labels[picked])
        result, _ = night(tmp_path, f"resample{number}", path, manifest)
        assert result.summary.drift == [], (number, result.summary.drift)


def token_lines(path: Path, sequences: list[list[int]]) -> Path:
    with path.open("w") as file:
        for ids in sequences:
            file.write(json.dumps({"input_ids": ids}) + "\n")
    return path


@pytest.mark.slow
def test_twenty_bootstrap_resamples_of_token_data_raise_nothing(tmp_path):
    rng = np.random.default_rng(3)
    weights = 1.0 / np.arange(1, 2_001) ** 1.1
    weights /= weights.sum()
    sequences = [
        rng.choice(2_000, size=int(length), p=weights).tolist()
        for length in np.maximum(1, rng.lognormal(4, 0.5, 1_000)).astype(int)
    ]
    _, manifest = night(tmp_path, "original", token_lines(tmp_path / "original.jsonl", sequences))
    for number in range(20):
        picked = rng.integers(0, len(sequences), len(sequences))
        path = token_lines(tmp_path / f"resample{number}.jsonl", [sequences[i] for i in picked])
        result, _ = night(tmp_path, f"resample{number}", path, manifest)
        assert result.summary.drift == [], (number, result.summary.drift)


@pytest.mark.slow
def test_twenty_bootstrap_resamples_of_an_image_folder_raise_nothing(tmp_path):
    """1,000 small PNGs of mixed sizes, modes and brightness; each resample is a folder of links
    to the drawn files (a file drawn twice, twice)."""
    rng = np.random.default_rng(5)
    source = tmp_path / "images"
    files = []
    for index in range(1_000):
        size = int(rng.integers(12, 40))
        mode = "L" if rng.random() < 0.1 else "RGB"
        files.append(write(source / f"{index}.png", image_bytes(index, mode=mode, fmt="PNG", size=size)))
    _, manifest = night(tmp_path, "original", source)
    for number in range(20):
        folder = tmp_path / f"resample{number}"
        folder.mkdir()
        for slot, picked in enumerate(rng.integers(0, len(files), len(files))):
            (folder / f"{slot}.png").hardlink_to(files[picked])
        result, _ = night(tmp_path, f"resample{number}", folder, manifest)
        assert result.summary.drift == [], (number, result.summary.drift)


def test_a_drift_is_always_new_and_never_carried_as_resolved(tmp_path, first_night):
    """A drift is measured against the baseline: tonight's is new whatever the baseline's manifest
    held, and the baseline's own drift (from the night before it) is not resolved tonight."""
    data, labels, manifest = first_night
    path = hdf5(tmp_path / "tuesday.h5", data.astype(np.float64), labels)
    tuesday, tuesday_manifest = night(tmp_path, "tuesday", path, manifest)
    assert tuesday.summary.baseline["new"] == 1 and tuesday.exit_code("new") == 1  # dtype-change: an error
    wednesday, wednesday_manifest = night(tmp_path, "wednesday", path, tuesday_manifest)
    assert wednesday.summary.drift == [] and wednesday.summary.baseline["resolved"] == 0
    assert manifest_lines(wednesday_manifest) == []
    thursday, thursday_manifest = night(tmp_path, "thursday", path, manifest)  # Monday's again
    assert [(line["check"], line["status"]) for line in manifest_lines(thursday_manifest)] == [
        ("dtype-change", "new")
    ]


def test_parquet_vectors_and_labels(tmp_path):
    """A Parquet table of embeddings and class labels: a class share moved 30% and an element
    position's mean moved by 2 sd are each found, with the feature named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(path: Path, data: np.ndarray, labels: np.ndarray) -> Path:
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(data.ravel()), data.shape[1])
        pq.write_table(pa.table({"emb": vectors, "label": pa.array(labels)}), path)
        return path

    data, labels = rows()
    _, manifest = night(tmp_path, "monday", table(tmp_path / "monday.parquet", data, labels))
    moved = data.copy()
    moved[:, 5] += 2 * moved[:, 5].std()
    moved_labels = labels.copy()
    zeros = np.flatnonzero(labels == 0)
    moved_labels[zeros[: int(len(zeros) * 0.3)]] = 1  # class 0's share 40% -> 28%
    result, _ = night(tmp_path, "tuesday", table(tmp_path / "tuesday.parquet", moved, moved_labels), manifest)
    assert {("value-drift", "arrays.8.features.5"), ("label-drift", "labels.classes")} <= drifted(result)


def test_lmdb_arrays_of_another_dtype(tmp_path):
    import io

    import lmdb

    def environment(path: Path, arrays: np.ndarray) -> Path:
        with lmdb.open(str(path), map_size=64 << 20) as opened, opened.begin(write=True) as transaction:
            for number, array in enumerate(arrays):
                buffer = io.BytesIO()
                np.save(buffer, array)
                transaction.put(f"{number:06d}".encode(), buffer.getvalue())
        return path

    data, _ = rows(500)
    _, manifest = night(tmp_path, "monday", environment(tmp_path / "monday.lmdb", data))
    result, _ = night(
        tmp_path, "tuesday", environment(tmp_path / "tuesday.lmdb", data.astype(np.float64)), manifest
    )
    assert drifted(result) == {("dtype-change", "arrays.8.dtypes")}


def test_resamples_of_rows_whose_elements_move_together_raise_nothing(tmp_path):
    """Every element of a row pooled (`arrays.N.row`) moves with its row when the records are
    resampled: 200 rows of 64 values, each row at its own level, are a sample of 200, not of
    12,800 (measured: counted as 12,800, one resample in twenty drifted)."""
    rng = np.random.default_rng(11)
    data = (rng.normal(0, 3, size=(200, 1)) + rng.normal(0, 0.3, size=(200, 64))).astype(np.float32)
    _, manifest = night(tmp_path, "original", hdf5(tmp_path / "original.h5", data))
    for number in range(20):
        path = hdf5(tmp_path / f"resample{number}.h5", data[rng.integers(0, len(data), len(data))])
        result, _ = night(tmp_path, f"resample{number}", path, manifest)
        assert result.summary.drift == [], (number, result.summary.drift)


def test_an_image_class_removed_and_a_third_of_the_images_gone(tmp_path):
    def folder(root: Path, classes: tuple[str, ...]) -> Path:
        for name in classes:
            for index in range(30):
                write(root / name / f"{index}.png", image_bytes(index, fmt="PNG", size=16))
        return root

    _, manifest = night(tmp_path, "monday", folder(tmp_path / "monday", ("cat", "dog", "fox")))
    result, _ = night(tmp_path, "tuesday", folder(tmp_path / "tuesday", ("cat", "dog")), manifest)
    assert drifted(result) == {("record-count-change", "records"), ("label-drift", "labels.classes")}
    (classes,) = [f for f in result.summary.drift if f["feature"] == "labels.classes"]
    assert "class 2's share is 0.0% tonight, 33.3% in the baseline" in classes["message"]  # fox


def test_with_the_cache_only_exact_counts_are_compared(tmp_path):
    """A nightly job with --cache reads only what changed: the records reused are counted in the
    profile (records, classes, modes) but sketched in nothing, so numbers are not compared (a note
    says so) while a class folder removed is still found."""
    for name in ("cat", "dog", "fox"):
        for index in range(30):
            write(tmp_path / "data" / name / f"{index}.png", image_bytes(index, fmt="PNG", size=16))
    cache = tmp_path / "cache"
    _, manifest = night(tmp_path, "monday", tmp_path / "data", cache=cache)
    same, _ = night(tmp_path, "tuesday", tmp_path / "data", manifest, cache=cache)
    assert same.summary.cache["reused"] == 90 and same.summary.drift == []
    assert any("90 of tonight's records were reused from --cache" in note for note in same.summary.notes)
    for path in (tmp_path / "data" / "fox").iterdir():
        path.unlink()
    removed, _ = night(tmp_path, "wednesday", tmp_path / "data", manifest, cache=cache)
    assert drifted(removed) == {("record-count-change", "records"), ("label-drift", "labels.classes")}


def test_the_check_table_lists_the_drift_checks_that_compared_something(tmp_path, first_night):
    """HDF5 rows hold no image sizes or token lengths: size-, length- and token-drift are not
    listed as having run (a 0 there would read as "compared, none found"); one the user selected
    by name is said."""
    data, labels, manifest = first_night
    result, _ = night(tmp_path, "tuesday", hdf5(tmp_path / "tuesday.h5", data, labels), manifest)
    listed = set(result.summary.checks) & set(NOT_RECORDS)
    assert listed == {"record-count-change", "label-drift", "value-drift", "dtype-change"}
    assert listed == set(result.summary.issues_by_check) & set(NOT_RECORDS)
    picked, _ = night(
        tmp_path, "wednesday", tmp_path / "tuesday.h5", manifest, select=["size-drift", "value-drift"]
    )
    assert set(picked.summary.checks) & set(NOT_RECORDS) == {"value-drift"}
    assert any("size-drift: compared nothing" in note for note in picked.summary.notes)
    images = tmp_path / "images"
    for index in range(12):
        write(images / f"c{index % 2}" / f"{index}.png", image_bytes(index, fmt="PNG", size=24))
    _, monday = night(tmp_path, "images-monday", images)
    tonight, _ = night(tmp_path, "images-tuesday", images, monday)
    assert set(tonight.summary.checks) & set(NOT_RECORDS) == {
        "record-count-change",
        "label-drift",
        "value-drift",
        "size-drift",
    }


def test_a_table_column_that_moved_is_named_by_its_column(tmp_path):
    """A Parquet table of scalar columns: the profile keeps the columns' names beside their
    positions, and a drift of one says which column it is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(path: Path, data: np.ndarray) -> Path:
        pq.write_table(pa.table({f"col_{i}": data[:, i] for i in range(data.shape[1])}), path)
        return path

    data, _ = rows()
    first, manifest = night(tmp_path, "monday", table(tmp_path / "monday.parquet", data))
    group = first.summary.profile["arrays"][str(FEATURES)]
    assert group["names"] == {str(i): f"col_{i}" for i in range(FEATURES)}
    moved = data.copy()
    moved[:, 3] += 2 * moved[:, 3].std()
    result, _ = night(tmp_path, "tuesday", table(tmp_path / "tuesday.parquet", moved), manifest)
    (found,) = [f for f in result.summary.drift if f["feature"] == "arrays.8.features.3"]
    assert found["message"].startswith("arrays.8.features.3 (column col_3): ")
    details = manifest_lines(tmp_path / "tuesday.scrub.jsonl")
    assert any(line.get("details", {}).get("column") == "col_3" for line in details)
