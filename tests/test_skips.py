"""A test skipped for a missing optional library says which one and how to install it, once per
library at the end of the run (the README's test command installs the test extra only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # runs pytest in a subprocess
def test_the_run_ends_with_one_line_per_missing_library(tmp_path):
    (tmp_path / "test_needs.py").write_text(
        "import pytest\n\n"
        "def test_a():\n    pytest.importorskip('scrub_no_such_module.sub')\n\n"
        "def test_b():\n    pytest.importorskip('scrub_no_such_module')\n\n"
        "def test_c():\n    pytest.skip('mosaicml-streaming is not installed')\n\n"
        "def test_d():\n    pytest.skip('a reason of its own')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "skipreport", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO / "tests")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped for optional libraries" in done.stdout
    assert "2 tests need scrub_no_such_module: pip install scrub_no_such_module" in done.stdout
    assert "1 test needs streaming: pip install --no-deps mosaicml-streaming" in done.stdout
    assert "own" not in done.stdout.split("skipped for optional libraries")[1]
