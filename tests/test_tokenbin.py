"""Flat token files: nanoGPT's raw uint16 ``train.bin`` (written as its prepare.py writes it,
``np.array(ids, dtype=np.uint16).tofile``) and llm.c's shards (its 256-int32 header); records
are windows of ``--max-length``; the cleaned copy, read back with NumPy, is the kept windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import manifest_lines, one_line_error

import scrub
from scrub.readers.tokenbin import MAGIC


def tokens(count: int = 10 * 64 + 1, seed: int = 0) -> np.ndarray:
    ids = np.random.default_rng(seed).integers(0, 1000, count).astype(np.uint16)
    ids[3 * 64 + 5] = 1100  # window 3: token-out-of-range with --vocab-size 1000
    return ids


def shard(path: Path, ids: np.ndarray, version: int = 1) -> None:
    """An llm.c shard as its fineweb.py writes one: header (magic, version, count), then tokens."""
    header = np.zeros(256, "<i4")
    header[:3] = (MAGIC, version, len(ids))
    path.write_bytes(header.tobytes() + ids.astype(np.uint16 if version == 1 else np.uint32).tobytes())


def keyed(result) -> set[tuple[str, str]]:
    return {(issue.key, issue.check) for issue in result.issues()}


def test_nanogpt_train_bin_is_read_in_windows_and_fixed_without_the_bad_ones(tmp_path):
    ids = tokens()
    ids.tofile(tmp_path / "train.bin")
    result = scrub.scan(tmp_path / "train.bin", vocab_size=1000, max_length=64, scheduler="sync")
    assert result.summary.records == 11  # 10 windows of 64 and the last of one token
    assert keyed(result) == {("3", "token-out-of-range")}  # the one-token window: training packs
    assert any("packs into samples" in note for note in result.summary.notes)
    position = next(i for i in result.issues() if i.key == "3").details["position"]
    assert position == 5
    assert result.summary.to_dict()["reading"]["max_length"] == 64
    fixed = scrub.fix(
        tmp_path / "train.bin", quarantine=True, vocab_size=1000, max_length=64, scheduler="sync"
    )
    assert fixed.verified and fixed.clean == tmp_path / "train.clean.bin"
    clean = np.fromfile(fixed.clean, dtype=np.uint16)  # as nanoGPT's get_batch maps it
    windows = [ids[i * 64 : (i + 1) * 64] for i in range(11)]
    assert np.array_equal(clean, np.concatenate([w for i, w in enumerate(windows) if i != 3]))
    held = np.fromfile(fixed.quarantine / "train.bin", dtype=np.uint16)
    assert np.array_equal(held, windows[3])
    assert not keyed(scrub.scan(fixed.clean, vocab_size=1000, max_length=64, scheduler="sync"))


@pytest.mark.parametrize("version", [1, 2])
def test_an_llmc_shard_keeps_its_header_with_the_new_count(tmp_path, version):
    ids = tokens().astype(np.uint32)
    if version == 2:
        ids[7 * 64] = 200_000  # a uint32 shard holds it; out of a 100,000 vocabulary
    shard(tmp_path / "fineweb_train_000001.bin", ids, version)
    vocabulary = 1000 if version == 1 else 100_000
    result = scrub.scan(
        tmp_path / "fineweb_train_000001.bin", vocab_size=vocabulary, max_length=64, scheduler="sync"
    )
    expected = {("3", "token-out-of-range")} if version == 1 else {("7", "token-out-of-range")}
    assert keyed(result) == expected
    assert result.summary.dataset.to_dict()["files"]["fineweb_train_000001.bin"]["dtype"] == (
        "uint16" if version == 1 else "uint32"
    )
    fixed = scrub.fix(
        tmp_path / "fineweb_train_000001.bin",
        out=tmp_path / "clean.bin",
        vocab_size=vocabulary,
        max_length=64,
    )
    assert fixed.verified
    header = np.fromfile(tmp_path / "clean.bin", dtype="<i4", count=256)
    assert list(header[:3]) == [MAGIC, version, 9 * 64 + 1]
    body = np.fromfile(tmp_path / "clean.bin", dtype=np.uint16 if version == 1 else np.uint32, offset=1024)
    assert len(body) == 9 * 64 + 1


def test_without_max_length_a_token_file_is_one_line_naming_it(tmp_path):
    tokens().tofile(tmp_path / "train.bin")
    assert "--max-length" in one_line_error("scan", tmp_path / "train.bin")


def test_a_shard_shorter_than_its_header_says_is_one_line(tmp_path):
    shard(tmp_path / "s.bin", tokens())
    data = (tmp_path / "s.bin").read_bytes()
    (tmp_path / "s.bin").write_bytes(data[:-10])
    assert "llm.c's loader refuses it" in one_line_error("scan", tmp_path / "s.bin", "--max-length", "64")


def test_a_raw_file_cut_inside_a_token_is_one_line(tmp_path):
    """A raw file cut between two tokens cannot be told from a whole one (it has no header); one
    cut inside a token can: NumPy's memmap of it raises (not a multiple of the dtype)."""
    data = tokens().tobytes()
    (tmp_path / "train.bin").write_bytes(data[:-1])
    assert "not a whole number of uint16 tokens" in one_line_error(
        "scan", tmp_path / "train.bin", "--max-length", "64"
    )


def test_a_uint16_file_for_a_larger_vocabulary_is_token_dtype_overflow(tmp_path):
    tokens().tofile(tmp_path / "train.bin")
    result = scrub.scan(tmp_path / "train.bin", vocab_size=70000, max_length=64, scheduler="sync")
    assert ("*", "token-dtype-overflow") in keyed(result)


def test_a_bin_beside_an_idx_is_megatron_unless_forced(tmp_path):
    from scrub.api import open_dataset

    tokens().tofile(tmp_path / "d.bin")
    (tmp_path / "d.idx").write_bytes(b"MMIDIDX\x00\x00" + b"\x00" * 30)
    assert open_dataset(tmp_path / "d.bin", format="tokenbin", max_length=64).reader.format == "tokenbin"
    assert "Megatron index version 0" in one_line_error("scan", tmp_path / "d.bin")  # sniffed as Megatron's
    assert "--max-length" in one_line_error("scan", tmp_path / "d.bin", "--format", "tokenbin")


def test_the_window_is_part_of_the_fingerprint_and_restore_reads_with_it(tmp_path):
    from scrub.fixing.restoring import restore

    tokens().tofile(tmp_path / "train.bin")
    scanned = scrub.scan(
        tmp_path / "train.bin",
        vocab_size=1000,
        max_length=64,
        manifest=tmp_path / "m.jsonl",
        scheduler="sync",
    )
    other = scrub.scan(tmp_path / "train.bin", vocab_size=1000, max_length=32, scheduler="sync")
    assert (
        scanned.summary.to_dict()["fingerprint"]["digest"] != other.summary.to_dict()["fingerprint"]["digest"]
    )
    with pytest.raises(scrub.ScrubError):
        scrub.fix(
            tmp_path / "train.bin", manifest=tmp_path / "m.jsonl", max_length=32, out=tmp_path / "x.bin"
        )
    fixed = scrub.fix(
        tmp_path / "train.bin", quarantine=True, vocab_size=1000, max_length=64, scheduler="sync"
    )
    whole = restore(fixed.quarantine, scheduler="sync")
    assert whole.verified and whole.report["kept"] == 11
    assert (tmp_path / "train.clean.bin").read_bytes() == (tmp_path / "train.bin").read_bytes()


def test_a_folder_of_token_files_is_a_folder_of_datasets_each_in_its_windows(tmp_path):
    """nanoGPT's prepare.py writes train.bin and val.bin side by side (and meta.pkl): the folder
    is scanned as a folder of LMDB environments is, each file a dataset with --max-length
    windows of its own, and `fix` writes each one's cleaned copy."""
    from typer.testing import CliRunner

    from scrub.cli import app

    data = tmp_path / "nano"
    data.mkdir()
    train, val = tokens(), tokens(5 * 64, seed=1)
    val[3 * 64 + 5] = 7  # val.bin's one bad id is in window 1
    val[64 + 2] = 1200
    train.tofile(data / "train.bin")
    val.tofile(data / "val.bin")
    (data / "meta.pkl").write_bytes(b"\x80\x04}\x94.")  # the vocabulary's pickle: not a dataset
    manifest = tmp_path / "nano.scrub.jsonl"
    runner = CliRunner()
    scanned = runner.invoke(
        app, ["scan", str(data), "--vocab-size", "1000", "--max-length", "64", "--manifest", str(manifest)]
    )
    assert scanned.exit_code == 1, scanned.output
    assert "tokenbin (2 datasets)" in scanned.output
    assert "1 entry is not datasets" in scanned.output and "meta.pkl" in scanned.output
    lines = manifest_lines(manifest)
    assert {(Path(line["dataset"]).name, line["key"], line["check"]) for line in lines} == {
        ("train.bin", "3", "token-out-of-range"),
        ("val.bin", "1", "token-out-of-range"),
    }
    out = tmp_path / "clean"
    fixed = runner.invoke(
        app, ["fix", str(data), "--vocab-size", "1000", "--max-length", "64", "--out", str(out)]
    )
    assert fixed.exit_code == 0, fixed.output
    windows = [train[i * 64 : (i + 1) * 64] for i in range(11)]
    kept_train = np.fromfile(out / "train.clean.bin", dtype=np.uint16)  # as nanoGPT maps it
    assert np.array_equal(kept_train, np.concatenate([w for i, w in enumerate(windows) if i != 3]))
    kept_val = np.fromfile(out / "val.clean.bin", dtype=np.uint16)
    assert np.array_equal(kept_val, np.concatenate([val[:64], val[128:]]))
    assert sorted(path.name for path in data.iterdir()) == ["meta.pkl", "train.bin", "val.bin"]


def test_a_folder_of_token_files_needs_max_length_once(tmp_path):
    tokens().tofile(tmp_path / "train.bin")
    tokens(seed=1).tofile(tmp_path / "val.bin")
    assert "--max-length" in one_line_error("scan", tmp_path)
