"""WebDataset samples of language-model data, written by `webdataset.TarWriter`: ``.txt`` texts,
``.json`` and msgpack (``.mp``) objects with token or text fields, ``.ten`` (tenbin) token
arrays. They are token and text records, not malformed samples; planted faults are found by
check id; `fix`'s cleaned shards read back by `webdataset.WebDataset` hold exactly the kept
samples. The tenbin decoder agrees with WebDataset's own encoder."""

from __future__ import annotations

import gzip
import io

import msgpack
import numpy as np
import pytest

import scrub
from scrub.fixing.restoring import restore
from scrub.readers.samplecontents import decode_tenbin

wds = pytest.importorskip("webdataset")


def write_shard(path, samples: list[dict]) -> None:
    with wds.TarWriter(str(path)) as sink:
        for sample in samples:
            sink.write(sample)


def found(result) -> set[tuple[str, str]]:
    return {(issue.key, issue.check) for issue in result.issues()}


def keys_read_back(path) -> list[str]:
    return [sample["__key__"] for sample in wds.WebDataset(str(path), shardshuffle=False)]


def test_text_json_msgpack_and_tenbin_samples_are_records(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    write_shard(
        shards / "text-000.tar",
        [
            {"__key__": "t0", "txt": "the first document"},
            {"__key__": "t1", "txt": ""},  # empty-sequence
            {"__key__": "t2", "txt": "the third", "json": {"url": "https://example.com"}},
        ],
    )
    write_shard(
        shards / "tokens-000.tar",
        [
            {"__key__": "j0", "json": {"input_ids": [1, 2, 3], "labels": [1, 2, 3]}},
            {"__key__": "j1", "json": {"input_ids": [1, 2], "labels": [-100, -100]}},  # no-supervised
            {"__key__": "j2", "json": {"messages": [{"role": "user", "content": "hi"}]}},  # no-supervised
            {"__key__": "m0", "mp": {"input_ids": [4, 5, 6], "attention_mask": [1, 1, 1]}},
            {"__key__": "m1", "mp": {"input_ids": [4, 5], "attention_mask": [0, 0]}},  # empty-attention
            {"__key__": "m2", "mp": {"prompt": "say", "completion": ""}},  # empty-sequence (answer)
            {"__key__": "n0", "ten": [np.array([7, 8, 9], dtype=np.uint16)]},
            {"__key__": "n1", "ten": [np.array([7, 80], dtype=np.int32)]},  # token-out-of-range
            {"__key__": "n2", "ten": [np.array([], dtype=np.int64)]},  # empty-sequence
        ],
    )
    result = scrub.scan(shards, vocab_size=50, scheduler="sync")
    assert found(result) == {
        ("t1", "empty-sequence"),
        ("j1", "no-supervised-tokens"),
        ("j2", "no-supervised-tokens"),
        ("m1", "empty-attention"),
        ("m2", "empty-sequence"),
        ("n1", "token-out-of-range"),
        ("n2", "empty-sequence"),
    }
    assert any("language-model samples" in note for note in result.summary.notes)

    fixed = scrub.fix(shards, quarantine=True, vocab_size=50, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 5 and fixed.report["quarantined"] == 7
    assert keys_read_back(fixed.clean / "text-000.tar") == ["t0", "t2"]
    assert keys_read_back(fixed.clean / "tokens-000.tar") == ["j0", "m0", "n0"]
    kept = next(iter(wds.WebDataset(str(fixed.clean / "tokens-000.tar"), shardshuffle=False).decode()))
    assert kept["json"] == {"input_ids": [1, 2, 3], "labels": [1, 2, 3]}
    whole = restore(fixed.quarantine, scheduler="sync")
    assert whole.verified and whole.report["kept"] == 12
    assert keys_read_back(whole.dataset / "tokens-000.tar") == keys_read_back(shards / "tokens-000.tar")


def test_webdatasets_own_kinds_of_samples(tmp_path):
    """The kinds of WebDataset's test shards (its testdata/mpdata.tar, tendata.tar, testgz.tar):
    msgpack objects of numbers, tenbin float arrays, gzip texts; none a malformed sample."""
    path = tmp_path / "mixed.tar"
    write_shard(
        path,
        [{"__key__": f"{i:06d}", "mp": {"x": i, "y": i * i}} for i in range(2, 5)]  # 1, 1 is constant-row
        + [{"__key__": "nan", "mp": {"x": 1, "y": float("nan")}}],
    )
    result = scrub.scan(path, scheduler="sync")
    assert found(result) == {("nan", "nonfinite-data")}  # arrays of numbers, checked as such
    tensors = tmp_path / "tensors.tar"
    write_shard(
        tensors,
        [
            {"__key__": f"{i}", "ten": [i * np.arange(16.0).reshape(4, 4), np.ones(4, np.float64)]}
            for i in range(3)
        ],
    )
    assert found(scrub.scan(tensors, scheduler="sync")) == {("0", "zero-norm")}
    texts = tmp_path / "gz.tar"
    with wds.TarWriter(str(texts), encoder=False) as sink:  # the members' bytes as given
        sink.write({"__key__": "a", "txt.gz": gzip.compress(b"some text")})
        sink.write({"__key__": "b", "txt.gz": gzip.compress(b"")})
        sink.write({"__key__": "c", "txt.gz": b"not gzip"})
    assert found(scrub.scan(texts, scheduler="sync")) == {("b", "empty-sequence"), ("c", "malformed-sample")}


def test_integer_txt_members_are_still_labels(tmp_path):
    path = tmp_path / "labelled.tar"
    write_shard(
        path,
        [{"__key__": f"{i}", "txt": str(i % 3), "ten": [np.array([i, i + 1], np.int16)]} for i in range(4)],
    )
    result = scrub.scan(path, num_classes=2, scheduler="sync")
    assert result.summary.dataset.labelled
    assert found(result) == {("2", "label-out-of-range")}


def test_damaged_members_are_findings(tmp_path):
    path = tmp_path / "bad.tar"
    good = msgpack.packb({"text": "fine"})
    with wds.TarWriter(str(path)) as sink:
        sink.write({"__key__": "ok", "mp": good})
        sink.write({"__key__": "cut", "mp": good[:-2]})
        sink.write({"__key__": "json", "json": b"{not json"})
        sink.write({"__key__": "ten", "ten": b"~TenBin~" + (1000).to_bytes(8, "little")})
        sink.write({"__key__": "fields", "json": b'{"title": "no text field"}'})
        sink.write({"__key__": "latin", "txt": "caf\xe9".encode("latin-1")})
    result = scrub.scan(path, scheduler="sync")
    assert found(result) == {
        ("cut", "malformed-sample"),
        ("json", "malformed-sample"),
        ("ten", "malformed-sample"),
        ("fields", "malformed-sample"),  # metadata only: nothing to train on
        ("latin", "malformed-record"),
    }
    # malformed-sample alone sets 4 of the 6 samples aside: more than half, refused unless allowed
    assert scrub.fix(path, scheduler="sync", allow_majority=True).verified


def test_the_tenbin_decoder_reads_what_webdataset_writes():
    tenbin = pytest.importorskip("webdataset.tenbin")
    arrays = [
        np.arange(5, dtype=np.uint16),
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array(7, dtype=np.int64),
        np.zeros((2, 0), dtype=np.int8),
    ]
    data = bytes(tenbin.encode_buffer(arrays, infos=["ids", "x", "n", "e"]))
    decoded = decode_tenbin(data)
    assert [name for name, _ in decoded] == ["ids", "x", "n", "e"]
    for (_, got), want in zip(decoded, arrays):
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
    stream = io.BytesIO()
    tenbin.write(stream, arrays[:2])
    assert [a.tolist() for _, a in decode_tenbin(stream.getvalue())] == [a.tolist() for a in arrays[:2]]
    for damaged in (data[:-70], b"~TenBin~" + data[8:15], b"x" + data[1:], data[:16] + data[80:]):
        with pytest.raises(ValueError):
            decode_tenbin(damaged)
