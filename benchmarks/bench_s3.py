"""Benchmark ``scrub scan`` of WebDataset shards in an S3 bucket against a naive loop and the floor.

Starts moto's S3 server on 127.0.0.1 (in this process, on its own threads), uploads 20 WebDataset
shards of small JPEGs (generated once into ``--workdir``; a few planted corrupt ones) and times,
as whole processes, best of ``--repeat`` (interleaved):

* the floor: one process reading every shard's bytes with ``s3fs`` (``fs.cat`` of all shards,
  which fetches them concurrently) and nothing else;
* the naive loop: one process, ``s3fs`` + ``tarfile`` (streaming) + Pillow ``load()`` per image;
* ``scrub scan s3://BUCKET/train-{000000..000019}.tar --storage-options ...`` (a brace pattern:
  each shard a dataset), and the same shards named by their prefix (one dataset);

* ``scrub scan s3://BUCKET/shards --cache DIR`` of the same shards unchanged since a first
  cached scan (a nightly job on a night when nothing changed), and the same of the HDF5 file
  (its local copy kept in DIR) and of the Parquet dataset (its partitions' results kept whole);
* the nightly job at scale (``--nightly-shards``, 200 small shards): its first night, a night
  when nothing changed and one when 1% of the shards were rewritten, each with the requests it
  made (issue 42's goal: an unchanged night costs the listing, a changed one reads those shards);

and an HDF5 file in the bucket, which scrub reads from a local copy (h5py opens files by name):
the floor (``s3fs.cat`` of the object), the naive way (download it with s3fs, then read every
chunk with h5py and test it with ``np.isfinite``) and ``scrub scan s3://BUCKET/h5/train.h5``;
and a Parquet dataset of ``--parquet-files`` files of float32 columns (a NaN in every 1,000th
row): the floor (``s3fs.cat`` of its files), the naive way (``pyarrow.parquet.read_table`` of
each file through s3fs, ``np.isfinite`` of every column) and ``scrub scan s3://BUCKET/parquet``.

It prints throughput ratios against the floor (issue 31's goal: scrub ≥ 0.8 of it) and against
the naive loop, with each process tree's peak resident memory and the requests the server
answered for it (from its request log: listings, GETs, HEADs). The server shares the machine's
cores with the process being timed, as a loopback server must.

    python benchmarks/bench_s3.py [--shards 20] [--samples 200] [--repeat 3] [--markdown-out r.md]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import re
import sys
import tarfile
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from bench_hdf5 import timed
from PIL import Image

BUCKET = "scrub-bench"

FLOOR = r"""
import sys, s3fs
fs = s3fs.S3FileSystem(endpoint_url=sys.argv[1])
data = fs.cat(sys.argv[2:])
print(sum(len(v) for v in data.values()))
"""

NAIVE = r"""
import io, sys, tarfile, s3fs
from PIL import Image
fs = s3fs.S3FileSystem(endpoint_url=sys.argv[1])
bad = 0
for url in sys.argv[2:]:
    with fs.open(url, "rb") as file, tarfile.open(fileobj=file, mode="r|") as tar:
        for member in tar:
            if member.isfile() and member.name.endswith(".jpg"):
                data = tar.extractfile(member).read()
                try:
                    Image.open(io.BytesIO(data)).load()
                except Exception:
                    bad += 1
print(bad)
"""


NAIVE_HDF5 = r"""
import sys, tempfile, h5py, numpy as np, s3fs
fs = s3fs.S3FileSystem(endpoint_url=sys.argv[1])
with tempfile.TemporaryDirectory() as folder:
    fs.get_file(sys.argv[2], f"{folder}/train.h5")
    bad = 0
    with h5py.File(f"{folder}/train.h5", "r") as file:
        data = file["data"]
        for start in range(0, len(data), 4096):
            bad += int((~np.isfinite(data[start : start + 4096])).any(axis=1).sum())
print(bad)
"""


NAIVE_PARQUET = r"""
import sys, numpy as np, pyarrow.parquet as pq, s3fs
fs = s3fs.S3FileSystem(endpoint_url=sys.argv[1])
bad = 0
for url in sys.argv[2:]:
    table = pq.read_table(url, filesystem=fs)
    rows = np.zeros(table.num_rows, dtype=bool)
    for column in table.columns:
        rows |= ~np.isfinite(column.to_numpy())
    bad += int(rows.sum())
print(bad)
"""


class RequestLog(logging.Handler):
    """Counts the requests moto's server answers (its werkzeug log: one line per request), by
    kind: a listing (``GET /bucket?list-type=2``), a GET of an object or a range, a HEAD, other."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.read: set[str] = set()  # the objects GET read since `taken`

    def emit(self, record: logging.LogRecord) -> None:
        text = re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage())  # a colored line: a 206 or a 404
        method = re.search(r'"([A-Z]+) ', text)
        kind = method.group(1) if method else ""
        if kind == "GET":
            self.counts["list" if "list-type=" in text else "get"] += 1
            if "list-type=" not in text and (key := re.search(r'"GET /([^ ?]+) ', text)):
                self.read.add(key.group(1))
        elif kind == "HEAD":
            self.counts["head"] += 1
        else:
            self.counts["other"] += 1

    def taken(self) -> Counter[str]:
        counts, self.counts = self.counts, Counter()
        self.read = set()
        return counts


def hdf5_file(folder: Path, rows: int, width: int) -> Path:
    """An HDF5 file of ``rows`` float32 vectors (with labels), one in 1,000 holding a NaN."""
    import h5py

    path = folder / "train.h5"
    if not path.exists():
        rng = np.random.default_rng(1)
        data = rng.normal(size=(rows, width)).astype(np.float32)
        data[::1000, 3] = np.nan
        with h5py.File(path.with_suffix(".tmp"), "w") as file:
            file.create_dataset("data", data=data, chunks=(1024, width))
            file.create_dataset("label", data=rng.integers(0, 10, rows))
        path.with_suffix(".tmp").rename(path)
    return path


def parquet_files(folder: Path, files: int, rows: int, width: int) -> list[Path]:
    """``files`` Parquet files of ``rows`` rows of ``width`` float32 columns and a class label, a
    NaN in every 1,000th row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    rng = np.random.default_rng(2)
    for number in range(files):
        path = folder / f"part-{number:05d}.parquet"
        paths.append(path)
        if path.exists():
            continue
        data = rng.normal(size=(rows, width)).astype(np.float32)
        data[::1000, 5] = np.nan
        columns = {f"f{column}": data[:, column] for column in range(width)}
        columns["label"] = rng.integers(0, 10, rows)
        pq.write_table(pa.table(columns), path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
    return paths


def jpeg(rng: np.random.Generator, side: int) -> bytes:
    """A small photo-like JPEG: smooth gradients plus noise (compresses as photos do)."""
    y, x = np.mgrid[0:side, 0:side]
    base = (x[..., None] * rng.uniform(0.5, 2, 3) + y[..., None] * rng.uniform(0.5, 2, 3)) % 256
    pixels = np.clip(base + rng.normal(0, 24, (side, side, 3)), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def generate(folder: Path, shards: int, samples: int, side: int) -> list[Path]:
    """``shards`` tar shards of ``samples`` (JPEG, class id) samples each; every 500th image is
    cut short (a corrupt image for both scrub and the naive loop to find)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    rng = np.random.default_rng(0)
    for shard in range(shards):
        path = folder / f"train-{shard:06d}.tar"
        paths.append(path)
        if path.exists():
            continue
        with tarfile.open(path.with_suffix(".tmp"), "w") as tar:
            for i in range(samples):
                number = shard * samples + i
                data = jpeg(rng, side)
                if number % 500 == 7:
                    data = data[: len(data) // 2]
                for name, content in (
                    (f"{number:08d}.jpg", data),
                    (f"{number:08d}.cls", str(number % 10).encode()),
                ):
                    info = tarfile.TarInfo(name)
                    info.size = len(content)
                    tar.addfile(info, io.BytesIO(content))
        path.with_suffix(".tmp").rename(path)
    return paths


def nightly(client: Any, arguments: argparse.Namespace, scrub: Any, requests: RequestLog) -> dict:
    """The nightly job's three nights over ``--nightly-shards`` shards: the first (fills the
    cache), one when nothing changed, one after 1% of the shards were rewritten (another shard's
    bytes: another ETag). Night -> (seconds, requests by kind, the shards GET read)."""
    folder = arguments.workdir.parent / f"nightly-{arguments.nightly_shards}x{arguments.nightly_samples}"
    paths = generate(folder, arguments.nightly_shards, arguments.nightly_samples, arguments.side)
    for path in paths:
        client.put_object(Bucket=BUCKET, Key=f"nightly/{path.name}", Body=path.read_bytes())
    cache = Path(tempfile.mkdtemp()) / "cache"
    command = [*scrub(f"s3://{BUCKET}/nightly"), "--cache", str(cache)]
    nights: dict[str, tuple[float, Counter[str], set[str]]] = {}
    for night in ("first (fills the cache)", "nothing changed", "1% of the shards rewritten"):
        if night.startswith("1%"):
            for path in paths[: max(1, len(paths) // 100)]:
                client.put_object(Bucket=BUCKET, Key=f"nightly/{path.name}", Body=paths[-1].read_bytes())
        requests.taken()
        seconds = timed(command)[0]
        read = requests.read.copy()
        nights[night] = (seconds, requests.taken(), read)
    return nights


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench/s3"))
    parser.add_argument("--shards", type=int, default=20)
    parser.add_argument("--samples", type=int, default=200, help="samples per shard")
    parser.add_argument("--side", type=int, default=128, help="image side in pixels")
    parser.add_argument(
        "--hdf5-rows", type=int, default=100_000, help="rows of the HDF5 file (256 floats each)"
    )
    parser.add_argument("--parquet-files", type=int, default=20)
    parser.add_argument("--parquet-rows", type=int, default=20_000, help="rows of each Parquet file")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--scrub-args", default="", help="extra arguments for scrub scan")
    parser.add_argument("--markdown-out", type=Path)
    parser.add_argument("--nightly-shards", type=int, default=200, help="shards of the nightly rows")
    parser.add_argument("--nightly-samples", type=int, default=20, help="samples per nightly shard")
    arguments = parser.parse_args()

    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    import boto3
    from moto.server import ThreadedMotoServer

    paths = generate(arguments.workdir, arguments.shards, arguments.samples, arguments.side)
    total = sum(path.stat().st_size for path in paths)
    hdf5 = hdf5_file(arguments.workdir.parent, arguments.hdf5_rows, 256)
    tables = parquet_files(
        arguments.workdir.parent / f"parquet-{arguments.parquet_files}x{arguments.parquet_rows}",
        arguments.parquet_files,
        arguments.parquet_rows,
        32,
    )
    requests = RequestLog()
    logging.getLogger("werkzeug").addHandler(requests)
    logging.getLogger("werkzeug").setLevel(logging.INFO)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        for path in paths:
            client.put_object(Bucket=BUCKET, Key=f"shards/{path.name}", Body=path.read_bytes())
        client.put_object(Bucket=BUCKET, Key="h5/train.h5", Body=hdf5.read_bytes())
        for path in tables:
            client.put_object(Bucket=BUCKET, Key=f"parquet/{path.name}", Body=path.read_bytes())
        table_urls = [f"s3://{BUCKET}/parquet/{path.name}" for path in tables]
        urls = [f"s3://{BUCKET}/shards/{path.name}" for path in paths]
        pattern = f"s3://{BUCKET}/shards/train-{{000000..{arguments.shards - 1:06d}}}.tar"
        options = json.dumps({"endpoint_url": endpoint})
        out = Path(tempfile.mkdtemp())

        def scrub(target: str) -> list[str]:
            return [
                arguments.python, "-m", "scrub", "scan", target, "--storage-options", options, "--quiet",
                "--fail-on", "never", "--json", str(out / "summary.json"), "--manifest",
                str(out / "manifest.jsonl"), *arguments.scrub_args.split(),
            ]  # fmt: skip

        commands = {
            "floor (s3fs.cat)": [arguments.python, "-c", FLOOR, endpoint, *urls],
            "naive loop": [arguments.python, "-c", NAIVE, endpoint, *urls],
            "scrub (brace pattern)": scrub(pattern),
            "scrub (prefix)": scrub(f"s3://{BUCKET}/shards"),
            "scrub (prefix, --scheduler sync)": [*scrub(f"s3://{BUCKET}/shards"), "--scheduler", "sync"],
            "scrub (local copy)": scrub(str(arguments.workdir)),
            "scrub (prefix, --cache, nothing changed)": [
                *scrub(f"s3://{BUCKET}/shards"), "--cache", str(out / "cache")
            ],
            "HDF5 floor (s3fs.cat)": [arguments.python, "-c", FLOOR, endpoint, f"s3://{BUCKET}/h5/train.h5"],
            "HDF5 naive (download, h5py)": [
                arguments.python, "-c", NAIVE_HDF5, endpoint, f"s3://{BUCKET}/h5/train.h5"
            ],
            "HDF5 scrub (a local copy)": scrub(f"s3://{BUCKET}/h5/train.h5"),
            "HDF5 scrub (a kept copy, --cache, nothing changed)": [
                *scrub(f"s3://{BUCKET}/h5/train.h5"), "--cache", str(out / "cache")
            ],
            "Parquet floor (s3fs.cat)": [arguments.python, "-c", FLOOR, endpoint, *table_urls],
            "Parquet naive (pyarrow, np.isfinite)": [
                arguments.python, "-c", NAIVE_PARQUET, endpoint, *table_urls
            ],
            "Parquet scrub (prefix)": scrub(f"s3://{BUCKET}/parquet"),
            "Parquet scrub (prefix, --cache, nothing changed)": [
                *scrub(f"s3://{BUCKET}/parquet"), "--cache", str(out / "cache")
            ],
        }  # fmt: skip
        nights = nightly(client, arguments, scrub, requests)
        timed(commands["scrub (prefix, --cache, nothing changed)"])  # the first night: fills the cache
        timed(commands["Parquet scrub (prefix, --cache, nothing changed)"])
        timed(commands["HDF5 scrub (a kept copy, --cache, nothing changed)"])
        runs: dict[str, list[tuple[float, int, str]]] = {name: [] for name in commands}
        counted: dict[str, Counter[str]] = {}
        for _ in range(arguments.repeat):
            for name, command in commands.items():
                requests.taken()
                runs[name].append(timed(command))
                counted[name] = requests.taken()
                if name == "scrub (prefix)":
                    summary = json.loads((out / "summary.json").read_text())
                if name == "Parquet scrub (prefix)":
                    parquet_rows = json.loads((out / "summary.json").read_text())["quarantine"]
        best = {name: min(results, key=lambda r: r[0]) for name, results in runs.items()}
    finally:
        server.stop()

    floors = {
        "HDF5": best["HDF5 floor (s3fs.cat)"][0],
        "Parquet": best["Parquet floor (s3fs.cat)"][0],
        "": best["floor (s3fs.cat)"][0],
    }
    naives = {
        "HDF5": best["HDF5 naive (download, h5py)"][0],
        "Parquet": best["Parquet naive (pyarrow, np.isfinite)"][0],
        "": best["naive loop"][0],
    }
    sizes = {"HDF5": hdf5.stat().st_size, "Parquet": sum(path.stat().st_size for path in tables), "": total}
    images = arguments.shards * arguments.samples
    lines = [
        f"## scrub S3 benchmark ({datetime.now(timezone.utc):%Y-%m-%d})",
        "",
        f"- {arguments.shards} WebDataset shards, {images} JPEGs of {arguments.side}x{arguments.side} "
        f"({total / 1e6:.1f} MB), in moto's S3 server on 127.0.0.1",
        f"- cores: {os.cpu_count()}; python {sys.version.split()[0]}; "
        f"best of {arguments.repeat}, whole processes",
        f"- corrupt images found: scrub {summary['issues']['by_check'].get('corrupt-image')}, naive "
        f"{best['naive loop'][2].strip()}",
        f"- an HDF5 file of {arguments.hdf5_rows} x 256 float32 ({hdf5.stat().st_size / 1e6:.1f} MB, a NaN "
        f"in every 1,000th row: the naive way found {best['HDF5 naive (download, h5py)'][2].strip()})",
        f"- {arguments.parquet_files} Parquet files of {arguments.parquet_rows} rows x 32 float32 "
        f"({sizes['Parquet'] / 1e6:.1f} MB, a NaN in every 1,000th row: the naive way found "
        f"{best['Parquet naive (pyarrow, np.isfinite)'][2].strip()}, scrub {parquet_rows})",
        "",
        "| command | seconds (runs) | MB/s | vs floor (goal ≥ 0.8) | vs naive | peak RSS MiB "
        "| requests: list / GET / HEAD / other |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (seconds, peak, _) in best.items():
        each = ", ".join(f"{r[0]:.2f}" for r in runs[name])
        kind = name.split()[0] if name.split()[0] in ("HDF5", "Parquet") else ""
        size = sizes[kind]
        made, floor, naive = counted[name], floors[kind], naives[kind]
        lines.append(
            f"| {name} | {seconds:.2f} ({each}) | {size / seconds / 1e6:.0f} | {floor / seconds:.2f} | "
            f"{naive / seconds:.2f}x | {peak / 2**20:.0f} "
            f"| {made['list']} / {made['get']} / {made['head']} / {made['other']} |"
        )
    lines += [
        "",
        f"The nightly job: {arguments.nightly_shards} shards of {arguments.nightly_samples} samples, "
        "`scrub scan s3://BUCKET/nightly --cache DIR`, one run each:",
        "",
        "| night | seconds | shards read (GET) | requests: list / GET / HEAD / other |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {seconds:.2f} | {len(read)} | {made['list']} / {made['get']} / {made['head']} / "
            f"{made['other']} |"
            for name, (seconds, made, read) in nights.items()
        ),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if arguments.markdown_out:
        arguments.markdown_out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
