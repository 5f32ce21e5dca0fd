"""A destination that is full or read-only: one line naming the path and the cause, exit 2, no
partial output, no crash (HDF5 segfaults on a full disk if left to itself), for every writer
and for the manifest. Runs on a real tmpfs of a few MB where the test may mount one (root)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import h5py
import lmdb
import numpy as np
import pytest
from PIL import Image

#: fills small file systems: `-m "not slow"` (the quick subset) leaves it out
pytestmark = pytest.mark.slow

MEBIBYTE = 1 << 20


def mount_tmpfs(where: Path, *options: str) -> None:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'not root'})")


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB file system."""
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=3m")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def read_only_disk(tmp_path):
    disk = tmp_path / "ro"
    mount_tmpfs(disk, "size=1m", "ro")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def scrub(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrub", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


def one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scrub: error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "internal error" not in lines[0] and "Traceback" not in done.stderr


def left_in(disk: Path) -> list[str]:
    return sorted(p.name for p in disk.iterdir())


def big_hdf5(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f["data"] = np.random.default_rng(0).random((120_000, 16), dtype=np.float32)  # 7.3 MiB
    return path


def test_fix_refuses_before_writing_when_the_outputs_cannot_fit(tmp_path, small_disk):
    source = big_hdf5(tmp_path / "big.h5")
    done = scrub("fix", source, "--out", small_disk / "big.clean.h5", cwd=tmp_path)
    one_line_error(done, "no space left on device", str(small_disk / "big.clean.h5"), "MiB")
    assert left_in(small_disk) == []
    environment = tmp_path / "env"
    with lmdb.open(str(environment), map_size=64 * MEBIBYTE) as env, env.begin(write=True) as txn:
        for number in range(1500):
            buffer = io.BytesIO()
            np.save(buffer, np.full(600, number, np.float64))
            txn.put(b"%06d" % number, buffer.getvalue())
    done = scrub("fix", environment, "--out", small_disk / "env.clean", cwd=tmp_path)
    one_line_error(done, "no space left on device", "env.clean")
    assert left_in(small_disk) == []


def test_a_disk_that_fills_during_the_write_is_one_line_not_a_crash(tmp_path, small_disk):
    """The HDF5 quarantine outgrows its compressed source (an index of 600,000 source rows);
    the preflight passes, the write fails half-way: exit 2, not HDF5's segfault (exit 139)."""
    source = tmp_path / "nan.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset(
            "data", data=np.full((600_000, 1), np.nan, np.float32), chunks=(65536, 1), compression="gzip"
        )
    # `duplicate` left out: 600,000 copies of one row would double the findings, and the time
    quiet = ("--ignore", "duplicate")
    done = scrub("fix", source, "--out", small_disk / "nan.clean.h5", "--quarantine", *quiet, cwd=tmp_path)
    # 600,000 findings: the manifest inside the quarantine fills the disk first
    one_line_error(done, "no space left on device", str(small_disk / "nan.quarantine" / "manifest.jsonl"))
    assert left_in(small_disk) == []
    assert scrub("scan", source, "--manifest", tmp_path / "m.jsonl", *quiet, cwd=tmp_path).returncode == 1
    done = scrub(
        "fix",
        source,
        "--out",
        small_disk / "nan.clean.h5",
        "--quarantine",
        *quiet,
        "--manifest",
        tmp_path / "m.jsonl",
        cwd=tmp_path,
    )
    one_line_error(done, "no space left on device", str(small_disk / "nan.clean.h5"))
    assert left_in(small_disk) == []
    images = tmp_path / "images"
    images.mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, (1000, 10, 10), dtype=np.uint8)
    for number in range(1000):  # small files (not tiny-image, not constant), a 4 KiB block each: 4 MiB
        Image.fromarray(pixels[number]).save(images / f"{number}.png")
    done = scrub("fix", images, "--out", small_disk / "images.clean", cwd=tmp_path)
    one_line_error(done, "no space left on device", "images.clean")
    assert left_in(small_disk) == []


def test_a_manifest_on_a_full_or_read_only_disk(tmp_path, small_disk, read_only_disk):
    source = tmp_path / "nan.h5"
    with h5py.File(source, "w") as f:
        f["data"] = np.full((100_000, 2), np.nan, np.float32)  # 100,000 findings: ~20 MB of manifest
    done = scrub("scan", source, "--manifest", small_disk / "m.jsonl", cwd=tmp_path)
    one_line_error(done, "no space left on device", "manifest", str(small_disk / "m.jsonl"))
    assert left_in(small_disk) == []
    done = scrub("scan", source, "--manifest", read_only_disk / "m.jsonl", cwd=tmp_path)
    one_line_error(done, "read-only file system", str(read_only_disk / "m.jsonl"))
    clean = tmp_path / "clean.h5"
    with h5py.File(clean, "w") as f:
        f["data"] = np.ones((10, 2), np.float32)
    done = scrub("fix", clean, "--out", read_only_disk / "clean.h5", cwd=tmp_path)
    one_line_error(done, "read-only file system", str(read_only_disk))
    done = scrub(
        "scan", clean, "--manifest", tmp_path / "m.jsonl", "--json", read_only_disk / "s.json", cwd=tmp_path
    )
    one_line_error(done, "read-only file system", "s.json")
