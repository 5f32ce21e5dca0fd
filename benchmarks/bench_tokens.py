"""Benchmark ``scrub scan`` on a large Megatron-LM indexed dataset against the naive way and the
floor, in one run.

For each pair (a ~1 GB uint16 ``.bin`` of documents of random length, and one twice as large to
see that memory stays flat) it times, as whole processes with a warm page cache, best of
``--repeat``:

* the floor: ``np.max`` over the whole memory-mapped ``.bin`` (one pass over the tokens, nothing
  per document);
* the naive way: a Python loop over the documents of the memory-mapped index, taking each one's
  tokens and testing ``len(d) == 0 or d.max() >= vocab`` (what a hand-written checker does);
* ``scrub scan PREFIX --vocab-size V``, sampling the resident memory of its whole process tree
  (no ``--max-length``: Megatron packs documents into samples, so a long document is not
  truncated; with one, the ~3% of documents longer than it are each a finding, and findings cost
  ~20 µs each: docs/benchmarks.md).

and prints ratios (scrub vs naive, scrub vs the floor). The pairs are generated once, a block at
a time, into ``--workdir`` (default /tmp/scrub-bench/tokens), with planted ids out of the
vocabulary and empty documents, whose detection is checked (and one-token documents, which are
not findings: training packs them with their neighbours).

    python benchmarks/bench_tokens.py [--gb 1] [--repeat 3] [--markdown-out report.md]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from bench_hdf5 import _cpu, timed, warm

VOCAB = 50257  # GPT-2's: stored as uint16, as Megatron stores vocabularies under 65,500
MEAN_TOKENS = 600  # a document's mean length
PLANTED_IDS = [11, 123_457, 700_001]  # documents holding an id >= VOCAB
PLANTED_EMPTY = [5, 400_003]
PLANTED_SHORT = [9, 500_009]  # one token: no finding (Megatron packs documents into samples)

PLANTED_CHECKS = ("token-out-of-range", "empty-sequence", "no-supervised-tokens")

FLOOR = r"""
import sys, numpy as np
print(int(np.max(np.memmap(sys.argv[1] + ".bin", dtype=np.uint16, mode="r"))))
"""

NAIVE = r"""
import sys, numpy as np
prefix, vocab = sys.argv[1], int(sys.argv[2])
index = np.memmap(prefix + ".idx", dtype=np.uint8, mode="r")
n = int(np.frombuffer(index[18:26], dtype="<u8")[0])
lengths = index[34 : 34 + 4 * n].view(np.int32)
pointers = index[34 + 4 * n : 34 + 12 * n].view(np.int64)
tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
bad = 0
for length, pointer in zip(lengths.tolist(), pointers.tolist()):
    d = tokens[pointer // 2 : pointer // 2 + length]
    if length == 0 or d.max() >= vocab:
        bad += 1
print(bad)
"""


def generate(prefix: Path, gigabytes: float) -> int:
    """A uint16 pair of about ``gigabytes`` of tokens, written a block of documents at a time;
    returns its document count."""
    idx = Path(f"{prefix}.idx")
    if idx.exists():
        return int(struct.unpack("<Q", idx.read_bytes()[18:26])[0])
    rng = np.random.default_rng(0)
    total = int(gigabytes * 1e9 / 2)
    lengths: list[np.ndarray] = []
    written = 0
    number = 0
    with open(f"{prefix}.bin.tmp", "wb") as data:
        while written < total:
            block = np.maximum(rng.geometric(1 / MEAN_TOKENS, size=65536), 2).astype(np.int32)
            block = block[: np.searchsorted(np.cumsum(block), total - written, side="right") + 1]
            for planted in PLANTED_EMPTY:
                if number <= planted < number + len(block):
                    block[planted - number] = 0
            for planted in PLANTED_SHORT:
                if number <= planted < number + len(block):
                    block[planted - number] = 1
            tokens = rng.integers(0, VOCAB, int(block.sum()), dtype=np.uint16)
            starts = np.concatenate([[0], np.cumsum(block[:-1], dtype=np.int64)])
            for planted in PLANTED_IDS:
                if number <= planted < number + len(block) and block[planted - number] > 0:
                    tokens[starts[planted - number]] = VOCAB + 7
            data.write(tokens.tobytes())
            lengths.append(block)
            written += int(block.sum())
            number += len(block)
    sizes = np.concatenate(lengths)
    pointers = np.concatenate([[0], np.cumsum(sizes[:-1], dtype=np.int64)]) * 2
    documents = np.arange(len(sizes) + 1, dtype=np.int64)
    header = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(documents))
    Path(f"{prefix}.idx").write_bytes(header + sizes.tobytes() + pointers.tobytes() + documents.tobytes())
    os.rename(f"{prefix}.bin.tmp", f"{prefix}.bin")
    return len(sizes)


def bench(prefix: Path, documents: int, repeat: int, python: str) -> dict:
    size = Path(f"{prefix}.bin").stat().st_size
    warm(Path(f"{prefix}.bin"))
    warm(Path(f"{prefix}.idx"))
    summary_path = Path(tempfile.mkdtemp()) / "summary.json"
    manifest = summary_path.with_name("manifest.jsonl")
    scrub = [python, "-m", "scrub", "scan", str(prefix), "--vocab-size", str(VOCAB)]
    scrub += ["--quiet", "--fail-on", "never", "--json", str(summary_path), "--manifest", str(manifest)]
    runs: dict[str, list] = {"floor": [], "naive": [], "scrub": []}
    for _ in range(repeat):
        runs["floor"].append(timed([python, "-c", FLOOR, str(prefix)]))
        runs["naive"].append(timed([python, "-c", NAIVE, str(prefix), str(VOCAB)]))
        runs["scrub"].append(timed(scrub))
    best = {name: min(found, key=lambda run: run[0]) for name, found in runs.items()}
    summary = json.loads(summary_path.read_text())
    by_check = summary["issues"]["by_check"]
    return {
        "file": Path(f"{prefix}.bin").name,
        "bytes": size,
        "documents": documents,
        "seconds": {name: round(run[0], 2) for name, run in best.items()},
        "runs": {name: [round(run[0], 2) for run in found] for name, found in runs.items()},
        "peak_rss_mib": {name: round(run[1] / 2**20) for name, run in best.items()},
        "scrub_found": {
            check: by_check.get(check)
            for check in ("token-out-of-range", "empty-sequence", "no-supervised-tokens")
        },
        "naive_found": int(best["naive"][2].strip()),
        "scheduler": summary["scheduler"],
    }


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"## scrub token benchmark ({meta['date']})", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items() if key != "date"]
    lines += [
        "",
        "| file | size | documents | floor s (np.max) | naive s | scrub s | scrub GB/s | scrub vs naive | "
        "floor / scrub | peak RSS MiB (floor / naive / scrub) | found (scrub / naive) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        s, rss = row["seconds"], row["peak_rss_mib"]
        lines.append(
            f"| {row['file']} | {row['bytes'] / 1e9:.2f} GB | {row['documents']:,} | {s['floor']} | "
            f"{s['naive']} | {s['scrub']} | {row['bytes'] / s['scrub'] / 1e9:.2f} | "
            f"{s['naive'] / s['scrub']:.1f}x | "
            f"{s['floor'] / s['scrub']:.2f} | {rss['floor']} / {rss['naive']} / {rss['scrub']} | "
            f"{sum(v or 0 for v in row['scrub_found'].values())} / {row['naive_found']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench/tokens"))
    parser.add_argument("--gb", type=float, default=1.0, help="tokens of the first pair (the second is 2x)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--skip-double", action="store_true")
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    sizes = [args.gb] + ([] if args.skip_double else [2 * args.gb])
    pairs = []
    for gigabytes in sizes:
        prefix = args.workdir / f"tokens-{gigabytes:g}gb_text_document"
        started = time.perf_counter()
        documents = generate(prefix, gigabytes)
        print(
            f"{prefix.name}: {documents:,} documents ready ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        pairs.append((prefix, documents))
    rows = []
    for prefix, documents in pairs:
        row = bench(prefix, documents, args.repeat, args.python)
        print(json.dumps(row), flush=True)
        rows.append(row)
    meta = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "cpu": _cpu(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "timing": f"whole process, warm page cache, best of {args.repeat}; RSS = whole process tree",
    }
    report = markdown(rows, meta)
    print(report)
    if args.markdown_out:
        args.markdown_out.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
