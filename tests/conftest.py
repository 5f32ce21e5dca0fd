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
from skipreport import pytest_terminal_summary  # noqa: F401 (a hook pytest finds here)

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


def timeless_replay(result) -> dict:
    """A scan's replay summary but its duration, which no two runs share."""
    return {key: value for key, value in result.summary.replay.items() if key != "seconds"}


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
def scratch_working_directory(tmp_path_factory, monkeypatch):
    """Each test runs in a folder of its own: a command run without ``--manifest`` writes its
    manifest and scan record in the working directory (as users expect), and the suite left
    ~40 pairs of them in the checkout. Not ``tmp_path``, which tests list and compare."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


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


class S3Server:
    """A real S3 server on loopback (moto's), with dummy credentials in the environment: the
    tests' object storage. ``upload`` copies a local folder or file under a bucket's prefix."""

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.endpoint = endpoint
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        self.buckets: set[str] = set()

    @property
    def storage_options(self) -> dict:
        return {"endpoint_url": self.endpoint}

    def bucket(self, name: str) -> str:
        if name not in self.buckets:
            self.client.create_bucket(Bucket=name)
            self.buckets.add(name)
        return name

    def upload(self, source: Path, bucket: str, prefix: str = "") -> str:
        """``source`` (a file or a folder, recursively) under ``s3://bucket/prefix``; its URL."""
        self.bucket(bucket)
        files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
        for file in files:
            relative = file.name if source.is_file() else file.relative_to(source).as_posix()
            key = f"{prefix.strip('/')}/{relative}" if prefix.strip("/") else relative
            self.client.put_object(Bucket=bucket, Key=key, Body=file.read_bytes())
        return f"s3://{bucket}/{prefix.strip('/')}" if prefix.strip("/") else f"s3://{bucket}"

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


@pytest.fixture(scope="session")
def s3_server():
    """Moto's S3 server on 127.0.0.1 (a free port), started once for the session and stopped
    after it; skipped where moto, boto3 or s3fs are not installed."""
    pytest.importorskip("s3fs")
    pytest.importorskip("boto3")
    server_module = pytest.importorskip("moto.server")
    import os

    saved = {
        k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    }
    os.environ.update(
        AWS_ACCESS_KEY_ID="scrub-test", AWS_SECRET_ACCESS_KEY="scrub-test", AWS_DEFAULT_REGION="us-east-1"
    )
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
