"""Default manifest names: a scan without ``--manifest`` never silently replaces a default
manifest that holds another dataset's scan (its scan record says which); the name then takes the
folders above the dataset and a note says so, while a rescan of the same dataset replaces its own
quietly. Through the real command line, on real token files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
from conftest import SAMPLES
from typer.testing import CliRunner

from scrub.cli import app

runner = CliRunner()


def run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def token_file(path: Path, seed: int, bad: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = np.random.default_rng(seed).integers(0, 1000, 640).astype(np.uint16)
    if bad:
        ids[5] = 1500  # window 0: out of a 1,000 vocabulary
    ids.tofile(path)
    return path


def scan(path: Path, *more: object):
    return run("scan", path, *more, "--max-length", 64, "--vocab-size", 1000, "--scheduler", "sync")


def keys(manifest: str) -> list[str]:
    return [json.loads(line)["key"] for line in Path(manifest).read_text().splitlines()]


def test_a_second_dataset_of_the_same_name_gets_a_manifest_of_its_own(tmp_path):
    nano = token_file(tmp_path / "nano" / "train.bin", 0)
    big = token_file(tmp_path / "nano100k" / "train.bin", 1, bad=True)
    first = scan(nano)
    assert first.exit_code == 0 and "manifest: train.bin.scrub.jsonl" in first.output
    second = scan(big)
    assert second.exit_code == 1, second.output
    assert "manifest: nano100k-train.bin.scrub.jsonl" in second.output
    assert (
        f"train.bin.scrub.jsonl holds the scan of {nano}" in second.output and "--manifest" in second.output
    )
    assert keys("train.bin.scrub.jsonl") == [] and keys("nano100k-train.bin.scrub.jsonl") == ["0"]
    record = json.loads(Path("train.bin.scrub.scan.json").read_text())
    assert record["absolute_path"] == str(nano)
    # a rescan of either replaces its own, and the other stays
    again = scan(big)
    assert "manifest: nano100k-train.bin.scrub.jsonl" in again.output
    rescan = scan(nano)
    assert "manifest: train.bin.scrub.jsonl" in rescan.output and "holds the scan" not in rescan.output
    assert sorted(p.name for p in Path.cwd().glob("*.jsonl")) == [
        "nano100k-train.bin.scrub.jsonl",
        "train.bin.scrub.jsonl",
    ]
    # fix without --manifest scans and names its manifest the same way
    fixed = run("fix", big, "--max-length", 64, "--vocab-size", 1000, "--scheduler", "sync")
    assert fixed.exit_code == 0, fixed.output
    assert "holds the scan of" in fixed.output and keys("train.bin.scrub.jsonl") == []


def test_the_same_dataset_named_otherwise_is_the_same(tmp_path, monkeypatch):
    nano = token_file(tmp_path / "nano" / "train.bin", 0)
    scan(nano)
    monkeypatch.chdir(tmp_path)
    scan(Path("nano") / "train.bin", "--manifest", "train.bin.scrub.jsonl")
    relative = scan(Path("nano") / ".." / "nano" / "train.bin")
    assert "manifest: train.bin.scrub.jsonl" in relative.output and "holds the scan" not in relative.output


def test_a_manifest_without_a_record_or_from_before_absolute_path(tmp_path):
    nano = token_file(tmp_path / "nano" / "train.bin", 0)
    Path("train.bin.scrub.jsonl").write_text("")  # not scrub's scan (no record): which dataset is unknown
    kept = scan(nano)
    assert "manifest: nano-train.bin.scrub.jsonl" in kept.output
    assert "no scan record" in kept.output and Path("train.bin.scrub.jsonl").read_text() == ""
    record_path = Path("nano-train.bin.scrub.scan.json")
    record = json.loads(record_path.read_text())
    del record["absolute_path"]  # as an older scrub wrote it: the path as given, where it ran (here)
    record["path"] = os.path.relpath(nano)
    record_path.write_text(json.dumps(record))
    again = scan(nano)
    assert "manifest: nano-train.bin.scrub.jsonl" in again.output and "no scan record" in again.output
    record["path"] = os.path.relpath(token_file(tmp_path / "other" / "train.bin", 2))
    record_path.write_text(json.dumps(record))
    moved = scan(nano)  # the older record names another dataset: not replaced
    assert f"manifest: {tmp_path.name}-nano-train.bin.scrub.jsonl" in moved.output, moved.output


def test_several_datasets_in_other_folders_do_not_share_datasets_jsonl(tmp_path):
    first = [token_file(tmp_path / "one" / name / "train.bin", i) for i, name in enumerate("ab")]
    second = [token_file(tmp_path / "two" / name / "train.bin", i, bad=True) for i, name in enumerate("ab")]
    assert "manifest: datasets.scrub.jsonl" in scan(*first).output
    other = scan(*second)
    assert "manifest: two-datasets.scrub.jsonl" in other.output, other.output
    assert "manifest: datasets.scrub.jsonl" in scan(*first).output  # its own again


def test_a_folder_of_datasets_is_named_after_the_folder(tmp_path):
    shutil.copytree(SAMPLES / "lmdb", tmp_path / "lmdb")
    first = run("scan", tmp_path / "lmdb", "--scheduler", "sync")
    assert "manifest: lmdb.scrub.jsonl" in first.output, first.output  # the README's example
    again = run("scan", tmp_path / "lmdb", "--scheduler", "sync")
    assert "manifest: lmdb.scrub.jsonl" in again.output and "holds the scan" not in again.output
    shutil.copytree(SAMPLES / "lmdb", tmp_path / "other" / "lmdb")
    other = run("scan", tmp_path / "other" / "lmdb", "--scheduler", "sync")
    assert "manifest: other-lmdb.scrub.jsonl" in other.output, other.output
