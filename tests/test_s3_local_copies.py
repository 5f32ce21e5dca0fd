"""Formats whose libraries open local files only (HDF5, LMDB, LevelDB, MDS, NumPy, Megatron,
flat token files), in a bucket of a real S3 server on loopback (moto's): read from a local copy
that the run makes, says and removes; fixed from a bucket into a bucket (Parquet and image
folders too, whose writers copy from the source's files), the outputs read back by each format's
own library; a scan's manifest serves a later ``fix --manifest`` of the same objects. Restore
from a bucket: the conformance suite (tests/conformance/test_formats.py)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES, one_line_error

import scrub
from scrub.fixing.outputs import SCRATCH_PREFIX
from scrub.storage import staging

pytest.importorskip("s3fs")


def storage(s3_server) -> dict:
    return {**s3_server.storage_options, "key": "scrub-test", "secret": "scrub-test"}


def in_bucket(s3_server, tmp_path: Path, sample: str, bucket: str) -> tuple[Path, str]:
    """The sample folder without its symlinks (a bucket holds none), on disk and in ``bucket``."""
    local = tmp_path / sample
    shutil.copytree(
        SAMPLES / sample, local, ignore=lambda d, names: [n for n in names if (Path(d) / n).is_symlink()]
    )
    return local, s3_server.upload(local, bucket, "d")


def findings(result) -> list[tuple]:
    return sorted((i.source, i.key, i.check, i.message) for i in result.issues())


def scratch_copies() -> list[str]:
    return [
        n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"{SCRATCH_PREFIX}{os.getpid()}-source")
    ]


CASES = [
    ("hdf5", "train.h5", {}),
    ("lmdb", "datum_lmdb", {}),
    ("leveldb", "datum_leveldb", {}),
    ("mds", "", {}),
    ("megatron", "my_text_document", {"vocab_size": 1000}),
    ("tokenbin", "train.bin", {"max_length": 64}),
    ("numpy", "train.npz", {}),
]


@pytest.mark.parametrize("sample, name, options", CASES, ids=[case[0] for case in CASES])
def test_a_dataset_of_local_files_in_a_bucket_scans_as_on_disk(s3_server, tmp_path, sample, name, options):
    local, url = in_bucket(s3_server, tmp_path, sample, f"scrub-copy-{sample}")
    here = scrub.scan(local / name, scheduler="sync", **options)
    there = scrub.scan(
        f"{url}/{name}".rstrip("/"), storage_options=storage(s3_server), scheduler="sync", **options
    )
    assert findings(there) == findings(here) and there.summary.records == here.summary.records
    said = [note for note in there.summary.notes if "copied to local scratch" in note]
    assert len(said) == 1 and said[0].startswith(f"{url}/{name}".rstrip("/"))
    assert not any(SCRATCH_PREFIX in note for note in there.summary.notes)  # named by its URL
    assert scratch_copies() == []  # removed when the scan ended


def test_a_cluster_elsewhere_is_refused_in_one_line(s3_server, tmp_path):
    _, url = in_bucket(s3_server, tmp_path, "hdf5", "scrub-copy-cluster")
    message = one_line_error(
        "scan",
        f"{url}/train.h5",
        "--scheduler",
        "tcp://10.255.255.1:8786",
        "--storage-options",
        json.dumps(storage(s3_server)),
    )
    assert "opens local files only" in message and "cannot open" in message
    assert scratch_copies() == []


def test_a_copy_the_scratch_disk_cannot_hold_is_refused_before_it_is_made(s3_server, tmp_path, monkeypatch):
    _, url = in_bucket(s3_server, tmp_path, "hdf5", "scrub-copy-full")
    monkeypatch.setattr(staging, "SPARE_BYTES", shutil.disk_usage(tempfile.gettempdir()).free)
    with pytest.raises(scrub.ScrubError, match="needs more than the .* free in .*TMPDIR"):
        scrub.scan(f"{url}/train.h5", storage_options=storage(s3_server), scheduler="sync")
    assert scratch_copies() == []


def test_a_prefix_that_holds_no_dataset_is_copied_no_further_than_its_heads(s3_server, tmp_path):
    s3_server.bucket("scrub-copy-none")
    s3_server.client.put_object(Bucket="scrub-copy-none", Key="d/notes.txt", Body=b"not a dataset\n" * 1000)
    with pytest.raises(scrub.ScrubError, match="s3://scrub-copy-none/d: no images found"):
        scrub.scan("s3://scrub-copy-none/d", storage_options=storage(s3_server), scheduler="sync")
    assert scratch_copies() == []


# -- fix from a bucket into a bucket ------------------------------------------------------


def fix_into_bucket(s3_server, tmp_path, sample: str, name: str, bucket: str = "", **options):
    bucket = bucket or f"scrub-fix-{sample}"
    local, url = in_bucket(s3_server, tmp_path, sample, bucket)
    source = f"{url}/{name}".rstrip("/")
    here = scrub.fix(local / name, out=tmp_path / "here" / "clean", scheduler="sync", **options)
    there = scrub.fix(
        source,
        out=f"s3://{bucket}/out/clean",
        quarantine_dir=f"s3://{bucket}/out/quarantine",
        storage_options=storage(s3_server),
        scheduler="sync",
        **options,
    )
    assert there.verified and (there.report["kept"], there.report["quarantined"]) == (
        here.report["kept"],
        here.report["quarantined"],
    )
    assert there.report["quarantined"] > 0 and scratch_copies() == []
    return bucket, there


def download(s3_server, bucket: str, prefix: str, target: Path) -> Path:
    for key in s3_server.keys(bucket, prefix):
        path = target / key[len(prefix) :].lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s3_server.client.get_object(Bucket=bucket, Key=key)["Body"].read())
    return target


def test_hdf5_from_a_bucket_into_a_bucket_loads_in_h5py(s3_server, tmp_path):
    h5py = pytest.importorskip("h5py")
    bucket, fixed = fix_into_bucket(s3_server, tmp_path, "hdf5", "train.h5")
    body = s3_server.client.get_object(Bucket=bucket, Key="out/clean")["Body"].read()
    with h5py.File(io.BytesIO(body), "r") as clean, h5py.File(SAMPLES / "hdf5" / "train.h5", "r") as source:
        assert len(clean["data"]) == fixed.report["kept"] == len(source["data"]) - fixed.report["quarantined"]
        assert np.isfinite(clean["data"][:]).all()


def test_megatron_from_a_bucket_into_a_bucket_loads_in_megatron(s3_server, tmp_path):
    pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    bucket, fixed = fix_into_bucket(s3_server, tmp_path, "megatron", "my_text_document", vocab_size=1000)
    assert s3_server.keys(bucket, "out/clean") == ["out/clean.bin", "out/clean.idx"]
    copy = download(s3_server, bucket, "out/", tmp_path / "down")
    clean = indexed.IndexedDataset(str(copy / "clean"))
    assert len(clean) == fixed.report["kept"] and all(len(clean[i]) > 0 for i in range(len(clean)))
    assert sorted(p.name for p in (copy / "quarantine").iterdir()) == [
        "fix.json",
        "manifest.jsonl",
        "manifest.scan.json",
        "my_text_document.bin",
        "my_text_document.idx",
    ]


def test_parquet_from_a_bucket_into_a_bucket_loads_in_pyarrow(s3_server, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    bucket, fixed = fix_into_bucket(s3_server, tmp_path, "parquet", "train.parquet", num_classes=10)
    body = s3_server.client.get_object(Bucket=bucket, Key="out/clean")["Body"].read()
    assert pq.read_table(io.BytesIO(body)).num_rows == fixed.report["kept"]


def test_an_image_folder_from_a_bucket_into_a_bucket_opens_in_pillow(s3_server, tmp_path):
    from PIL import Image

    bucket, fixed = fix_into_bucket(s3_server, tmp_path, "images", "")
    images = [key for key in s3_server.keys(bucket, "out/clean/") if key.endswith((".jpg", ".png"))]
    assert len(images) == fixed.report["kept"]
    for key in images:
        Image.open(io.BytesIO(s3_server.client.get_object(Bucket=bucket, Key=key)["Body"].read())).load()


def test_a_scan_of_the_bucket_serves_a_later_fix_manifest(s3_server, tmp_path):
    _, url = in_bucket(s3_server, tmp_path, "parquet", "scrub-fix-reuse")
    source = f"{url}/train.parquet"
    scanned = scrub.scan(
        source,
        storage_options=storage(s3_server),
        num_classes=10,
        scheduler="sync",
        manifest=tmp_path / "m.jsonl",
    )
    fixed = scrub.fix(  # its writer reads a local copy; the fingerprint is the objects' all the same
        source,
        manifest=tmp_path / "m.jsonl",
        out=tmp_path / "clean.parquet",
        storage_options=storage(s3_server),
    )
    assert fixed.verified and fixed.report["quarantined"] == len(
        {i.key for i in scanned.issues() if i.severity == "error"}
    )


def test_restore_of_no_quarantine_in_a_bucket_is_one_line(s3_server):
    s3_server.bucket("scrub-restore-none")
    message = one_line_error(
        "restore", "s3://scrub-restore-none/q", "--storage-options", json.dumps(storage(s3_server))
    )
    assert message.strip() == (
        "scrub: error: s3://scrub-restore-none/q: not a quarantine `scrub fix --quarantine` wrote "
        "(no fix.json)"
    )


@pytest.mark.parametrize(
    "sample, name", [("hdf5", "train_list.txt"), ("coco", "annotations/instances_val2017.json")]
)
def test_a_file_that_names_files_beyond_it_is_refused_in_one_line(s3_server, tmp_path, sample, name):
    _, url = in_bucket(s3_server, tmp_path, sample, f"scrub-copy-names-{sample}")
    message = one_line_error("scan", f"{url}/{name}", "--storage-options", json.dumps(storage(s3_server)))
    assert message.startswith(f"scrub: error: {url}/{name}: ") and SCRATCH_PREFIX not in message
    assert scratch_copies() == []


def test_a_fix_says_why_it_reads_a_copy_of_a_format_read_in_place(s3_server, tmp_path):
    _, url = in_bucket(s3_server, tmp_path, "parquet", "scrub-fix-why")
    fixed = scrub.fix(
        f"{url}/train.parquet",
        out=tmp_path / "clean.parquet",
        storage_options=storage(s3_server),
        num_classes=10,
        scheduler="sync",
    )
    said = [note for note in fixed.scan.summary.notes if "copied to local scratch" in note]
    assert len(said) == 1 and said[0].startswith(
        f"{url}/train.parquet: fix writes its cleaned copy from the source's files: 1 object ("
    )


def test_a_prefix_of_lmdb_environments_scans_as_each_of_them(s3_server, tmp_path):
    """As a folder of environments on disk is: each environment a dataset of the run (found from
    the prefix's one listing), each read from its own local copy; the same findings per dataset."""
    local, url = in_bucket(s3_server, tmp_path, "lmdb", "scrub-lmdb-folder")
    here = scrub.scan(local, scheduler="sync")
    there = scrub.scan(url, storage_options=storage(s3_server), scheduler="sync")
    assert sorted(Path(p.path).name for p in there.summary.parts) == ["datum_lmdb", "lsun_lmdb", "npy.lmdb"]
    assert [Path(p.path).name for p in there.summary.parts] == [Path(p.path).name for p in here.summary.parts]

    def per_dataset(result) -> list[tuple]:
        return sorted((Path(i.dataset or "").name, i.key, i.check, i.message) for i in result.issues())

    assert per_dataset(there) == per_dataset(here) and per_dataset(here)
    assert scratch_copies() == []


def test_a_kept_copy_fetches_only_what_changed(s3_server, tmp_path, caplog):
    """Issue 42's nightly job for the formats read from a local copy: with ``--cache`` the copy is
    kept, so an unchanged night fetches no object, a rewritten object is fetched alone, and an
    object gone from the prefix leaves the copy; each night's manifest is a fresh scan's."""
    import logging

    import h5py
    from test_s3_read import object_reads

    folder = tmp_path / "h5"
    folder.mkdir()
    for name, bad in (("a.h5", 3), ("b.h5", 7)):
        data = np.arange(40, dtype=np.float32).reshape(10, 4)
        data[bad % 10, 1] = np.nan
        with h5py.File(folder / name, "w") as file:
            file.create_dataset("data", data=data)
    url = s3_server.upload(folder, "scrub-kept", "h5")
    options = {"storage_options": storage(s3_server), "cache": tmp_path / "cache", "scheduler": "sync"}
    caplog.set_level(logging.INFO, logger="werkzeug")

    def night() -> tuple[scrub.ScanResult, set[str]]:
        caplog.clear()
        result = scrub.scan(url, **options)
        reads = object_reads(caplog)
        fresh = scrub.scan(url, storage_options=storage(s3_server), scheduler="sync")
        assert findings(result) == findings(fresh) and result.summary.records == fresh.summary.records
        return result, {key.rsplit("/", 1)[-1] for key, count in reads.items() if count}

    first, read = night()
    assert read == {"a.h5", "b.h5"} and first.summary.records == 20
    again, read = night()
    assert read == set(), read
    assert any("read from the copy kept in" in note and "0 objects" in note for note in again.summary.notes)
    with h5py.File(tmp_path / "b.h5", "w") as file:
        file.create_dataset("data", data=np.full((6, 4), np.inf, np.float32))
    s3_server.client.put_object(Bucket="scrub-kept", Key="h5/b.h5", Body=(tmp_path / "b.h5").read_bytes())
    changed, read = night()
    assert read == {"b.h5"} and changed.summary.records == 16
    s3_server.client.delete_object(Bucket="scrub-kept", Key="h5/b.h5")
    gone, read = night()
    assert read == set() and gone.summary.records == 10
    assert scratch_copies() == []


def test_an_object_named_as_a_copied_format_is_not_sniffed_by_every_reader(s3_server, tmp_path, caplog):
    """``s3://b/h5/train.h5`` is told HDF5 by its copy's head (one request), not by every reader's
    sniff of the URL (two dozen HEADs and listings); with its copy kept, a night that finds it
    unchanged fetches nothing and asks a few requests in all."""
    import logging

    import h5py
    from test_s3_read import object_reads

    with h5py.File(tmp_path / "train.h5", "w") as file:
        file.create_dataset("data", data=np.ones((20, 3), np.float32))
    url = s3_server.upload(tmp_path / "train.h5", "scrub-named", "h5") + "/train.h5"
    options = {"storage_options": storage(s3_server), "cache": tmp_path / "cache", "scheduler": "sync"}
    assert scrub.scan(url, **options).summary.dataset.format == "hdf5"
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    again = scrub.scan(url, **options)
    asked = [record for record in caplog.records if record.name == "werkzeug"]
    assert again.summary.records == 20 and not object_reads(caplog)
    assert len(asked) <= 8, [record.getMessage() for record in asked]
