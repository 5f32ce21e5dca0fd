"""One unreadable file of a dataset of several files (a folder or list of HDF5 files, a folder of
Parquet files, WebDataset shards, TFRecord files, a folder of token files) is a finding of its
own naming the file; the other files are scanned, and `fix` sets that file aside (byte for byte
in the quarantine) while the cleaned copy, read back by the format's own library, holds the
others. When no file can be read the dataset is unusable: one line, exit 2.

Every file is written by the format's own library (h5py, pyarrow, tarfile, the ``tfrecord``
package, NumPy) and everything runs through the command line."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import manifest_lines, one_line_error
from typer.testing import CliRunner

from scrub.cli import app

runner = CliRunner()


def run(*arguments: object):
    return runner.invoke(app, [str(argument) for argument in arguments])


def write_h5(path: Path, nan_row: int | None = None, data_key: str = "data") -> np.ndarray:
    """A file of 20 rows of 4 floats with class labels; ``nan_row``: a NaN in that row."""
    seed = int.from_bytes(path.name.encode(), "little")  # files of other names hold other rows
    data = np.random.default_rng(seed).normal(size=(20, 4)).astype(np.float32)
    if nan_row is not None:
        data[nan_row, 1] = np.nan
    with h5py.File(path, "w") as file:
        file[data_key] = data
        file["label"] = np.arange(20) % 3
    return data


def without_data(path: Path) -> None:
    write_h5(path, data_key="features")  # the others' `data` is named otherwise here


def not_hdf5(path: Path) -> None:
    path.write_bytes(b"this is not an HDF5 file\n" * 40)


def truncated_hdf5(path: Path) -> None:
    write_h5(path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])


def garbage(path: Path) -> None:
    path.write_bytes(np.random.default_rng(7).bytes(3000))


def unreadable_lines(manifest: Path) -> list[dict]:
    return [line for line in manifest_lines(manifest) if line["key"] == "*"]


@pytest.mark.parametrize(
    "damage, reason",
    [
        (without_data, "no dataset 'data' (datasets: features, label)"),
        (not_hdf5, "not a readable HDF5 file"),
        (truncated_hdf5, "not a readable HDF5 file"),
    ],
)
def test_an_unreadable_hdf5_file_of_a_folder_is_a_finding_and_fix_sets_it_aside(tmp_path, damage, reason):
    folder = tmp_path / "shards"
    folder.mkdir()
    a = write_h5(folder / "a.h5", nan_row=3)
    b = write_h5(folder / "b.h5")
    damage(folder / "named.h5")
    manifest = tmp_path / "m.jsonl"
    scanned = run("scan", folder, "--manifest", manifest, "--scheduler", "sync")
    assert scanned.exit_code == 1, scanned.output
    assert "40 records scanned" in scanned.output  # the two readable files, every row
    lines = manifest_lines(manifest)
    assert {(line["source"], line["key"], line["check"]) for line in lines} == {
        ("named.h5", "*", "unreadable-file"),
        ("a.h5", "3", "nonfinite-data"),
    }
    assert reason in next(line["message"] for line in lines if line["check"] == "unreadable-file")

    fixed = run("fix", folder, "--manifest", manifest, "--quarantine")
    assert fixed.exit_code == 0, fixed.output
    clean, quarantine = tmp_path / "shards.clean", tmp_path / "shards.quarantine" / "shards"
    assert sorted(path.name for path in clean.iterdir()) == ["a.h5", "b.h5"]
    with h5py.File(clean / "a.h5") as file:
        assert np.array_equal(file["data"][:], np.delete(a, 3, axis=0))
    with h5py.File(clean / "b.h5") as file:
        assert np.array_equal(file["data"][:], b) and len(file["label"]) == 20
    assert (quarantine / "named.h5").read_bytes() == (folder / "named.h5").read_bytes()
    rescanned = run("scan", clean, "--manifest", tmp_path / "again.jsonl")
    assert rescanned.exit_code == 0, rescanned.output


def test_an_unreadable_file_of_an_hdf5_list_leaves_the_cleaned_list(tmp_path):
    """Caffe's HDF5Data source list: the cleaned list no longer names the file set aside."""
    write_h5(tmp_path / "a.h5")
    not_hdf5(tmp_path / "broken.h5")
    write_h5(tmp_path / "b.h5")
    listing = tmp_path / "train_list.txt"
    listing.write_text("a.h5\nbroken.h5\nb.h5\n")
    manifest = tmp_path / "m.jsonl"
    scanned = run("scan", listing, "--manifest", manifest)
    assert scanned.exit_code == 1, scanned.output
    assert [(line["source"], line["check"]) for line in manifest_lines(manifest)] == [
        ("broken.h5", "unreadable-file")
    ]
    out = tmp_path / "out"
    fixed = run("fix", listing, "--manifest", manifest, "--out", out, "--quarantine")
    assert fixed.exit_code == 0, fixed.output
    assert (out / "train_list.txt").read_text().split() == ["a.h5", "b.h5"]
    for name in ("a.h5", "b.h5"):
        with h5py.File(out / name) as file:
            assert file["data"].shape == (20, 4)
    assert not (out / "broken.h5").exists()


def write_parquet(path: Path, rows: int = 10, nan_row: int | None = None) -> None:
    """Rows (x, 2x) from x = 1 (no all-zero row: `zero-norm`); a file whose name starts with c
    from x = 1, others from a start of their own (no row of one file repeats another's)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    start = 1 if path.name.startswith("c") else 100 * ord(path.name[0])
    values = np.arange(start, start + rows, dtype=np.float64)
    if nan_row is not None:
        values[nan_row] = np.nan
    pq.write_table(pa.table({"x": values, "y": values * 2, "label": np.arange(rows) % 3}), path)


def test_a_parquet_file_pyarrow_cannot_open_is_a_finding_and_fix_sets_it_aside(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    folder = tmp_path / "table"
    folder.mkdir()
    garbage(folder / "a-broken.parquet")  # listed first: the folder is still taken as Parquet
    write_parquet(folder / "b.parquet", nan_row=4)
    write_parquet(folder / "c.parquet")
    whole = (folder / "b.parquet").read_bytes()
    (folder / "d-cut.parquet").write_bytes(whole[: len(whole) - 20])  # its footer cut off
    manifest = tmp_path / "m.jsonl"
    scanned = run("scan", folder, "--manifest", manifest, "--scheduler", "sync")
    assert scanned.exit_code == 1, scanned.output
    assert "20 records scanned" in scanned.output
    lines = manifest_lines(manifest)
    assert {(line["source"], line["key"], line["check"]) for line in lines} == {
        ("a-broken.parquet", "*", "unreadable-file"),
        ("d-cut.parquet", "*", "unreadable-file"),
        ("b.parquet", "4", "nonfinite-data"),
    }
    assert all("not a readable Parquet file" in line["message"] for line in unreadable_lines(manifest))

    fixed = run("fix", folder, "--manifest", manifest, "--quarantine")
    assert fixed.exit_code == 0, fixed.output
    clean, quarantine = tmp_path / "table.clean", tmp_path / "table.quarantine" / "table"
    assert sorted(path.name for path in clean.iterdir()) == ["b.parquet", "c.parquet"]
    assert pq.read_table(clean / "b.parquet").num_rows == 9
    assert pq.read_table(clean / "c.parquet").column("x").to_pylist() == list(np.arange(1.0, 11.0))
    for name in ("a-broken.parquet", "d-cut.parquet"):
        assert (quarantine / name).read_bytes() == (folder / name).read_bytes()


def shard(path: Path, count: int = 4, nan_sample: int | None = None) -> None:
    """A WebDataset shard of ``.npy`` + ``.cls`` samples, written with tarfile."""
    with tarfile.open(path, "w") as tar:
        for number in range(count):
            shard_number = int(path.stem.rsplit("-", 1)[-1])  # other shards, other values: no duplicate
            values = np.arange(4, dtype=np.float32) + number + 1.0 + 10 * shard_number  # not constant-row
            if number == nan_sample:
                values[0] = np.nan
            buffer = io.BytesIO()
            np.save(buffer, values)
            for suffix, data in ((".npy", buffer.getvalue()), (".cls", str(number % 3).encode())):
                member = tarfile.TarInfo(f"{path.stem}-{number:03d}{suffix}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))


def test_a_shard_that_is_not_a_tar_is_damaged_shard_even_listed_first(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    garbage(folder / "train-000000.tar")
    shard(folder / "train-000001.tar", nan_sample=2)
    shard(folder / "train-000002.tar")
    manifest = tmp_path / "m.jsonl"
    scanned = run("scan", folder, "--manifest", manifest, "--scheduler", "sync")
    assert scanned.exit_code == 1, scanned.output
    assert "8 records scanned" in scanned.output
    assert {(line["source"], line["key"], line["check"]) for line in manifest_lines(manifest)} == {
        ("train-000000.tar", "*", "damaged-shard"),
        ("train-000001.tar", "train-000001-002", "nonfinite-data"),
    }
    fixed = run("fix", folder, "--manifest", manifest, "--quarantine")
    assert fixed.exit_code == 0, fixed.output
    clean, quarantine = tmp_path / "shards.clean", tmp_path / "shards.quarantine" / "shards"
    assert sorted(path.name for path in clean.iterdir()) == ["train-000001.tar", "train-000002.tar"]
    with tarfile.open(clean / "train-000001.tar") as tar:
        assert len(tar.getnames()) == 6  # 3 samples of 2 members
    with tarfile.open(clean / "train-000002.tar") as tar:
        assert len(tar.getnames()) == 8
    assert (quarantine / "train-000000.tar").read_bytes() == (folder / "train-000000.tar").read_bytes()


def test_a_file_that_is_not_tfrecord_is_a_finding_and_its_bytes_go_to_the_quarantine(tmp_path):
    pytest.importorskip("tfrecord")
    from tfrecord.reader import tfrecord_loader
    from tfrecord.writer import TFRecordWriter

    folder = tmp_path / "records"
    folder.mkdir()
    for name in ("a.tfrecord", "c.tfrecord"):
        writer = TFRecordWriter(str(folder / name))
        for number in range(5):
            writer.write(
                {
                    "features": (np.arange(3, dtype=np.float32) + number + 1.0 + 10 * ord(name[0]), "float"),
                    "label": (number % 2, "int"),
                }
            )
        writer.close()
    garbage(folder / "b.tfrecord")
    manifest = tmp_path / "m.jsonl"
    scanned = run("scan", folder, "--manifest", manifest, "--scheduler", "sync")
    assert scanned.exit_code == 1, scanned.output
    lines = manifest_lines(manifest)
    assert {(line["source"], line["key"], line["check"]) for line in lines} == {
        ("b.tfrecord", "0", "record-crc-mismatch")
    }
    fixed = run("fix", folder, "--manifest", manifest, "--quarantine")
    assert fixed.exit_code == 0, fixed.output
    clean, quarantine = tmp_path / "records.clean", tmp_path / "records.quarantine" / "records"
    for name in ("a.tfrecord", "c.tfrecord"):
        labels = [int(r["label"][0]) for r in tfrecord_loader(str(clean / name), None)]
        assert labels == [0, 1, 0, 1, 0]
    assert list(tfrecord_loader(str(clean / "b.tfrecord"), None)) == []  # an empty file: no record
    assert (quarantine / "b.tfrecord").read_bytes() == (folder / "b.tfrecord").read_bytes()


def test_an_unreadable_token_file_of_a_folder_is_an_unreadable_dataset(tmp_path):
    """A folder of token files is a folder of datasets: a shard whose llm.c header disagrees with
    its size is `unreadable-dataset`, the others are scanned, and `fix` writes them and then
    names it (exit 2), as for every folder of datasets."""
    folder = tmp_path / "nano"
    folder.mkdir()
    ids = np.random.default_rng(0).integers(0, 1000, 640).astype(np.uint16)
    ids.tofile(folder / "train.bin")
    header = np.zeros(256, "<i4")
    header[:3] = (20240520, 1, 640)
    (folder / "val.bin").write_bytes(header.tobytes() + ids[:300].tobytes())  # cut short
    manifest = tmp_path / "m.jsonl"
    scanned = run("scan", folder, "--max-length", "64", "--vocab-size", "1000", "--manifest", manifest)
    assert scanned.exit_code == 1, scanned.output
    [line] = manifest_lines(manifest)
    assert line["check"] == "unreadable-dataset" and line["dataset"].endswith("val.bin")
    assert "llm.c's loader refuses it" in line["message"]
    fixed = run("fix", folder, "--max-length", "64", "--vocab-size", "1000", "--out", tmp_path / "out")
    assert fixed.exit_code == 2, fixed.output
    assert "val.bin" in fixed.output
    assert np.array_equal(np.fromfile(tmp_path / "out" / "train.clean.bin", dtype=np.uint16), ids)


@pytest.mark.slow  # three processes: out of the quick subset
@pytest.mark.parametrize(
    "names, make, message",
    [
        (("a.h5", "b.h5"), not_hdf5, "none of its 2 HDF5 files can be read (a.h5: not a readable HDF5 file"),
        (
            ("x.h5", "y.h5", "z.h5"),
            without_data,
            "none of its 3 HDF5 files can be read (x.h5: no dataset 'data'",
        ),
        (("a.parquet", "b.parquet"), garbage, ""),
    ],
)
def test_when_no_file_can_be_read_the_dataset_is_one_line_and_exit_2(tmp_path, names, make, message):
    folder = tmp_path / "data"
    folder.mkdir()
    for name in names:
        make(folder / name)
    said = one_line_error("scan", folder, "--manifest", tmp_path / "m.jsonl")
    assert message in said
    assert not os.path.exists(tmp_path / "m.jsonl") or not manifest_lines(tmp_path / "m.jsonl")


def test_ignoring_unreadable_file_leaves_a_note_and_fix_still_sets_the_file_aside(tmp_path):
    """``--ignore unreadable-file`` keeps the finding out of the manifest, never out of sight:
    the file's rows were not scanned (a note), and `fix`, which cannot copy rows it never read,
    leaves it out of the cleaned copy and says so."""
    folder = tmp_path / "shards"
    folder.mkdir()
    write_h5(folder / "a.h5")
    not_hdf5(folder / "broken.h5")
    scanned = run("scan", folder, "--ignore", "unreadable-file", "--manifest", tmp_path / "m.jsonl")
    assert scanned.exit_code == 0, scanned.output
    assert "not scanned: broken.h5 cannot be read (not a readable HDF5 file" in scanned.output
    fixed = run("fix", folder, "--ignore", "unreadable-file", "--quarantine")
    assert fixed.exit_code == 0, fixed.output
    assert "broken.h5" in fixed.output
    assert sorted(path.name for path in (tmp_path / "shards.clean").iterdir()) == ["a.h5"]
    quarantined = tmp_path / "shards.quarantine" / "shards" / "broken.h5"
    assert quarantined.read_bytes() == (folder / "broken.h5").read_bytes()
