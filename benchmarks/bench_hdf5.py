"""Benchmark ``scrub scan`` on large chunked HDF5 files against the naive way, in one run.

For each file (a ≥ 2 GiB float32 file, the same at twice the size, and a gzip-compressed
variant) it times, as whole processes with a warm page cache, best of ``--repeat``:

* ``cat FILE > /dev/null``: the plain sequential read scrub's throughput is compared with;
* the naive way: one process reading chunk by chunk and testing ``np.isfinite(x).all()`` per row;
* ``scrub scan FILE``, sampling the resident memory of its whole process tree.

and prints ratios (scrub vs naive, scrub vs cat) with the targets next to them. The files are
generated once into ``--workdir`` (default /tmp/scrub-bench/hdf5), with a few planted NaN rows
whose detection is checked.

    python benchmarks/bench_hdf5.py [--gib 2] [--repeat 3] [--markdown-out report.md]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np

ROW = 1024  # float32 values per row: 4 KiB rows
CHUNK_ROWS = 256  # 1 MiB chunks
PLANTED = [7, 123_457, 300_001]

NAIVE = r"""
import sys, h5py, numpy as np
bad = 0
with h5py.File(sys.argv[1], "r") as f:
    d = f["data"]
    step = d.chunks[0]
    for start in range(0, d.shape[0], step):
        block = d[start:start + step]
        for row in block:
            if not np.isfinite(row).all():
                bad += 1
print(bad)
"""


def generate(path: Path, rows: int, compression: str | None) -> None:
    """A chunked float32 file of ``rows`` rows, written block by block (bounded memory)."""
    if path.exists():
        return
    rng = np.random.default_rng(0)
    temporary = path.with_suffix(".tmp")
    with h5py.File(temporary, "w") as file:
        options = {"compression": compression, "compression_opts": 1} if compression else {}
        data = file.create_dataset("data", shape=(rows, ROW), dtype="f4", chunks=(CHUNK_ROWS, ROW), **options)
        file.create_dataset("label", data=(np.arange(rows) % 1000).astype(np.float32))
        block = 16 * CHUNK_ROWS
        base = rng.normal(size=(block, ROW)).astype(np.float32)
        if compression:  # quantized values: compressible, as real features often are
            base = np.round(base * 16) / 16
        for start in range(0, rows, block):
            count = min(block, rows - start)
            data[start : start + count] = np.roll(base, start // block, axis=1)[:count]
        for row in PLANTED:
            if row < rows:
                values = data[row]
                values[17] = np.nan
                data[row] = values
    temporary.rename(path)


def warm(path: Path) -> None:
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)


def tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def timed(
    command: list[str], shell: bool = False, limit: float | None = None
) -> tuple[float, int, str | None]:
    """Wall seconds, peak RSS of the process tree (sampled every 20 ms), stdout. A run past
    ``limit`` seconds (None: no limit) is stopped, its process group killed: stdout None then."""
    peak = 0
    start = time.perf_counter()
    process = subprocess.Popen(
        command if not shell else " ".join(command),
        shell=shell,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=limit is not None,
    )
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(process.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        done.set()
        sampler.join()
        return time.perf_counter() - start, peak, None
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if process.returncode not in (0, 1):
        raise RuntimeError(f"{command[:4]} failed ({process.returncode}): {err.strip()[-800:]}")
    return seconds, peak, out


def bench_file(path: Path, repeat: int, python: str, scrub_args: list[str]) -> dict:
    size = path.stat().st_size
    warm(path)
    results: dict[str, list] = {"cat": [], "naive": [], "scrub": []}
    summary_path = Path(tempfile.mkdtemp()) / "summary.json"
    manifest = summary_path.with_name("manifest.jsonl")
    for _ in range(repeat):
        results["cat"].append(timed(["cat", str(path), ">", "/dev/null"], shell=True))
        results["naive"].append(timed([python, "-c", NAIVE, str(path)]))
        results["scrub"].append(
            timed(
                [
                    python,
                    "-m",
                    "scrub",
                    "scan",
                    str(path),
                    "--quiet",
                    "--fail-on",
                    "never",
                    "--json",
                    str(summary_path),
                    "--manifest",
                    str(manifest),
                    *scrub_args,
                ]
            )
        )
    best = {name: min(runs, key=lambda r: r[0]) for name, runs in results.items()}
    summary = json.loads(summary_path.read_text())
    naive_bad = int(best["naive"][2].strip())
    return {
        "file": path.name,
        "bytes": size,
        "seconds": {name: round(run[0], 2) for name, run in best.items()},
        "runs": {name: [round(r[0], 2) for r in runs] for name, runs in results.items()},
        "peak_rss_mib": {name: round(run[1] / 2**20) for name, run in best.items()},
        "scrub_nonfinite": summary["issues"]["by_check"].get("nonfinite-data"),
        "naive_nonfinite": naive_bad,
        "scheduler": summary["scheduler"],
    }


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"## scrub HDF5 benchmark ({meta['date']})", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items() if k != "date"]
    lines += [
        "",
        "| file | size | cat s | naive s | scrub s | scrub GB/s | vs naive (target ≥ 1.6x) | "
        "vs cat (target ≥ 0.8) | peak RSS MiB (target < 400) | NaN rows found (scrub / naive) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        s = row["seconds"]
        lines.append(
            f"| {row['file']} | {row['bytes'] / 2**30:.2f} GiB | {s['cat']} | {s['naive']} | {s['scrub']} | "
            f"{row['bytes'] / s['scrub'] / 1e9:.2f} | {s['naive'] / s['scrub']:.2f}x | "
            f"{s['cat'] / s['scrub']:.2f} | "
            f"{row['peak_rss_mib']['scrub']} | {row['scrub_nonfinite']} / {row['naive_nonfinite']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench/hdf5"))
    parser.add_argument(
        "--gib", type=float, default=2.0, help="size of the plain file (the doubled one is 2x)"
    )
    parser.add_argument("--gzip-gib", type=float, default=1.0, help="uncompressed size of the gzip file")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--scrub-args", default="", help="extra arguments for scrub scan")
    parser.add_argument("--skip-double", action="store_true", help="skip the doubled file")
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = int(args.gib * 2**30 / (ROW * 4))
    files = [(args.workdir / f"plain-{args.gib:g}gib.h5", rows, None)]
    if not args.skip_double:
        files.append((args.workdir / f"plain-{2 * args.gib:g}gib.h5", 2 * rows, None))
    files.append(
        (args.workdir / f"gzip-{args.gzip_gib:g}gib.h5", int(args.gzip_gib * 2**30 / (ROW * 4)), "gzip")
    )
    for path, count, compression in files:
        started = time.perf_counter()
        generate(path, count, compression)
        print(
            f"{path.name}: {path.stat().st_size / 2**30:.2f} GiB ready ({time.perf_counter() - started:.0f} "
            "s)",
            flush=True,
        )
    results = []
    for path, _, _ in files:
        result = bench_file(path, args.repeat, args.python, args.scrub_args.split())
        print(json.dumps(result), flush=True)
        results.append(result)
    meta = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "cpu": _cpu(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "h5py": f"{h5py.__version__} (HDF5 {h5py.version.hdf5_version})",
        "timing": f"whole process, warm page cache, best of {args.repeat}; RSS = whole process tree",
    }
    report = markdown(results, meta)
    print(report)
    if args.markdown_out:
        args.markdown_out.write_text(report)
    return 0


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
