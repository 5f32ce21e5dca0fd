"""A `fix` killed with SIGKILL at any moment leaves no partial output, and rerunning it succeeds.

Real subprocesses, real kills: one run is killed as soon as its staged output holds data (the
middle of writing), others after assorted delays (scanning, writing, verifying, renaming).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

#: kills fixes at every moment of a two-second write: `-m "not slow"` (the quick subset) leaves it out
pytestmark = pytest.mark.slow

ROWS, WIDTH = 8_000, 1024  # ~31 MiB of float32, gzip: a fix takes about two seconds


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("atomic")
    rng = np.random.default_rng(0)
    with h5py.File(folder / "data.h5", "w") as file:
        data = file.create_dataset(
            "data",
            shape=(ROWS, WIDTH),
            dtype=np.float32,
            chunks=(256, WIDTH),
            compression="gzip",
            compression_opts=1,
        )
        for start in range(0, ROWS, 2000):
            block = rng.normal(size=(2000, WIDTH)).astype(np.float32)
            block[::997] = np.nan
            data[start : start + 2000] = block
        file["label"] = np.arange(ROWS) % 10
    return folder / "data.h5"


def fix_command(source: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "scrub",
        "fix",
        str(source),
        "--out",
        str(out),
        "--quarantine-dir",
        str(out.parent / "held"),
        "--scheduler",
        "sync",
        "-q",
    ]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".scrub-" in p.name)


def assert_whole_or_absent(out: Path, reference: dict[str, str]) -> None:
    """The destination either does not exist or is exactly the uninterrupted run's output."""
    held = out.parent / "held"
    if out.exists():
        assert digest_of_h5(out) == reference["clean"]
    if held.exists():
        assert (held / "fix.json").is_file() and (held / "manifest.jsonl").is_file()
        assert digest_of_h5(held / "data.h5") == reference["held"]


def digest_of_h5(path: Path) -> str:
    """The rows of every dataset (file bytes differ run to run: HDF5 stores timestamps)."""
    hasher = hashlib.sha256()
    with h5py.File(path, "r") as file:
        for name in ("data", "label"):
            hasher.update(np.ascontiguousarray(file[name][:]).tobytes())
    return hasher.hexdigest()


@pytest.fixture(scope="module")
def reference(dataset, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("reference") / "clean.h5"
    subprocess.run(fix_command(dataset, out), check=True)
    return {"clean": digest_of_h5(out), "held": digest_of_h5(out.parent / "held" / "data.h5")}


def test_killed_while_writing_leaves_nothing_and_a_rerun_succeeds(dataset, reference, tmp_path):
    before = digest(dataset)
    out = tmp_path / "clean.h5"
    process = subprocess.Popen(fix_command(dataset, out))
    deadline = time.monotonic() + 120
    staged = None
    while time.monotonic() < deadline and process.poll() is None:
        staged = next(
            (p for p in tmp_path.glob(".clean.h5.scrub-*/clean.h5") if p.stat().st_size > 1 << 20), None
        )
        if staged is not None:
            break
        time.sleep(0.005)
    assert staged is not None, "the fix ended before its staged output held data: make the dataset bigger"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not out.exists() and not (tmp_path / "held").exists()
    assert leftovers(tmp_path)  # the killed run's staging folder is still there ...

    subprocess.run(fix_command(dataset, out), check=True)
    assert leftovers(tmp_path) == []  # ... and the rerun removed it
    assert_whole_or_absent(out, reference)
    assert out.exists() and digest(dataset) == before


@pytest.mark.parametrize("delay", [0.3, 1.0, 1.7, 2.4])
def test_killed_at_any_moment_leaves_a_whole_output_or_none(dataset, reference, tmp_path, delay):
    out = tmp_path / "clean.h5"
    process = subprocess.Popen(fix_command(dataset, out))
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert_whole_or_absent(out, reference)
    if out.exists():
        return  # finished before the kill
    # A rerun succeeds without --force, whatever the killed run left behind.
    subprocess.run(fix_command(dataset, out), check=True)
    assert_whole_or_absent(out, reference)
    assert out.exists() and leftovers(tmp_path) == []


def test_a_quarantine_orphaned_between_the_two_renames_is_replaced(dataset, reference, tmp_path):
    """The quarantine is renamed into place first: a kill right after it leaves the quarantine
    without its cleaned copy. That state is recreated here; the rerun must not ask for --force."""
    out = tmp_path / "clean.h5"
    subprocess.run(fix_command(dataset, out), check=True)
    os.remove(out)
    done = subprocess.run(fix_command(dataset, out), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert_whole_or_absent(out, reference)
    assert out.exists()
