#!/usr/bin/env python3
"""Benchmark incremental rescans (``--cache``) on the 20,000-JPEG dataset of ``bench_images.py``.

One run times, as whole processes from the command line (start-up included), warm page cache,
best of ``--repeat``:

* ``scrub scan`` without a cache (the naive way: every night, everything);
* the first scan with ``--cache`` (an empty cache folder);
* a rerun on the unchanged data;
* a rerun after 1% of the files changed (a different 1% each repeat, new bytes);
* scanning only those 1% (a folder of just the changed files): the floor a rerun is held to;

and checks that the rerun's manifest after the change equals a full scan's. With root rights
(``/proc/sys/vm/drop_caches``) it also times the first scan and the unchanged rerun with a cold
page cache. Peak RSS is the driver process's (``wait4``). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchdata import images

HERE = Path(__file__).resolve().parent


def timed(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (MiB) of one process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited with {code}")
    return seconds, usage.ru_maxrss // 1024


def drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def change(files: list[Path], count: int, rng: random.Random, generation: int) -> list[Path]:
    """Give ``count`` random files new bytes: a JPEG comment segment inserted after the start
    marker (a valid file stays valid, a truncated one truncated; the content hash changes)."""
    chosen = rng.sample(files, count)
    for path in chosen:
        data = path.read_bytes()
        text = f"scrub-bench change {generation}".encode()
        comment = b"\xff\xfe" + (len(text) + 2).to_bytes(2, "big") + text
        path.write_bytes(data[:2] + comment + data[2:])
    return chosen


def manifest_lines(path: Path) -> list[str]:
    return sorted(
        json.dumps({k: v for k, v in json.loads(line).items() if k != "status"}, sort_keys=True)
        for line in path.read_text().splitlines()
        if line.strip()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--scrub", default=str(Path(sys.executable).with_name("scrub")))
    args = parser.parse_args()

    source = images(args.workdir, sys.executable)
    work = args.workdir / "cache-bench"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = work / "data"
    subprocess.run(["cp", "-a", str(source), str(data)], check=True)
    files = sorted(data.rglob("*.jpg"))
    count = max(1, int(len(files) * args.fraction))
    scrub = [args.scrub, "scan", str(data), "-q"]
    rng = random.Random(0)
    rows: list[tuple[str, float, int]] = []

    def best(name: str, make: callable) -> float:
        results = [make() for _ in range(args.repeat)]
        seconds, peak = min(results)
        rows.append((name, seconds, peak))
        return seconds

    subprocess.run(scrub + ["--manifest", str(work / "warm.jsonl")], stdout=subprocess.DEVNULL)  # warm up
    plain = best("scan, no cache", lambda: timed(scrub + ["--manifest", str(work / "plain.jsonl")]))

    def first() -> tuple[float, int]:
        shutil.rmtree(work / "cache", ignore_errors=True)
        return timed(scrub + ["--cache", str(work / "cache"), "--manifest", str(work / "first.jsonl")])

    first_scan = best("first scan with --cache", first)
    unchanged = best(
        "rerun, nothing changed",
        lambda: timed(scrub + ["--cache", str(work / "cache"), "--manifest", str(work / "same.jsonl")]),
    )
    generation = [0]
    changed_sets: list[list[Path]] = []

    def after_change() -> tuple[float, int]:
        generation[0] += 1
        changed_sets.append(change(files, count, rng, generation[0]))
        return timed(scrub + ["--cache", str(work / "cache"), "--manifest", str(work / "changed.jsonl")])

    rerun = best(f"rerun, {count:,} files ({args.fraction:.0%}) changed", after_change)
    full = work / "full.jsonl"
    subprocess.run(scrub + ["--manifest", str(full)], stdout=subprocess.DEVNULL)
    # the last rerun's manifest must be a full scan's (the data did not change since)
    timed(scrub + ["--cache", str(work / "cache"), "--manifest", str(work / "check.jsonl")])
    identical = manifest_lines(work / "check.jsonl") == manifest_lines(full)

    only = work / "only-changed"
    for path in changed_sets[-1]:
        target = only / path.relative_to(data)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    floor = best(
        f"scan of only those {count:,} files",
        lambda: timed([args.scrub, "scan", str(only), "-q", "--manifest", str(work / "only.jsonl")]),
    )
    # In one process, imports excluded: what the cache saves of the scan itself.
    api = subprocess.run(
        [
            sys.executable,
            "-c",
            f"""
import json, shutil, time, scrub
shutil.rmtree({str(work / "api-cache")!r}, ignore_errors=True)
times = []
for run in range(1 + {args.repeat}):
    started = time.perf_counter()
    scrub.scan({str(data)!r}, cache={str(work / "api-cache")!r})
    times.append(time.perf_counter() - started)
print(json.dumps([times[0], min(times[1:])]))
""",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    api_first, api_rerun = json.loads(api.stdout)
    # The encoded-JPEG Datum LMDB of bench_lmdb.py: values are looked up by their hash.
    from bench_lmdb import build

    database = args.workdir / "datum_lmdb"
    build(source, database)
    lmdb_scan = [args.scrub, "scan", str(database), "-q"]
    lmdb_plain = min(timed(lmdb_scan + ["--manifest", str(work / "l0.jsonl")]) for _ in range(args.repeat))[0]

    def lmdb_first() -> tuple[float, int]:
        shutil.rmtree(work / "lmdb-cache", ignore_errors=True)
        return timed(lmdb_scan + ["--cache", str(work / "lmdb-cache"), "--manifest", str(work / "l1.jsonl")])

    lmdb_first_scan = min(lmdb_first() for _ in range(args.repeat))[0]
    lmdb_rerun = min(
        timed(lmdb_scan + ["--cache", str(work / "lmdb-cache"), "--manifest", str(work / "l2.jsonl")])
        for _ in range(args.repeat)
    )[0]
    cold = None
    if drop_caches():
        shutil.rmtree(work / "cache", ignore_errors=True)
        drop_caches()
        cold_first = timed(scrub + ["--cache", str(work / "cache"), "--manifest", str(work / "c1.jsonl")])[0]
        drop_caches()
        cold_rerun = timed(scrub + ["--cache", str(work / "cache"), "--manifest", str(work / "c2.jsonl")])[0]
        cold = (cold_first, cold_rerun)

    print(
        f"## Incremental rescans, {dt.date.today()} ({platform.machine()}, {os.cpu_count()} cores, "
        f"{len(files):,} JPEGs 256x256, warm page cache, whole process, best of {args.repeat})\n"
    )
    print("| run | seconds | peak RSS (MiB) |\n|---|---|---|")
    for name, seconds, peak in rows:
        print(f"| {name} | {seconds:.2f} | {peak} |")
    print()
    print(
        f"- unchanged rerun: {first_scan / unchanged:.1f}x faster than the first scan with --cache, "
        f"{plain / unchanged:.1f}x faster than a scan without one"
    )
    print(
        f"- in one process (`scrub.scan`, imports excluded): first scan with a cache {api_first:.2f} s, "
        f"unchanged rerun {api_rerun:.3f} s ({api_first / api_rerun:.1f}x)"
    )
    print(
        f"- rerun after {args.fraction:.0%} changed: {rerun:.2f} s, {rerun / floor:.2f}x the scan of only "
        "the "
        f"changed files ({floor:.2f} s); {rerun - unchanged:.2f} s more than an unchanged rerun"
    )
    print(f"- its manifest equals a full scan's: {identical}")
    print(
        f"- LMDB, the same JPEGs as {len(files):,} encoded Datums: scan {lmdb_plain:.2f} s, first scan with "
        f"--cache {lmdb_first_scan:.2f} s, unchanged rerun {lmdb_rerun:.2f} s "
        f"({lmdb_first_scan / lmdb_rerun:.1f}x)"
    )
    if cold:
        print(
            f"- cold page cache: first scan {cold[0]:.2f} s, unchanged rerun {cold[1]:.2f} s "
            f"({cold[0] / cold[1]:.1f}x)"
        )
    else:
        print("- cold page cache: not measured (needs root for /proc/sys/vm/drop_caches)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
