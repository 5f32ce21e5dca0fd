"""Drift on a wide table: scrub's profile and ``--baseline`` beside Evidently's ``DataDriftPreset``
and whylogs' profiles + drift scores, on the same data in one run.

The data (generated once into ``--workdir``, default /tmp/scrub-bench/drift): two Parquet files
of ``--rows`` rows (default 1,000,000) x ``--columns`` float64 columns (default 100, named
``f000`` ...), row groups of 65,536 rows. Each column is normal with its own mean and standard
deviation; ``reference.parquet`` and ``current.parquet`` are independent draws of the same
distributions, except the planted changes in ``current.parquet``: ten columns shifted by 0.5 to 2
of their standard deviations (``SHIFTED``) and one with its mean kept and its spread multiplied
by 1.5 (``RESCALED``). ``planted.json`` records them. The planted columns are spread over the
table, as real changes are (scrub profiles every position of a row of up to 256 elements, each
column of such a table, and the first 32 of a wider row: docs/profile.md).

Each tool runs as its own whole process (start-up included), the tools interleaved, ``--repeat``
rounds, median wall time and the peak resident memory of the process tree (sampled every 20 ms):

* scrub (this interpreter): ``scrub scan reference.parquet``, then ``scrub scan current.parquet
  --baseline`` the first scan's manifest; the row gives both and their sum (the profile of the
  reference is what last night's scan left; the drift is measured by tonight's);
* Evidently (``--peer-python``, default /work/benchvenv/bin/python: see
  benchmarks/requirements-peers.txt): both files read into pandas, ``Report([DataDriftPreset()])``
  run on them; a column drifts when its score is past its method's threshold (for numbers over
  1,000 rows: the normed Wasserstein distance >= 0.1);
* whylogs (the same interpreter): both files read into pandas, ``why.log`` of each, then
  ``calculate_drift_scores`` (Kolmogorov-Smirnov on the two KLL sketches); a column drifts when
  its category is ``DRIFT`` (p < 0.05; ``POSSIBLE_DRIFT``, 0.05 <= p < 0.15, is counted apart).

Then it compares the columns each flagged with the planted ones: found, missed, false alarms.

    python benchmarks/bench_drift.py [--rows 1000000] [--columns 100] [--repeat 3] [--skip evidently]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script
from bench_hdf5 import _cpu, timed  # noqa: E402

#: Columns of ``current.parquet`` moved by this many of their standard deviations.
SHIFTED = {3: 0.5, 11: 0.75, 19: 1.0, 27: 1.5, 35: 2.0, 47: 0.5, 58: 0.75, 69: 1.0, 80: 1.5, 91: 2.0}
#: Columns of ``current.parquet`` with the same mean and their spread multiplied by this.
RESCALED = {23: 1.5}
ROW_GROUP = 65_536
#: Element positions per feature group that scrub's profile keeps (docs/profile.md).
#: the positions scrub's profile keeps per feature of a row this wide (`scrub.profile.ArrayGroup`)
PROFILE_POSITIONS_WIDE, EVERY_POSITION_UP_TO = 32, 256
#: scrub's drift ids (docs/checks.md) whose ``details.feature`` names a feature.
SCRUB_DRIFT = {"value-drift", "dtype-change", "record-count-change"}


def column(index: int) -> str:
    return f"f{index:03d}"


def generate(folder: Path, rows: int, columns: int, seed: int) -> dict:
    """``reference.parquet`` and ``current.parquet`` (reused when ``planted.json`` matches), written
    a row group at a time (bounded memory); returns what was planted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    planted = {
        "rows": rows,
        "columns": columns,
        "seed": seed,
        "shifted": {column(i): sd for i, sd in SHIFTED.items() if i < columns},
        "rescaled": {column(i): factor for i, factor in RESCALED.items() if i < columns},
    }
    record = folder / "planted.json"
    if record.exists() and json.loads(record.read_text()) == planted:
        return planted
    folder.mkdir(parents=True, exist_ok=True)
    record.unlink(missing_ok=True)
    rng = np.random.default_rng(seed)
    means = rng.uniform(-5, 5, columns)
    spreads = rng.uniform(0.5, 3, columns)
    shifted_means = means.copy()
    shifted_spreads = spreads.copy()
    for index, sd in SHIFTED.items():
        if index < columns:
            shifted_means[index] += sd * spreads[index]
    for index, factor in RESCALED.items():
        if index < columns:
            shifted_spreads[index] *= factor
    names = [column(i) for i in range(columns)]
    schema = pa.schema([(name, pa.float64()) for name in names])
    for name, mean, spread in (("reference", means, spreads), ("current", shifted_means, shifted_spreads)):
        with pq.ParquetWriter(folder / f"{name}.parquet", schema) as writer:
            for start in range(0, rows, ROW_GROUP):
                count = min(ROW_GROUP, rows - start)
                block = rng.standard_normal((count, columns)) * spread + mean
                writer.write_table(pa.Table.from_arrays(list(block.T), names=names))
    record.write_text(json.dumps(planted))
    return planted


EVIDENTLY = r"""
import json, sys, time
started = time.perf_counter()
import pandas as pd
from evidently import Report
from evidently.presets import DataDriftPreset
imported = time.perf_counter()
reference = pd.read_parquet(sys.argv[1])
current = pd.read_parquet(sys.argv[2])
read = time.perf_counter()
snapshot = Report([DataDriftPreset()]).run(current_data=current, reference_data=reference)
result = snapshot.dict()
done = time.perf_counter()
flagged, scores, methods = [], {}, set()
for metric in result["metrics"]:
    config = metric["config"]
    if not config.get("type", "").endswith("ValueDrift"):
        continue
    method, threshold, score = config["method"], config["threshold"], metric["value"]
    methods.add(f"{method}, threshold {threshold}")
    scores[config["column"]] = score
    # Evidently's rule: a p-value drifts below its threshold, a distance at or above it
    if (score < threshold) if "p_value" in method or "test" in method.lower() else (score >= threshold):
        flagged.append(config["column"])
print(json.dumps({"flagged": flagged, "possible": [], "scores": scores, "methods": sorted(methods),
                  "phases": {"import": imported - started, "read": read - imported, "drift": done - read}}))
"""

WHYLOGS = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
started = time.perf_counter()
import pandas as pd
import whylogs as why
from whylogs.viz.drift.column_drift_algorithms import calculate_drift_scores
imported = time.perf_counter()
reference = pd.read_parquet(sys.argv[1])
current = pd.read_parquet(sys.argv[2])
read = time.perf_counter()
reference_view = why.log(pandas=reference).view()
current_view = why.log(pandas=current).view()
profiled = time.perf_counter()
scores = calculate_drift_scores(target_view=current_view, reference_view=reference_view, with_thresholds=True)
done = time.perf_counter()
flagged = [name for name, score in scores.items() if score and score["drift_category"] == "DRIFT"]
possible = [name for name, score in scores.items() if score and score["drift_category"] == "POSSIBLE_DRIFT"]
methods = sorted({score["algorithm"] for score in scores.values() if score})
print(json.dumps({"flagged": flagged, "possible": possible, "methods": methods,
                  "scores": {name: score["pvalue"] for name, score in scores.items() if score},
                  "phases": {"import": imported - started, "read": read - imported,
                             "profile": profiled - read, "drift": done - profiled}}))
"""


def scrub_flagged(manifest: Path, names: list[str]) -> tuple[list[str], list[str]]:
    """The columns scrub's drift findings name (an element position is the table's column of that
    place: the float columns stacked in the schema's order), and the other features it named."""
    flagged, other = [], []
    for line in manifest.read_text().splitlines():
        entry = json.loads(line)
        if entry["check"] not in SCRUB_DRIFT and not entry["check"].endswith("-drift"):
            continue
        feature = entry.get("details", {}).get("feature", entry["check"])
        parts = feature.split(".")
        if len(parts) == 4 and parts[0] == "arrays" and parts[2] == "features":
            flagged.append(names[int(parts[3])])
        else:
            other.append(feature)
    return flagged, other


def verdict(flagged: list[str], planted: dict) -> dict:
    changed = set(planted["shifted"]) | set(planted["rescaled"])
    return {
        "found": sorted(changed & set(flagged)),
        "missed": sorted(changed - set(flagged)),
        "false": sorted(set(flagged) - changed),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench/drift"))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--columns", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs scrub")
    parser.add_argument(
        "--peer-python", default="/work/benchvenv/bin/python", help="Evidently's and whylogs'"
    )
    parser.add_argument(
        "--limit", type=float, default=1200, help="seconds a tool's run may take before it is stopped"
    )
    parser.add_argument("--skip", action="append", default=[], choices=["scrub", "evidently", "whylogs"])
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    folder = args.workdir / f"{args.rows}x{args.columns}"
    planted = generate(folder, args.rows, args.columns, args.seed)
    reference, current = folder / "reference.parquet", folder / "current.parquet"
    names = [column(i) for i in range(args.columns)]
    benchdata.warm(reference)
    benchdata.warm(current)
    work = Path(tempfile.mkdtemp(prefix="scrub-bench-drift-"))
    scan = [args.python, "-m", "scrub", "scan", "-q", "--fail-on", "never"]
    baseline = work / "reference.scrub.jsonl"
    tonight = work / "current.scrub.jsonl"
    commands: dict[str, list[str]] = {}
    if "scrub" not in args.skip:
        commands["scrub: profile the reference"] = [*scan, str(reference), "--manifest", str(baseline)]
        commands["scrub: profile tonight + drift"] = [
            *scan,
            str(current),
            "--manifest",
            str(tonight),
            "--baseline",
            str(baseline),
        ]
    if "evidently" not in args.skip:
        commands["Evidently DataDriftPreset"] = [
            args.peer_python,
            "-c",
            EVIDENTLY,
            str(reference),
            str(current),
        ]
    if "whylogs" not in args.skip:
        commands["whylogs profiles + drift"] = [args.peer_python, "-c", WHYLOGS, str(reference), str(current)]
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in commands}
    outputs: dict[str, dict] = {}
    stopped: set[str] = set()
    for round_ in range(args.repeat):
        for name, command in commands.items():
            if name in stopped:  # past the limit once: not run again
                continue
            seconds, peak, out = timed(command, limit=args.limit)
            runs[name].append((seconds, peak))
            if out is None:  # stopped at the limit
                stopped.add(name)
            elif out.strip():
                outputs[name] = json.loads(out.strip().splitlines()[-1])
            print(
                f"  round {round_ + 1} {name}: {seconds:.2f} s, {peak / 2**20:.0f} MiB",
                file=sys.stderr,
                flush=True,
            )
    wall = {name: statistics.median(run[0] for run in found) for name, found in runs.items()}
    peak = {name: max(run[1] for run in found) for name, found in runs.items()}
    rows: list[tuple[str, float, int, dict, str]] = []
    if "scrub" not in args.skip:
        flagged, other = scrub_flagged(tonight, names)
        both = ["scrub: profile the reference", "scrub: profile tonight + drift"]
        profiled = args.columns if args.columns <= EVERY_POSITION_UP_TO else PROFILE_POSITIONS_WIDE
        note = f"features by position 0..{profiled - 1}; also named: {', '.join(other) or 'none'}"
        for name in both:
            rows.append((name, wall[name], peak[name], {}, ""))
        rows.append(
            (
                "scrub, both scans",
                sum(wall[n] for n in both),
                max(peak[n] for n in both),
                verdict(flagged, planted),
                note,
            )
        )
    for name in commands:
        if name.startswith("scrub"):
            continue
        if name in stopped:
            note = f"stopped after {args.limit:g} s (--limit): no result; the peak RSS is up to then"
            rows.append((f"{name}: did not finish", wall[name], peak[name], {}, note))
            continue
        found = outputs[name]
        phases = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in found["phases"].items())
        note = f"{'; '.join(found['methods'])}; {phases}"
        if found["possible"]:
            note += f"; POSSIBLE_DRIFT (not counted): {', '.join(found['possible'])}"
        rows.append((name, wall[name], peak[name], verdict(found["flagged"], planted), note))
    changed = sorted(set(planted["shifted"]) | set(planted["rescaled"]))
    profiled = args.columns if args.columns <= EVERY_POSITION_UP_TO else PROFILE_POSITIONS_WIDE
    visible = [name for name in changed if names.index(name) < profiled]
    load = os.getloadavg()
    lines = [
        f"## Drift on a {args.rows:,} x {args.columns} Parquet table "
        f"({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"- {_cpu()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; load average at the end "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min)",
        f"- planted in current.parquet: shifted {planted['shifted']} (standard deviations), rescaled "
        f"{planted['rescaled']} (same mean, spread x factor); {len(visible)} of the {len(changed)} lie in "
        f"the {profiled} positions scrub profiles one by one ({', '.join(visible)})",
        f"- whole processes, warm page cache, medians of {args.repeat} interleaved rounds; peak RSS of the "
        "process tree",
        "",
        "| tool | s | peak RSS MiB | planted found | missed | false alarms | notes |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for name, seconds, memory, judged, note in rows:
        if not judged:
            lines.append(f"| {name} | {seconds:.2f} | {memory / 2**20:.0f} | | | | {note} |")
            continue
        lines.append(
            f"| {name} | {seconds:.2f} | {memory / 2**20:.0f} | {len(judged['found'])} / {len(changed)} | "
            f"{', '.join(judged['missed']) or 'none'} | {', '.join(judged['false']) or 'none'} | {note} |"
        )
    benchdata.report(lines, args.markdown_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
