#!/usr/bin/env python3
"""The speed table: every row of the speed issue's table in one run, scrub beside its peer.

On the data the other benchmarks generate (generated first if missing, then reused), each
command is timed as a whole process (start-up included), the tools of a row interleaved,
``--repeat`` times, and the medians reported:

* 20,000 JPEGs of 256x256 (``bench_images.py``), warm: scrub against the naive Pillow loop and
  against ``jpeginfo -c`` (2 processes through ``xargs -P 2``); cold (the files' pages evicted
  with ``posix_fadvise(DONTNEED)`` before each run): scrub against jpeginfo;
* the same JPEGs as encoded Caffe Datums in LMDB (``bench_lmdb.py``): scrub against the naive
  cursor + protobuf + Pillow loop;
* a 2 GiB float32 HDF5 file (``bench_hdf5.py``), warm: scrub against the naive chunked
  ``np.isfinite`` loop; the extra 2 GiB of a 4 GiB file against ``cat``'s (the median of the
  differences of runs paired in time); cold against ``cat``;
* ``scrub fix --quarantine`` against ``scrub scan`` plus a plain copy (images, HDF5), outputs
  on tmpfs (``bench_fix.py``);
* a folder of 20 JPEGs (start-up);
* photos of real sizes (``bench_photos.py``): scrub against the naive loop;
* ``--cache`` rerun of the 20,000 unchanged JPEGs (``bench_cache.py``'s case), whole process,
  against the first scan with the cache.

Before timing, scrub's modules are compiled to bytecode, as an installed package has them: run
from a source tree with ``PYTHONDONTWRITEBYTECODE`` set (this machine sets it), every changed
module would be compiled again in every process, by the scan and by its worker server. After
the table come the floors the rows are bound by, measured in the same run: the start-up of
``scrub --version``, the decode floor of each JPEG folder and of the LMDB's Datums, and how much
each goal leaves above its floor for everything a scan does besides decoding.

    python benchmarks/bench_speed.py [--repeat 3] [--skip-cold] [--markdown-out F]

Needs ``jpeginfo`` and scikit-image (for the photos), as the scripts it borrows from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_fix  # noqa: E402 - beside this script
import bench_lmdb  # noqa: E402
import bench_photos  # noqa: E402
import benchdata  # noqa: E402
from bench_images import NAIVE_SCRIPT as NAIVE_IMAGES  # noqa: E402

#: The naive HDF5 loop the issue names: chunk by chunk (16 chunks at a time), one vectorized
#: ``np.isfinite(block).all(axis=1)`` per block; what a NumPy user writes (bench_hdf5's naive
#: loop tests row by row in Python, which is slower).
NAIVE_HDF5 = r"""
import sys, h5py, numpy as np
bad = 0
with h5py.File(sys.argv[1], "r") as f:
    d = f["data"]
    step = d.chunks[0] * 16
    for start in range(0, d.shape[0], step):
        bad += int((~np.isfinite(d[start:start + step]).all(axis=1)).sum())
print(bad)
"""


@dataclass
class Row:
    """One line of the table: scrub's seconds, the peer's, and how the two compare."""

    work: str
    scrub: float
    peer: str
    theirs: float
    #: scrub's speed relative to the peer's (peer s / scrub s), or for "fix" rows fix / (scan + copy)
    value: float
    goal: float
    #: "x" (times the peer's speed), "of cat" (a fraction of cat's), "s" (scrub's own seconds),
    #: "" (a ratio)
    unit: str = "x"
    lower_is_better: bool = False

    def markdown(self) -> str:
        unit = "x" if self.unit == "x" else f" {self.unit}" if self.unit else ""
        met = self.value <= self.goal if self.lower_is_better else self.value >= self.goal
        return (
            f"| {self.work} | {self.scrub:.2f} | {self.peer} | {self.theirs:.2f} | {self.value:.2f}{unit} "
            f"| {'≤' if self.lower_is_better else '≥'} {self.goal:g}{unit} | {'yes' if met else 'no'} |"
        )


def evict(path: Path) -> None:
    """Drop ``path``'s pages (every file below it) from the page cache: the next read is cold.
    ``POSIX_FADV_DONTNEED`` needs no privilege; a page still mapped somewhere stays."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        descriptor = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def decode_floor(folder: Path) -> tuple[int, float]:
    """(files, seconds) of reading and verifying every JPEG below ``folder`` in this process,
    on one core, with scrub's own decoder (libjpeg-turbo, strict, 1/8 scale): the work no JPEG
    checker can skip. Half of it is the floor on two cores, before any start-up."""
    from scrub.checks.imagedecode import inspect_image

    paths = sorted(folder.rglob("*.jpg"))
    started = time.perf_counter()
    for path in paths:
        inspect_image(path.read_bytes(), None)
    return len(paths), time.perf_counter() - started


def datum_floor(database: Path) -> tuple[int, float]:
    """(values, seconds) of reading every Datum of the LMDB ``database`` through one cursor,
    parsing it and verifying its JPEG, in this process, on one core, with scrub's own parser and
    decoder: the LMDB row's counterpart of `decode_floor`."""
    import lmdb

    from scrub.checks.imagedecode import inspect_image
    from scrub.readers.caffe_datum import parse_datum

    environment = lmdb.open(str(database), readonly=True, lock=False)
    count = 0
    try:
        started = time.perf_counter()
        with environment.begin() as transaction:
            for _, value in transaction.cursor():
                inspect_image(bytes(parse_datum(value).data), None)
                count += 1
        return count, time.perf_counter() - started
    finally:
        environment.close()


def shell(command: str) -> Callable[[], float]:
    return lambda: benchdata.timed(["/bin/bash", "-c", command])


def compile_scrub(python: str) -> None:
    """Compile scrub's modules to bytecode, as installing the package does (see the docstring)."""
    import scrub

    environment = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    package = Path(scrub.__file__).parent
    subprocess.run([python, "-m", "compileall", "-q", str(package)], check=True, env=environment)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--skip-cold", action="store_true", help="no cold-cache rows")
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    if shutil.which("jpeginfo") is None:
        parser.error("jpeginfo is not on PATH (apt-get install jpeginfo)")
    python, repeat = args.python, args.repeat
    compile_scrub(python)
    scratch = Path(tempfile.mkdtemp(prefix="bench-speed-"))
    manifest = scratch / "scan.jsonl"

    def scrub(path: Path, *options: str) -> Callable[[], float]:
        command = [python, "-m", "scrub", "scan", str(path), "-q", "--manifest", str(manifest), *options]
        return lambda: benchdata.timed(command)

    def naive(script: str, path: Path) -> Callable[[], float]:
        return lambda: benchdata.timed([python, "-c", script, str(path)])

    def jpeginfo(folder: Path, batch: int) -> Callable[[], float]:
        quoted = shlex.quote(str(folder))
        return shell(
            f"find {quoted} -name '*.jpg' -print0 | xargs -0 -P 2 -n {batch} jpeginfo -c > /dev/null; "
            "code=$?; [ $code -eq 0 ] || [ $code -eq 123 ]"  # 123: jpeginfo found broken files
        )

    rows: list[Row] = []
    images = benchdata.images(args.workdir, python)
    count = sum(1 for _ in images.rglob("*.jpg"))
    benchdata.warm(images)
    warm = benchdata.medians(
        repeat,
        {"scrub": scrub(images), "naive": naive(NAIVE_IMAGES, images), "jpeginfo": jpeginfo(images, 250)},
    )
    label = f"{count:,} JPEGs 256x256, warm"
    rows.append(
        Row(
            label,
            warm["scrub"],
            "naive Pillow `load()` loop",
            warm["naive"],
            warm["naive"] / warm["scrub"],
            3.0,
        )
    )
    rows.append(
        Row(
            label,
            warm["scrub"],
            "`jpeginfo -c`, 2 processes",
            warm["jpeginfo"],
            warm["jpeginfo"] / warm["scrub"],
            1.0,
        )
    )
    if not args.skip_cold:
        cold = benchdata.medians(
            repeat, {"scrub": scrub(images), "jpeginfo": jpeginfo(images, 250)}, before=lambda: evict(images)
        )
        rows.append(
            Row(
                f"{count:,} JPEGs, cold page cache",
                cold["scrub"],
                "`jpeginfo -c`, 2 processes",
                cold["jpeginfo"],
                cold["jpeginfo"] / cold["scrub"],
                1.2,
            )
        )
        benchdata.warm(images)

    database = args.workdir / "datum_lmdb"
    records = bench_lmdb.build(images, database)
    benchdata.warm(database)
    lmdb = benchdata.medians(repeat, {"scrub": scrub(database), "naive": naive(bench_lmdb.NAIVE, database)})
    rows.append(
        Row(
            f"{records:,} encoded-JPEG Datums (LMDB)",
            lmdb["scrub"],
            "naive cursor + protobuf + Pillow",
            lmdb["naive"],
            lmdb["naive"] / lmdb["scrub"],
            3.0,
        )
    )

    two, four = benchdata.plain_hdf5(args.workdir, 2), benchdata.plain_hdf5(args.workdir, 4)
    benchdata.warm(two)
    hdf5 = benchdata.medians(
        repeat, {"scrub": scrub(two), "naive": naive(NAIVE_HDF5, two), "cat": shell(f"cat {two} > /dev/null")}
    )
    rows.append(
        Row(
            "2 GiB float32 HDF5, warm, whole process",
            hdf5["scrub"],
            "naive chunked `isfinite`",
            hdf5["naive"],
            hdf5["naive"] / hdf5["scrub"],
            1.0,
        )
    )
    # The two files in one series, each scrub right after a `cat` of its file (warm as the row
    # says: this VM's host reclaims "warm" pages between runs, and a 4 GiB series then a 2 GiB
    # one measured the drift between the two series too), and the median of the paired
    # differences: the two runs of a round ran side by side in time.
    benchdata.warm(four)
    sizes = benchdata.runs(
        repeat,
        {
            "cat 4": shell(f"cat {four} > /dev/null"),
            "scrub 4": scrub(four),
            "cat 2": shell(f"cat {two} > /dev/null"),
            "scrub 2": scrub(two),
        },
    )
    extra_scrub = statistics.median(a - b for a, b in zip(sizes["scrub 4"], sizes["scrub 2"]))
    extra_cat = statistics.median(a - b for a, b in zip(sizes["cat 4"], sizes["cat 2"]))
    rows.append(
        Row(
            "the extra 2 GiB of a 4 GiB file",
            extra_scrub,
            "`cat`",
            extra_cat,
            extra_cat / extra_scrub,
            0.7,
            "of cat",
        )
    )
    if not args.skip_cold:
        cold = benchdata.medians(
            repeat,
            {"scrub": scrub(two), "naive": naive(NAIVE_HDF5, two), "cat": shell(f"cat {two} > /dev/null")},
            before=lambda: evict(two),
        )
        rows.append(
            Row(
                "2 GiB HDF5, cold page cache",
                cold["scrub"],
                f"`cat` (naive {cold['naive']:.2f} s)",
                cold["cat"],
                cold["cat"] / cold["scrub"],
                0.8,
                "of cat",
            )
        )
        benchdata.warm(two)

    outputs = Path(
        tempfile.mkdtemp(prefix="bench-speed-fix-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    )
    try:
        for name, source, copies in (
            ("images", images, {"copy": ["cp", "-r", str(images), str(outputs / "copy")]}),
            ("2 GiB HDF5", two, {"copy": ["cp", str(two), str(outputs / "copy.h5")]}),
        ):
            found = bench_fix.bench(name, source, outputs / name, python, repeat, copies)
            both = found["scan"] + found["copy"]
            rows.append(
                Row(
                    f"`fix --quarantine` / (scan + copy), {name}",
                    found["fix"],
                    "scan + `cp`",
                    both,
                    found["fix"] / both,
                    1.15,
                    "",
                    lower_is_better=True,
                )
            )
    finally:
        shutil.rmtree(outputs, ignore_errors=True)

    few = scratch / "twenty"
    few.mkdir()
    for path in sorted(images.rglob("*.jpg"))[:20]:
        shutil.copy(path, few / path.name)
    small = benchdata.medians(max(repeat, 11), {"scrub": scrub(few)})
    rows.append(
        Row(
            "20-file folder, whole process",
            small["scrub"],
            "the goal, 0.30 s",
            0.30,
            0.30 / small["scrub"],
            1.0,
        )
    )

    photo_goals: dict[Path, float] = {}
    for name, number, size in bench_photos.SETS:
        folder = bench_photos.photos(args.workdir, name, number, size)
        benchdata.warm(folder)
        photo = benchdata.medians(
            repeat, {"scrub": scrub(folder), "naive": naive(bench_photos.NAIVE, folder)}
        )
        rows.append(
            Row(
                f"{number:,} photos {size[0]}x{size[1]}",
                photo["scrub"],
                "naive Pillow `load()` loop",
                photo["naive"],
                photo["naive"] / photo["scrub"],
                4.0,
            )
        )
        photo_goals[folder] = photo["naive"] / 4
    cache = scratch / "cache"
    first = benchdata.medians(1, {"first": scrub(images, "--cache", str(cache))})["first"]
    rerun = benchdata.medians(max(repeat, 5), {"rerun": scrub(images, "--cache", str(cache))})["rerun"]
    rows.append(
        Row(
            f"`--cache` rerun, {count:,} unchanged JPEGs, whole process",
            rerun,
            "the first scan with the cache",
            first,
            rerun,
            0.20,
            "s",
            lower_is_better=True,
        )
    )
    start_up = benchdata.medians(
        max(repeat, 11), {"version": lambda: benchdata.timed([python, "-m", "scrub", "--version"])}
    )["version"]
    walk = f"find {shlex.quote(str(images))} -type f -printf '%s %T@\\n' > /dev/null"  # a stat per file
    stat_walk = benchdata.medians(max(repeat, 5), {"find": shell(walk)})["find"]
    shutil.rmtree(scratch, ignore_errors=True)

    lines = [
        f"scrub's speed table, {dt.date.today().isoformat()}: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; whole processes, medians of {repeat} "
        "interleaved runs (20-file folder: of 11 or more).",
        "",
        "| work | scrub s | peer | peer s | scrub relative to the peer | goal | met |",
        "|---|---:|---|---:|---:|---:|---|",
        *(row.markdown() for row in rows),
    ]
    lines.append(
        f"\nStart-up: `scrub --version` takes {start_up:.2f} s (Python, NumPy and the command line); "
        f"`find`'s stat walk of the {count:,} JPEGs {stat_walk:.2f} s: together "
        f"{start_up + stat_walk:.2f} s, the least a rerun that stats every file can take."
    )
    goals = {images: warm["naive"] / 3, database: lmdb["naive"] / 3, **photo_goals}
    floors = [(folder, "JPEGs", decode_floor(folder)) for folder in (images, *photo_goals)]
    floors.insert(1, (database, "Datums", datum_floor(database)))
    for folder, what, (files, seconds) in floors:
        least = start_up + seconds / 2
        room = goals[folder] - least
        lines.append(
            f"\nDecode floor, {folder.name}: reading and verifying its {files:,} {what} takes "
            f"{seconds:.2f} s on one core ({seconds / files * 1e6:.0f} µs each): "
            f"{seconds / 2:.2f} s on two; with the start-up, {least:.2f} s is the least a scan of "
            f"them can take. The goal ({goals[folder]:.2f} s) "
            + (
                f"leaves {room:.2f} s ({room / files * 2e6:.1f} µs a record on each core) for "
                "everything else: imports, the command line, listing, the checks, the pool, outputs."
                if room > 0
                else "is below it: not reachable here."
            )
        )
    benchdata.report(lines, args.markdown_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
