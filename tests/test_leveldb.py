"""LevelDB (Caffe's --backend leveldb): databases written with plyvel, Caffe Datum values, scanned
and fixed; plyvel reads what fix wrote; the source's files stay byte for byte as they were, and
a writer holding the database open is not disturbed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import image_bytes
from test_lmdb import datum, npy

import scrub

plyvel = pytest.importorskip("plyvel")


def write_leveldb(path: Path) -> dict[bytes, bytes]:
    items = {
        f"{i:08d}_img/{i}.jpg".encode(): datum(data=image_bytes(i), label=i % 5, encoded=True)
        for i in range(20)
    }
    jpeg = image_bytes(99)
    items[b"00000005_img/5.jpg"] = datum(data=jpeg[: len(jpeg) // 2], label=1, encoded=True)  # truncated
    items[b"00000021_float"] = datum(channels=1, height=1, width=4, float_data=[1.0, float("nan"), 2.0, 3.0])
    items[b"00000022_npy"] = npy(np.array([1e39, 1.0]))  # float32 overflow
    database = plyvel.DB(str(path), create_if_missing=True)
    for key, value in items.items():
        database.put(key, value)
    database.close()
    return items


def tree(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


def items_of(path: Path) -> dict[bytes, bytes]:
    database = plyvel.DB(str(path), create_if_missing=False)
    try:
        return dict(database.iterator())
    finally:
        database.close()


def test_scan_and_fix_a_caffe_leveldb(tmp_path):
    source = tmp_path / "train_leveldb"
    items = write_leveldb(source)
    before = tree(source)
    result = scrub.scan(source, scheduler="sync")
    found = {(issue.key, issue.check) for issue in result.issues()}
    assert ("00000005_img/5.jpg", "corrupt-image") in found
    assert ("00000021_float", "nonfinite-data") in found
    assert ("00000022_npy", "float32-overflow") in found
    assert result.summary.records == 22 and result.summary.dataset.format == "leveldb"
    assert result.summary.dataset.labelled  # Datums carry labels
    fixed = scrub.fix(source, quarantine=True)  # the default scheduler: threads, one handle
    assert fixed.verified and fixed.report["kept"] == 19 and fixed.report["quarantined"] == 3
    clean, held = items_of(fixed.clean), items_of(fixed.quarantine / "train_leveldb")
    assert set(clean).isdisjoint(held) and {**clean, **held} == items
    assert tree(source) == before  # never opened in place: no new manifest, log or LOCK
    assert scrub.scan(fixed.clean, scheduler="sync").summary.records_with_errors == 0


def test_a_writer_holding_the_database_is_not_disturbed(tmp_path):
    source = tmp_path / "live_leveldb"
    write_leveldb(source)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, plyvel; db = plyvel.DB(sys.argv[1]); db.put(b'zz', b'x'); "
            "print('open', flush=True); sys.stdin.read()",
            str(source),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "scrub",
                "scan",
                str(source),
                "-q",
                "--manifest",
                str(tmp_path / "m.jsonl"),
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 1, done.stderr  # read from the linked copy while the lock is held
        assert holder.poll() is None
    finally:
        holder.communicate("")
    assert b"zz" in items_of(source)  # the writer's data is intact


def test_processes_are_refused_in_one_line(tmp_path):
    source = tmp_path / "db"
    write_leveldb(source)
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", str(source), "--scheduler", "processes"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "use --scheduler threads or sync" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_metadata_keys_are_each_outputs_own_or_said_unchanged(tmp_path):
    import pickle

    source = tmp_path / "meta_leveldb"
    database = plyvel.DB(str(source), create_if_missing=True)
    keys = [f"{i:03d}".encode() for i in range(5)]
    for number, key in enumerate(keys):
        database.put(key, image_bytes(number, fmt="PNG") if number != 3 else b"not an image")
    database.put(b"__keys__", pickle.dumps(keys))
    database.put(b"num-samples", b"5")
    database.close()
    result = scrub.fix(source, quarantine=True)
    assert result.report["kept"] == 4
    clean = items_of(result.clean)
    assert clean[b"num-samples"] == b"4" and clean[b"__keys__"] == pickle.dumps(keys)  # not unpickled
    assert any("metadata keys copied unchanged (__keys__)" in note for note in result.report["notes"])
    allowed = scrub.fix(source, allow_pickle=True, out=tmp_path / "allowed")
    assert pickle.loads(items_of(allowed.clean)[b"__keys__"]) == [k for k in keys if k != b"003"]


def test_a_folder_holding_a_leveldb_scans_it_or_says_which_extra_to_install(tmp_path):
    """A folder of databases: a LevelDB is one of them, as an LMDB environment is (it was taken
    for an image folder with no image: "none is a dataset scrub can read")."""
    import shutil
    import subprocess
    import sys

    from conftest import SAMPLES

    shutil.copytree(SAMPLES / "leveldb" / "datum_leveldb", tmp_path / "data" / "datum_leveldb")
    (tmp_path / "data" / "README.txt").write_text("the Datums\n")
    found = scrub.scan(tmp_path / "data", scheduler="sync", manifest=tmp_path / "m.jsonl")
    assert [part.dataset.format for part in found.summary.parts] == ["leveldb"]
    assert found.summary.records == 22
    without = subprocess.run(  # plyvel cannot be imported: the same line as for the database named
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['plyvel'] = None; from scrub.__main__ import main; "
            "sys.argv[0] = 'scrub'; main()",
            "scan",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert without.returncode == 2
    assert without.stderr.strip() == (
        "scrub: error: reading LevelDB needs plyvel: pip install 'scrub[leveldb]' (or pip install plyvel)"
    )
