"""`fix` of a dataset that lives in a bucket (moto's S3 server on loopback): WebDataset, JSON
Lines and TFRecord sources are read where they live, Parquet from a local copy (its writer copies
row groups from the source's file), and written to a local folder or into the bucket, verified
record for record, byte for byte what a fix of the same files on disk writes."""

from __future__ import annotations

import shutil

import pytest
from conftest import SAMPLES

import scrub

CASES = [
    ("webdataset", "", {"num_classes": 10}),
    ("jsonl", "train.jsonl", {"vocab_size": 1000}),
    ("tfrecord", "", {"num_classes": 10}),
    ("parquet", "train.parquet", {"num_classes": 10}),
]


def bucket_copy(s3_server, tmp_path, sample: str, path: str) -> tuple[str, dict]:
    local = tmp_path / "local"
    shutil.copytree(SAMPLES / sample, local, symlinks=True)
    for link in [p for p in local.rglob("*") if p.is_symlink()]:
        link.unlink()  # a bucket holds no links
    url = s3_server.upload(local, f"scrub-source-{sample}", "d")
    options = s3_server.storage_options | {"key": "scrub-test", "secret": "scrub-test"}
    return (f"{url}/{path}" if path else url), options


@pytest.mark.parametrize("sample, path, options", CASES, ids=[case[0] for case in CASES])
def test_a_bucket_source_is_fixed_as_a_local_copy_is(s3_server, tmp_path, sample, path, options):
    url, storage = bucket_copy(s3_server, tmp_path, sample, path)
    suffix = "." + path.split(".", 1)[1] if path else ""
    here = scrub.fix(tmp_path / "local" / path, out=tmp_path / f"here{suffix}", scheduler="sync", **options)
    there = scrub.fix(
        url,
        out=tmp_path / f"there{suffix}",
        quarantine=True,
        storage_options=storage,
        scheduler="sync",
        **options,
    )
    assert there.verified and here.verified
    assert (there.report["kept"], there.report["quarantined"]) == (
        here.report["kept"],
        here.report["quarantined"],
    )
    if path:
        assert (tmp_path / f"there{suffix}").read_bytes() == (tmp_path / f"here{suffix}").read_bytes()
    else:
        for written in sorted((tmp_path / "here").iterdir()):
            assert (tmp_path / "there" / written.name).read_bytes() == written.read_bytes()


@pytest.mark.slow
def test_a_bucket_source_is_fixed_into_the_bucket(s3_server, tmp_path):
    url, storage = bucket_copy(s3_server, tmp_path, "webdataset", "")
    fixed = scrub.fix(
        url,
        out="s3://scrub-source-webdataset/clean",
        storage_options=storage,
        num_classes=10,
        scheduler="sync",
    )
    assert fixed.verified
    assert s3_server.keys("scrub-source-webdataset", "clean/") == [
        "clean/train-000000.tar",
        "clean/train-000001.tar",
    ]
