"""WebDataset shards and JSON Lines read where they live, against a real S3 server on loopback
(moto's, `conftest.s3_server`): a scan of a bucket gives the manifest a scan of the same local
copy gives (same sources, keys, checks and messages), whether a shard, a prefix of shards, a brace
pattern or a glob names them, on one process and on several; a partition of a shard reads its own
byte range; a missing object or an unreachable store is one line and exit 2."""

from __future__ import annotations

import gzip
import json
import logging
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import one_line_error

import scrub
from scrub import storage
from scrub.readers.base import ReadOptions, open_reader
from scrub.storage import location

pytest.importorskip("webdataset")
from test_webdataset import write_shards

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"


def lines(result) -> list[tuple]:
    """A manifest as what it says of each record (the dataset's own name aside: a path or a URL)."""
    return sorted(
        (
            i.source,
            i.key,
            i.index,
            i.check,
            i.severity.value,
            i.message,
            json.dumps(i.details, sort_keys=True),
        )
        for i in result.issues()
    )


def storage_options(s3_server) -> dict:
    """The server's endpoint and its credentials: a pool of workers started by an earlier test,
    before the server set them in the environment, would not find them there."""
    return s3_server.storage_options | {"key": "scrub-test", "secret": "scrub-test"}


def same_scan(local: Path, url: str, s3_server, **options) -> scrub.ScanResult:
    """Scan the local copy and the bucket's; their manifests and record counts must agree."""
    here = scrub.scan(local, **options)
    there = scrub.scan(url, storage_options=storage_options(s3_server), **options)
    assert lines(there) == lines(here)
    assert there.summary.records == here.summary.records
    return there


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """Three generated shards with one fault of each kind, beside the sample's two."""
    folder = tmp_path_factory.mktemp("wds") / "shards"
    write_shards(folder, shards=3, per_shard=6)
    return folder


@pytest.mark.parametrize("scheduler", ["sync", pytest.param("processes", marks=pytest.mark.slow)])
def test_webdataset_from_a_bucket_as_from_a_local_copy(s3_server, shards, scheduler):
    url = s3_server.upload(shards, "scrub-wds", f"generated-{scheduler}")
    found = same_scan(shards, url, s3_server, scheduler=scheduler, num_classes=3, partition_size=4)
    assert {"corrupt-image", "label-out-of-range", "malformed-sample"} <= {i.check for i in found.issues()}
    sample = s3_server.upload(SAMPLES / "webdataset", "scrub-wds", f"sample-{scheduler}")
    same_scan(SAMPLES / "webdataset", sample, s3_server, scheduler=scheduler)
    one = SAMPLES / "webdataset" / "train-000000.tar"
    same_scan(one, f"{sample}/train-000000.tar", s3_server, scheduler=scheduler)


def test_compressed_shards(s3_server, tmp_path):
    write_shards(tmp_path / "gz", shards=2, per_shard=5, compress=True)
    url = s3_server.upload(tmp_path / "gz", "scrub-wds", "compressed")
    same_scan(tmp_path / "gz", url, s3_server, scheduler="sync", num_classes=3)


@pytest.mark.slow
def test_brace_patterns_and_globs_name_shards(s3_server, shards):
    """A pattern names each shard as a dataset of its own, as it does locally."""
    url = s3_server.upload(shards, "scrub-wds", "patterns")
    local = scrub.scan(f"{shards}/train-{{000000..000002}}.tar", scheduler="sync", num_classes=3)
    for pattern in (f"{url}/train-{{000000..000002}}.tar", f"{url}/train-*.tar"):
        named = scrub.scan(
            pattern, storage_options=s3_server.storage_options, scheduler="sync", num_classes=3
        )
        assert lines(named) == lines(local)
        assert len(named.summary.parts) == 3 and named.summary.records == 18
    message = one_line_error(
        "scan",
        f"{url}/train-{{000000..000003}}.tar",
        "--storage-options",
        json.dumps(s3_server.storage_options),
    )
    assert "train-000003.tar does not exist" in message


def test_a_partition_reads_its_own_byte_range(s3_server, shards, monkeypatch):
    url = s3_server.upload(shards, "scrub-wds", "ranges")
    options = ReadOptions(storage_options=tuple(s3_server.storage_options.items()))
    reader = open_reader(location(f"{url}/train-000001.tar", options.storage), options)
    _, partitions = reader.open(2)
    assert [len(p) for p in partitions] == [2, 2, 2]
    assert [p.end for p in partitions] == [partitions[1].start, partitions[2].start, None]
    fetched: list[tuple[int, int]] = []
    fetch = storage.RangeFile._fetch

    def counted(self, start, stop):
        fetched.append((start, stop))
        return fetch(self, start, stop)

    monkeypatch.setattr(storage.RangeFile, "_fetch", counted)
    middle = partitions[1]
    assert [r.key for r in reader.read(middle)] == ["000008", "000009"]
    assert fetched[0][0] == middle.start and all(
        stop <= middle.end + storage.PAST_END_BLOCK for _, stop in fetched
    )


def jsonl_copy(folder: Path) -> Path:
    """The JSON Lines sample, a gzip copy of it in a sub-folder, and a file of other lines."""
    shutil.copytree(SAMPLES / "jsonl", folder)
    data = (SAMPLES / "jsonl" / "train.jsonl").read_bytes()
    (folder / "more").mkdir()
    (folder / "more" / "chat.jsonl.gz").write_bytes(gzip.compress(data))
    (folder / "more" / "short.jsonl").write_bytes(b'{"text": "a"}\n\n{"text": ""}\nnot json\n{"text": "b"}')
    return folder


@pytest.mark.parametrize("scheduler", ["sync", pytest.param("processes", marks=pytest.mark.slow)])
def test_json_lines_from_a_bucket_as_from_a_local_copy(s3_server, tmp_path, scheduler):
    folder = jsonl_copy(tmp_path / "jsonl")
    url = s3_server.upload(folder, "scrub-jsonl", scheduler)
    found = same_scan(folder, url, s3_server, scheduler=scheduler, partition_size=25)
    assert {"more/chat.jsonl.gz", "more/short.jsonl", "train.jsonl"} <= {i.source for i in found.issues()}
    same_scan(folder / "train.jsonl", f"{url}/train.jsonl", s3_server, scheduler=scheduler)
    same_scan(folder / "more" / "chat.jsonl.gz", f"{url}/more/chat.jsonl.gz", s3_server, scheduler=scheduler)
    globbed = scrub.scan(
        f"{url}/more/*.jsonl*", storage_options=storage_options(s3_server), scheduler=scheduler
    )
    assert {i.source for i in globbed.issues()} == {"chat.jsonl.gz", "short.jsonl"}


def test_json_lines_partitions_read_their_lines(s3_server, tmp_path):
    """Byte-range partitions of an object: every line read once, the same records as locally."""
    many = tmp_path / "many.jsonl"
    many.write_bytes(b"".join(b'{"text": "line %d"}\n' % n if n % 97 else b"\n" for n in range(5000)))
    url = s3_server.upload(many, "scrub-jsonl", "many")
    options = ReadOptions(storage_options=tuple(s3_server.storage_options.items()))
    remote = open_reader(location(f"{url}/many.jsonl", options.storage), options)
    local = open_reader(many, ReadOptions())
    (remote_info, remote_parts), (local_info, local_parts) = remote.open(500), local.open(500)
    assert remote_info.records == local_info.records and len(remote_parts) == len(local_parts) > 1
    keys = [r.key for p in remote_parts for r in remote.read(p)]
    assert keys == [r.key for p in local_parts for r in local.read(p)]
    assert len(keys) == len(set(keys)) == remote_info.records
    assert list(remote.members(remote_parts)) == [f"{url}/many.jsonl"]


@pytest.mark.slow  # s3fs retries a refused connection with back-off: about 15 s
def test_an_unreachable_store_or_no_credentials_is_one_line(s3_server, tmp_path, monkeypatch):
    url = s3_server.upload(SAMPLES / "jsonl", "scrub-jsonl", "errors")
    wrong = json.dumps(
        {
            "endpoint_url": "http://127.0.0.1:9",
            "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}},
        }
    )
    message = one_line_error("scan", f"{url}/train.jsonl", "--storage-options", wrong)
    assert "cannot reach the object store" in message
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    message = one_line_error(
        "scan", f"{url}/train.jsonl", "--storage-options", json.dumps(s3_server.storage_options)
    )
    assert "no credentials" in message


def object_reads(caplog, method: str = "GET") -> Counter:
    """The GETs of objects' bytes (or another ``method``'s requests of objects) the server
    answered since ``caplog`` was cleared (its log holds a line per request), by key; listings
    (``GET /bucket?list-type=2``) are not reads."""
    found: Counter = Counter()
    for record in caplog.records:
        text = re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage())  # a 206 is a colored line
        if record.name == "werkzeug" and (read := re.search(rf'"{method} /([^ ?]+) ', text)):
            found[read.group(1)] += 1
    return found


def nightly_files(folder: Path, kind: str) -> list[str]:
    """Three files of ``kind``, each holding more records than opening reads to tell their kind."""
    if kind == "webdataset":
        write_shards(folder, shards=3, per_shard=40)
        return [f"train-{n:06d}.tar" for n in range(3)]
    if kind == "tfrecord":
        pytest.importorskip("tfrecord")
        from test_tfrecord import write_file

        for n in range(3):
            write_file(folder / f"train.tfrecord-{n:05d}-of-00003", count=40, seed=n)
        return [f"train.tfrecord-{n:05d}-of-00003" for n in range(3)]
    if kind == "parquet":  # rows checked in blocks: their partitions are kept whole
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        folder.mkdir(parents=True)
        for n in range(4):  # a NaN in each file, and no finding of the dataset as a whole (a
            # duplicate's rows are read back, after any scan, to name their content)
            values = [float("nan") if row == 5 else float(row + 1) for row in range(40)]
            other = [100.0 * n + row for row in range(40)]
            table = pa.table(
                {"x": pa.array(values, pa.float32()), "y": other, "label": [r % 3 for r in range(40)]}
            )
            pq.write_table(
                table, folder.parent / f"part-{n}.parquet" if n == 3 else folder / f"part-{n}.parquet"
            )
        return [f"part-{n}.parquet" for n in range(3)]
    folder.mkdir(parents=True)
    for n in range(3):
        texts = (b'{"text": "file %d line %d", "label": %d}\n' % (n, line, line % 3) for line in range(40))
        (folder / f"part-{n}.jsonl").write_bytes(b"".join(texts) + (b"not json\n" if n == 2 else b""))
    return [f"part-{n}.jsonl" for n in range(3)]


def test_an_object_named_as_shards_are_is_sniffed_by_its_format_alone(s3_server, shards, caplog):
    """A shard named by its URL (a brace pattern names many) is sniffed by the WebDataset reader
    first: no request asks the store whether it is an LMDB or LevelDB folder or an HDF5 file, as
    every reader's sniff in order did (a dozen requests a shard); the dataset is the same."""
    url = s3_server.upload(shards, "scrub-by-name", "wds")
    options = ReadOptions(storage_options=tuple(storage_options(s3_server).items()))
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    reader = open_reader(location(f"{url}/train-000001.tar", options.storage), options)
    assert reader.format == "webdataset"
    asked = [record.getMessage() for record in caplog.records if record.name == "werkzeug"]
    assert asked and not [line for line in asked if "data.mdb" in line or "CURRENT" in line]
    assert len(asked) <= 3, asked


def test_a_worker_reads_its_shards_range_without_asking_its_size(s3_server, shards, caplog):
    """The driver's listing gave each shard's size; its partitions carry it, so a worker (a pickled
    reader in a process that listed nothing) reads its range with GETs only, no HEAD."""
    import pickle

    url = s3_server.upload(shards, "scrub-sizes", "wds")
    options = ReadOptions(storage_options=tuple(storage_options(s3_server).items()))
    reader = open_reader(location(url, options.storage), options)
    _, partitions = reader.open(500)
    worker = pickle.loads(pickle.dumps(reader))
    storage.forget_listings(location(url, options.storage))  # as in another process
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    assert sum(1 for partition in partitions for _ in worker.read(partition)) == sum(map(len, partitions))
    assert object_reads(caplog) and not object_reads(caplog, "HEAD")


@pytest.mark.parametrize("kind", ["webdataset", "jsonl", "tfrecord", "parquet"])
def test_an_unchanged_night_reads_no_object_and_a_rewritten_one_only_itself(
    s3_server, tmp_path, caplog, kind
):
    """Issue 42's nightly job: with ``--cache``, a rerun over unchanged objects costs the listing
    (what opening learned of each, a shard's walk or a file's lines, comes from the memo; their
    results from the cache); a rewritten object is read, and no other."""
    names = nightly_files(tmp_path / kind, kind)
    url = s3_server.upload(tmp_path / kind, "scrub-nightly", kind)
    options = {
        "storage_options": storage_options(s3_server),
        "cache": tmp_path / "cache",
        "scheduler": "sync",
    }
    caplog.set_level(logging.INFO, logger="werkzeug")
    first = scrub.scan(url, **options)
    assert set(object_reads(caplog)) == {f"scrub-nightly/{kind}/{name}" for name in names}
    caplog.clear()
    again = scrub.scan(url, **options)
    assert object_reads(caplog) == Counter()
    assert lines(again) == lines(first) and again.summary.cache["scanned"] == 0
    # another file's bytes: another ETag (a table's, rows of its own: copies' rows would be read
    # back to name the duplicates)
    rewritten = (tmp_path / ("part-3.parquet" if kind == "parquet" else f"{kind}/{names[2]}")).read_bytes()
    s3_server.client.put_object(Bucket="scrub-nightly", Key=f"{kind}/{names[1]}", Body=rewritten)
    caplog.clear()
    changed = scrub.scan(url, **options)
    assert set(object_reads(caplog)) == {f"scrub-nightly/{kind}/{names[1]}"}
    assert lines(changed) == lines(scrub.scan(url, storage_options=storage_options(s3_server)))
    assert 0 < changed.summary.cache["scanned"] < changed.summary.records


@pytest.mark.parametrize("kind", ["webdataset", "jsonl"])
def test_the_cache_reads_no_unchanged_object_again(s3_server, shards, tmp_path, kind):
    """Objects are versioned by (size, ETag) as files are by stat: a rerun checks no record of
    an unchanged object again, and every record of a rewritten one; the manifest stays a full
    scan's."""
    if kind == "webdataset":
        local, name = shards, "train-000001.tar"
        rewritten = (shards / "train-000002.tar").read_bytes()  # another shard's bytes: another ETag
    else:
        local, name = jsonl_copy(tmp_path / "jsonl"), "train.jsonl"
        rewritten = (local / "train.jsonl").read_bytes() + b'{"text": ""}\n'
    url = s3_server.upload(local, "scrub-cache", kind)
    options = {
        "storage_options": storage_options(s3_server),
        "cache": tmp_path / "cache",
        "scheduler": "sync",
    }
    first = scrub.scan(url, **options)
    assert first.summary.cache["reused"] == 0
    again = scrub.scan(url, **options)
    assert lines(again) == lines(first)
    assert again.summary.cache["reused"] == first.summary.records and again.summary.cache["scanned"] == 0
    s3_server.client.put_object(Bucket="scrub-cache", Key=f"{kind}/{name}", Body=rewritten)
    changed = scrub.scan(url, **options)
    fresh = scrub.scan(url, storage_options=storage_options(s3_server), scheduler="sync")
    assert lines(changed) == lines(fresh)
    assert 0 < changed.summary.cache["scanned"] < changed.summary.records


def test_tfrecord_shards_in_a_bucket_scan_as_on_disk(s3_server, tmp_path):
    local = tmp_path / "tfrecord"
    shutil.copytree(SAMPLES / "tfrecord", local)
    url = s3_server.upload(local, "scrub-tfrecord", "train")
    there = same_scan(local, url, s3_server, num_classes=10, scheduler="sync")
    assert there.summary.records > 0 and lines(there)
    pattern = f"{url}/train.tfrecord-{{00000..00001}}-of-00002"
    shards = scrub.scan(pattern, storage_options=storage_options(s3_server), num_classes=10, scheduler="sync")
    # a pattern names each shard as a dataset of its own: indices count within each
    assert [line[:2] + line[3:] for line in lines(shards)] == [line[:2] + line[3:] for line in lines(there)]


def spool_folders() -> list[Path]:
    """The scratch folders of this process's spools (`scrub.storage.spool`)."""
    import os
    import tempfile

    return list(Path(tempfile.gettempdir()).glob(f"scrub-*{os.getpid()}-spool-*"))


@pytest.mark.parametrize("scheduler", ["sync", pytest.param("processes", marks=pytest.mark.slow)])
def test_a_shard_in_a_bucket_is_read_once(s3_server, shards, caplog, scheduler):
    """Issue 42's floor: the walk that counts a shard's samples fetches it with one request into
    a local copy its partitions read (the workers fetched it again before); the manifest is the
    local one's, the summary says where the shards were read, and no copy outlives the scan."""
    url = s3_server.upload(shards, "scrub-once", scheduler)
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    found = same_scan(shards, url, s3_server, scheduler=scheduler, num_classes=3, partition_size=4)
    reads = object_reads(caplog)
    first = f"scrub-once/{scheduler}/train-000000.tar"
    assert reads.pop(first) <= 2  # its sniff's first bytes, then its copy
    assert reads == {f"scrub-once/{scheduler}/train-{n:06d}.tar": 1 for n in (1, 2)}
    said = [note for note in found.summary.notes if "read once into local scratch" in note]
    assert said and said[0].startswith("3 objects (")
    assert spool_folders() == []


def test_shards_that_do_not_fit_in_scratch_are_read_where_they_are(s3_server, shards, caplog, monkeypatch):
    """No room for copies: each shard is read twice (its walk, then its partitions), as the
    summary says; the findings do not change."""
    from scrub.storage import spool

    monkeypatch.setattr(spool, "ROOM_SHARE", 0.0)
    url = s3_server.upload(shards, "scrub-once", "no-room")
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    found = same_scan(shards, url, s3_server, scheduler="sync", num_classes=3, partition_size=4)
    assert object_reads(caplog)["scrub-once/no-room/train-000001.tar"] >= 2
    notes = [note for note in found.summary.notes if "did not fit" in note]
    assert notes and "3 objects" in notes[0] and "TMPDIR" in notes[0]
    assert spool_folders() == []


@pytest.mark.parametrize("kind", ["jsonl", "tfrecord"])
def test_files_a_driver_reads_whole_are_read_once(s3_server, tmp_path, caplog, kind):
    """As shards are: a JSON Lines file's survey and a TFRecord file's walk read it whole, into
    the copy its partitions read; the manifest is the local files'."""
    names = nightly_files(tmp_path / kind, kind)
    url = s3_server.upload(tmp_path / kind, "scrub-once", kind)
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    same_scan(tmp_path / kind, url, s3_server, scheduler="sync", partition_size=8)
    reads = object_reads(caplog)
    assert reads == {f"scrub-once/{kind}/{name}": 1 for name in names}
    assert spool_folders() == []


def test_a_brace_pattern_costs_its_prefixs_listing(s3_server, shards, caplog):
    """Issue 42: a pattern of shards lists their prefix once, and each shard's opening is answered
    from that listing: no shard is asked about on its own (a HEAD each, nine a shard before), and
    each is fetched once for its copy (and its first bytes for its sniff)."""
    url = s3_server.upload(shards, "scrub-pattern", "wds")
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    named = scrub.scan(
        f"{url}/train-{{000000..000002}}.tar", storage_options=storage_options(s3_server), scheduler="sync"
    )
    assert len(named.summary.parts) == 3
    names = {f"scrub-pattern/wds/train-{n:06d}.tar" for n in range(3)}
    assert not names & set(object_reads(caplog, "HEAD"))
    reads = object_reads(caplog)
    assert set(reads) == names and max(reads.values()) <= 2, reads
