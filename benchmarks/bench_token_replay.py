"""Benchmark the dummy-loss replay on token data: what ``--dummy-loss`` adds to ``scrub scan``.

The issue's case (issue 38, point 12): 3,000 token records, a vocabulary of 32,000, ``scrub scan
DATA --vocab-size 32000 --dummy-loss`` took 189 s against 2.1 s for the scan. The data here is a
JSON Lines file of ``input_ids`` (``--records`` records of 64..511 uniformly random ids below
32,000: the most distinct ids a batch can hold, the built-in model's worst case), with planted
records the scan condemns (two whose labels are all ignored, one empty sequence). Times, as
whole processes with a warm page cache (best of ``--repeat``):

* ``scrub scan DATA --vocab-size 32000``;
* the same with ``--dummy-loss`` (the built-in NumPy embedding model);
* the same with ``--dummy-loss --model tinylm:tiny_gpt2 --max-length 128`` on the first
  ``--torch-records`` records: a one-layer GPT-2 (16-wide, from a config, nothing downloaded) in
  PyTorch on the CPU, whose full 32,000-way head is the cost (``--max-length`` keeps its logits
  at ~1 GB a batch). Skipped when PyTorch or transformers is missing.

The replay's records/s is records divided by the time it adds. With ``--compare SRC`` every
command also runs with ``PYTHONPATH=SRC`` (another checkout of scrub, e.g. before a change),
interleaved with this one, on the same data, in the same run.

    python benchmarks/bench_token_replay.py [--records 3000] [--compare /path/to/old/scrub]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
VOCAB = 32_000

FACTORY = '''"""A tiny GPT-2 for the token-replay benchmark (from a config: nothing downloaded)."""
import transformers


def tiny_gpt2(vocab_size, max_length):
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=16, vocab_size=vocab_size, n_positions=max_length,
        bos_token_id=0, eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)
'''


def token_jsonl(path: Path, records: int, seed: int = 0) -> None:
    """``records`` lines of ``input_ids``; lines 11 and 501 with every label ignored, 778 empty."""
    rng = np.random.default_rng(seed)
    with path.open("w") as out:
        for i in range(records):
            ids = rng.integers(0, VOCAB, int(rng.integers(64, 512))).tolist()
            line: dict = {"input_ids": ids}
            if i in (10, 500):
                line["labels"] = [-100] * len(ids)
            if i == 777:
                line = {"input_ids": []}
            out.write(json.dumps(line) + "\n")


def timed(command: list[str], source: Path | None, work: Path) -> tuple[float, dict]:
    """Seconds of one whole process, and its JSON summary."""
    environment = dict(os.environ)
    paths = [str(work)] + ([str(source)] if source is not None else [])
    environment["PYTHONPATH"] = os.pathsep.join(paths + [environment.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    summary = work / "summary.json"
    started = time.perf_counter()
    done = subprocess.run(
        [*command, "-q", "--json", str(summary)], capture_output=True, text=True, env=environment, cwd=work
    )
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(command[3:8])} failed: {done.stderr.strip()[-600:]}")
    return took, json.loads(summary.read_text())


def has_torch(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import torch, transformers"], capture_output=True)
    return probe.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench/token-replay"))
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--torch-records", type=int, default=640)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--compare", type=Path, help="another scrub source tree, timed beside this one")
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"tokens-{args.records}.jsonl"
    if not data.exists():
        token_jsonl(data, args.records)
    small = work / f"tokens-{args.torch_records}.jsonl"
    if not small.exists():
        token_jsonl(small, args.torch_records)
    (work / "tinylm.py").write_text(FACTORY)
    scan = [args.python, "-m", "scrub", "scan"]
    manifest = ["--manifest", str(work / "m.jsonl")]
    rows = [
        ("scan", data, ["--vocab-size", str(VOCAB)]),
        ("+ --dummy-loss (NumPy embedding LM)", data, ["--vocab-size", str(VOCAB), "--dummy-loss"]),
    ]
    if has_torch(args.python):
        flags = ["--vocab-size", str(VOCAB), "--max-length", "128"]
        rows += [
            ("scan, --max-length 128", small, flags),
            (
                "+ --dummy-loss --model tinylm:tiny_gpt2 (PyTorch)",
                small,
                [*flags, "--dummy-loss", "--model", "tinylm:tiny_gpt2"],
            ),
        ]
    here = HERE.parent
    sources = [("this tree", here)] + ([("compared", args.compare.resolve())] if args.compare else [])
    results: dict[tuple[str, str], tuple[float, dict]] = {}
    for name, path, flags in rows:
        for label, source in sources:
            runs = [timed([*scan, str(path), *flags, *manifest], source, work) for _ in range(args.repeat)]
            results[name, label] = min(runs, key=lambda run: run[0])
            print(f"{label:>9}  {name}: {results[name, label][0]:.2f} s", flush=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    lines = [
        f"{stamp}, {os.cpu_count()} cores, best of {args.repeat}, whole processes, warm page cache",
        "",
        "| tree | command | records | seconds | replay adds | replay records/s | replay found |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for index, (name, _, _) in enumerate(rows):
        base = rows[index - 1][0] if name.startswith("+") else None
        for label, _ in sources:
            took, summary = results[name, label]
            records = summary["records"]
            added = rate = found = ""
            if base is not None:
                extra = took - results[base, label][0]
                replay = summary.get("replay") or {}
                added = f"{extra:.2f} s"
                rate = f"{records / extra:,.0f}" if extra > 0 else "-"
                skipped = replay.get("skipped", {})
                found = (
                    f"{replay.get('loss_nonfinite', 0)} loss-nonfinite; skipped {json.dumps(skipped)}"
                    if replay
                    else ""
                )
            lines.append(f"| {label} | {name} | {records:,} | {took:.2f} s | {added} | {rate} | {found} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.markdown_out:
        args.markdown_out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
