"""Object storage as paths (`scrub.storage`), against a real S3 server on loopback (moto's): URLs,
brace patterns and globs name objects; a missing bucket or object is one line and exit 2; the
storage options are an option like any other and are never recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import one_line_error

from scrub.errors import UnusableDataset, UsageError
from scrub.options.model import ScanOptions
from scrub.readers.base import ReadOptions, expand_datasets
from scrub.storage import is_url, location, read_bytes, stat_version


def test_urls_and_paths():
    assert is_url("s3://bucket/key") and is_url("gs://b/k") and is_url("memory://x")
    assert not is_url("data/train") and not is_url("file:///tmp/x") and not is_url(Path("/tmp"))
    assert location("file:///tmp/x") == Path("/tmp/x")
    assert location("data/train") == Path("data/train")
    assert str(location("memory://scrub/x.jsonl")) == "memory://scrub/x.jsonl"


def test_objects_are_read_and_versioned_by_their_etag(s3_server, tmp_path):
    (tmp_path / "a.txt").write_bytes(b"hello")
    url = s3_server.upload(tmp_path / "a.txt", "scrub-storage", "d")
    place = location(f"{url}/a.txt", s3_server.storage_options)
    assert read_bytes(place) == b"hello"
    size, version = stat_version(place)
    assert size == 5 and version == "5d41402abc4b2a76b9719d911017c592"  # the object's ETag (its MD5)


def test_patterns_name_objects(s3_server, tmp_path):
    for number in range(3):
        (tmp_path / f"train-{number:06d}.tar").write_bytes(b"x")
    s3_server.upload(tmp_path, "scrub-patterns", "shards")
    options = ReadOptions(storage_options=(("endpoint_url", s3_server.endpoint),))
    braces = expand_datasets(["s3://scrub-patterns/shards/train-{000000..000002}.tar"], options)
    assert [str(p) for p in braces.paths] == [
        f"s3://scrub-patterns/shards/train-{n:06d}.tar" for n in range(3)
    ]
    globbed = expand_datasets(["s3://scrub-patterns/shards/*.tar"], options)
    assert [str(p) for p in globbed.paths] == [str(p) for p in braces.paths]
    with pytest.raises(UnusableDataset, match="1 of the 4 objects this pattern names are missing"):
        expand_datasets(["s3://scrub-patterns/shards/train-{000000..000003}.tar"], options)
    with pytest.raises(UnusableDataset, match="no object matches"):
        expand_datasets(["s3://scrub-patterns/shards/*.parquet"], options)


def test_a_missing_bucket_or_object_is_one_line(s3_server):
    options = json.dumps(s3_server.storage_options)
    message = one_line_error("scan", "s3://scrub-no-such-bucket/data.jsonl", "--storage-options", options)
    assert "s3://scrub-no-such-bucket/data.jsonl" in message


def test_storage_options_are_validated_and_never_recorded(s3_server):
    options = ScanOptions.build(storage_options={"endpoint_url": "http://x", "s3": {"anon": True}})
    assert options.read.storage == {"endpoint_url": "http://x", "s3": {"anon": True}}
    assert "storage_options" not in options.read.recorded("jsonl")
    assert options.read.given() == {}  # where the data lives: no reader's option
    with pytest.raises(UsageError, match="expected a JSON object"):
        ScanOptions.build(storage_options="endpoint_url=http://x")
    with pytest.raises(UsageError, match="expected a JSON object"):
        ScanOptions.build(storage_options="[1, 2]")


def test_an_option_the_store_does_not_take_is_one_line(s3_server):
    options = json.dumps({**s3_server.storage_options, "no_such_option": 1})
    message = one_line_error("scan", "s3://scrub-storage/d/a.txt", "--storage-options", options)
    assert message.startswith("scrub: error: storage-options:") and "no_such_option" in message
