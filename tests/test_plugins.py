"""A check written outside scrub runs like a built-in one, in every scheduler's workers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO, image_bytes, write

import scrub


@pytest.fixture
def examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples"))


@pytest.mark.parametrize("scheduler", ["sync", "processes"])
def test_example_check_runs_in_workers(examples_on_path, tmp_path, scheduler):
    write(tmp_path / "a" / "big.jpg", image_bytes(1, size=48))
    write(tmp_path / "a" / "small.jpg", image_bytes(2, size=16))
    write(tmp_path / "a" / "other.jpg", image_bytes(3, size=40))
    result = scrub.scan(tmp_path, plugins=["tiny_images"], scheduler=scheduler, workers=2, partition_size=1)
    assert [(i.key, i.check, i.details) for i in result.issues()] == [
        ("a/small.jpg", "small-image", {"width": 16, "height": 16})
    ]


def test_plugin_option_on_the_command_line(tmp_path):
    write(tmp_path / "a" / "small.jpg", image_bytes(2, size=16))
    env = {**os.environ, "PYTHONPATH": str(REPO / "examples")}
    command = [sys.executable, "-m", "scrub", "scan", str(tmp_path), "--plugin", "tiny_images"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # a warning only
    assert "small-image" in result.stdout
    missing = subprocess.run([*command[:-1], "no_such_module"], capture_output=True, text=True, cwd=tmp_path)
    assert missing.returncode == 2 and "cannot import" in missing.stderr
