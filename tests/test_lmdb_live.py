"""A live LMDB: another process commits while scrub scans (what a nightly job meets). Read with
LMDB's lock, every read transaction is a snapshot whose pages the writer leaves alone; read
without it (as scrub did), the scans failed (MDB_PAGE_NOTFOUND) or aborted on an LMDB assertion
in 19 of 19 runs with a writer that also deletes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest
from conftest import image_bytes

import scrub

#: scans while a writer process commits: `-m "not slow"` (the quick subset) leaves it out
pytestmark = pytest.mark.slow

WRITER = r"""
import sys, time, lmdb
path, delete, value = sys.argv[1], sys.argv[2] == "delete", bytes.fromhex(sys.argv[3])
env = lmdb.open(path, map_size=1 << 20)  # small: the writer grows the map as it goes
def put(t, n):
    t.put(b"%08d" % n, value)
n = 0
while n < 5000:
    try:
        with env.begin(write=True) as t:
            for _ in range(500):
                put(t, n); n += 1
    except lmdb.MapFullError:
        env.set_mapsize(env.info()["map_size"] * 2)
print("ready", flush=True)
while True:
    time.sleep(0.01)  # a commit every ~10 ms: about a hundred during a scan
    try:
        with env.begin(write=True) as t:
            for _ in range(20):
                put(t, n); n += 1
            if delete:
                for k in range(n - 5020, n - 5000):
                    t.delete(b"%08d" % k)
    except lmdb.MapFullError:
        env.set_mapsize(env.info()["map_size"] * 2)
"""


@pytest.mark.parametrize("mode", ["append", "delete"])
def test_scans_complete_while_a_writer_commits(tmp_path, mode):
    database = tmp_path / "live"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(database), mode, image_bytes(fmt="PNG").hex()],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        for run in range(3):
            manifest = tmp_path / f"m{run}.jsonl"
            done = subprocess.run(
                [sys.executable, "-m", "scrub", "scan", str(database), "-q", "--manifest", str(manifest)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr  # complete, and every value a clean PNG
            summary = json.loads(manifest.with_name(f"m{run}.scan.json").read_text())
            reading = summary["dataset"]["files"]["live"]
            assert reading["locked"] is True and reading["snapshot"] > 0
            assert summary["complete"] and summary["records"] > 0
            if summary["records"] != reading["entries"]:  # each key range read in a later snapshot
                assert any("the database changed during the scan" in note for note in summary["notes"])
            # every value is the same PNG: every record but one is a duplicate, each named once
            keys = [line["key"] for line in map(json.loads, manifest.read_text().splitlines())]
            assert len(keys) == len(set(keys)) and len(keys) >= summary["records"] - 1
            assert writer.poll() is None  # the writer was committing all along
    finally:
        writer.kill()
        writer.wait()


def test_an_environment_without_a_lock_file_is_read_without_adding_one(tmp_path):
    """A copy of data.mdb alone: read without a lock, and nothing is created beside it."""
    made = tmp_path / "made"
    with lmdb.open(str(made), map_size=1 << 20) as env, env.begin(write=True) as t:
        t.put(b"a", image_bytes(fmt="PNG"))
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(made / "data.mdb", copy / "data.mdb")
    result = scrub.scan(copy, scheduler="sync")
    assert result.summary.records == 1
    assert result.summary.dataset.files["copy"]["locked"] is False
    assert sorted(p.name for p in copy.iterdir()) == ["data.mdb"]
    assert not any("lock" in note for note in result.summary.notes)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write a read-only lock file")
def test_a_read_only_lock_file_is_said(tmp_path: Path):
    made = tmp_path / "made"
    with lmdb.open(str(made), map_size=1 << 20) as env, env.begin(write=True) as t:
        t.put(b"a", image_bytes(fmt="PNG"))
    (made / "lock.mdb").chmod(0o444)
    result = scrub.scan(made, scheduler="sync")
    assert result.summary.dataset.files["made"]["locked"] is False
    assert any("read without LMDB's lock" in note for note in result.summary.notes)
