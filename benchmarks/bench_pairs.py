"""Benchmark ``scrub scan`` on paired datasets against the naive loop that loads each pair.

In one run, as whole processes with a warm page cache, median of ``--repeat``:

* **Segmentation**: N images (the bundled-photo JPEGs of ``bench_images.py``, 256x256) with
  5-class PNG masks in ``images/`` + ``masks/``. Naive: Pillow ``load()`` of the image and
  the mask, then the mask's values checked against the class count (``np.unique``), per pair.
* **YOLO**: the same images with label files of 1-4 boxes in ``images/`` + ``labels/``. Naive:
  Pillow ``load()`` of the image and every line parsed and range-checked, per pair.

Goal (issue 15): records/s reported beside the naive loop's.

    python benchmarks/bench_pairs.py [--count 4000] [--repeat 3] [--markdown-out F]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script

NAIVE_SEGMENTATION = r"""
import os, sys, numpy as np
from PIL import Image
root = sys.argv[1]
bad = 0
for name in sorted(os.listdir(os.path.join(root, "images"))):
    try:
        with Image.open(os.path.join(root, "images", name)) as image:
            image.load()
        with Image.open(os.path.join(root, "masks", name[:-4] + ".png")) as mask:
            values = np.unique(np.asarray(mask))
        bad += bool(((values >= 5) & (values != 255)).any())
    except Exception:
        bad += 1
print(bad)
"""

NAIVE_YOLO = r"""
import os, sys
from PIL import Image
root = sys.argv[1]
bad = 0
for name in sorted(os.listdir(os.path.join(root, "images"))):
    try:
        with Image.open(os.path.join(root, "images", name)) as image:
            image.load()
        with open(os.path.join(root, "labels", name[:-4] + ".txt")) as labels:
            for line in labels:
                c, x, y, w, h = map(float, line.split())
                inside = 0 <= x <= 1 and 0 <= y <= 1 and 0 < w <= 1 and 0 < h <= 1
                bad += not (c == int(c) and 0 <= c < 3 and inside)
    except Exception:
        bad += 1
print(bad)
"""


def pairs_of(images: Path, workdir: Path, count: int) -> tuple[Path, Path]:
    """The first ``count`` JPEGs as a segmentation dataset and as a YOLO dataset (made once)."""
    segmentation, yolo = workdir / f"segmentation-{count}", workdir / f"yolo-{count}"
    if segmentation.exists() and yolo.exists():
        return segmentation, yolo
    for folder in (segmentation, yolo):
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "images").mkdir(parents=True)
    (segmentation / "masks").mkdir()
    (yolo / "labels").mkdir()
    (yolo / "data.yaml").write_text("names: [a, b, c]\n")
    rng = np.random.default_rng(0)
    for number, path in enumerate(sorted(images.rglob("*.jpg"))[:count]):
        name = f"{number:06d}"
        for folder in (segmentation, yolo):
            os.link(path, folder / "images" / f"{name}.jpg")
        with Image.open(path) as image:
            width, height = image.size
        mask = np.full((height, width), 255, np.uint8)
        for c in range(5):
            y, x = rng.integers(0, max(1, height - 64)), rng.integers(0, max(1, width - 64))
            mask[y : y + 64, x : x + 64] = c
        Image.fromarray(mask).save(segmentation / "masks" / f"{name}.png")
        lines = [
            f"{rng.integers(0, 3)} {rng.uniform(0.2, 0.8):.4f} {rng.uniform(0.2, 0.8):.4f} "
            f"{rng.uniform(0.05, 0.3):.4f} {rng.uniform(0.05, 0.3):.4f}"
            for _ in range(rng.integers(1, 5))
        ]
        (yolo / "labels" / f"{name}.txt").write_text("\n".join(lines) + "\n")
    return segmentation, yolo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"))
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    images = benchdata.images(args.workdir, args.python)
    segmentation, yolo = pairs_of(images, args.workdir, args.count)
    cases = [
        (
            f"segmentation, {args.count:,} JPEG + PNG mask pairs",
            segmentation,
            NAIVE_SEGMENTATION,
            ["--num-classes", "5"],
        ),
        (f"YOLO, {args.count:,} JPEGs + label files", yolo, NAIVE_YOLO, []),
    ]
    today = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    lines = [
        f"# scrub vs the naive loop over pairs ({today}, {os.cpu_count()} cores, median of {args.repeat})",
        "",
        "| data | naive s | naive records/s | scrub s | scrub records/s | scrub vs naive |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    manifest = args.workdir / "pairs.jsonl"
    for name, path, naive, options in cases:
        benchdata.warm(path)
        theirs, ours = benchdata.naive_and_scrub(args.python, naive, path, manifest, args.repeat, *options)
        lines.append(
            f"| {name} | {theirs:.2f} | {args.count / theirs:,.0f} | {ours:.2f} | {args.count / ours:,.0f} "
            f"| {theirs / ours:.2f}x |"
        )
        print(lines[-1], flush=True)
    manifest.unlink(missing_ok=True)
    benchdata.report(lines, args.markdown_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
