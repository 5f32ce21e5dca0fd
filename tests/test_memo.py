"""What a reader learned of a file at one version, kept for the next run (`scrub.storage.memo`):
given back while the file's version is unchanged, learned again once it changes, never trusted
when damaged; and a WebDataset rerun with ``--cache`` that finds a shard rewritten on disk reads
its new samples, not the old walk's."""

from __future__ import annotations

import os

import pytest

import scrub
from scrub.storage.memo import MAGIC, Memo, current_memo

pytest.importorskip("webdataset")
from test_s3_read import lines
from test_webdataset import write_shards


def test_a_fact_is_given_back_while_its_file_is_unchanged(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"first")
    path = tmp_path / "cache" / "memo-x.scrubmemo"
    learned: list[str] = []

    def learn() -> dict:
        learned.append(data.read_text())
        return {"text": data.read_text(), "raw": data.read_bytes()}

    first = Memo(path)
    assert first.remembered("kind", data, learn, "extra") == {"text": "first", "raw": b"first"}
    assert first.save() is None and path.is_file()  # its folder made
    again = Memo(path)
    assert again.remembered("kind", data, learn, "extra")["text"] == "first"
    assert learned == ["first"] and again.reused == 1
    assert Memo(path).remembered("kind", data, learn, "other extra")["text"] == "first"
    assert learned == ["first", "first"]  # another extra: another fact
    data.write_bytes(b"second")  # another size, another mtime: learned again
    assert Memo(path).remembered("kind", data, learn, "extra")["text"] == "second"
    assert learned[-1] == "second"
    memo = Memo(path)
    memo.remembered("kind", data, learn, "extra")
    memo.save()
    twin = tmp_path / "twin.bin"  # the same size and mtime, another file (as rsync -t leaves one)
    twin.write_bytes(b"third!")
    status = data.stat()
    os.utime(twin, ns=(status.st_atime_ns, status.st_mtime_ns))
    os.replace(twin, data)
    assert Memo(path).remembered("kind", data, learn, "extra")["text"] == "third!"


def test_a_damaged_memo_is_not_trusted_and_no_path_keeps_nothing(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"x")
    path = tmp_path / "memo-x.scrubmemo"
    memo = Memo(path)
    memo.remembered("kind", data, lambda: 1)
    memo.save()
    raw = path.read_bytes()
    path.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))  # one bit of the payload flipped
    assert Memo(path).remembered("kind", data, lambda: 2) == 2
    path.write_bytes(b"not a memo")
    assert Memo(path).remembered("kind", data, lambda: 3) == 3
    assert raw.startswith(MAGIC)
    nothing = Memo()
    assert nothing.remembered("kind", data, lambda: 4) == 4 and nothing.save() is None
    assert current_memo().remembered("kind", data, lambda: 5) == 5  # outside an opening: learns
    with memo.in_use():
        assert current_memo() is memo


def test_a_memo_that_cannot_be_written_is_said(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"x")
    blocked = tmp_path / "a file, not a folder"
    blocked.write_bytes(b"")
    memo = Memo(blocked / "memo-x.scrubmemo")
    memo.remembered("kind", data, lambda: 1)
    note = memo.save()
    assert note is not None and "cannot write" in note and "learns its files again" in note


def test_a_rewritten_shard_is_walked_again(tmp_path):
    """The walk of an unchanged shard comes from the memo (it is not read to be opened); a shard
    rewritten with more samples is walked again: the cached rerun finds what a fresh scan does."""
    shards = tmp_path / "shards"
    write_shards(shards, shards=2, per_shard=6)
    options = {"cache": tmp_path / "cache", "scheduler": "sync", "num_classes": 3}
    first = scrub.scan(shards, **options)
    memos = list((tmp_path / "cache").glob("memo-*.scrubmemo"))
    assert len(memos) == 1
    saved = memos[0].stat().st_mtime_ns
    again = scrub.scan(shards, **options)
    assert lines(again) == lines(first) and again.summary.cache["scanned"] == 0
    assert memos[0].stat().st_mtime_ns >= saved  # used: kept, not rewritten
    grown = tmp_path / "grown"
    write_shards(grown, shards=2, per_shard=9)
    os.replace(grown / "train-000001.tar", shards / "train-000001.tar")
    changed = scrub.scan(shards, **options)
    fresh = scrub.scan(shards, scheduler="sync", num_classes=3)
    assert changed.summary.records == fresh.summary.records == 6 + 9
    assert lines(changed) == lines(fresh)


def test_json_lines_records_are_named_from_the_survey_as_by_reading(tmp_path):
    """`locate` numbers a partition's records from its file's blank lines, learned on opening,
    exactly as reading the lines numbers them (blank runs at the start, inside and at the end of
    partitions, a last line without a newline)."""
    import random

    from scrub.readers.base import ReadOptions, open_reader

    rng = random.Random(7)
    rows = []
    for number in range(3000):
        rows.append(b"\n" * rng.choice([0, 0, 0, 0, 1, 3]) + b'{"text": "%d"}\n' % number)
    data = tmp_path / "blank.jsonl"
    data.write_bytes(b"\n\n" + b"".join(rows) + b'{"text": "last"}')
    reader = open_reader(data, ReadOptions())
    _, partitions = reader.open(500)
    assert len(partitions) > 3
    for partition in partitions:
        offsets = sorted(rng.sample(range(partition.records), 40)) + [0, partition.records - 1]
        surveyed = reader.locate(partition, offsets)
        reading = reader.__dict__.pop("_layouts")
        try:
            assert surveyed == reader.locate(partition, offsets)  # read from the file
        finally:
            reader._layouts = reading


def test_a_fact_learned_from_several_files_is_learned_again_when_any_changes(tmp_path):
    first, second = tmp_path / "a.bin", tmp_path / "b.bin"
    first.write_bytes(b"a")
    second.write_bytes(b"b")
    path = tmp_path / "memo-x.scrubmemo"
    learned: list[int] = []

    def learn() -> int:
        learned.append(1)
        return len(learned)

    memo = Memo(path)
    assert memo.remembered("kind", first, learn, also=[second]) == 1
    memo.save()
    memo = Memo(path)
    assert memo.remembered("kind", first, learn, also=[second]) == 1  # both unchanged
    memo.save()
    second.write_bytes(b"bb")  # the other file only
    assert Memo(path).remembered("kind", first, learn, also=[second]) == 2
