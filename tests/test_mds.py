"""MosaicML Streaming (MDS): datasets written by streaming's own `MDSWriter`, scanned and fixed;
`StreamingDataset` reads the cleaned copy back with every kept sample as it was; pickled columns
are refused as LMDB refuses pickles; a damaged or missing shard is a finding and the scan goes on;
restore puts every sample back."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line_error

import scrub
from scrub.fixing.restoring import restore

pytestmark = pytest.mark.torch  # streaming's datasets are torch datasets
pytest.importorskip("torch")


def streaming_base():
    """``streaming.base`` (MDSWriter, StreamingDataset). The top-level package imports its vision
    datasets and with them torchvision, whose only build on the package index needs CUDA's
    libraries: where it does not import, ``streaming.base`` is imported without that ``__init__``
    (it needs only torch)."""
    if importlib.util.find_spec("streaming") is None:
        pytest.skip("mosaicml-streaming is not installed")
    try:
        import streaming.base
    except ImportError:
        for name in [name for name in sys.modules if name == "streaming" or name.startswith("streaming.")]:
            del sys.modules[name]
        spec = importlib.util.find_spec("streaming")
        assert spec is not None and spec.submodule_search_locations is not None
        package = types.ModuleType("streaming")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["streaming"] = package
        import streaming.base
    return streaming.base


def write_sft(folder: Path, rows: int = 12, first: int = 0, **options) -> None:
    """A tokenized SFT set: input_ids (int32), labels (int64), and a text column not checked;
    sample 3 holds id 5000 (>= the vocabulary of 1000), sample 5's labels are all -100; the ids
    of sample n start at ``first`` + n (sets of other ``first`` share no sequence)."""
    streaming = streaming_base()
    columns = {"input_ids": "ndarray:int32", "labels": "ndarray:int64", "source": "str"}
    with streaming.MDSWriter(
        out=str(folder), columns=columns, size_limit=options.pop("size_limit", 500), **options
    ) as out:
        for row in range(rows):
            ids = (np.arange(6, dtype=np.int32) + first + row) % 1000
            labels = ids.astype(np.int64)
            if row == 3:
                ids[2] = 5000
            if row == 5:
                labels[:] = -100
            out.write({"input_ids": ids, "labels": labels, "source": f"doc {row}"})


def samples(folder: Path, **options) -> list[dict]:
    """Every sample of a dataset folder, as StreamingDataset reads it (local only, no remote).
    Its lock files (``NNNNNN_cache_filelock``) go to a folder of their own, removed after: the
    library leaves them in the temporary folder, a few more every run."""
    streaming = streaming_base()
    with tempfile.TemporaryDirectory(prefix="scrub-test-streaming-") as locks:
        saved, tempfile.tempdir = tempfile.tempdir, locks  # where the library's gettempdir() points
        try:
            dataset = streaming.StreamingDataset(local=str(folder), batch_size=1, shuffle=False, **options)
            return [dataset[index] for index in range(len(dataset))]
        finally:
            tempfile.tempdir = saved


def found(result) -> set[tuple[str, str, str]]:
    return {(issue.source, issue.key, issue.check) for issue in result.issues()}


@pytest.mark.slow
def test_planted_faults_are_found_by_id_and_named_by_their_position(tmp_path):
    source = tmp_path / "sft"
    write_sft(source)
    index = json.loads((source / "index.json").read_text())
    assert len(index["shards"]) > 2  # several shards: positions count across them
    result = scrub.scan(source, scheduler="sync", vocab_size=1000)
    assert result.summary.records == 12
    shard_of = {}
    first = 0
    for entry in index["shards"]:
        for sample in range(first, first + entry["samples"]):
            shard_of[sample] = entry["raw_data"]["basename"]
        first += entry["samples"]
    assert found(result) == {
        (shard_of[3], "3", "token-out-of-range"),
        (shard_of[5], "5", "no-supervised-tokens"),
    }
    assert any("columns not checked: source" in note for note in result.summary.notes)


@pytest.mark.slow  # over half a second: out of the quick subset
def test_a_store_of_uint16_ids_overflows_a_large_vocabulary(tmp_path):
    streaming = streaming_base()
    with streaming.MDSWriter(out=str(tmp_path / "u16"), columns={"input_ids": "ndarray:uint16"}) as out:
        for row in range(4):
            out.write({"input_ids": np.arange(1, 5, dtype=np.uint16) + row})
    result = scrub.scan(tmp_path / "u16", scheduler="sync", vocab_size=100_277)
    assert found(result) == {("shard.00000.mds", "*", "token-dtype-overflow")}


def test_the_cleaned_copy_is_read_by_streaming_with_the_kept_samples_unchanged(tmp_path):
    source = tmp_path / "sft"
    write_sft(source, compression="zstd:7", hashes=["sha1", "xxh64"])
    fixed = scrub.fix(source, quarantine=True, scheduler="sync", vocab_size=1000)
    assert fixed.verified and fixed.report["kept"] == 10 and fixed.report["quarantined"] == 2
    before = samples(source)
    after = samples(fixed.clean, validate_hash="sha1")  # the new files' hashes are right
    expected = [sample for number, sample in enumerate(before) if number not in (3, 5)]
    assert len(after) == len(expected) == 10
    for got, want in zip(after, expected):
        assert got.keys() == want.keys()
        assert np.array_equal(got["input_ids"], want["input_ids"]) and got["input_ids"].dtype == np.int32
        assert np.array_equal(got["labels"], want["labels"]) and got["source"] == want["source"]
    shards = json.loads((fixed.clean / "index.json").read_text())["shards"]
    assert all(shard["compression"] == "zstd:7" and shard["zip_data"] for shard in shards)
    held = samples(fixed.quarantine / "sft")
    assert [sample["source"] for sample in held] == ["doc 3", "doc 5"]
    assert scrub.scan(fixed.clean, scheduler="sync", vocab_size=1000).summary.records_with_errors == 0


def test_text_and_chat_columns_are_records_and_other_columns_are_not_decoded(tmp_path):
    streaming = streaming_base()
    columns = {"messages": "json", "image": "jpeg", "id": "int"}
    chats = [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        [{"role": "user", "content": "hi"}],  # nothing the loss counts
        "not a list",  # malformed-record
    ]
    with streaming.MDSWriter(out=str(tmp_path / "chat"), columns=columns) as out:
        for number, chat in enumerate(chats):
            out.write({"messages": chat, "image": b"not decoded", "id": number})
    result = scrub.scan(tmp_path / "chat", scheduler="sync")
    checks = {(key, check) for _, key, check in found(result)}
    assert ("2", "malformed-record") in checks and ("0", "malformed-record") not in checks
    assert result.summary.records == 3


def test_a_pickled_column_is_refused_as_lmdb_refuses_pickles(tmp_path):
    streaming = streaming_base()
    with streaming.MDSWriter(out=str(tmp_path / "pickled"), columns={"input_ids": "pkl"}) as out:
        out.write({"input_ids": [1, 2, 3]})
        out.write({"input_ids": [1, 9999, 3]})
    result = scrub.scan(tmp_path / "pickled", scheduler="sync", vocab_size=1000)
    assert {(key, check) for _, key, check in found(result)} == {
        ("0", "undecodable-record"),
        ("1", "undecodable-record"),
    }
    issue = next(iter(result.issues()))
    assert "--allow-pickle" in issue.message and "arbitrary code" in issue.message
    trusted = scrub.scan(tmp_path / "pickled", scheduler="sync", vocab_size=1000, allow_pickle=True)
    assert {(key, check) for _, key, check in found(trusted)} == {("1", "token-out-of-range")}


def test_a_damaged_shard_names_its_unreadable_samples_and_the_scan_goes_on(tmp_path):
    source = tmp_path / "sft"
    write_sft(source, rows=30, size_limit=2000)
    shards = json.loads((source / "index.json").read_text())["shards"]
    assert len(shards) >= 2 and shards[0]["samples"] >= 4
    first = source / shards[0]["raw_data"]["basename"]
    first.write_bytes(first.read_bytes()[:-40])  # the shard's last sample is cut short
    missing = shards[-1]
    (source / missing["raw_data"]["basename"]).unlink()  # an interrupted download
    result = scrub.scan(source, scheduler="sync", vocab_size=1000)
    last = shards[0]["samples"] - 1
    damaged = {issue.key for issue in result.issues() if issue.check == "malformed-record"}
    assert damaged == {str(last)}
    assert (missing["raw_data"]["basename"], "*", "missing-file") in found(result)
    assert (shards[0]["raw_data"]["basename"], "3", "token-out-of-range") in found(result)  # the rest is read
    assert result.summary.records == 30 - missing["samples"]
    fixed = scrub.fix(source, quarantine=True, scheduler="sync", vocab_size=1000)
    assert fixed.verified
    assert fixed.report["kept"] + fixed.report["quarantined"] == 30 - missing["samples"]
    assert len(samples(fixed.clean)) == fixed.report["kept"]
    written = json.loads((fixed.clean / "index.json").read_text())["shards"]
    assert missing["raw_data"]["basename"] not in {entry["raw_data"]["basename"] for entry in written}
    assert any("missing" in line for line in fixed.report["forced"])


def test_restore_puts_every_sample_back(tmp_path):
    source = tmp_path / "sft"
    write_sft(source)
    fixed = scrub.fix(source, quarantine=True, scheduler="sync", vocab_size=1000)
    one = restore(fixed.quarantine, keys=["3"], scheduler="sync")
    assert one.verified and one.report["quarantined"] == 1
    assert [int(s["input_ids"][2]) for s in samples(one.clean)].count(5000) == 1
    whole = restore(fixed.quarantine, scheduler="sync")
    assert whole.verified and whole.report["kept"] == 12 and whole.report["quarantined"] == 0
    again, original = samples(whole.clean), samples(source)
    assert len(again) == len(original) == 12
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(again, original))


def test_folders_of_datasets_and_merged_indexes(tmp_path):
    streaming_base()
    from streaming.base.util import merge_index

    root = tmp_path / "splits"
    write_sft(root / "train")
    write_sft(root / "val", rows=4, first=100)
    result = scrub.scan(root, scheduler="sync", vocab_size=1000)
    assert result.summary.records == 16
    keys = {(source.split("/")[0], key, check) for source, key, check in found(result)}
    assert keys == {("train", "3", "token-out-of-range"), ("train", "5", "no-supervised-tokens"),
                    ("val", "15", "token-out-of-range")}  # fmt: skip
    fixed = scrub.fix(root, quarantine=True, scheduler="sync", vocab_size=1000)
    assert fixed.verified and fixed.report["kept"] == 13
    assert len(samples(fixed.clean / "train")) == 10 and len(samples(fixed.clean / "val")) == 3
    merge_index(str(root), keep_local=True)  # one index.json, shards below
    merged = scrub.scan(root, scheduler="sync", vocab_size=1000)
    assert {key for _, key, _ in found(merged)} == {"3", "5", "15"}
    fixed = scrub.fix(root, out=tmp_path / "merged.clean", scheduler="sync", vocab_size=1000)
    assert fixed.verified and len(samples(fixed.clean)) == 13


@pytest.mark.slow
def test_unusable_datasets_are_one_line(tmp_path):
    streaming = streaming_base()
    with streaming.MDSWriter(out=str(tmp_path / "images"), columns={"image": "jpeg", "label": "int"}) as out:
        out.write({"image": b"\xff\xd8", "label": 1})
    assert "no column a language-model record is read by" in one_line_error("scan", tmp_path / "images")
    with streaming.MDSWriter(
        out=str(tmp_path / "brotli"), columns={"input_ids": "ndarray:int32"}, compression="br"
    ) as out:
        out.write({"input_ids": np.arange(3, dtype=np.int32)})
    assert "br-compressed shards are not read" in one_line_error("scan", tmp_path / "brotli")
    assert "no such column" in one_line_error("scan", tmp_path / "images", "--data-key", "ids")


def test_the_command_line_reports_and_exits_1(tmp_path):
    write_sft(tmp_path / "sft")
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", str(tmp_path / "sft"), "--vocab-size", "1000"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    assert "token-out-of-range" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("cut", [30, 200])  # inside the table of sample offsets; inside sample 0
def test_a_shard_cut_short_names_every_sample_it_lost(tmp_path, cut):
    """index.json counts each shard's samples: every one the cut took is a finding, none silent."""
    source = tmp_path / "sft"
    write_sft(source, rows=30, size_limit=2000)
    shard = json.loads((source / "index.json").read_text())["shards"][0]
    first = source / shard["raw_data"]["basename"]
    first.write_bytes(first.read_bytes()[:cut])
    manifest = tmp_path / "sft.scrub.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrub",
            "scan",
            str(source),
            "--vocab-size",
            "1000",
            "--manifest",
            str(manifest),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    lost = [json.loads(line) for line in manifest.read_text().splitlines()]
    lost = [line for line in lost if line.get("check") == "malformed-record"]
    assert [(line["source"], line["key"]) for line in lost] == [
        (first.name, str(n)) for n in range(shard["samples"])
    ]
