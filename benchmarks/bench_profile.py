"""What the profile costs: ``scrub scan`` with it (the default) and with ``--no-profile``, side by
side on the same data in one run (the issue's budget: at most 3% more).

Data (generated once, shared with the other benchmarks): the 20,000-JPEG class-folder tree of
``bench_images.py``, a plain float32 HDF5 file of ``--gib`` GiB (4 KiB rows, labels; from
``bench_hdf5.py``) and a Megatron-LM pair of ``--megatron-gb`` GB of uint16 tokens (from
``bench_tokens.py``, scanned with ``--vocab-size 50257``). scrub's modules are compiled to
bytecode first, as an installed package has them (``bench_speed.py`` says why). Each run is a
whole process with a warm page cache; the three variants (with, without, and without again: the
control) run in every order in turn, ``--repeat`` rounds. For each, the table gives the median
wall time, the median CPU time of the process tree (user + system, the scan and its workers:
less moved by other work on a shared machine than the wall time), the wall ratio of the medians,
the median of the paired wall differences (runs of one round ran next to each other in time),
the median paired CPU ratio with a 95% bootstrap interval for the profile and for the control,
and the peak resident memory of the process tree (sampled every 20 ms). The verdict is on the
CPU ratio's interval: "yes" when all of it is at most 1.03, "no" when all of it is above, else
"within the noise" (the machine cannot tell; more rounds or a quieter machine can).
It checks that the scan record holds a profile with it and none without.

    python benchmarks/bench_profile.py [--repeat 12] [--gib 2] [--megatron-gb 1] [--skip images]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script
from bench_hdf5 import _cpu, timed  # noqa: E402
from bench_tokens import VOCAB, generate  # noqa: E402

#: The issue's budget: the scan with the profile takes at most this much more than without.
BUDGET = 1.03


def compile_scrub(python: str) -> None:
    """Compile the modules of the scrub ``python`` imports to bytecode, as installing it does."""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    script = (
        "import compileall, pathlib, scrub; "
        "compileall.compile_dir(pathlib.Path(scrub.__file__).parent, quiet=1)"
    )
    subprocess.run([python, "-c", script], check=True, env=environment)


def megatron(workdir: Path, gigabytes: float) -> Path:
    """The Megatron-LM pair of ``bench_tokens.py`` (its naming: shared with that benchmark)."""

    prefix = workdir / "tokens" / f"tokens-{gigabytes:g}gb_text_document"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    generate(prefix, gigabytes)
    return prefix


def children_cpu() -> float:
    """User + system seconds of every child process waited for so far (workers included: the
    scan waits for its own)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(command: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of the process tree, peak RSS bytes of one run of ``command``."""
    before = children_cpu()
    seconds, peak, _ = timed(command)
    return seconds, children_cpu() - before, peak


def has_profile(record_path: Path) -> bool:
    """Whether a scan record holds a profile (the top level's: one dataset a scan here)."""
    return json.loads(record_path.read_text()).get("profile") is not None


def interval(ratios: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 95% bootstrap interval of the median of paired ratios (rounds drawn with replacement)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def verdict(low: float, high: float) -> str:
    """Whether the budget is met, as far as the interval of the CPU ratio can tell."""
    if high <= BUDGET:
        return "yes"
    if low > BUDGET:
        return "no"
    return "within the noise"


def cost(path: Path, files: list[Path], repeat: int, python: str, options: tuple[str, ...]) -> dict:
    """Both variants of one dataset, and the one without a second time (a control: how far two
    runs of the same command differ here), interleaved; medians, paired ratios and the profile
    check."""
    work = Path(tempfile.mkdtemp(prefix="scrub-bench-profile-"))
    variants = {"without": ["--no-profile"], "with": [], "control": ["--no-profile"]}
    commands = {
        name: [python, "-m", "scrub", "scan", str(path), "-q", "--fail-on", "never"]
        + ["--manifest", str(work / f"{name}.scrub.jsonl"), *options, *flags]
        for name, flags in variants.items()
    }
    for file in files:
        benchdata.warm(file)
    orders = list(itertools.permutations(variants))
    found: dict[str, list[tuple[float, float, int]]] = {name: [] for name in variants}
    for round_ in range(repeat):
        for name in orders[round_ % len(orders)]:  # each variant first, middle and last in turn
            seconds, cpu, peak = measured(commands[name])
            found[name].append((seconds, cpu, peak))
            print(f"  {path.name} {name}: {seconds:.3f} s, {cpu:.3f} s CPU", file=sys.stderr, flush=True)
    profiled = {name: has_profile(work / f"{name}.scrub.scan.json") for name in variants}
    if profiled != {"without": False, "with": True, "control": False}:
        raise RuntimeError(f"{path}: the scan records' profiles are not as asked: {profiled}")
    wall = {name: statistics.median(run[0] for run in runs) for name, runs in found.items()}
    cpu = {name: statistics.median(run[1] for run in runs) for name, runs in found.items()}
    ratios = {
        name: [b[1] / a[1] for a, b in zip(found["without"], found[name])] for name in ("with", "control")
    }
    return {
        "wall": wall,
        "cpu": cpu,
        "paired": statistics.median(b[0] - a[0] for a, b in zip(found["without"], found["with"])),
        "cpu_ratio": {name: statistics.median(values) for name, values in ratios.items()},
        "cpu_interval": {name: interval(values) for name, values in ratios.items()},
        "peak": {name: max(run[2] for run in runs) for name, runs in found.items()},
        "runs": {name: [round(run[0], 3) for run in runs] for name, runs in found.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"))
    parser.add_argument("--repeat", type=int, default=12)
    parser.add_argument("--gib", type=float, default=2.0, help="the HDF5 file's size (GiB)")
    parser.add_argument("--megatron-gb", type=float, default=1.0, help="the Megatron file's tokens (GB)")
    parser.add_argument("--skip", action="append", default=[], choices=["images", "hdf5", "megatron"])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    compile_scrub(args.python)
    datasets: dict[str, tuple[Path, list[Path], tuple[str, ...]]] = {}
    if "images" not in args.skip:
        folder = benchdata.images(args.workdir, args.python)
        count = sum(1 for _ in folder.rglob("*.jpg"))
        datasets[f"{count:,} JPEGs 256x256, class folders"] = (folder, [folder], ())
    if "hdf5" not in args.skip:
        h5 = benchdata.plain_hdf5(args.workdir, args.gib)
        datasets[f"HDF5, {args.gib:g} GiB float32, 4 KiB rows"] = (h5, [h5], ())
    if "megatron" not in args.skip:
        prefix = megatron(args.workdir, args.megatron_gb)
        pair = [Path(f"{prefix}.bin"), Path(f"{prefix}.idx")]
        vocabulary = ("--vocab-size", str(VOCAB))
        datasets[f"Megatron, {args.megatron_gb:g} GB uint16 tokens"] = (prefix, pair, vocabulary)
    rows = []
    for name, (path, files, options) in datasets.items():
        found = cost(path, files, args.repeat, args.python, options)
        print(json.dumps({"data": name, **found}), file=sys.stderr, flush=True)
        wall, cpu, peak = found["wall"], found["cpu"], found["peak"]
        (low, high), (control_low, control_high) = (
            found["cpu_interval"]["with"],
            found["cpu_interval"]["control"],
        )
        rows.append(
            f"| {name} | {wall['without']:.3f} | {wall['with']:.3f} | {wall['with'] / wall['without']:.3f} | "
            f"{found['paired']:+.3f} | {cpu['without']:.2f} | {cpu['with']:.2f} | "
            f"{found['cpu_ratio']['with']:.3f} [{low:.3f}, {high:.3f}] | "
            f"{found['cpu_ratio']['control']:.3f} [{control_low:.3f}, {control_high:.3f}] | "
            f"{peak['without'] / 2**20:.0f} / {peak['with'] / 2**20:.0f} | {verdict(low, high)} |"
        )
    load = os.getloadavg()
    lines = [
        f"## What the profile costs ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"- {_cpu()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; load average at the end "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min)",
        f"- `scrub scan DATA -q` with the profile, with `--no-profile`, and with `--no-profile` again (the "
        f"control): whole processes, warm page cache, medians of {args.repeat} interleaved rounds; CPU = "
        "user + system of the process tree; a CPU ratio is the median of the rounds' paired ratios "
        "(with / without, control / without), with its 95% bootstrap interval",
        "",
        "| data | without s | with s | wall ratio | paired difference s | CPU without s | CPU with s | "
        "CPU ratio [95%] | control CPU ratio [95%] | peak RSS MiB (without / with) | CPU ≤ 1.03 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows,
    ]
    benchdata.report(lines, args.markdown_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
