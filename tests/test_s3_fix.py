"""`fix --out s3://...` against a real S3 server on loopback (moto's, `conftest.s3_server`): the
cleaned copy and the quarantine land in the bucket, byte for byte what a local fix writes, and
load in the formats' own libraries with exactly the kept records; nothing appears under the
destination before every object is written and verified (a ``kill -9`` while staging leaves
nothing there, and the next run removes the dead run's staging); no credentials is one line."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import scrub
from scrub.storage.buckets import LEASE, PAUSE_VARIABLE, STAGING_MARK

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"
#: the WebDataset sample's samples with a planted defect (see tests/test_samples.py)
WDS_BAD = {"000002", "000003", "000005", "000009", "000011", "000012", "000015"}


def local_files(folder: Path) -> dict[str, bytes]:
    if folder.is_file():
        return {"": folder.read_bytes()}
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def bucket_files(s3_server, bucket: str, prefix: str) -> dict[str, bytes]:
    found = {}
    for key in s3_server.keys(bucket, prefix):
        body = s3_server.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        found[key[len(prefix) :].lstrip("/")] = body
    return found


def staging_keys(s3_server, bucket: str) -> list[str]:
    return [key for key in s3_server.keys(bucket) if STAGING_MARK in key]


def s3fs_of(s3_server):
    import s3fs

    return s3fs.S3FileSystem(endpoint_url=s3_server.endpoint)


@pytest.mark.slow
def test_webdataset_into_a_bucket_loads_in_webdataset_with_the_kept_samples(s3_server, tmp_path):
    tariterators = pytest.importorskip("webdataset.tariterators")
    bucket = s3_server.bucket("scrub-fix-wds")
    options = {"num_classes": 10, "scheduler": "sync", "storage_options": s3_server.storage_options}
    result = scrub.fix(
        SAMPLES / "webdataset", out=f"s3://{bucket}/clean/", quarantine_dir=f"s3://{bucket}/held/", **options
    )
    assert result.verified and str(result.clean) == f"s3://{bucket}/clean"
    assert (result.report["kept"], result.report["quarantined"]) == (9, 7)

    local = scrub.fix(
        SAMPLES / "webdataset", out=tmp_path / "clean", quarantine_dir=tmp_path / "held", **options
    )
    assert bucket_files(s3_server, bucket, "clean/") == local_files(local.clean)  # byte for byte
    held = bucket_files(s3_server, bucket, "held/")
    assert {k: v for k, v in held.items() if k.startswith("webdataset/")} == {
        f"webdataset/{name}": data for name, data in local_files(tmp_path / "held" / "webdataset").items()
    }
    assert {"fix.json", "manifest.jsonl"} <= set(held) and staging_keys(s3_server, bucket) == []

    fs = s3fs_of(s3_server)  # the user's own loader: webdataset's tar reader over s3fs's bytes
    keys = set()
    for shard in sorted(fs.find(f"{bucket}/clean")):
        with fs.open(shard, "rb") as stream:
            for member in tariterators.tar_file_iterator(stream):
                keys.add(member["fname"].split(".", 1)[0])
    assert keys == {f"{n:06d}" for n in range(16)} - WDS_BAD


@pytest.mark.slow
def test_parquet_into_a_bucket_loads_in_pyarrow_and_datasets(s3_server, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    bucket = s3_server.bucket("scrub-fix-parquet")
    source = SAMPLES / "parquet" / "train.parquet"
    result = scrub.fix(
        source,
        out=f"s3://{bucket}/out/train.clean.parquet",
        quarantine=True,
        scheduler="sync",
        storage_options=s3_server.storage_options,
    )
    assert result.verified and result.report["quarantined"] == 4
    assert str(result.quarantine) == f"s3://{bucket}/out/train.quarantine"
    fs = s3fs_of(s3_server)
    table = pq.read_table(f"{bucket}/out/train.clean.parquet", filesystem=fs)
    original = pq.read_table(source)
    set_aside = {3, 8, 10, 12}  # the planted rows (tests/test_samples.py)
    kept = [row for row in range(original.num_rows) if row not in set_aside]
    assert table.num_rows == len(kept) and table.schema.equals(original.schema)
    assert table.to_pylist() == original.take(kept).to_pylist()
    assert pq.read_table(f"{bucket}/out/train.quarantine/train.parquet", filesystem=fs).num_rows == 4

    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(
        "parquet",
        data_files=f"s3://{bucket}/out/train.clean.parquet",
        storage_options=s3_server.storage_options,
        split="train",
        cache_dir=str(tmp_path / "hf-cache"),
    )
    assert loaded.num_rows == len(kept)


def test_jsonl_into_a_bucket_holds_the_kept_lines(s3_server, tmp_path):
    bucket = s3_server.bucket("scrub-fix-jsonl")
    source = SAMPLES / "jsonl" / "train.jsonl"
    options = {"scheduler": "sync", "storage_options": s3_server.storage_options}
    result = scrub.fix(source, out=f"s3://{bucket}/clean.jsonl", **options)
    assert result.verified and result.report["quarantined"] > 0
    local = scrub.fix(source, out=tmp_path / "clean.jsonl", **options)
    stored = bucket_files(s3_server, bucket, "clean.jsonl")[""]
    assert stored == (tmp_path / "clean.jsonl").read_bytes()
    lines = [line for line in stored.decode().splitlines() if line.strip()]  # blank lines stay, no records
    assert len(lines) == local.report["kept"] and all(json.loads(line) for line in lines)
    assert staging_keys(s3_server, bucket) == []


def test_an_existing_destination_is_refused_unless_forced(s3_server):
    bucket = s3_server.bucket("scrub-fix-exists")
    s3_server.client.put_object(Bucket=bucket, Key="clean/old.txt", Body=b"old")
    url = f"s3://{bucket}/clean/"
    with pytest.raises(scrub.UsageError, match="already exists .use --force"):
        scrub.fix(SAMPLES / "jsonl" / "train.jsonl", out=url, storage_options=s3_server.storage_options)
    assert s3_server.keys(bucket) == ["clean/old.txt"]
    scrub.fix(
        SAMPLES / "jsonl" / "train.jsonl", out=url, force=True, storage_options=s3_server.storage_options
    )
    assert s3_server.keys(bucket) == ["clean"]  # a single file's cleaned copy: one object, the old gone


@pytest.mark.slow
def test_link_and_a_missing_bucket_are_one_line(s3_server):
    options = ["--storage-options", json.dumps(s3_server.storage_options)]
    assert "no links" in fix_error(
        "images", "--out", "s3://scrub-fix-any/clean/", "--link", *options, env=os.environ
    )
    assert "no such object or bucket" in fix_error(
        "jsonl/train.jsonl", "--out", "s3://scrub-no-such-bucket/clean.jsonl", *options, env=os.environ
    )


def test_no_credentials_is_one_line(s3_server):
    s3_server.bucket("scrub-fix-nocreds")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    message = fix_error(
        "jsonl/train.jsonl",
        "--out",
        "s3://scrub-fix-nocreds/clean.jsonl",
        "--storage-options",
        json.dumps(s3_server.storage_options),
        env=env,
    )
    assert "credentials" in message or "access denied" in message


def fix_error(sample: str, *arguments: str, env) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "fix", str(SAMPLES / sample), *arguments, "--scheduler", "sync"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def fix_process(s3_server, bucket: str, pause: float) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "scrub",
        "fix",
        str(SAMPLES / "webdataset"),
        "--out",
        f"s3://{bucket}/clean/",
        "--quarantine-dir",
        f"s3://{bucket}/held/",
        "--num-classes",
        "10",
        "--scheduler",
        "sync",
        "--storage-options",
        json.dumps(s3_server.storage_options),
        "-q",
    ]
    return subprocess.Popen(command, env=os.environ | {PAUSE_VARIABLE: str(pause)})


def wait_for(condition, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("the fix ended before the moment to kill it")


def destination_keys(s3_server, bucket: str) -> list[str]:
    return [k for k in s3_server.keys(bucket) if k.startswith(("clean/", "held/"))]


@pytest.mark.slow
def test_killed_while_staging_leaves_nothing_and_the_next_run_removes_the_staging(s3_server):
    bucket = s3_server.bucket("scrub-fix-killed")
    process = fix_process(s3_server, bucket, pause=60)  # waits after each upload
    staged = lambda: any(not k.endswith(LEASE) for k in staging_keys(s3_server, bucket))  # noqa: E731
    wait_for(staged, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert destination_keys(s3_server, bucket) == []  # nothing under the destination ...
    assert any(k.endswith(LEASE) for k in staging_keys(s3_server, bucket))  # ... a staging, with its lease

    rerun = fix_process(s3_server, bucket, pause=0)
    assert rerun.wait(timeout=120) == 0
    assert staging_keys(s3_server, bucket) == []  # the dead run's staging removed
    assert "clean/train-000000.tar" in destination_keys(s3_server, bucket)


@pytest.mark.slow
def test_killed_while_copying_its_copies_are_removed_by_the_next_run(s3_server):
    bucket = s3_server.bucket("scrub-fix-killed-copying")
    process = fix_process(s3_server, bucket, pause=0.5)  # staging 7 objects, then copying them
    wait_for(lambda: bool(destination_keys(s3_server, bucket)), process, seconds=120)
    process.send_signal(signal.SIGKILL)
    process.wait()
    partial = destination_keys(s3_server, bucket)
    assert partial and len(partial) < 7 and staging_keys(s3_server, bucket)

    from scrub.storage import location
    from scrub.storage.buckets import remove_abandoned

    for name in ("held", "clean"):
        remove_abandoned(location(f"s3://{bucket}/{name}/", s3_server.storage_options))
    assert destination_keys(s3_server, bucket) == [] and staging_keys(s3_server, bucket) == []


def test_a_live_runs_staging_is_left_alone(s3_server):
    """A staging whose lease names a live process (this one) is not removed."""
    from scrub.storage import location
    from scrub.storage.buckets import remove_abandoned

    bucket = s3_server.bucket("scrub-fix-live")
    staging = f".clean{STAGING_MARK}abc"
    lease = {"pid": os.getpid(), "host": os.uname().nodename, "heartbeat": time.time(), "phase": "uploading"}
    s3_server.client.put_object(Bucket=bucket, Key=f"{staging}/{LEASE}", Body=json.dumps(lease).encode())
    s3_server.client.put_object(Bucket=bucket, Key=f"{staging}/clean/a.tar", Body=b"x")
    assert remove_abandoned(location(f"s3://{bucket}/clean/", s3_server.storage_options)) == []
    lease["pid"] = 2**22 + 12345  # no such process
    s3_server.client.put_object(Bucket=bucket, Key=f"{staging}/{LEASE}", Body=json.dumps(lease).encode())
    assert len(remove_abandoned(location(f"s3://{bucket}/clean/", s3_server.storage_options))) == 1
    assert s3_server.keys(bucket) == []


def test_tar_bytes_in_the_bucket_are_whole_archives(s3_server):
    """Each cleaned shard in the bucket is a complete tar archive (`tarfile` reads it to its end)."""
    bucket = s3_server.bucket("scrub-fix-tar")
    scrub.fix(
        SAMPLES / "webdataset",
        out=f"s3://{bucket}/c/",
        num_classes=10,
        scheduler="sync",
        storage_options=s3_server.storage_options,
    )
    for name, data in bucket_files(s3_server, bucket, "c/").items():
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            assert archive.getmembers(), name
