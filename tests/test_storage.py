"""Object storage as paths (`scrub.storage`), against a real S3 server on loopback (moto's) and
fsspec's memory file system: the storage interface answers alike on a disk and in a bucket; URLs,
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
from scrub.storage import is_url, location, overlapping, read_bytes, same_place, stat_version, storage_of


def test_urls_and_paths():
    assert is_url("s3://bucket/key") and is_url("gs://b/k") and is_url("memory://x")
    assert not is_url("data/train") and not is_url("file:///tmp/x") and not is_url(Path("/tmp"))
    assert location("file:///tmp/x") == Path("/tmp/x")
    assert location("data/train") == Path("data/train")
    assert str(location("memory://scrub/x.jsonl")) == "memory://scrub/x.jsonl"


#: a tree each storage holds the same of: hidden entries (left out of `Storage.files_below`),
#: nested folders, an empty object, sorted names that differ from insertion order
TREE = {
    "b.txt": b"hello",
    "a/z.bin": b"0123456789",
    "a/deeper/c.txt": b"c",
    "a/.hidden.txt": b"h",
    ".git/config": b"g",
    "empty": b"",
}


def _tree_in(where: str, tmp_path: Path, s3_server) -> tuple[Path, object]:
    """The tree on this disk, and the same in ``where`` (``memory`` or ``s3``)."""
    local = tmp_path / "tree"
    for key, data in TREE.items():
        (local / key).parent.mkdir(parents=True, exist_ok=True)
        (local / key).write_bytes(data)
    if where == "s3":
        return local, location(s3_server.upload(local, "scrub-interface", "tree"), s3_server.storage_options)
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/scrub-interface-{tmp_path.name}/tree"
    for key, data in TREE.items():
        fs.pipe_file(f"{root}/{key}", data)
    return local, location(f"memory:/{root}")


@pytest.mark.parametrize("where", ["memory", "s3"])
def test_the_storage_interface_answers_alike_on_a_disk_and_in_a_bucket(where, tmp_path, s3_server):
    """fsspec's abstract tests' way: one tree, every method of `scrub.storage.base.Storage`, the
    local implementation as the oracle of the object store's."""
    local, remote = _tree_in(where, tmp_path, s3_server)
    on_disk, in_bucket = storage_of(local), storage_of(remote)
    assert on_disk is not in_bucket
    assert list(in_bucket.walk(remote)) == list(on_disk.walk(local))
    pruned = []
    for relative, folders, _ in in_bucket.walk(remote):
        pruned.append(relative)
        folders[:] = [name for name in folders if name != "a"]  # os.walk's contract: not entered
    assert pruned == ["", ".git"]
    below = ["b.txt", "empty", "a/z.bin", "a/deeper/c.txt"]  # the walk's order: a folder's files first
    assert list(in_bucket.files_below(remote)) == list(on_disk.files_below(local)) == below
    assert in_bucket.files_in(remote) == on_disk.files_in(local) == ["b.txt", "empty"]
    for key, data in TREE.items():
        for storage, root in ((on_disk, local), (in_bucket, remote)):
            path = root.joinpath(*key.split("/"))
            assert storage.read_bytes(path) == data
            assert storage.read_range(path, 1, 3) == data[1:4] and storage.read_head(path, 2) == data[:2]
            assert storage.size(path) == len(data) == storage.version(path)[0]
            assert storage.relative(path, root) == key
            with storage.open_range(path, 2, None, 4) as file:
                assert file.read() == data[2:]
            with storage.open_stream(path) as stream:
                assert stream.read() == data
            with storage.open_random(path) as random:
                assert random.read() == data
    assert on_disk.local_path(local) == str(local) and in_bucket.local_path(remote) is None
    assert not in_bucket.forks_cleanly and on_disk.forks_cleanly
    assert same_place(remote / "a") == f"{str(remote).rstrip('/')}/a"
    assert overlapping(remote / "a", remote) and overlapping(remote, remote / "a" / "deeper")
    assert not overlapping(remote / "a", remote / "b.txt") and not overlapping(remote, local)
    assert overlapping(local / "a", local) and not overlapping(local / "a", local / "b.txt")


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
