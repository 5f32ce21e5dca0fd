"""Incremental rescans: a cached result gives exactly the issues a full scan gives."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import h5py
import numpy as np
from conftest import image_bytes, write

import scrub
from scrub.scanning.cache import SUFFIX

TRUNCATED = 300


def dataset(root, count=60):
    """Three classes of JPEGs and PNGs, with a truncated file, a duplicate and a mislabelled one."""
    for i in range(count):
        fmt, ext = ("PNG", "png") if i % 7 == 0 else ("JPEG", "jpg")
        write(root / f"c{i % 3}" / f"{i:03d}.{ext}", image_bytes(i, fmt=fmt))
    write(root / "c0" / "bad.jpg", image_bytes(500)[:TRUNCATED])
    write(root / "c1" / "copy.jpg", image_bytes(3))
    write(root / "c2" / "wrong.png", image_bytes(501))  # a JPEG named .png: format-mismatch
    return root


def lines(result):
    return sorted(json.dumps(issue.to_dict(), sort_keys=True) for issue in result.issues())


def same_as_full_scan(path, cache, **options):
    """Scan with the cache, then without it: the same issues, the same statistics."""
    cached = scrub.scan(path, cache=cache, **options)
    full = scrub.scan(path, **options)
    assert lines(cached) == lines(full)
    for field in (
        "records",
        "issues_by_check",
        "issues_by_severity",
        "records_with_errors",
        "stats",
        "datasets",
    ):
        assert getattr(cached.summary, field) == getattr(full.summary, field), field
    return cached.summary.cache


def test_an_unchanged_rescan_reuses_every_result(tmp_path):
    root = dataset(tmp_path / "d")
    cache = tmp_path / "cache"
    first = same_as_full_scan(root, cache, num_classes=3)
    assert (first["reused"], first["scanned"]) == (0, 63) and first["from"] is None
    again = same_as_full_scan(root, cache, num_classes=3)
    assert (again["reused"], again["scanned"]) == (63, 0)
    assert len(list(cache.glob(f"*{SUFFIX}"))) == 1


def test_an_unchanged_rescan_keeps_the_file_and_marks_it_used(tmp_path):
    root = dataset(tmp_path / "d")
    cache = tmp_path / "cache"
    scrub.scan(root, cache=cache)
    (stored,) = cache.glob(f"*{SUFFIX}")
    content = stored.read_bytes()
    os.utime(stored, ns=(1, 1))
    assert same_as_full_scan(root, cache)["reused"] == 63
    assert stored.read_bytes() == content and stored.stat().st_mtime_ns > 1  # not rewritten, used
    (root / "c1" / "copy.jpg").unlink()  # one record fewer: the next file is another
    assert same_as_full_scan(root, cache)["reused"] == 62
    assert stored.read_bytes() != content
    assert same_as_full_scan(root, cache)["reused"] == 62


def test_rows_carried_over_keep_their_outcomes_and_columns(tmp_path):
    """Records reused under their own key are carried into the next file as they are; ones
    found by content under a new name get a row of their own: a third scan still agrees."""
    root = dataset(tmp_path / "d")
    cache = tmp_path / "cache"
    scrub.scan(root, cache=cache, num_classes=3)
    (root / "c0" / "003.jpg").rename(root / "c0" / "renamed.jpg")  # by content
    write(root / "c2" / "new.jpg", image_bytes(77))  # scanned
    first = same_as_full_scan(root, cache, num_classes=3)
    assert (first["reused"], first["scanned"]) == (63, 1)
    again = same_as_full_scan(root, cache, num_classes=3)
    assert (again["reused"], again["scanned"]) == (64, 0)


def test_changes_renames_additions_and_deletions(tmp_path):
    root = dataset(tmp_path / "d")
    cache = tmp_path / "cache"
    scrub.scan(root, cache=cache, num_classes=3)
    (root / "c0" / "003.jpg").write_bytes(image_bytes(900)[: TRUNCATED + 50])  # now broken
    (root / "c0" / "bad.jpg").write_bytes(image_bytes(901))  # now fine
    os.rename(root / "c1" / "004.jpg", root / "c1" / "renamed.jpg")  # same bytes, new name
    os.rename(root / "c2" / "005.jpg", root / "c0" / "005.jpg")  # same bytes, another label
    (root / "c1" / "013.jpg").unlink()
    write(root / "c2" / "new.jpg", image_bytes(902))
    write(root / "c2" / "dup-of-cached.jpg", image_bytes(10))  # a duplicate of a cached record
    os.utime(root / "c2" / "008.jpg", ns=(1, 1))  # touched only: the content hash decides
    summary = same_as_full_scan(root, cache, num_classes=3)
    # rescanned: the two changed files, the moved one (its label changed), the two new files
    assert summary["scanned"] == 5 and summary["reused"] == 59  # 63 - 1 deleted + 2 new = 64 records


def test_a_changed_option_is_another_scope(tmp_path):
    root = dataset(tmp_path / "d")
    cache = tmp_path / "cache"
    scrub.scan(root, cache=cache, num_classes=3)
    summary = same_as_full_scan(root, cache, num_classes=2)  # labels 2 are now out of range
    assert summary["reused"] == 0
    assert same_as_full_scan(root, cache, num_classes=3)["reused"] == 63  # the first scope is kept
    assert same_as_full_scan(root, cache, num_classes=3, precision="float16")["reused"] == 0


def test_a_damaged_cache_file_is_ignored_with_a_note_and_rewritten(tmp_path):
    root = dataset(tmp_path / "d")
    cache = tmp_path / "cache"
    scrub.scan(root, cache=cache)
    (cached,) = cache.glob(f"*{SUFFIX}")
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0x40  # one flipped bit
    cached.write_bytes(bytes(data))
    result = scrub.scan(root, cache=cache)
    assert result.summary.cache["reused"] == 0
    assert any(
        "is damaged (its checksum does not match its content): ignored" in n for n in result.summary.notes
    )
    assert same_as_full_scan(root, cache)["reused"] == 63  # rewritten whole
    cached.write_bytes(b"garbage")
    assert any("not a scrub cache file" in n for n in scrub.scan(root, cache=cache).summary.notes)
    cached.write_bytes(b"scrub-cache 1\n" + bytes(40))  # the layout of rows before columns
    notes = scrub.scan(root, cache=cache).summary.notes
    assert any("was written by another version of scrub: ignored" in n for n in notes), notes


def test_a_copy_elsewhere_hits_by_content(tmp_path):
    root = dataset(tmp_path / "d")
    cache = tmp_path / "cache"
    scrub.scan(root, cache=cache)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(root), str(copy)], check=True)  # new inodes, same mtimes
    summary = same_as_full_scan(copy, cache)
    assert summary["reused"] == 63 and summary["from"] != summary["file"]


def test_list_files_and_reordering(tmp_path):
    root = dataset(tmp_path / "d", count=12)
    listing = tmp_path / "d" / "list.txt"
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.*g"))
    listing.write_text("".join(f"{name} {i % 4}\n" for i, name in enumerate(names)))
    cache = tmp_path / "cache"
    scrub.scan(listing, cache=cache, num_classes=3)
    listing.write_text("".join(f"{name} {i % 4}\n" for i, name in reversed(list(enumerate(names)))))
    assert same_as_full_scan(listing, cache, num_classes=3)["reused"] == len(names)


def test_misses_scanned_by_worker_processes_keep_their_offsets(tmp_path):
    root = dataset(tmp_path / "d")
    cache = tmp_path / "cache"
    scrub.scan(root, cache=cache, partition_size=5)
    for name in ("c0/000.png", "c1/001.jpg", "c2/002.jpg", "c0/bad.jpg", "c1/010.jpg", "c2/020.jpg"):
        path = root / name
        path.write_bytes(path.read_bytes()[:-10])  # each one changed: a truncated file
    summary = same_as_full_scan(root, cache, partition_size=5, scheduler="processes", workers=2)
    assert summary["scanned"] == 6


def test_dead_runs_temporaries_are_removed(tmp_path):
    root = dataset(tmp_path / "d", count=6)
    cache = tmp_path / "cache"
    cache.mkdir()
    process = subprocess.Popen(["true"])
    process.wait()
    stale = cache / f".x{SUFFIX}.scrub-{process.pid}-abcd.tmp"
    stale.write_bytes(b"partial")
    live = cache / f".x{SUFFIX}.scrub-{os.getppid()}-abcd.tmp"
    live.write_bytes(b"another run's")
    scrub.scan(root, cache=cache)
    assert not stale.exists() and live.exists()


def test_formats_without_a_cache_say_so(tmp_path):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=np.ones((5, 2), np.float32))
    result = scrub.scan(path, cache=tmp_path / "cache")
    assert result.summary.cache is None
    assert any(n.startswith("cache: hdf5 records are not cached") for n in result.summary.notes)


def test_dummy_loss_stores_without_reusing(tmp_path):
    root = dataset(tmp_path / "d", count=9)
    cache = tmp_path / "cache"
    scrub.scan(root, cache=cache, num_classes=3)
    result = scrub.scan(root, cache=cache, num_classes=3, dummy_loss=True)
    assert result.summary.cache["reused"] == 0
    assert any("--dummy-loss reads every record" in n for n in result.summary.notes)


def test_cli_prints_the_cache_line(tmp_path):
    from typer.testing import CliRunner

    from scrub.cli import app

    root = dataset(tmp_path / "d", count=6)
    args = ["scan", str(root), "--cache", str(tmp_path / "c"), "--manifest", str(tmp_path / "m.jsonl")]
    CliRunner().invoke(app, args)
    result = CliRunner().invoke(app, args)
    assert "cache: 9 records reused, 0 scanned" in result.output, result.output
    shutil.rmtree(tmp_path / "c")


def test_lmdb_values_are_looked_up_by_their_hash(tmp_path):
    from test_lmdb import datum, npy, write_db

    items = {
        f"{i:05d}".encode(): datum(
            channels=3, height=48, width=48, encoded=True, label=i % 4, data=image_bytes(i)
        )
        for i in range(40)
    }
    items[b"00007"] = datum(channels=3, height=48, width=48, encoded=True, label=2, data=image_bytes(7)[:200])
    items[b"00009"] = datum(channels=3, height=48, width=48, encoded=True, label=9, data=image_bytes(9))
    items[b"array"] = npy(np.array([1.0, np.nan], np.float32))
    path = write_db(tmp_path / "db", items.items())
    cache = tmp_path / "cache"
    first = same_as_full_scan(path, cache, num_classes=4, partition_size=8)
    assert (first["reused"], first["scanned"]) == (0, 41)
    assert same_as_full_scan(path, cache, num_classes=4, partition_size=8)["reused"] == 41
    items[b"00003"] = datum(channels=3, height=48, width=48, encoded=True, label=3, data=image_bytes(3)[:300])
    items[b"00011"] = datum(
        channels=3, height=48, width=48, encoded=True, label=1, data=image_bytes(11)
    )  # relabelled
    del items[b"00020"]
    items[b"00099"] = datum(
        channels=3, height=48, width=48, encoded=True, label=0, data=image_bytes(5)
    )  # a duplicate
    shutil.rmtree(path)
    write_db(path, items.items())
    summary = same_as_full_scan(
        path, cache, num_classes=4, partition_size=8, scheduler="processes", workers=2
    )
    assert (summary["reused"], summary["scanned"]) == (38, 3)
