"""Parquet (Hugging Face's layout): files written by pyarrow, scanned and fixed; pyarrow reads
what fix wrote with the same schema, metadata, codec and rows; a ClassLabel's names declare the
class range; numeric list, fixed-size list and scalar-column tables; --data-key/--label-key."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import image_bytes, one_line_error

import scrub

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def huggingface(**features) -> dict[str, str]:
    return {"huggingface": json.dumps({"info": {"features": features}})}


def image_table(rows: int = 12, start: int = 0):
    """An image classification split as ``datasets`` writes it: Image struct + ClassLabel."""
    images = [{"bytes": image_bytes(start + i), "path": f"{start + i:04d}.jpg"} for i in range(rows)]
    labels = [(start + i) % 3 for i in range(rows)]
    if start == 0:
        images[2]["bytes"] = images[2]["bytes"][:100]  # corrupt-image
        labels[4] = 7  # label-out-of-range: the ClassLabel has 3 names
        labels[5] = -1  # Hugging Face's "no label": out of range for cross-entropy
        images[6]["bytes"] = image_bytes(6, fmt="PNG")  # format-mismatch: its path says .jpg
    table = pa.table({"image": pa.array(images, IMAGE), "label": pa.array(labels, pa.int64())})
    features = huggingface(
        image={"_type": "Image"}, label={"_type": "ClassLabel", "names": ["cat", "dog", "bird"]}
    )
    return table.replace_schema_metadata(features)


def test_a_huggingface_image_folder_is_scanned_and_fixed(tmp_path):
    source = tmp_path / "beans"
    (source / "data").mkdir(parents=True)
    pq.write_table(image_table(), source / "data" / "train-00000-of-00002.parquet", row_group_size=5)
    pq.write_table(
        image_table(8, start=100), source / "data" / "train-00001-of-00002.parquet", row_group_size=3
    )
    (source / "README.md").write_text("---\nlicense: mit\n---\n")
    result = scrub.scan(source, scheduler="sync")
    found = {(issue.source, issue.key, issue.index, issue.check) for issue in result.issues()}
    first = "data/train-00000-of-00002.parquet"
    assert found == {  # named by the Image struct's path; the index is the row
        (first, "0002.jpg", 2, "corrupt-image"),
        (first, "0004.jpg", 4, "label-out-of-range"),
        (first, "0005.jpg", 5, "label-out-of-range"),
        (first, "0006.jpg", 6, "format-mismatch"),
    }
    assert result.summary.records == 20 and result.summary.dataset.classes == ["cat", "dog", "bird"]
    fixed = scrub.fix(source, quarantine=True, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 17 and fixed.report["quarantined"] == 3
    kept = pq.read_table(fixed.clean / first)
    original = pq.read_table(source / first)
    assert kept.schema.equals(original.schema, check_metadata=True)  # features kept
    expected = original.filter(pa.array([i not in (2, 4, 5) for i in range(12)]))
    assert kept.equals(expected)
    held = pq.read_table(fixed.quarantine / "beans" / first)
    assert held.column("label").to_pylist() == [2, 7, -1]
    assert (fixed.clean / "README.md").read_text() == (source / "README.md").read_text()
    assert pq.ParquetFile(fixed.clean / first).metadata.num_row_groups == 3  # one per source group
    assert scrub.scan(fixed.clean, scheduler="sync").summary.records_with_errors == 0


def test_numeric_list_columns_and_tables(tmp_path):
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(10, 4)).astype(np.float32)
    embeddings[1, 2] = np.nan
    embeddings[3] = 0.0
    embeddings[5, 0] = 3e38  # its square overflows float32
    fixed_list = pa.FixedSizeListArray.from_arrays(pa.array(embeddings.ravel()), 4)
    table = pa.table(
        {"id": [f"r{i}" for i in range(10)], "emb": fixed_list, "label": pa.array([1] * 9 + [None])}
    )
    pq.write_table(table, tmp_path / "emb.parquet", compression="zstd", row_group_size=4)
    result = scrub.scan(tmp_path / "emb.parquet", scheduler="sync")
    found = {(issue.key, issue.check) for issue in result.issues()}
    assert {
        ("1", "nonfinite-data"),
        ("3", "zero-norm"),
        ("5", "square-overflow"),
        ("9", "nonfinite-label"),
    } <= found
    assert any("columns not checked: id" in note for note in result.summary.notes)
    fixed = scrub.fix(tmp_path / "emb.parquet", quarantine=True, scheduler="sync")
    assert fixed.verified
    assert pq.ParquetFile(fixed.clean).metadata.row_group(0).column(0).compression == "ZSTD"
    assert pq.read_table(fixed.clean).column("id").to_pylist() == [f"r{i}" for i in (0, 2, 3, 4, 6, 7, 8)]

    ragged = pa.array(
        [[1.0, 2.0], [float("nan")], [], None, [1e39, 3.0], [4.0, 5.0, 6.0]], pa.list_(pa.float64())
    )
    pq.write_table(pa.table({"x": ragged, "y": [0, 1, 2, 1, 0, 1]}), tmp_path / "ragged.parquet")
    result = scrub.scan(tmp_path / "ragged.parquet", num_classes=2, scheduler="sync")
    assert {(issue.key, issue.check) for issue in result.issues()} == {
        ("1", "nonfinite-data"),
        ("2", "empty-record"),
        ("2", "label-out-of-range"),
        ("3", "empty-record"),  # a null row
        ("4", "float32-overflow"),
        ("4", "fp16-overflow"),
        ("4", "magnitude-outlier"),
    }

    features = pa.table({"a": [1.0, 2.0, None, 4.0], "b": [5, 6, 7, 70000], "note": ["w", "x", "y", "z"]})
    pq.write_table(features, tmp_path / "features.parquet")
    result = scrub.scan(tmp_path / "features.parquet", scheduler="sync")
    assert {(issue.key, issue.check) for issue in result.issues()} == {
        ("2", "nonfinite-data"),  # a null feature: NaN once pandas reads it
        ("3", "fp16-overflow"),
        ("3", "magnitude-outlier"),
    }
    assert scrub.fix(tmp_path / "features.parquet", quarantine=True, scheduler="sync").verified


def test_columns_named_by_the_options(tmp_path):
    table = pa.table(
        {
            "pixels": pa.array([{"bytes": image_bytes(i), "path": None} for i in range(4)], IMAGE),
            "thumbnail": pa.array([image_bytes(i, size=12) for i in range(3)] + [b"not an image"]),
            "fine": [0, 1, 99, 2],
        }
    )
    path = tmp_path / "two.parquet"
    pq.write_table(table, path)
    result = scrub.scan(path, data_key="thumbnail", label_key="fine", num_classes=10, scheduler="sync")
    assert {(issue.key, issue.check) for issue in result.issues()} == {
        ("2", "label-out-of-range"),
        ("3", "corrupt-image"),
    }
    for option, value, said in (
        ("--data-key", "depth", "has no such column"),
        ("--label-key", "pixels", "not numeric labels"),
    ):
        assert said in one_line_error("scan", path, option, value)


def test_an_unreadable_file_is_one_line(tmp_path):
    path = tmp_path / "broken.parquet"
    pq.write_table(pa.table({"x": [1.0, 2.0]}), path)
    path.write_bytes(path.read_bytes()[:-20])  # the footer cut off
    assert "not a readable Parquet file" in one_line_error("scan", path)


def test_huggingface_datasets_loads_the_cleaned_copy(tmp_path):
    datasets = pytest.importorskip("datasets")
    source = tmp_path / "split.parquet"
    pq.write_table(image_table(), source)
    fixed = scrub.fix(source, scheduler="sync")
    loaded = datasets.load_dataset("parquet", data_files=str(fixed.clean), split="train")
    assert len(loaded) == 9 and loaded.features["label"].names == ["cat", "dog", "bird"]
    assert loaded[0]["image"].size == (48, 48)  # decoded by datasets' own Image feature


def test_without_pyarrow_the_error_names_the_extra(tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"x": [1.0]}), path)
    blocked = (
        "import sys; sys.modules['pyarrow'] = None; sys.modules['pyarrow.parquet'] = None; "
        f"sys.argv = ['scrub', 'scan', {str(path)!r}]; from scrub.__main__ import main; main()"
    )
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True)
    assert done.returncode == 2 and "pip install 'scrub[parquet]'" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("form", ["file", "stream"])
def test_arrow_ipc_files_are_read_by_record_batch_and_written_alike(tmp_path, form):
    rng = np.random.default_rng(2)
    values = rng.normal(size=(30, 4)).astype(np.float32)
    values[7, 1] = np.inf
    table = pa.table(
        {"x": pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 4), "label": np.arange(30) % 3}
    ).replace_schema_metadata({"source": "test"})
    path = tmp_path / "rows.arrow"
    new = pa.ipc.new_file if form == "file" else pa.ipc.new_stream
    with new(str(path), table.schema) as writer:
        writer.write_table(table, max_chunksize=8)  # record batches of 8 rows
    result = scrub.scan(path, num_classes=3, scheduler="sync")
    assert result.summary.dataset.format == "arrow"
    assert {(issue.key, issue.check) for issue in result.issues()} == {("7", "nonfinite-data")}
    assert result.summary.dataset.files["rows.arrow"]["ipc"] == form
    fixed = scrub.fix(path, quarantine=True, num_classes=3, scheduler="sync")
    assert fixed.verified
    opened = pa.ipc.open_file(str(fixed.clean)) if form == "file" else pa.ipc.open_stream(str(fixed.clean))
    kept = opened.read_all()
    assert kept.schema.equals(table.schema, check_metadata=True)
    assert kept.equals(table.filter(pa.array([i != 7 for i in range(30)])))


def test_huggingface_save_to_disk_round_trips(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"])}
    )
    images = [{"bytes": image_bytes(i), "path": f"{i}.jpg"} for i in range(10)]
    images[3]["bytes"] = images[3]["bytes"][:100]
    labels = [i % 3 for i in range(10)]
    source = tmp_path / "beans"
    datasets.Dataset.from_dict({"image": images, "label": labels}, features=features).save_to_disk(
        str(source)
    )
    result = scrub.scan(source, scheduler="sync")
    assert {(issue.key, issue.index, issue.check) for issue in result.issues()} == {
        (
            "3.jpg",
            3,
            "corrupt-image",
        )
    }
    fixed = scrub.fix(source, scheduler="sync")
    loaded = datasets.load_from_disk(str(fixed.clean))
    assert len(loaded) == 9 and loaded.features["label"].names == ["a", "b", "c"]
    assert loaded[3]["image"].size == (48, 48)  # the row after the set-aside one


def test_dataset_checks_name_image_rows_by_their_path(tmp_path):
    """`duplicate` finds its records by position after the scan (`locate`): they are named by the
    Image struct's path, as the record checks name them."""
    table = image_table(6, start=100)  # no planted problem
    images = table.column("image").to_pylist()
    images[5] = {"bytes": images[1]["bytes"], "path": "copy_of_0101.jpg"}
    table = table.set_column(0, "image", pa.array(images, IMAGE))
    pq.write_table(table, tmp_path / "train.parquet", row_group_size=2)
    result = scrub.scan(tmp_path / "train.parquet", scheduler="sync", select=["duplicate"])
    (duplicate,) = list(result.issues())
    assert (duplicate.key, duplicate.index) == ("copy_of_0101.jpg", 5)
    assert "0101.jpg" in duplicate.message


def _walk_for(folder, suffix):
    """The sniff's walk for one suffix alone, by `os.walk` (names sorted, a folder's files before
    its sub-folders, symlinked folders not entered): the oracle."""
    import os
    from pathlib import Path

    for directory, folders, files in os.walk(folder):
        folders[:] = sorted(n for n in folders if not n.startswith(".") and not n.endswith(suffix))
        for name in sorted(files):
            if not name.startswith(".") and name.endswith(suffix):
                return Path(directory) / name
    return None


@pytest.mark.parametrize("layout", range(6))
def test_the_table_sniffs_shared_walk_finds_what_each_walk_found(tmp_path, layout):
    """The Parquet and Arrow sniffs of one opening walk the tree once between them; each still
    finds the file its own walk found: below folders named like tables (Spark's ``x.parquet/``),
    hidden ones, symlinked ones, and whichever sniff asks first."""
    import random

    from scrub.readers import base
    from scrub.readers.parquet import first_table_file

    rng = random.Random(layout)
    root = tmp_path / "data"
    for name in ("b.parquet/y.parquet", "b.parquet/z.arrow", "c.arrow/v.parquet", ".hidden/h.arrow"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    folders = [root]
    names = ["a", "b.parquet", "c.arrow", ".hidden", "d"]
    for _ in range(12):
        folder = rng.choice(folders) / rng.choice(names)
        if folder.exists():
            continue
        if rng.random() < 0.4:
            folder.mkdir(parents=True)
            folders.append(folder)
        else:
            folder.parent.mkdir(parents=True, exist_ok=True)
            folder.write_bytes(b"x")
    if layout % 2:
        (root / "linked.parquet").mkdir(parents=True, exist_ok=True)
        (root / "linked.parquet" / "in.arrow").write_bytes(b"x")
        (root / "link").symlink_to(root / "linked.parquet")
    expected = {suffix: _walk_for(root, suffix) for suffix in (".parquet", ".arrow")}
    for order in ((".parquet", ".arrow"), (".arrow", ".parquet")):
        token = base._SHARED_SNIFFS.set({})
        try:
            assert {suffix: first_table_file(root, suffix) for suffix in order} == expected
        finally:
            base._SHARED_SNIFFS.reset(token)
        assert {suffix: first_table_file(root, suffix) for suffix in order} == expected
