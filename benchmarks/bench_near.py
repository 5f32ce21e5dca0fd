"""Near copies across splits: scrub's ``split-leak`` beside cleanvision's duplicate checks and
imagededup's ``PHash``, on one planted-duplicate corpus of real photographs, in one run.

Why: a validation image that is a re-encoded, resized, cropped or brightened copy of a training
image leaks as surely as a byte-identical one; the question is how many of the copies each tool
finds, how many pairs it names that are not copies, and what that costs.

The corpus (generated once into ``--workdir``, default /tmp/scrub-bench/near; reused while
``planted.json`` matches the options): scikit-image's bundled photographs (``skimage.data``; ``cat``
is left out, it is ``chelsea``; ``microaneurysms`` is too small, ``horse`` a binary mask), each cut
into non-overlapping tiles of about 128 pixels a side (at most 5 x 5 a photograph), each tile
resized to 256 x 256. Tiles with almost no content (a grey level spread under ``MIN_SPREAD``: the
black corners of ``retina``, the white margin of ``logo``) are dropped: every tile kept is a
distinct picture. Of the tiles, ``data/train/a/NNNN.jpg`` holds all but a held-out set, as JPEG
quality 90. ``data/val/a/`` holds, in a shuffled order, ``--per-kind`` changed copies of training
images for each kind of ``KINDS`` (each kind on other training images: a byte-identical copy,
re-encodes at quality 50 and 95, resizes to 0.5 and 0.9, crops of 2% and 5% a side, brightness
x 0.9 and x 1.1, a PNG re-save; each made from the decoded training JPEG, as a copy is made), and
as many held-out tiles, none of them in train. ``planted.json`` records each validation image's
training original and change.

Each tool runs as its own whole process (start-up included) on the same ``data`` folder,
``--repeat`` interleaved rounds, median wall time and the peak resident memory of the process
tree (sampled every 20 ms):

* scrub (this interpreter): ``scrub scan data -q --manifest M`` (the run's splits: train and
  val), at its default ``--near-distance`` (6 bits) and at 10 (imagededup's default); the pairs
  are its ``split-leak`` lines (the validation image, ``details.train.key``);
* cleanvision (``--peer-python``): ``Imagelab(data_path=data)`` and ``find_issues`` of
  ``exact_duplicates`` (an MD5 of the decoded pixels) and ``near_duplicates`` (equal imagehash
  pHashes, 64 bits); every pair of a set with one image in each split;
* imagededup (the same interpreter): ``PHash().find_duplicates(data, recursive=True)`` at
  ``max_distance_threshold`` 10 (its default) and 6 (scrub's); every pair across the splits.

A pair predicted is (validation image, training image). Recall is the planted pairs found, by
kind; a false pair is a predicted pair across the splits that was not planted (a held-out tile
paired with a training tile, or a copy paired with another training image than its original).

The peers live in a virtualenv of their own (never scrub's), the one ``bench_drift.py`` uses (no
pin of benchmarks/requirements-peers.txt moves). imagededup imports torch and torchvision though
``PHash`` uses neither; the registry's torchvision is built against its CUDA torch (about 3 GB
with the NVIDIA libraries): with a CPU build of torch it fails to import ("operator
torchvision::nms does not exist"), so the pair as the registry serves it is pinned:

    python3 -m venv /work/benchvenv
    /work/benchvenv/bin/pip install cleanvision==0.3.7 imagededup==0.3.3.post2 torch==2.14.1 \
        torchvision==0.29.1
    python benchmarks/bench_near.py [--per-kind 8] [--repeat 3] [--skip cleanvision]

A peer its interpreter cannot import is reported as such in the table, and the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script
from bench_hdf5 import _cpu, timed  # noqa: E402

#: the photographs of ``skimage.data`` cut into tiles (none needs a download)
PHOTOS = [
    "astronaut",
    "camera",
    "coffee",
    "chelsea",
    "rocket",
    "immunohistochemistry",
    "hubble_deep_field",
    "coins",
    "moon",
    "page",
    "text",
    "retina",
    "logo",
    "colorwheel",
    "brick",
    "grass",
    "gravel",
    "clock",
    "cell",
    "stereo_motorcycle",
]
#: the side of a tile before it is resized (about), the most tiles a photograph gives a side,
#: and the side of every tile written
TILE, MOST_A_SIDE, SIDE = 128, 5, 256
#: a tile whose grey levels spread less than this (standard deviation) is almost blank: dropped
MIN_SPREAD = 12.0
#: the quality training JPEGs (and the copies that stay JPEGs unless re-encoded) are written at
QUALITY = 90
#: the changes planted in val, in the tables' order, and their column headings
KINDS = {
    "exact": "exact",
    "jpeg-q50": "q50",
    "jpeg-q95": "q95",
    "resize-0.5": "x0.5",
    "resize-0.9": "x0.9",
    "crop-2%": "crop 2%",
    "crop-5%": "crop 5%",
    "bright-0.9": "bright 0.9",
    "bright-1.1": "bright 1.1",
    "png": "PNG",
}
#: the distances in bits scrub's ``--near-distance`` and imagededup's threshold are run at
SCRUB_DISTANCES = (6, 10)
IMAGEDEDUP_DISTANCES = (10, 6)

Pair = tuple[str, str]


def photographs() -> dict[str, Image.Image]:
    """The photographs, as RGB or greyscale images (an alpha channel laid on white)."""
    from skimage import data

    found: dict[str, Image.Image] = {}
    for name in PHOTOS:
        pixels = data.stereo_motorcycle()[0] if name == "stereo_motorcycle" else getattr(data, name)()
        if pixels.ndim == 3 and pixels.shape[2] == 4:
            image = Image.fromarray(pixels, "RGBA")
            white = Image.new("RGBA", image.size, (255, 255, 255, 255))
            found[name] = Image.alpha_composite(white, image).convert("RGB")
        else:
            found[name] = Image.fromarray(np.asarray(pixels, np.uint8))
    return found


def tiles(photos: dict[str, Image.Image]) -> list[tuple[str, Image.Image]]:
    """Every photograph's non-overlapping tiles, each resized to ``SIDE`` x ``SIDE``, named
    ``photo:row,column``; almost blank tiles dropped."""
    found = []
    for name, photo in photos.items():
        width, height = photo.size
        rows = min(MOST_A_SIDE, max(1, round(height / TILE)))
        columns = min(MOST_A_SIDE, max(1, round(width / TILE)))
        for row in range(rows):
            for column in range(columns):
                box = (
                    column * width // columns,
                    row * height // rows,
                    (column + 1) * width // columns,
                    (row + 1) * height // rows,
                )
                tile = photo.crop(box).resize((SIDE, SIDE), Image.Resampling.LANCZOS)
                if np.asarray(tile.convert("L"), np.float64).std() >= MIN_SPREAD:
                    found.append((f"{name}:{row},{column}", tile))
    return found


def changed(kind: str, original: Path, copy: Path) -> Path:
    """Write the ``kind`` copy of the training JPEG ``original`` as ``copy`` (its suffix ``.png``
    for a PNG re-save); returns the path written."""
    if kind == "exact":
        shutil.copyfile(original, copy)
        return copy
    with Image.open(original) as opened:
        image = opened.copy()
    quality = QUALITY
    if kind.startswith("jpeg-q"):
        quality = int(kind.removeprefix("jpeg-q"))
    elif kind.startswith("resize-"):
        factor = float(kind.removeprefix("resize-"))
        image = image.resize((round(SIDE * factor),) * 2, Image.Resampling.LANCZOS)
    elif kind.startswith("crop-"):
        cut = round(SIDE * float(kind.removeprefix("crop-").rstrip("%")) / 100)
        image = image.crop((cut, cut, SIDE - cut, SIDE - cut))
    elif kind.startswith("bright-"):
        factor = float(kind.removeprefix("bright-"))
        pixels = np.asarray(image, np.float64) * factor
        image = Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8), image.mode)
    elif kind == "png":
        copy = copy.with_suffix(".png")
        image.save(copy)
        return copy
    image.save(copy, quality=quality)
    return copy


def generate(folder: Path, per_kind: int, seed: int) -> dict:
    """``data/train`` and ``data/val`` (reused when ``planted.json`` matches); returns the record
    of what was planted: each validation key's training original and change, and the held-out
    validation keys (keys are paths relative to ``data``)."""
    wanted = {"per_kind": per_kind, "seed": seed, "kinds": list(KINDS), "tile": TILE, "side": SIDE}
    record = folder / "planted.json"
    if record.exists():
        planted = json.loads(record.read_text())
        if planted["options"] == wanted:
            return planted
    record.unlink(missing_ok=True)
    shutil.rmtree(folder / "data", ignore_errors=True)
    found = tiles(photographs())
    rng = random.Random(seed)
    rng.shuffle(found)
    copies = per_kind * len(KINDS)
    held_out, kept = found[:copies], found[copies:]
    if len(kept) < copies:
        raise SystemExit(f"{len(found)} tiles: too few for --per-kind {per_kind} (at most {len(found) // 3})")
    train, val = folder / "data" / "train" / "a", folder / "data" / "val" / "a"
    train.mkdir(parents=True)
    val.mkdir(parents=True)
    sources = {}
    for number, (name, tile) in enumerate(kept):
        tile.save(train / f"{number:04d}.jpg", quality=QUALITY)
        sources[f"train/a/{number:04d}.jpg"] = name
    originals = rng.sample(sorted(sources), copies)
    jobs: list[tuple[str, str | None, Image.Image | None]] = [
        (kind, originals[index * per_kind + n], None)
        for index, kind in enumerate(KINDS)
        for n in range(per_kind)
    ]
    jobs += [("held-out", None, tile) for _, tile in held_out]
    rng.shuffle(jobs)  # a validation image's name tells nothing of what it is
    pairs: dict[str, dict[str, str]] = {}
    distinct: list[str] = []
    for number, (kind, original, unseen) in enumerate(jobs):
        path = val / f"{number:04d}.jpg"
        if original is None:
            assert unseen is not None  # a held-out tile
            unseen.save(path, quality=QUALITY)
            distinct.append(f"val/a/{path.name}")
            continue
        written = changed(kind, folder / "data" / original, path)
        pairs[f"val/a/{written.name}"] = {"train": original, "kind": kind}
    planted = {
        "options": wanted,
        "tiles": len(found),
        "train": len(kept),
        "pairs": pairs,
        "held_out": sorted(distinct),
        "sources": sources,
    }
    record.write_text(json.dumps(planted, indent=1))
    return planted


CLEANVISION = r"""
import json, os, sys, time
started = time.perf_counter()
from cleanvision import Imagelab
imported = time.perf_counter()
root = sys.argv[1]
lab = Imagelab(data_path=root)
lab.find_issues({"exact_duplicates": {}, "near_duplicates": {}})
done = time.perf_counter()
sets = {name: [[os.path.relpath(path, root) for path in group] for group in lab.info[name]["sets"]]
        for name in ("exact_duplicates", "near_duplicates")}
print(json.dumps({"sets": sets, "phases": {"import": imported - started, "find_issues": done - imported}}))
"""

IMAGEDEDUP = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
started = time.perf_counter()
from imagededup.methods import PHash
imported = time.perf_counter()
found = PHash(verbose=False).find_duplicates(
    image_dir=sys.argv[1], max_distance_threshold=int(sys.argv[2]), recursive=True)
done = time.perf_counter()
print(json.dumps({"duplicates": found, "phases": {"import": imported - started, "find": done - imported}}))
"""


def across(group: list[str]) -> set[Pair]:
    """The (validation, training) pairs of a group of images a tool found alike."""
    return {
        (val, train)
        for val in group
        if val.startswith("val/")
        for train in group
        if train.startswith("train/")
    }


def scrub_pairs(manifest: Path) -> set[Pair]:
    """The ``split-leak`` lines of a scrub manifest as (validation, training) pairs (a key is
    relative to its split's folder, named by the line's ``dataset``)."""
    pairs = set()
    for line in manifest.read_text().splitlines():
        entry = json.loads(line)
        if entry["check"] == "split-leak":
            train = entry["details"]["train"]
            pairs.add(
                (
                    f"{Path(entry['dataset']).name}/{entry['key']}",
                    f"{Path(train['dataset']).name}/{train['key']}",
                )
            )
    return pairs


def cleanvision_pairs(out: dict) -> tuple[set[Pair], str]:
    """Pairs of cleanvision's exact and near duplicate sets, and a note of which found what."""
    by_type = {name: set().union(*map(across, sets)) for name, sets in out["sets"].items()}
    note = ", ".join(f"{name}: {len(pairs)} pairs" for name, pairs in by_type.items())
    return set().union(*by_type.values()), note


def imagededup_pairs(out: dict) -> set[Pair]:
    """imagededup's duplicates (each image's list of the others) as pairs across the splits."""
    return {pair for image, others in out["duplicates"].items() for pair in across([image, *others])}


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def phases(out: dict) -> str:
    return ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in out["phases"].items())


def cleanvision_result(out: str) -> tuple[set[Pair], str]:
    parsed = last_json(out)
    pairs, note = cleanvision_pairs(parsed)
    return pairs, f"{note}; {phases(parsed)}"


def imagededup_result(out: str) -> tuple[set[Pair], str]:
    parsed = last_json(out)
    return imagededup_pairs(parsed), phases(parsed)


@dataclass
class Tool:
    """One measured configuration: its command and how its output becomes pairs."""

    name: str
    command: list[str]
    #: the pairs and a note, from the tool's last stdout line (JSON) or, for scrub, its manifest
    pairs: Callable[[str], tuple[set[Pair], str]]
    runs: list[tuple[float, int]] = field(default_factory=list)
    found: set[Pair] | None = None
    note: str = ""
    failed: str = ""


def importable(python: str, module: str) -> str:
    """Empty when ``python`` imports ``module``, else why not (its last line of error)."""
    try:
        done = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{python} cannot run: {error}"
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["no error output"]
        return f"not importable from {python}: {lines[-1]}"
    return ""


def tools(args: argparse.Namespace, data: Path, work: Path) -> list[Tool]:
    """The configurations to measure, those a peer cannot run marked as failed."""
    found: list[Tool] = []
    if "scrub" not in args.skip:
        for distance in SCRUB_DISTANCES:
            manifest = work / f"scrub-{distance}.jsonl"
            command = [args.python, "-m", "scrub", "scan", str(data), "-q", "--manifest", str(manifest)]
            command += ["--near-distance", str(distance)]

            def read(_: str, manifest: Path = manifest) -> tuple[set[Pair], str]:
                return scrub_pairs(manifest), ""

            name = f"scrub split-leak, --near-distance {distance}"
            found.append(Tool(name + (" (default)" if distance == 6 else ""), command, read))
    if "cleanvision" not in args.skip:
        command = [args.peer_python, "-c", CLEANVISION, str(data)]
        missing = importable(args.peer_python, "cleanvision")
        found.append(Tool("cleanvision exact + near duplicates", command, cleanvision_result, failed=missing))
    if "imagededup" not in args.skip:
        missing = importable(args.peer_python, "imagededup.methods")
        for distance in IMAGEDEDUP_DISTANCES:
            name = f"imagededup PHash, max_distance_threshold {distance}"
            command = [args.peer_python, "-c", IMAGEDEDUP, str(data), str(distance)]
            found.append(
                Tool(
                    name + (" (default)" if distance == 10 else ""),
                    command,
                    imagededup_result,
                    failed=missing,
                )
            )
    return found


def measure(tools_: list[Tool], repeat: int, limit: float) -> None:
    """Run every tool ``repeat`` rounds, interleaved; keep its times, peak RSS and pairs."""
    for round_ in range(repeat):
        for tool in tools_:
            if tool.failed:
                continue
            try:
                seconds, peak, out = timed(tool.command, limit=limit)
            except RuntimeError as error:  # exited neither 0 nor 1: said in the table
                tool.failed = str(error).replace("\n", " ")[-300:]
                continue
            tool.runs.append((seconds, peak))
            if out is None:
                tool.failed = f"stopped after {limit:g} s (--limit)"
                continue
            tool.found, tool.note = tool.pairs(out)
            print(
                f"  round {round_ + 1} {tool.name}: {seconds:.2f} s, {peak / 2**20:.0f} MiB, "
                f"{len(tool.found)} pairs",
                file=sys.stderr,
                flush=True,
            )


def judged(found: set[Pair], planted: dict) -> tuple[dict[str, int], list[Pair]]:
    """Planted pairs found by kind, and the false pairs."""
    truth = {(val, entry["train"]): entry["kind"] for val, entry in planted["pairs"].items()}
    by_kind = dict.fromkeys(KINDS, 0)
    for pair in found & truth.keys():
        by_kind[truth[pair]] += 1
    return by_kind, sorted(found - truth.keys())


def table(tools_: list[Tool], planted: dict, args: argparse.Namespace) -> list[str]:
    per_kind, total = args.per_kind, args.per_kind * len(KINDS)
    held_out = set(planted["held_out"])
    load = os.getloadavg()
    lines = [
        f"## Near copies across splits: {planted['train']} training images, {total} planted copies + "
        f"{len(held_out)} held-out images in val ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"- {_cpu()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; load average at the end "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min)",
        f"- {planted['tiles']} tiles of {len(PHOTOS)} scikit-image photographs, {SIDE} px, JPEG q{QUALITY}; "
        f"{per_kind} copies of each kind, each kind on other training images; the held-out tiles are "
        "in no split but val",
        f"- whole processes, warm page cache, medians of {args.repeat} interleaved rounds; peak RSS of the "
        "process tree",
        "",
        f"| tool | s | peak RSS MiB | planted found (of {total}) | false pairs | of them held-out | notes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    recall = [
        "",
        f"Planted copies found, by kind (of {per_kind} each):",
        "",
        "| tool | " + " | ".join(KINDS.values()) + " |",
        "|---|" + "---:|" * len(KINDS),
    ]
    for tool in tools_:
        seconds = statistics.median(run[0] for run in tool.runs) if tool.runs else None
        peak = max(run[1] for run in tool.runs) / 2**20 if tool.runs else None
        timing = f"{seconds:.2f} | {peak:.0f}" if seconds is not None and peak is not None else " | "
        if tool.failed or tool.found is None:
            lines.append(f"| {tool.name} | {timing} | | | | did not run: {tool.failed} |")
            recall.append(f"| {tool.name} |" + " |" * len(KINDS))
            continue
        by_kind, false = judged(tool.found, planted)
        on_held_out = sum(val in held_out for val, _ in false)
        found = sum(by_kind.values())
        lines.append(f"| {tool.name} | {timing} | {found} | {len(false)} | {on_held_out} | {tool.note} |")
        recall.append(f"| {tool.name} | " + " | ".join(str(by_kind[kind]) for kind in KINDS) + " |")
    return lines + recall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench/near"))
    parser.add_argument("--per-kind", type=int, default=8, help="planted copies of each kind of change")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs scrub")
    parser.add_argument(
        "--peer-python", default="/work/benchvenv/bin/python", help="cleanvision's and imagededup's"
    )
    parser.add_argument(
        "--limit", type=float, default=600, help="seconds a tool's run may take before it is stopped"
    )
    parser.add_argument("--skip", action="append", default=[], choices=["scrub", "cleanvision", "imagededup"])
    parser.add_argument("--markdown-out", type=Path)
    parser.add_argument("--pairs-out", type=Path, help="a JSON file of each tool's false pairs")
    args = parser.parse_args()
    planted = generate(args.workdir, args.per_kind, args.seed)
    data = args.workdir / "data"
    benchdata.warm(data)
    work = Path(tempfile.mkdtemp(prefix="scrub-bench-near-"))
    measured = tools(args, data, work)
    measure(measured, args.repeat, args.limit)
    benchdata.report(table(measured, planted, args), args.markdown_out)
    if args.pairs_out:
        false = {tool.name: judged(tool.found, planted)[1] for tool in measured if tool.found is not None}
        args.pairs_out.write_text(json.dumps(false, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
