"""Image folders and Parquet read where they live: from a bucket of a real S3 server on loopback
(moto's, `s3_server`), a scan's manifest is the manifest of a scan of the same files on disk
(same keys, checks and messages), on one process and on a pool of worker processes that open
the objects themselves; Hugging Face's ``data/*.parquet`` names objects by a glob; a missing
prefix is one line and exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLES, one_line_error

import scrub

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def local_copy(source: Path, target: Path) -> Path:
    """``source`` without its symlinks: a bucket has no links (the upload skips them, as
    ``aws s3 sync`` would copy their targets' bytes under another name), so the local scan that
    the bucket's is compared with must not hold them either."""
    shutil.copytree(
        source, target, ignore=lambda folder, names: [n for n in names if (Path(folder) / n).is_symlink()]
    )
    return target


def findings(result) -> list[tuple]:
    """What a manifest says of each record, in order: where the dataset is does not enter."""
    return sorted(
        (issue.source, issue.key, issue.index, issue.check, issue.message) for issue in result.issues()
    )


def storage(s3_server) -> dict:
    """The server's storage options with its credentials: worker processes started before the
    fixture set them in the environment (a pool a test before started) would have none."""
    return {**s3_server.storage_options, "key": "scrub-test", "secret": "scrub-test"}


def scan_both(s3_server, local: Path, url: str, **options):
    here = scrub.scan(local, **options)
    there = scrub.scan(url, storage_options=storage(s3_server), **options)
    return here, there


# -- Parquet -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["train.parquet", "embeddings.parquet"])
def test_a_parquet_object_scans_as_its_file(s3_server, tmp_path, name):
    url = s3_server.upload(SAMPLES / "parquet" / name, "scrub-parquet-one", "p")
    here, there = scan_both(s3_server, SAMPLES / "parquet" / name, f"{url}/{name}", scheduler="sync")
    assert findings(there) == findings(here) and findings(here)
    assert there.summary.records == here.summary.records


def huggingface_split(folder: Path) -> Path:
    """A Hugging Face repository's layout: ``data/train-0000N-of-00002.parquet`` (rows of images
    by ``Image`` struct and a ``ClassLabel``), several row groups each, a README beside."""
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": ["a", "b", "c"]}}
    metadata = {"huggingface": json.dumps({"info": {"features": features}})}
    from conftest import image_bytes

    for shard in range(2):
        images = [{"bytes": image_bytes(10 * shard + i), "path": f"{shard}-{i}.jpg"} for i in range(9)]
        labels = [i % 3 for i in range(9)]
        if shard == 1:
            images[3]["bytes"] = images[3]["bytes"][:90]  # corrupt-image
            labels[5] = 5  # label-out-of-range
        table = pa.table({"image": pa.array(images, image), "label": pa.array(labels, pa.int64())})
        (folder / "data").mkdir(parents=True, exist_ok=True)
        pq.write_table(
            table.replace_schema_metadata(metadata),
            folder / "data" / f"train-{shard:05d}-of-00002.parquet",
            row_group_size=4,
        )
    (folder / "README.md").write_text("---\nlicense: mit\n---\n")
    return folder


def test_a_prefix_of_parquet_objects_scans_as_its_folder(s3_server, tmp_path):
    local = huggingface_split(tmp_path / "beans")
    url = s3_server.upload(local, "scrub-parquet-prefix", "beans")
    here, there = scan_both(s3_server, local, url, scheduler="sync", partition_size=4)
    assert findings(there) == findings(here)
    assert {(source, check) for source, _, _, check, _ in findings(there)} == {
        ("data/train-00001-of-00002.parquet", "corrupt-image"),
        ("data/train-00001-of-00002.parquet", "label-out-of-range"),
    }
    assert there.summary.records == 18 and there.summary.dataset.classes == ["a", "b", "c"]


def test_a_huggingface_glob_names_the_objects(s3_server, tmp_path):
    local = huggingface_split(tmp_path / "beans")
    url = s3_server.upload(local, "scrub-parquet-glob", "beans")
    here = scrub.scan(str(local / "data" / "*.parquet"), scheduler="sync")
    there = scrub.scan(f"{url}/data/*.parquet", storage_options=s3_server.storage_options, scheduler="sync")
    assert findings(there) == findings(here) and len(findings(there)) == 2
    assert there.summary.records == 18


def test_a_worker_fetches_its_row_groups_and_nothing_else(s3_server, tmp_path, caplog):
    """Issue 42's floor for Parquet: the driver read each footer (side by side) and its partitions
    carry it with the listed size, so a worker (a pickled reader in a process that listed
    nothing) fetches its row groups' column chunks: no footer again, no HEAD."""
    import logging
    import pickle

    from test_s3_read import object_reads

    from scrub.readers.base import ReadOptions, open_reader
    from scrub.storage import forget_listings, location

    local = huggingface_split(tmp_path / "beans")
    url = s3_server.upload(local, "scrub-parquet-footers", "beans")
    options = ReadOptions(storage_options=tuple(storage(s3_server).items()))
    reader = open_reader(location(url, options.storage), options)
    _, partitions = reader.open(4)
    assert len(partitions) == 6 and all(p.footer is not None and p.size for p in partitions)
    worker = pickle.loads(pickle.dumps(reader))
    forget_listings(location(url, options.storage))  # as in another process
    caplog.set_level(logging.INFO, logger="werkzeug")
    for partition in partitions:
        caplog.clear()
        assert len(list(worker.read(partition))) == len(partition)  # an image a record
        assert sum(object_reads(caplog).values()) == 1  # the row group's chunks, coalesced
        assert not object_reads(caplog, "HEAD")


@pytest.mark.slow
def test_workers_read_parquet_row_groups_from_the_bucket(s3_server, tmp_path):
    local = huggingface_split(tmp_path / "beans")
    url = s3_server.upload(local, "scrub-parquet-workers", "beans")
    here, there = scan_both(s3_server, local, url, scheduler="processes", workers=2, partition_size=4)
    assert findings(there) == findings(here) and len(findings(there)) == 2
    assert there.summary.records == here.summary.records == 18
    assert there.summary.scheduler == "processes"


@pytest.mark.slow
def test_a_missing_prefix_is_one_line(s3_server):
    s3_server.bucket("scrub-missing")
    options = json.dumps(s3_server.storage_options)
    message = one_line_error("scan", "s3://scrub-missing/no/such/prefix", "--storage-options", options)
    assert "s3://scrub-missing/no/such/prefix" in message
    message = one_line_error("scan", "s3://scrub-missing/data/*.parquet", "--storage-options", options)
    assert "no object matches" in message
    s3_server.client.put_object(Bucket="scrub-missing", Key="notes/README.txt", Body=b"hello")
    message = one_line_error("scan", "s3://scrub-missing/notes", "--storage-options", options)
    assert "no images found; it holds 1 object(s): README.txt" in message
    message = one_line_error("scan", "s3://scrub-missing/notes/README.txt", "--storage-options", options)
    assert "not a dataset scrub can read" in message


def test_an_arrow_object_scans_as_its_file(s3_server, tmp_path):
    local = tmp_path / "arrow"
    local.mkdir()
    table = pa.table({"x": pa.array([[1.0, 2.0], [float("nan"), 1.0], [3.0, 4.0]], pa.list_(pa.float32()))})
    with pa.ipc.new_stream(
        local / "data-00000-of-00001.arrow", table.schema
    ) as stream:  # as `datasets` writes
        stream.write_table(table, max_chunksize=2)
    url = s3_server.upload(local, "scrub-arrow", "a")
    here, there = scan_both(s3_server, local, url, scheduler="sync")
    assert findings(there) == findings(here) and findings(here)


# -- image folders -------------------------------------------------------------------------


@pytest.fixture
def images(s3_server, tmp_path) -> tuple[Path, str]:
    """sample_data/images (class folders, planted faults, a README; its symlink left out) on
    disk and in a bucket, uploaded from that copy."""
    local = local_copy(SAMPLES / "images", tmp_path / "images")
    (local / ".git").mkdir()
    (local / ".git" / "HEAD.jpg").write_bytes(b"ref: main")  # a hidden folder: skipped in both
    return local, s3_server.upload(local, "scrub-images", "pets/train")


def test_an_image_folder_in_a_bucket_scans_as_its_copy_on_disk(s3_server, images):
    local, url = images
    here, there = scan_both(s3_server, local, url, scheduler="sync")
    assert findings(there) == findings(here)
    checks = {check for *_, check, _ in findings(there)}
    assert checks == {
        "corrupt-image",
        "decompression-bomb",
        "format-mismatch",
        "empty-record",
        "missing-label",
        "duplicate",
        "shape-mismatch",
    }
    assert there.summary.records == here.summary.records
    assert there.summary.dataset.classes == here.summary.dataset.classes == ["bird", "cat", "dog"]
    assert there.summary.dataset.skipped == here.summary.dataset.skipped
    assert there.summary.dataset.root == url and there.summary.dataset.image_root is None


@pytest.mark.slow
def test_workers_fetch_the_objects_themselves(s3_server, images):
    local, url = images
    here, there = scan_both(s3_server, local, url, scheduler="processes", workers=2, partition_size=8)
    assert findings(there) == findings(here) and findings(there)
    assert there.summary.scheduler == "processes"


@pytest.mark.slow
def test_a_flat_prefix_of_images_and_a_missing_object(s3_server, tmp_path):
    from conftest import image_bytes

    local = tmp_path / "flat"
    local.mkdir()
    for number in range(150):  # more than one batch of fetches (FETCH_CONCURRENCY)
        (local / f"{number:03d}.jpg").write_bytes(image_bytes(number, size=16))
    (local / "077.jpg").write_bytes(b"")
    (local / "odd [1] *.jpg").write_bytes(image_bytes(1000, size=16))  # a key fsspec's cat would glob
    url = s3_server.upload(local, "scrub-flat", "")
    here, there = scan_both(s3_server, local, url, scheduler="sync")
    assert findings(there) == findings(here)
    assert [(key, check) for _, key, _, check, _ in findings(there)] == [("077.jpg", "empty-record")]
    assert there.summary.dataset.layout == "flat"


def test_an_object_gone_after_listing_is_a_finding(s3_server, tmp_path):
    from conftest import image_bytes

    from scrub.options.model import ScanOptions
    from scrub.scanning.opening import open_dataset
    from scrub.scanning.run import scan_dataset

    local = tmp_path / "going"
    for number in range(3):
        (local / "a").mkdir(parents=True, exist_ok=True)
        (local / "a" / f"{number}.jpg").write_bytes(image_bytes(number))
    url = s3_server.upload(local, "scrub-going", "g")
    options = ScanOptions.build(storage_options=s3_server.storage_options, scheduler="sync")
    dataset = open_dataset(url, options)
    s3_server.client.delete_object(Bucket="scrub-going", Key="g/a/1.jpg")
    result = scan_dataset(dataset, options)
    assert [(issue.key, issue.check) for issue in result.issues()] == [("a/1.jpg", "missing-file")]


def test_the_cache_reuses_an_image_folders_unchanged_objects(s3_server, images, tmp_path, caplog):
    """Objects are named by the (size, ETag) their prefix's listing gave: a rerun reads no
    unchanged object (the server's request log) and reuses its result; a rewritten one is read
    and checked again, and the manifest stays a fresh scan's."""
    import logging

    from test_s3_read import object_reads

    local, url = images
    options = {"storage_options": storage(s3_server), "scheduler": "sync", "cache": tmp_path / "c"}
    first = scrub.scan(url, **options)
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    again = scrub.scan(url, **options)
    assert findings(again) == findings(first) and findings(first)
    assert again.summary.cache["reused"] == first.summary.records and again.summary.cache["scanned"] == 0
    assert not object_reads(caplog)
    images = {key for key in object_reads(caplog, "HEAD") if key.endswith((".jpg", ".png", ".jpeg"))}
    assert not images  # the fingerprint's versions too come from the listing
    key = next(p for p in sorted(local.rglob("*.jpg")) if ".git" not in p.parts).relative_to(local)
    garbled = b"\xff\xd8" + bytes(200)  # a JPEG's start and nothing after: corrupt now
    s3_server.client.put_object(Bucket="scrub-images", Key=f"pets/train/{key.as_posix()}", Body=garbled)
    caplog.clear()
    changed = scrub.scan(url, **options)
    assert set(object_reads(caplog)) == {f"scrub-images/pets/train/{key.as_posix()}"}
    assert changed.summary.cache["scanned"] == 1
    assert findings(changed) == findings(
        scrub.scan(url, storage_options=storage(s3_server), scheduler="sync")
    )
    assert "corrupt-image" in {check for _, name, _, check, _ in findings(changed) if name == key.as_posix()}
