"""A scan of splits on a cluster: the driver's memory with `duplicate`'s and `split-leak`'s
columns joined on the cluster (`scrub.scanning.joins`, the default) and gathered into the
driver (as scans did before, and as `--cache`, `--against` and `--near-text` still do).

Why: the joins on the cluster exist so that the machine that runs `scrub` holds the pairs
found, not every record's identity and hash; this measures it on a real scan, not on the
synthetic frames of `bench_join.py`.

The data: a folder of two splits, ``train.h5`` (``--known`` rows) and ``val.h5`` (``--queries``
rows) of 4 float32 values each (written once under the system's temporary folder, never in the
repository); val holds 1,000 rows of train, train 1,000 rows twice. Each variant runs as its own
process (its own peak RSS) on its own ``LocalCluster`` of 2 worker processes of 1 thread (the
scheduler in the driver's process, as `bench_join.py` has it): wall time of the scan, the
driver's peak RSS, and the findings, which must be equal.

    python benchmarks/bench_cluster_scan.py [--known 2000000] [--queries 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
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

ROOT = Path(tempfile.gettempdir()) / "scrub-bench" / "cluster-scan"
PLANTED = 1000


def make_splits(known: int, queries: int) -> Path:
    import h5py

    folder = ROOT / f"{known}-{queries}"
    if (folder / "val.h5").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    train = rng.normal(size=(known, 4)).astype(np.float32)
    train[known - PLANTED :] = train[:PLANTED]  # duplicates inside train
    val = rng.normal(size=(queries, 4)).astype(np.float32)
    val[:: queries // PLANTED][:PLANTED] = train[PLANTED : 2 * PLANTED]  # leaks
    for name, rows in (("train.h5", train), ("val.h5", val)):
        with h5py.File(folder / f".{name}", "w") as file:
            file["data"] = rows
        (folder / f".{name}").rename(folder / name)
    return folder


def peak_rss() -> float:
    """This process's peak RSS in MiB: VmHWM, which an exec starts anew (``ru_maxrss`` keeps the
    peak of the process that forked it: the benchmark's own, with the data it made)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_variant(folder: Path, variant: str) -> dict:
    """One scan on a fresh cluster, in this process (a child of the benchmark)."""
    import distributed

    import scrub
    import scrub.scanning.run

    if variant == "gathered":  # the columns come back to the driver, as before the joins
        scrub.scanning.run.leave_on_cluster = lambda *arguments, **options: None  # type: ignore[assignment]
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        before = peak_rss()
        started = time.perf_counter()
        splits = [folder / "train.h5", folder / "val.h5"]
        result = scrub.scan(splits, scheduler=cluster.scheduler_address, select=["duplicate", "split-leak"])
        seconds = time.perf_counter() - started
        found = sorted((issue.dataset or "", issue.key, issue.check) for issue in result.issues())
    return {
        "seconds": seconds,
        "rss_before": before,
        "rss_peak": peak_rss(),
        "findings": len(found),
        "digest": hashlib.sha256(json.dumps(found).encode()).hexdigest(),
        "leaks": sum(check == "split-leak" for *_, check in found),
        "duplicates": sum(check == "duplicate" for *_, check in found),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--known", type=int, default=2_000_000)
    parser.add_argument("--queries", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.variant:
        print(json.dumps(run_variant(Path(arguments.folder), arguments.variant)))
        return
    folder = make_splits(arguments.known, arguments.queries)
    runs: dict[str, list[dict]] = {"cluster": [], "gathered": []}
    for _ in range(arguments.repeat):
        for variant in runs:  # interleaved, so that the machine's load falls on both alike
            output = subprocess.run(
                [sys.executable, __file__, "--variant", variant, "--folder", str(folder)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            runs[variant].append(json.loads(output.strip().splitlines()[-1]))
    digests = {run["digest"] for variant in runs.values() for run in variant}
    import dask
    import distributed

    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}")
    print(
        f"# Python {platform.python_version()}, NumPy {np.__version__}, dask {dask.__version__}, "
        f"distributed {distributed.__version__}"
    )
    print(f"# {arguments.known:,} training rows, {arguments.queries:,} validation rows")
    print(f"# medians of {arguments.repeat}")
    print("| columns | scan s | driver RSS MiB before / peak | leaks | duplicates |")
    print("|---|---:|---:|---:|---:|")
    for variant, found in runs.items():
        print(
            f"| {'joined on the cluster' if variant == 'cluster' else 'gathered into the driver'} "
            f"| {statistics.median(r['seconds'] for r in found):.1f} "
            f"| {statistics.median(r['rss_before'] for r in found):.0f} / "
            f"{statistics.median(r['rss_peak'] for r in found):.0f} "
            f"| {found[0]['leaks']:,} | {found[0]['duplicates']:,} |"
        )
    print(f"findings equal: {len(digests) == 1}")


if __name__ == "__main__":
    main()
