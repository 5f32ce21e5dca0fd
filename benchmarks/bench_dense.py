"""Findings in flat memory: a shard whose every row is bad, and records larger than a block.

Two cases, two sizes each, in one run (warm page cache, whole processes, peak memory of the
process tree sampled every 20 ms as PSS, so that pages the workers share count once):

* **dense**: an HDF5 of N rows x 4 float32, every row NaN (N findings). scrub writes the
  manifest of N lines; the naive way reads the file block by block and writes one JSON line per
  bad row from one process. Reported: seconds, findings/s, peak PSS. Goal (issue 13): peak
  <= 300 MiB at 10,000,000 findings, >= 300,000 findings/s on 2 cores (for the 10M case, run
  ``--dense 1000000 4000000 10000000``).
* **big rows**: an HDF5 of 3 rows of S x S float32 (chunks 1 x 1024 x 1024), one with a NaN.
  Reported: peak PSS of ``scrub scan`` and of the naive per-row ``np.isfinite(row).all()``;
  then of ``scrub fix`` (the NaN row set aside, the rest copied, both verified) and of the
  naive copy of the finite rows. Goal: <= 300 MiB for S = 8192 (256 MiB a row).

    python benchmarks/bench_dense.py [--dense 1000000 4000000] [--sides 4096 8192] [--markdown-out F]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np

NAIVE_DENSE = r"""
import json, sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f, open(sys.argv[2], "w") as out:
    d = f["data"]
    for start in range(0, d.shape[0], 65536):
        block = d[start:start + 65536]
        for i, row in enumerate(block):
            bad = ~np.isfinite(row)
            if bad.any():
                line = {"key": str(start + i), "check": "nonfinite-data", "nan": int(np.isnan(row).sum()),
                        "first_position": int(np.flatnonzero(bad)[0])}
                out.write(json.dumps(line) + "\n")
"""

NAIVE_ROWS = r"""
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    d = f["data"]
    print(sum(not np.isfinite(d[i]).all() for i in range(d.shape[0])))
"""


NAIVE_COPY = r"""
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as out:
    d = f["data"]
    keep = [i for i in range(d.shape[0]) if np.isfinite(d[i]).all()]
    o = out.create_dataset("data", shape=(len(keep), *d.shape[1:]), dtype=d.dtype, chunks=d.chunks)
    for j, i in enumerate(keep):
        o[j] = d[i]
"""


def tree_pss(pid: int) -> int:
    """Proportional set size of a process and its descendants, in bytes (Linux)."""
    import psutil

    try:
        processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            with open(f"/proc/{process.pid}/smaps_rollup") as rollup:
                total += next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total


def timed(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak PSS of the process tree."""
    peak = 0
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_pss(process.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = process.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if process.returncode not in (0, 1):
        raise RuntimeError(f"{command[:4]} failed ({process.returncode}): {err.strip()[-500:]}")
    return seconds, peak


def dense_file(workdir: Path, rows: int) -> Path:
    path = workdir / f"dense-{rows}.h5"
    if not path.exists():  # written aside and renamed: a run killed mid-way leaves no broken file
        temporary = path.with_suffix(".tmp")
        with h5py.File(temporary, "w") as file:
            data = file.create_dataset("data", shape=(rows, 4), dtype="f4", chunks=(65536, 4))
            for start in range(0, rows, 1 << 20):
                data[start : start + (1 << 20)] = np.nan
        temporary.rename(path)
    return path


def big_row_file(workdir: Path, side: int) -> Path:
    path = workdir / f"rows-3x{side}x{side}.h5"
    if not path.exists():
        temporary = path.with_suffix(".tmp")
        with h5py.File(temporary, "w") as file:
            data = file.create_dataset("data", shape=(3, side, side), dtype="f4", chunks=(1, 1024, 1024))
            for row in range(3):
                for top in range(0, side, 1024):
                    data[row, top : top + 1024] = np.random.default_rng(row).random(
                        (min(1024, side - top), side), "f4"
                    )
            data[1, side - 1, side - 1] = np.nan
        temporary.rename(path)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dense", type=int, nargs="*", default=[1_000_000, 4_000_000])
    parser.add_argument("--sides", type=int, nargs="*", default=[4096, 8192])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench/dense"))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    mib = 1 << 20
    today = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    lines = [
        f"# scrub: dense findings and big rows ({today}, {os.cpu_count()} cores)",
        "",
        "| case | scrub s | scrub findings/s | scrub peak PSS | naive s | naive peak PSS |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for rows in args.dense:
        path = dense_file(args.workdir, rows)
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
        ours, our_peak = timed(
            [args.python, "-m", "scrub", "scan", str(path), "-q", "--manifest", str(args.workdir / "m.jsonl")]
        )
        theirs, their_peak = timed(
            [args.python, "-c", NAIVE_DENSE, str(path), str(args.workdir / "naive.jsonl")]
        )
        lines.append(
            f"| dense, {rows:,} findings | {ours:.1f} | {rows / ours:,.0f} | {our_peak / mib:,.0f} MiB "
            f"| {theirs:.1f} | {their_peak / mib:,.0f} MiB |"
        )
        print(lines[-1], flush=True)
        for name in ("m.jsonl", "naive.jsonl", "m.scan.json"):
            (args.workdir / name).unlink(missing_ok=True)
    for side in args.sides:
        path = big_row_file(args.workdir, side)
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
        ours, our_peak = timed(
            [args.python, "-m", "scrub", "scan", str(path), "-q", "--manifest", str(args.workdir / "m.jsonl")]
        )
        theirs, their_peak = timed([args.python, "-c", NAIVE_ROWS, str(path)])
        row_mib = side * side * 4 / mib
        lines.append(
            f"| scan, 3 rows of {row_mib:,.0f} MiB | {ours:.1f} | - | {our_peak / mib:,.0f} MiB "
            f"| {theirs:.1f} | {their_peak / mib:,.0f} MiB |"
        )
        print(lines[-1], flush=True)
        # fix of the same file: the row with a NaN set aside, the others copied, all verified
        outputs = [args.workdir / "clean.h5", args.workdir / "held"]
        ours, our_peak = timed(
            [
                args.python,
                "-m",
                "scrub",
                "fix",
                str(path),
                "-q",
                "--out",
                str(outputs[0]),
                "--quarantine-dir",
                str(outputs[1]),
            ]
        )
        theirs, their_peak = timed([args.python, "-c", NAIVE_COPY, str(path), str(args.workdir / "naive.h5")])
        lines.append(
            f"| fix, 3 rows of {row_mib:,.0f} MiB | {ours:.1f} | - | {our_peak / mib:,.0f} MiB "
            f"| {theirs:.1f} | {their_peak / mib:,.0f} MiB |"
        )
        print(lines[-1], flush=True)
        subprocess.run(["rm", "-rf", *map(str, outputs), str(args.workdir / "naive.h5")], check=True)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.markdown_out:
        args.markdown_out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
