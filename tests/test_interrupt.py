"""Ctrl-C, as a terminal sends it (SIGINT to the whole process group), at several moments of a
scan, a replay and a fix, in real processes: one line, exit code 130, no traceback, no process
and no temporary file left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import REPO, image_bytes, write


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("interrupt") / "images"
    for i in range(600):
        write(root / f"c{i % 3}" / f"{i}.jpg", image_bytes(seed=i, size=24))
    return root


def interrupt(args, after: float, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    process = subprocess.Popen(
        [sys.executable, "-m", "scrub", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
        cwd=cwd,
    )
    tree = psutil.Process(process.pid)
    time.sleep(after)
    children = tree.children(recursive=True)
    assert process.poll() is None, "the command ended before the interrupt: make it slower"
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=30)
    gone, alive = psutil.wait_procs(children, timeout=10)
    return process.returncode, err, alive


SCAN = [
    "scan",
    "--plugin",
    "plugins.slow",
    "--manifest",
    "m.jsonl",
    "--workers",
    "2",
    "--partition-size",
    "50",
]


@pytest.mark.parametrize(
    ("where", "args", "after"),
    [
        ("start-up", ["scan", "IMAGES", "--manifest", "m.jsonl"], 0.25),
        ("scan, processes", [*SCAN[:1], "IMAGES", *SCAN[1:]], 2.5),
        ("scan, threads", [*SCAN[:1], "IMAGES", *SCAN[1:], "--scheduler", "threads"], 2.5),
        (
            "replay",
            [
                "scan",
                "IMAGES",
                "--dummy-loss",
                "--model",
                "plugins.slow:slow_loss",
                "--batch-size",
                "2",
                "--manifest",
                "m.jsonl",
            ],
            3.0,
        ),
        (
            "fix",
            [
                "fix",
                "IMAGES",
                "--plugin",
                "plugins.slow",
                "--partition-size",
                "50",
                "--out",
                "OUT/clean",
                "--quarantine-dir",
                "OUT/held",
            ],
            2.5,
        ),
    ],
)
def test_ctrl_c_prints_one_line_and_leaves_nothing(images, tmp_path, where, args, after):
    out = tmp_path / "out"
    out.mkdir()
    args = [str(images) if a == "IMAGES" else a.replace("OUT", str(out)) for a in args]
    code, err, alive = interrupt(args, after, tmp_path)
    assert (code, err) == (130, "scrub: interrupted\n"), err
    assert alive == []  # workers, the worker server, isolation children: all gone
    left = sorted(p.name for p in [*tmp_path.iterdir(), *out.iterdir()])
    assert left == ["out"], left  # no manifest, no temporary sibling, no partial output


def test_a_killed_scans_temporary_manifest_goes_with_the_next_scan(images, tmp_path):
    """kill -9 (an OOM killer, a CI timeout) leaves the manifest's temporary sibling; the next
    scan writing that manifest removes it (its process is gone)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    process = subprocess.Popen(
        [sys.executable, "-m", "scrub", *SCAN[:1], str(images), *SCAN[1:]],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".m.jsonl.scrub-*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    left = list(tmp_path.glob(".m.jsonl.scrub-*.tmp"))
    assert len(left) == 1 and str(process.pid) in left[0].name
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", str(images / "c0"), "--manifest", "m.jsonl", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, 1), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl", "m.scan.json"]
