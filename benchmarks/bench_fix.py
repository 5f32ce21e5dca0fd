"""Benchmark ``scrub fix`` against what it replaces: ``scrub scan`` plus a plain copy.

On the data the other benchmarks generate (generated first if missing; few bad records):

* images: 20,000 JPEGs in 10 class folders (``bench_images.py``), copy = ``cp -r``;
* LMDB: the same JPEGs as encoded Caffe Datums (``bench_lmdb.py``), copy = ``cp -r``;
* HDF5: a plain float32 file of ``--hdf5-gib`` GiB (``bench_hdf5.py``), copy = ``cp`` and an
  h5py chunk copy (``File.copy`` of every dataset, which is what the writer's own work is);

it times, as whole processes with a warm page cache, outputs on tmpfs (medians of ``--repeat``
rounds, each round running every command once):
``scrub scan``, the copy, ``scrub fix --quarantine`` (which scans, writes both outputs and reads them back to
verify), and ``scrub fix --manifest`` (reusing the scan). The ratio the issue sets is
``fix / (scan + copy)``: about 1 means fix costs no more than doing both by hand.

``python benchmarks/bench_fix.py [--repeat 3] [--markdown-out report.md]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script

H5_COPY = r"""
import sys, h5py
with h5py.File(sys.argv[1], "r") as source, h5py.File(sys.argv[2], "w") as target:
    for name in source:
        source.copy(source[name], target, name=name)
"""


def remove(*paths: Path) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def warm(path: Path) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        with open(file, "rb") as handle:
            while handle.read(16 << 20):
                pass


def bench(
    name: str, source: Path, work: Path, python: str, repeat: int, copies: dict[str, list[str]]
) -> dict:
    scrub = [python, "-m", "scrub"]
    work.mkdir(parents=True, exist_ok=True)
    clean, held, manifest = work / f"clean{source.suffix or '.d'}", work / "held", work / "scan.jsonl"
    warm(source)
    row = {"name": name, "records": None}
    fix = [*scrub, "fix", str(source), "--out", str(clean), "--quarantine-dir", str(held), "-q"]
    fresh = lambda: remove(clean, held)  # noqa: E731 - timing a first fix, not a --force replacement
    # (command, what to remove after it) in the order of one round; the rounds interleave them,
    # so that the ratio's parts share this VM's drift (separate series measured it too)
    commands = {
        "scan": ([*scrub, "scan", str(source), "-q", "--manifest", str(manifest)], None),
        **{
            label: (command, lambda target=Path(command[-1]): remove(target))
            for label, command in copies.items()
        },
        "fix": (fix, fresh),
        "fix_reuse": ([*fix, "--manifest", str(manifest)], fresh),  # the round's scan wrote it
    }
    times: dict[str, list[float]] = {label: [] for label in commands}
    fresh()
    for command in copies.values():  # `cp -r` into a folder left by an aborted run would nest
        remove(Path(command[-1]))
    for _ in range(repeat):
        for label, (command, after) in commands.items():
            times[label].append(benchdata.timed(command))
            if after is not None:
                after()
    row.update({label: statistics.median(runs) for label, runs in times.items()})
    remove(clean, held)
    copy = min(v for k, v in row.items() if k.startswith("copy"))
    row["ratio"] = row["fix"] / (row["scan"] + copy)
    row["ratio_reuse"] = row["fix_reuse"] / copy
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"), help="where the data is")
    parser.add_argument(
        "--outdir",
        type=Path,
        default=Path("/dev/shm/scrub-bench-fix")
        if Path("/dev/shm").is_dir()
        else Path("/tmp/scrub-bench/fix"),
        help="where copies and outputs go (default: tmpfs, so that the disk's writeback does not "
        "dominate: on the reference VM, cp -r of the image tree took 1.6-13 s to disk)",
    )
    parser.add_argument("--hdf5-gib", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--only", choices=["images", "lmdb", "hdf5"], action="append")
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    work = args.outdir
    only = set(args.only or ["images", "lmdb", "hdf5"])
    images = benchdata.images(args.workdir, args.python) if only & {"images", "lmdb"} else None
    rows = []
    if "images" in only:
        rows.append(
            bench(
                "images (20,000 JPEGs)",
                images,
                work / "images",
                args.python,
                args.repeat,
                {"copy (cp -r)": ["cp", "-r", str(images), str(work / "images" / "copy")]},
            )
        )
    if "lmdb" in only:
        from bench_lmdb import build

        db = args.workdir / "datum_lmdb"
        build(images, db)
        rows.append(
            bench(
                "LMDB (20,000 Datums)",
                db,
                work / "lmdb",
                args.python,
                args.repeat,
                {"copy (cp -r)": ["cp", "-r", str(db), str(work / "lmdb" / "copy")]},
            )
        )
    if "hdf5" in only:
        path = benchdata.plain_hdf5(args.workdir, args.hdf5_gib)
        h5work = work / "hdf5"
        h5work.mkdir(parents=True, exist_ok=True)
        (h5work / "h5copy.py").write_text(H5_COPY)
        rows.append(
            bench(
                f"HDF5 ({args.hdf5_gib:g} GiB float32)",
                path,
                h5work,
                args.python,
                args.repeat,
                {
                    "copy (cp)": ["cp", str(path), str(h5work / "copy.h5")],
                    "copy (h5py)": [
                        args.python,
                        str(h5work / "h5copy.py"),
                        str(path),
                        str(h5work / "copy-h5py.h5"),
                    ],
                },
            )
        )
    report = markdown(rows, args)
    print(report)
    if args.markdown_out:
        args.markdown_out.write_text(report)
    return 0


def markdown(rows: list[dict], args) -> str:
    lines = [
        f"`scrub fix` vs `scrub scan` + a copy; medians of {args.repeat}, warm cache, {os.cpu_count()} cores",
        "",
        "| dataset | scan | copy | fix --quarantine | fix / (scan + copy) | fix --manifest | fix --manifest "
        "/ copy |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        copies = ", ".join(f"{v:.2f} s {k[5:]}" for k, v in row.items() if k.startswith("copy"))
        lines.append(
            f"| {row['name']} | {row['scan']:.2f} s | {copies} | {row['fix']:.2f} s | **{row['ratio']:.2f}** "
            f"| {row['fix_reuse']:.2f} s | {row['ratio_reuse']:.2f} |"
        )
    lines.append("")
    lines.append(f"outputs written to {args.outdir}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
