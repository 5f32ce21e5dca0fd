"""What the content identities cost: `duplicate` (every record's identity: the bytes of a JPEG,
each row of a 2 GiB HDF5 file, each document of a 1 GB Megatron store) and `near-duplicate`
(the JPEGs' perceptual hashes), as the CPU and wall time of whole `scrub scan` processes with
the check against the same scan with ``--ignore`` of it, in paired, interleaved runs (this VM
varies by 10-30% from run to run: the ratio of each pair is the measure, its median the
result), with peak memory.

    python benchmarks/bench_identities.py --repeat 5 --markdown-out /tmp/identities.md   # ~5 min

Reuses the other scripts' data (generated on first use): ``bench_images.py``'s 20,000 JPEGs,
``bench_hdf5.py``'s plain 2 GiB file and ``bench_tokens.py``'s 1 GB Megatron store.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchdata import images, plain_hdf5, report, warm


def scan(python: str, path: Path, manifest: Path, *options: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, the scan's worker processes included) and
    peak RSS (MiB, of the largest process) of one ``scrub scan``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    command = [python, "-m", "scrub", "scan", str(path), "-q", "--manifest", str(manifest), *options]
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(command[:5])} failed: {done.stderr.strip()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 1024


def paired(python: str, path: Path, workdir: Path, check: str, repeat: int, *options: str) -> dict:
    """``repeat`` pairs of scans with and without ``check``, in alternating order."""
    rows: dict[str, list[tuple[float, float, float]]] = {"with": [], "without": []}
    for round_number in range(repeat):
        order = ["with", "without"] if round_number % 2 == 0 else ["without", "with"]
        for name in order:
            ignored = ("--ignore", check) if name == "without" else ()
            rows[name].append(scan(python, path, workdir / f"identities-{name}.jsonl", *options, *ignored))
    cpu_ratios = [w[1] / o[1] for w, o in zip(rows["with"], rows["without"])]
    wall_ratios = [w[0] / o[0] for w, o in zip(rows["with"], rows["without"])]
    return {
        "wall": statistics.median(w[0] for w in rows["with"]),
        "wall_without": statistics.median(o[0] for o in rows["without"]),
        "cpu": statistics.median(w[1] for w in rows["with"]),
        "cpu_without": statistics.median(o[1] for o in rows["without"]),
        "cpu_ratio": statistics.median(cpu_ratios),
        "cpu_range": (min(cpu_ratios), max(cpu_ratios)),
        "wall_ratio": statistics.median(wall_ratios),
        "rss": max(w[2] for w in rows["with"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_tokens import generate

    tokens = args.workdir / "tokens" / "megatron-1gb"
    if not tokens.with_suffix(".bin").exists():
        generate(tokens, 1.0)
    cases = [
        ("20,000 JPEGs 256x256", images(args.workdir, args.python), "duplicate", ()),
        ("same", images(args.workdir, args.python), "near-duplicate", ()),
        ("2 GiB float32 HDF5 (524,288 rows)", plain_hdf5(args.workdir, 2), "duplicate", ()),
        ("1 GB Megatron store (833,791 documents)", tokens, "duplicate", ("--vocab-size", "50257")),
    ]
    lines = [
        "| data | check | wall with / without | CPU with / without | CPU ratio, median (range) | peak RSS |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, path, check, options in cases:
        warm(path.parent if path.name.startswith("megatron") else path)
        found = paired(args.python, path, args.workdir, check, args.repeat, *options)
        low, high = found["cpu_range"]
        lines.append(
            f"| {name} | `{check}` | {found['wall']:.2f} / {found['wall_without']:.2f} s "
            f"| {found['cpu']:.2f} / {found['cpu_without']:.2f} s "
            f"| {found['cpu_ratio']:.2f}x ({low:.2f}-{high:.2f}) | {found['rss']:.0f} MiB |"
        )
        print(lines[-1], flush=True)
    report(lines, args.markdown_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
