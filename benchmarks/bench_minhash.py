"""Near-duplicate texts by MinHash LSH: scrub's NumPy signatures (`scrub.checks.minhash`) beside
datasketch's ``MinHash`` + ``MinHashLSH``, on one corpus of real-ish documents with planted near
copies, in one process.

Why: the issue asks for near-duplicate text by MinHash LSH, with a well-kept library where it
serves, measured first. The question is what a document costs (its signature, then the index and
the lookup) and how many near copies each finds at Jaccard 0.8, with how many false pairs.

The corpus (no network): the docstrings of the standard library's modules, classes and functions
(read with ``ast``, never imported; test packages left out) and the help topics of
``pydoc_data``, each file's text cut into documents of ``--min-words`` to ``--max-words`` words;
when they are fewer than the documents asked for, the rest are made of their sentences drawn at
random (documents that share whole sentences with others: the boilerplate of a real corpus).
``--train`` documents are the known (training) split; the evaluation split holds ``--per-kind``
edited copies of training documents for each kind of `KINDS` (each on other training documents)
and ``--held-out`` documents that are in no other split.

The truth is each evaluation document's exact Jaccard similarity with every training document
(their sets of 5-word shingles, `scrub.checks.minhash.shingles`, as a sparse product). A document
is a near copy when its most similar training document is at ``--threshold`` or above; recall is
the near copies paired with a training document at or above it, a false pair one below it.

Each tool gets the same shingles (made inside its timing) and runs ``--repeat`` rounds, median:

* scrub: ``signatures`` of all documents, ``band_keys`` (16 x 8), ``near_text_pairs``;
* datasketch: ``MinHash(num_perm=128)`` and ``update_batch`` of the shingles' bytes a document,
  with its default hash (SHA-1) and with XXH32 (scrub's); ``MinHashLSH`` at the threshold (its
  own bands, 9 x 13 for 0.8 and 128 values) and with scrub's 16 x 8; each candidate verified by
  ``MinHash.jaccard`` at the threshold, the most similar kept.

It checks too that scrub's signatures equal datasketch's (XXH32) on every document.

    python benchmarks/bench_minhash.py [--train 5000] [--repeat 3] [--markdown-out M]
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import random
import re
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import xxhash
from scipy import sparse

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script
from bench_hdf5 import _cpu  # noqa: E402

from scrub.checks import minhash  # noqa: E402

#: the planted edits: each copies a training document and changes it so (``words`` -> words)
KINDS: dict[str, Callable[[list[str], random.Random], list[str]]] = {}


def _edit(name: str) -> Callable:
    def register(function: Callable[[list[str], random.Random], list[str]]) -> Callable:
        KINDS[name] = function
        return function

    return register


@_edit("exact")
def _exact(words: list[str], rng: random.Random) -> list[str]:
    return list(words)


@_edit("1 changed")
def _one_changed(words: list[str], rng: random.Random) -> list[str]:
    return _changed(words, rng, 1)


@_edit("2 changed")
def _two_changed(words: list[str], rng: random.Random) -> list[str]:
    return _changed(words, rng, 2)


@_edit("1 in, 1 out")
def _inserted_deleted(words: list[str], rng: random.Random) -> list[str]:
    edited = list(words)
    edited.insert(rng.randrange(len(edited) + 1), "inserted")
    del edited[rng.randrange(len(edited))]
    return edited


@_edit("5% changed")
def _five_percent(words: list[str], rng: random.Random) -> list[str]:
    return _changed(words, rng, max(1, len(words) // 20))


def _changed(words: list[str], rng: random.Random, count: int) -> list[str]:
    edited = list(words)
    for position in rng.sample(range(len(edited)), count):
        edited[position] = f"changed{position}"
    return edited


def stdlib_texts() -> list[str]:
    """Each standard library file's docstrings as one text, and each pydoc help topic."""
    from pydoc_data.topics import topics

    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for path in sorted(root.rglob("*.py")):
        if {"site-packages", "test", "tests", "idle_test"} & set(path.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        docs = [
            ast.get_docstring(node)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        texts.append(" ".join(doc for doc in docs if doc))
    return texts + list(topics.values())


def documents(count: int, low: int, high: int, rng: random.Random) -> tuple[list[list[str]], int]:
    """``count`` distinct documents (word lists) and how many of them are cut from real text."""
    cut, seen = [], set()
    for text in stdlib_texts():
        words = text.split()
        while len(words) >= low:
            length = rng.randint(low, high)
            piece, words = words[:length], words[length:]
            if " ".join(piece) not in seen:
                seen.add(" ".join(piece))
                cut.append(piece)
    rng.shuffle(cut)
    real = min(len(cut), count)
    made = cut[:real]
    sentences = [s.split() for piece in cut for s in re.split(r"(?<=[.!?])\s+", " ".join(piece))]
    while len(made) < count:
        length, words = rng.randint(low, high), []
        while len(words) < length:
            words += rng.choice(sentences)
        if " ".join(words[:length]) not in seen:
            seen.add(" ".join(words[:length]))
            made.append(words[:length])
    return made, real


def corpus(args: argparse.Namespace) -> dict:
    """The training and evaluation documents, what each evaluation one copies, and by which edit."""
    rng = random.Random(args.seed)
    total = args.train + args.held_out
    docs, real = documents(total, args.min_words, args.max_words, rng)
    train, held_out = docs[: args.train], docs[args.train :]
    originals = rng.sample(range(len(train)), args.per_kind * len(KINDS))
    evaluation, kinds = [], []
    for number, original in enumerate(originals):
        kind = list(KINDS)[number // args.per_kind]
        evaluation.append(KINDS[kind](train[original], rng))
        kinds.append(kind)
    evaluation += held_out
    kinds += ["held-out"] * len(held_out)
    return {
        "train": [" ".join(words) for words in train],
        "evaluation": [" ".join(words) for words in evaluation],
        "kinds": kinds,
        "real": real,
    }


def exact_jaccard(train: list[str], evaluation: list[str]) -> sparse.csr_matrix:
    """Every (evaluation, training) pair's Jaccard similarity of shingle sets, where it is not 0."""
    vocabulary: dict[str, int] = {}

    def incidence(texts: list[str]) -> tuple[list[int], list[int]]:
        rows, columns = [], []
        for row, text in enumerate(texts):
            for shingle in set(minhash.shingles(text)):
                rows.append(row)
                columns.append(vocabulary.setdefault(shingle, len(vocabulary)))
        return rows, columns

    known, queries = (
        sparse.csr_matrix((np.ones(len(rows)), (rows, columns)), shape=(len(texts), len(vocabulary)))
        for texts, (rows, columns) in [(train, incidence(train)), (evaluation, incidence(evaluation))]
    )
    shared = (queries @ known.T).tocoo()
    sizes_known, sizes_queries = np.asarray(known.sum(1)).ravel(), np.asarray(queries.sum(1)).ravel()
    union = sizes_queries[shared.row] + sizes_known[shared.col] - shared.data
    return sparse.csr_matrix((shared.data / union, (shared.row, shared.col)), shape=shared.shape)


def run_scrub(train: list[str], evaluation: list[str], threshold: float) -> tuple[dict, dict]:
    """scrub's pairs {evaluation: training} and its seconds by stage."""
    started = time.perf_counter()
    known, queries = minhash.signatures(train), minhash.signatures(evaluation)
    signed = time.perf_counter()
    found = minhash.near_text_pairs(
        minhash.band_keys(known), known, minhash.band_keys(queries), queries, threshold
    )
    looked = time.perf_counter()
    pairs = {int(query): int(match) for query, match, _ in zip(*found)}
    return pairs, {"signatures": signed - started, "lookup": looked - signed}


def run_datasketch(
    train: list[str], evaluation: list[str], threshold: float, hashfunc: Callable | None, bands: tuple | None
) -> tuple[dict, dict]:
    """datasketch's pairs {evaluation: training} and its seconds by stage."""
    from datasketch import MinHash, MinHashLSH

    started = time.perf_counter()
    sketches = []
    for text in train + evaluation:
        sketch = MinHash(num_perm=minhash.NUM_PERM, hashfunc=hashfunc)
        sketch.update_batch([shingle.encode() for shingle in minhash.shingles(text)])
        sketches.append(sketch)
    signed = time.perf_counter()
    index = MinHashLSH(threshold=threshold, num_perm=minhash.NUM_PERM, params=bands)
    with index.insertion_session() as session:
        for number, sketch in enumerate(sketches[: len(train)]):
            if minhash.shingles(train[number]):
                session.insert(number, sketch, check_duplication=False)
    pairs = {}
    for query, sketch in enumerate(sketches[len(train) :]):
        if not minhash.shingles(evaluation[query]):
            continue
        scored = [(sketch.jaccard(sketches[known]), -known) for known in index.query(sketch)]
        best = max(scored, default=(0.0, 0))
        if best[0] >= threshold:
            pairs[query] = -best[1]
    looked = time.perf_counter()
    return pairs, {"signatures": signed - started, "lookup": looked - signed}


def same_signatures(texts: list[str]) -> bool:
    """Whether scrub's signature of every text is datasketch's (XXH32, seed 1, affine32)."""
    from datasketch import MinHash

    ours = minhash.signatures(texts)
    for text, signature in zip(texts, ours):
        sketch = MinHash(num_perm=minhash.NUM_PERM, hashfunc=xxhash.xxh32_intdigest)
        sketch.update_batch([shingle.encode() for shingle in minhash.shingles(text)])
        if not np.array_equal(sketch.hashvalues, signature):
            return False
    return True


def tools(threshold: float) -> dict[str, Callable[[list[str], list[str]], tuple[dict, dict]]]:
    """Each measured configuration by its name in the table."""
    ours = (minhash.BANDS, minhash.ROWS)
    xxh32 = xxhash.xxh32_intdigest
    return {
        f"scrub (NumPy), {ours[0]} x {ours[1]}": lambda t, e: run_scrub(t, e, threshold),
        "datasketch, SHA-1, its bands": lambda t, e: run_datasketch(t, e, threshold, None, None),
        "datasketch, XXH32, its bands": lambda t, e: run_datasketch(t, e, threshold, xxh32, None),
        f"datasketch, XXH32, {ours[0]} x {ours[1]}": lambda t, e: run_datasketch(
            t, e, threshold, xxh32, ours
        ),
    }


def judged(pairs: dict, truth: sparse.csr_matrix, kinds: list[str], threshold: float) -> tuple:
    """Near copies found (of all, and by kind), and the true Jaccard of each false pair (below the
    threshold)."""
    best = np.asarray(truth.max(axis=1).todense()).ravel()
    near = set(np.flatnonzero(best >= threshold).tolist())
    right = {query for query, known in pairs.items() if truth[query, known] >= threshold}
    false = [truth[query, known] for query, known in pairs.items() if query not in right]
    by_kind = {kind: sum(kinds[query] == kind for query in right & near) for kind in [*KINDS, "held-out"]}
    return len(right & near), len(near), false, by_kind


def table(results: dict, data: dict, truth: sparse.csr_matrix, args: argparse.Namespace) -> list[str]:
    documents_ = len(data["train"]) + len(data["evaluation"])
    best = np.asarray(truth.max(axis=1).todense()).ravel()
    planted = np.array([kind != "held-out" for kind in data["kinds"]])
    load = os.getloadavg()
    lines = [
        f"**Run** ({len(data['train'])} training documents, {len(data['evaluation'])} evaluation ones; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC):",
        "",
        f"- {_cpu()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min)",
        f"- {data['real']} documents cut from the standard library's docstrings and help topics, "
        f"{len(data['train']) + args.held_out - data['real']} made of their sentences; "
        f"{args.min_words}-{args.max_words} words; {args.per_kind} planted copies of each kind",
        "- true Jaccard of the planted copies (5-word shingles): median by kind "
        + ", ".join(f"{kind} {np.median(best[np.array(data['kinds']) == kind]):.2f}" for kind in KINDS)
        + f"; held-out: highest {best[~planted].max():.2f}",
        f"- scrub's signatures equal datasketch's (XXH32) on every document: {data['same']}",
        f"- medians of {args.repeat} rounds, one process",
        "",
        "| tool | signatures ms/doc | lookup s | near copies found | false pairs | notes |",
        "|---|---:|---:|---:|---:|---|",
    ]
    recall = [
        "",
        "Near copies found, by kind:",
        "",
        "| tool | " + " | ".join(KINDS) + " |",
        "|---|" + "---:|" * len(KINDS),
    ]
    for name, (pairs, seconds) in results.items():
        found, near, false, by_kind = judged(pairs, truth, data["kinds"], args.threshold)
        per_doc = seconds["signatures"] / documents_ * 1000
        note = f"false pairs' true Jaccard {min(false):.2f}-{max(false):.2f}" if false else ""
        false = len(false)
        lines.append(
            f"| {name} | {per_doc:.3f} | {seconds['lookup']:.2f} | {found} of {near} | {false} | {note} |"
        )
        of_kind = [
            int(((np.array(data["kinds"]) == kind) & (best >= args.threshold)).sum()) for kind in KINDS
        ]
        recall.append(
            f"| {name} | " + " | ".join(f"{by_kind[k]} of {n}" for k, n in zip(KINDS, of_kind)) + " |"
        )
    return lines + recall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=5000, help="training documents")
    parser.add_argument("--held-out", type=int, default=500, help="evaluation documents in no other split")
    parser.add_argument("--per-kind", type=int, default=100, help="planted copies of each kind of edit")
    parser.add_argument("--min-words", type=int, default=30)
    parser.add_argument("--max-words", type=int, default=300)
    parser.add_argument("--threshold", type=float, default=minhash.THRESHOLD)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    data = corpus(args)
    data["same"] = same_signatures(data["train"] + data["evaluation"])
    truth = exact_jaccard(data["train"], data["evaluation"])
    measured = tools(args.threshold)
    rounds: dict[str, list] = {name: [] for name in measured}
    for _ in range(args.repeat):
        for name, tool in measured.items():
            rounds[name].append(tool(data["train"], data["evaluation"]))
    results = {
        name: (runs[0][0], {stage: statistics.median(run[1][stage] for run in runs) for stage in runs[0][1]})
        for name, runs in rounds.items()
    }
    benchdata.report(table(results, data, truth, args), args.markdown_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
