"""Benchmark the dummy-loss replay: its throughput and its overhead over a plain scan.

On the data the other benchmarks generate (generated first if missing): the 20,000 JPEGs of
``bench_images.py`` and a plain float32 HDF5 file of ``--hdf5-gib`` GiB from ``bench_hdf5.py``
(4 KiB rows: 1024 features). Times, as whole processes with a warm page cache (best of
``--repeat``): ``scrub scan X -q``, and the same with ``--dummy-loss`` for each built-in model
(``linear``, the default, with its L2 probe; ``l2``; ``batchnorm``), and the default model with
``--precision float16``. The replay's cost is the difference; its throughput is records
divided by that difference.

``python benchmarks/bench_replay.py [--repeat 3] [--markdown-out report.md]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script


def best(repeat: int, command: list[str]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"{' '.join(command[:6])} failed: {done.stderr.strip()[-400:]}")
    return min(times)


def bench(name: str, path: Path, python: str, repeat: int, work: Path) -> dict:
    summary = work / "summary.json"
    scan = [python, "-m", "scrub", "scan", str(path), "-q", "--manifest", str(work / "m.jsonl")]
    subprocess.run([*scan, "--dummy-loss", "--json", str(summary)], capture_output=True)  # warm, and facts
    replay = json.loads(summary.read_text())["replay"]
    row = {
        "name": name,
        "records": replay["records"],
        "features": replay["features"],
        "classes": replay["classes"],
    }
    row["scan"] = best(repeat, scan)
    for variant, flags in VARIANTS.items():
        took = best(repeat, [*scan, "--dummy-loss", *flags])
        extra = took - row["scan"]
        row[variant] = (took, extra / row["scan"], row["records"] / extra if extra > 0 else float("inf"))
    return row


#: The replays timed: each built-in model in float32, and the default one in float16.
VARIANTS = {
    "linear": ["--model", "linear"],
    "l2": ["--model", "l2"],
    "batchnorm": ["--model", "batchnorm"],
    "linear, float16": ["--precision", "float16"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"))
    parser.add_argument("--hdf5-gib", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    images = benchdata.images(args.workdir, args.python)
    h5 = benchdata.plain_hdf5(args.workdir, args.hdf5_gib)
    with tempfile.TemporaryDirectory() as work:
        rows = [
            bench("images (20,000 256x256 JPEGs)", images, args.python, args.repeat, Path(work)),
            bench(f"HDF5 ({args.hdf5_gib:g} GiB float32 rows)", h5, args.python, args.repeat, Path(work)),
        ]
    lines = [
        f"`scrub scan` with and without `--dummy-loss`; best of {args.repeat}, warm cache, {os.cpu_count()} "
        "cores",
        "",
        "| dataset | records | features x classes | scan | model | + replay | overhead | replay records/s |",
        "|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        for variant in VARIANTS:
            took, overhead, rate = r[variant]
            lines.append(
                f"| {r['name']} | {r['records']:,} | {r['features']} x {r['classes']} | {r['scan']:.2f} s "
                f"| {variant} | {took:.2f} s | {overhead:+.0%} | {rate:,.0f} |"
            )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.markdown_out:
        args.markdown_out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
