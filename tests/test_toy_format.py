"""The worked example of a format of another package (``examples/toy_format``, docs/internals.md's
recipe): registered through the ``scrub.formats`` entry point, named by a prefix no file bears,
written as a pair of files, with a reader check of its own, it passes scrub's conformance suite
(`scrub.testing.FormatSuite`) as scrub's own formats do."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

from scrub.testing import FormatSuite, Subject

TOY = REPO / "examples" / "toy_format"


class TestToyFormat(FormatSuite):
    @pytest.fixture
    def subject(self, tmp_path, monkeypatch) -> Subject:
        monkeypatch.syspath_prepend(str(TOY))  # as installing it would: its module and dist-info
        monkeypatch.delitem(sys.modules, "toyrows", raising=False)  # imported anew: its check registers
        import toyrows

        rows = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
        rows[4, 1] = np.nan
        labels = np.arange(40) % 3
        labels[9] = toyrows.NO_LABEL
        toyrows.write_pair(tmp_path / "train", rows, labels[:-1])  # the last row past the labels' end
        return Subject("toyrows", tmp_path / "train", {"num_classes": 3})


def test_scrub_checks_lists_and_explains_the_formats_own_check():
    environment = {**os.environ, "PYTHONPATH": f"{TOY}{os.pathsep}{REPO}"}
    listed = subprocess.run(
        [sys.executable, "-m", "scrub", "checks"], capture_output=True, text=True, env=environment
    )
    assert listed.returncode == 0 and "toyrows-unlabelled" in listed.stdout, listed.stderr
    explained = subprocess.run(
        [sys.executable, "-m", "scrub", "checks", "toyrows-unlabelled"],
        capture_output=True,
        text=True,
        env=environment,
    )
    assert explained.returncode == 0 and "labelled -1" in explained.stdout, explained.stderr
