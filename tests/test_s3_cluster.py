"""A real `dask scheduler` and two `dask worker` processes scan a dataset that exists only in a
bucket (moto's S3 server on loopback): each worker opens the objects itself, with the storage
options the reader carries, and no file system is shared; the driver alone writes the manifest,
which equals a local scan's of the same files."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import SAMPLES, manifest_lines
from test_cluster import cluster  # noqa: F401 - the fixture: a scheduler and two workers

import scrub

pytestmark = pytest.mark.slow

distributed = pytest.importorskip("distributed")


def lines_of(path) -> list[tuple]:
    lines = manifest_lines(path)
    return sorted((line["source"], line["key"], line["check"], line["message"]) for line in lines)


def test_cluster_workers_read_the_bucket_themselves(s3_server, cluster, tmp_path):  # noqa: F811
    pytest.importorskip("webdataset")
    address, _, _ = cluster
    local = tmp_path / "local"
    shutil.copytree(SAMPLES / "webdataset", local)
    url = s3_server.upload(local, "scrub-cluster", "shards")
    here = scrub.scan(local, num_classes=10, scheduler="sync", manifest=tmp_path / "local.jsonl")
    there = scrub.scan(
        url,
        num_classes=10,
        scheduler=address,
        storage_options=s3_server.storage_options,
        manifest=tmp_path / "bucket.jsonl",
    )
    assert there.summary.scheduler == address
    assert there.summary.records == here.summary.records
    assert lines_of(tmp_path / "bucket.jsonl") == lines_of(tmp_path / "local.jsonl")
    assert s3_server.endpoint not in json.dumps(there.summary.to_dict())  # options are never recorded
