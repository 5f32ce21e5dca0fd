"""Shared helpers: real image files, real datasets in tmp_path."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_data"


def one_line_error(*arguments: object) -> str:
    """Run ``scrub ARGUMENTS``; it must exit 2 with one line on stderr (a usage error or an
    unusable dataset, never a traceback), which is returned."""
    done = subprocess.run(
        [sys.executable, "-m", "scrub", *map(str, arguments)], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def image_bytes(seed: int = 0, mode: str = "RGB", fmt: str = "JPEG", size: int = 48) -> bytes:
    """A small real image with some texture, so that JPEG data is not trivially compressible."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, fmt, **({"quality": 85} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def findings(result) -> set[tuple[str, str]]:
    """(key, check) of every issue of a scan result."""
    return {(issue.key, issue.check) for issue in result.issues()}


def manifest_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def counts(result) -> Counter:
    return Counter({k: v for k, v in result.summary.issues_by_check.items() if v})


@pytest.fixture
def clean_folder(tmp_path: Path) -> Path:
    """Two classes of four clean, distinct RGB JPEGs."""
    root = tmp_path / "clean"
    for label, name in enumerate(["a", "b"]):
        for i in range(4):
            write(root / name / f"{i}.jpg", image_bytes(seed=10 * label + i))
    return root


@pytest.fixture(autouse=True)
def isolated_check_registry():
    """Checks that a test registers (plugins) do not leak into the tests after it."""
    import sys

    from scrub.checks.base import REGISTRY

    before = dict(REGISTRY)
    yield
    for check_id in set(REGISTRY) - set(before):
        check = REGISTRY.pop(check_id)
        function = check.func or check.batch
        if function is not None:
            sys.modules.pop(function.__module__, None)  # so that the next import registers it again
