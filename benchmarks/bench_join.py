"""Joining a run's hashes at scale: the grouping by sort on one machine, and the distributed join
(`scrub.scanning.joins`) beside `split_leak`'s single-machine joins on the same arrays.

Why: `split_leak` holds every record's identity and hash in the driver; past one machine's
memory the join has to run on the workers, and the question is what that costs and whether
the driver's memory stays flat as the hashes grow.

1. One machine: ``--group`` (default 1,000,000) hashes grouped by sort: ``np.sort`` and a
   stable ``np.argsort`` of uint64 hashes, ``np.unique`` and a stable ``np.argsort`` of 16-byte
   identities (``S16``, what `split_leak` sorts), and the radius + 1 band keys of every hash
   sorted band by band; medians of ``--repeat``.
2. For each ``KNOWN:QUERIES`` of ``--sizes``: synthetic splits of random 64-bit hashes and random
   16-byte identities, made a partition at a time by a seeded generator (``--partition`` rows
   each), so that a worker makes its partitions and the driver never sees them. The first
   ``PLANTED`` queries of each query partition are changed copies of a known partition's
   records: near copies at 0..radius + 1 bits, a tenth of them with the known identity.

   * cluster: `distributed_leaks` on a ``LocalCluster`` of 2 worker processes of 1 thread (the
     scheduler in the driver's process, as a local run has it); wall time of the join, the
     driver's peak RSS (the process's maximum, and its RSS before the join), each worker's peak;
   * one machine: every partition made in one process, then `split_leak`'s joins (a stable
     argsort + searchsorted of the identities, `near_pairs` of the other queries' hashes); wall
     time of the joins, the process's peak RSS.

   Each runs as its own process (its own peak RSS); the two results must be equal pair for pair
   (checked; written under the system's temporary folder, never in the repository).

    python benchmarks/bench_join.py [--sizes 1000000:100000 10000000:1000000] [--radius 6]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script
from bench_hdf5 import _cpu  # noqa: E402

from scrub.checks.perceptual import near_pairs  # noqa: E402
from scrub.scanning.joins import EXACT, band_layout, distributed_leaks, hash_columns, identity_words  # noqa: E402

#: the planted copies at the head of each query partition
PLANTED = 1000
KNOWN_SIDE, QUERY_SIDE = 0, 1


def seconds(function, repeat: int) -> float:
    """The median wall time of ``function()`` over ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def grouping(count: int, radius: int, repeat: int) -> list[tuple[str, float]]:
    """Seconds to group ``count`` hashes and identities by sort, each way `split_leak` and the
    band keys need it."""
    rng = np.random.default_rng(0)
    hashes = rng.integers(1, 2**64, count, dtype=np.uint64)
    identities = rng.integers(0, 256, (count, 16), dtype=np.uint8).view("S16").reshape(-1)
    high, low = identity_words(identities)

    def band_keys() -> None:
        for low, width in band_layout(radius):
            np.argsort((hashes >> np.uint64(low)) & np.uint64((1 << width) - 1), kind="stable")

    return [
        ("np.sort, uint64 hashes", seconds(lambda: np.sort(hashes), repeat)),
        ("np.argsort (stable), uint64 hashes", seconds(lambda: np.argsort(hashes, kind="stable"), repeat)),
        ("np.unique, S16 identities", seconds(lambda: np.unique(identities), repeat)),
        (
            "np.argsort (stable), S16 identities",
            seconds(lambda: np.argsort(identities, kind="stable"), repeat),
        ),
        ("np.lexsort, identities as two uint64 words", seconds(lambda: np.lexsort((low, high)), repeat)),
        (f"{radius + 1} band keys, each argsort (stable)", seconds(band_keys, repeat)),
    ]


def partitions(side: int, args: argparse.Namespace) -> int:
    total = args.known if side == KNOWN_SIDE else args.queries
    return -(-total // args.partition)


def identities_of(frame) -> np.ndarray:
    """A frame's identities as ``S16`` again (`hash_columns` made its words of them)."""
    words = np.ascontiguousarray(frame[["identity_high", "identity_low"]].to_numpy(">u8"))
    return words.view("S16")[:, 0]


def synthetic(side: int, number: int, args: argparse.Namespace):
    """Partition ``number`` of a side, the same wherever it is made (seeded by its place); a
    query partition's planted copies come from known partition ``number`` modulo their count."""
    rng = np.random.default_rng([args.seed, side, number])
    start = number * args.partition
    count = min(args.partition, (args.known if side == KNOWN_SIDE else args.queries) - start)
    hashes = rng.integers(1, 2**64, count, dtype=np.uint64)
    identities = rng.integers(0, 256, (count, 16), dtype=np.uint8).view("S16").reshape(-1)
    if side == QUERY_SIDE:
        source = synthetic(KNOWN_SIDE, number % partitions(KNOWN_SIDE, args), args)
        picked = rng.choice(len(source), min(PLANTED, count, len(source)), replace=False)
        source_hashes = source["phash"].to_numpy(np.uint64)
        for copy, row in enumerate(picked):
            bits = rng.choice(64, copy % (args.radius + 2), replace=False)
            hashes[copy] = source_hashes[row] ^ np.uint64(sum(1 << int(bit) for bit in bits))
        copied = picked[: len(picked) // 10]
        identities[: len(copied)] = identities_of(source)[copied]
    return hash_columns(start + np.arange(count), identities, hashes)


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def on_cluster(args: argparse.Namespace) -> dict:
    import dask.dataframe as dd
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        frames = [
            dd.from_map(
                synthetic, [side] * partitions(side, args), range(partitions(side, args)), args=[args]
            )
            for side in (KNOWN_SIDE, QUERY_SIDE)
        ]
        before = current_mib()
        started = time.perf_counter()
        found = distributed_leaks(client, *frames, args.radius)
        elapsed = time.perf_counter() - started
        workers = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    np.savez(args.out, *found)
    return {
        "seconds": elapsed,
        "driver_before": before,
        "peak": peak_mib(),
        "workers": sorted(workers.values()),
    }


def one_machine(args: argparse.Namespace) -> dict:
    import pandas as pd

    frames = [
        pd.concat([synthetic(side, number, args) for number in range(partitions(side, args))])
        for side in (KNOWN_SIDE, QUERY_SIDE)
    ]
    (known_ids, known_hashes), (ids, hashes) = [
        (identities_of(frame), frame["phash"].to_numpy(np.uint64)) for frame in frames
    ]
    del frames
    started = time.perf_counter()
    by_identity = np.argsort(known_ids, kind="stable")
    ordered = known_ids[by_identity]
    found = np.searchsorted(ordered, ids)
    found[found == len(ordered)] = 0
    exact = np.flatnonzero(ordered[found] == ids)
    rest = np.setdiff1d(np.arange(len(ids)), exact)
    near, nearest, distance = near_pairs(known_hashes, hashes[rest], args.radius)
    elapsed = time.perf_counter() - started
    query = np.concatenate([exact, rest[near]])
    order = np.argsort(query)
    known = np.concatenate([by_identity[found[exact]], nearest])[order]
    distances = np.concatenate([np.full(len(exact), EXACT), distance])[order]
    np.savez(args.out, query[order], known, distances)
    return {"seconds": elapsed, "peak": peak_mib()}


def measured(mode: str, known: int, queries: int, args: argparse.Namespace, out: Path) -> dict:
    """One mode as its own process: its numbers, and the pairs it found."""
    command = [sys.executable, __file__, "--mode", mode, "--known", str(known), "--queries", str(queries)]
    command += ["--radius", str(args.radius), "--partition", str(args.partition), "--seed", str(args.seed)]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
    numbers = json.loads(done.stdout.strip().splitlines()[-1])
    with np.load(out) as pairs:
        numbers["pairs"] = [pairs[name] for name in sorted(pairs.files)]
    return numbers


def table(args: argparse.Namespace) -> list[str]:
    load_before = os.getloadavg()
    lines = [
        f"**Run** ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"- {_cpu()}, {os.cpu_count()} cores, Python {platform.python_version()}, NumPy {np.__version__}; "
        f"load average at the start {load_before[0]:.2f}",
        "",
        f"One machine, {args.group:,} hashes grouped by sort (median of {args.repeat}):",
        "",
        "| grouping | s |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {took:.3f} |" for name, took in grouping(args.group, args.radius, args.repeat)]
    print("\n".join(lines), flush=True)
    lines += [
        "",
        f"The join at radius {args.radius} ({args.partition:,} rows a partition; "
        f"{PLANTED:,} planted copies a query partition):",
        "",
        "| known | queries | pairs | one machine s | one machine peak RSS MiB | cluster s "
        "| driver RSS MiB before / peak | workers' peak RSS MiB | equal |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="scrub-bench-join-") as folder:
        for size in args.sizes:
            known, queries = (int(part) for part in size.split(":"))
            local = measured("local", known, queries, args, Path(folder) / "local.npz")
            cluster = measured("cluster", known, queries, args, Path(folder) / "cluster.npz")
            equal = all(np.array_equal(a, b) for a, b in zip(local["pairs"], cluster["pairs"]))
            workers = " / ".join(f"{peak:,.0f}" for peak in cluster["workers"])
            lines.append(
                f"| {known:,} | {queries:,} | {len(local['pairs'][0]):,} | {local['seconds']:.1f} "
                f"| {local['peak']:,.0f} | {cluster['seconds']:.1f} "
                f"| {cluster['driver_before']:,.0f} / {cluster['peak']:,.0f} | {workers} | {equal} |"
            )
            print(lines[-1], flush=True)
    load = os.getloadavg()
    lines += ["", f"Load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min)"]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1000000:100000", "10000000:1000000"])
    parser.add_argument("--radius", type=int, default=6)
    parser.add_argument("--partition", type=int, default=500_000)
    parser.add_argument("--group", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown-out", type=Path)
    parser.add_argument("--mode", choices=["local", "cluster"], help=argparse.SUPPRESS)
    parser.add_argument("--known", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--queries", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps((on_cluster if args.mode == "cluster" else one_machine)(args)))
        return 0
    benchdata.report(table(args), args.markdown_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
