"""Nothing left behind: a `scrub scan` killed with SIGKILL mid-scan (what an OOM killer or a CI
timeout does) leaves no process running and no temporary file the next run does not remove."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from PIL import Image

from scrub.fixing.outputs import SCRATCH_PREFIX

TESTS = Path(__file__).parent

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")


def group_members(group: int) -> list[tuple[int, str]]:
    """(pid, state) of the live (not zombie) processes of a process group."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == group and state != "Z":
            members.append((int(entry.name), state))
    return members


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def scratch_of(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}{pid}-*"))


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["forked", "server"])
def test_sigkill_mid_scan_leaves_no_process_and_the_next_run_removes_its_files(workers, tmp_path):
    """Workers forked from the scan (on Linux), or from the worker server (a plugin runs a thread
    in the scan's process), beside multiprocessing's resource tracker, with a scratch folder of
    the run's."""
    dataset = tmp_path / "images"
    dataset.mkdir()
    for number in range(400):  # 400 x 20 ms on 2 workers: ~4 s of scanning
        image = Image.new("RGB", (10, 10), (number % 256, 0, 0))  # not a tiny-image
        image.putpixel((0, 0), (0, 0, 255))  # not a constant-image
        image.save(dataset / f"{number}.png")
    forked = workers == "forked" and sys.platform.startswith("linux")
    manifest = tmp_path / "m.jsonl"
    command = [
        sys.executable,
        "-m",
        "scrub",
        "scan",
        str(dataset),
        "--plugin",
        "plugins.slow",
        "--scheduler",
        "processes",
        "--workers",
        "2",
        "--manifest",
        str(manifest),
        "-q",
        *([] if forked else ["--plugin", "plugins.background"]),
    ]
    environment = {**os.environ, "PYTHONPATH": str(TESTS)}
    scan = subprocess.Popen(
        command, env=environment, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        # the driver and two workers; else also the worker server (and the resource tracker)
        members = 3 if forked else 4
        assert wait_for(lambda: len(group_members(scan.pid)) >= members, 60), group_members(scan.pid)
        assert wait_for(lambda: list(tmp_path.glob(".m.jsonl.scrub-*.tmp")), 30)
        assert wait_for(lambda: forked or scratch_of(scan.pid), 30)  # made by then on a loaded machine
        time.sleep(0.5)  # mid-scan: the workers are busy
        assert scan.poll() is None, "the scan ended before it could be killed"
        os.kill(scan.pid, signal.SIGKILL)
        scan.wait()
        assert wait_for(lambda: not group_members(scan.pid), 5), f"left running: {group_members(scan.pid)}"
    finally:
        for pid, _ in group_members(scan.pid):
            os.kill(pid, signal.SIGKILL)
    left = list(tmp_path.glob(".m.jsonl.scrub-*.tmp"))
    assert left and (forked or scratch_of(scan.pid))  # a SIGKILL runs no cleanup: the next run must
    clean = tmp_path / "clean"
    clean.mkdir()
    image = Image.new("RGB", (10, 10))  # not a tiny-image
    image.putpixel((0, 0), (9, 9, 9))  # not a constant-image
    image.save(clean / "a.png")
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrub",
            "scan",
            str(clean),
            "--manifest",
            str(manifest),
            "--scheduler",
            "processes",
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr
    assert not list(tmp_path.glob(".m.jsonl.scrub-*.tmp"))
    assert not scratch_of(scan.pid)
