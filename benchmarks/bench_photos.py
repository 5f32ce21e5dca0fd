"""Benchmark ``scrub scan`` on photos of real sizes against the naive loop and ``jpeginfo -c``.

The image benchmark's JPEGs are 256x256; photos people train from are larger, and there the
decode dominates. One run, whole processes, warm page cache, median of ``--repeat``:

* **ImageNet-like**: 2,000 JPEGs of 500x375 (q85-95, 4:2:0 or 4:4:4).
* **Phone-like**: 500 JPEGs of 1600x1200 (q85-95).

Both are cut from the photos bundled with scikit-image (random crops, flips), as
``bench_images.py`` cuts its own. The naive loop is Pillow's ``Image.open(path).load()`` per file
in one process; ``jpeginfo -c`` runs as two processes through ``xargs -P 2``.
Goal (issue 16): scrub at least 4x the naive loop.

    python benchmarks/bench_photos.py [--repeat 3] [--markdown-out F]   (needs scikit-image, jpeginfo)
"""

from __future__ import annotations

import argparse
import io
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script
from bench_images import SOURCES, _register_sources  # noqa: E402

SETS = (("imagenet", 2000, (500, 375)), ("phone", 500, (1600, 1200)))

NAIVE = r"""
import os, sys
from PIL import Image
bad = 0
for directory, _, files in os.walk(sys.argv[1]):
    for name in sorted(files):
        try:
            with Image.open(os.path.join(directory, name)) as image:
                image.load()
        except Exception:
            bad += 1
print(bad)
"""


def photos(workdir: Path, name: str, count: int, size: tuple[int, int]) -> Path:
    """``count`` JPEGs of ``size`` cut from the bundled photos (made once, then reused)."""
    folder = workdir / "photos" / name
    if folder.is_dir() and len(os.listdir(folder)) == count:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    _register_sources()
    sources = [Image.fromarray(np.ascontiguousarray(load())).convert("RGB") for _, load, _ in SOURCES]
    rng = np.random.default_rng(16)
    width, height = size
    for number in range(count):
        source = sources[rng.integers(len(sources))]
        w, h = source.size
        scale = rng.uniform(0.5, 1.0)
        crop_w, crop_h = w * scale, min(h, w * scale * height / width)
        x0, y0 = rng.uniform(0, w - crop_w), rng.uniform(0, h - crop_h)
        view = source.resize(size, Image.Resampling.BILINEAR, box=(x0, y0, x0 + crop_w, y0 + crop_h))
        if rng.random() < 0.5:
            view = view.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        buffer = io.BytesIO()
        view.save(
            buffer, "JPEG", quality=int(rng.integers(85, 96)), subsampling=0 if rng.random() < 0.2 else 2
        )
        (folder / f"{number:05d}.jpg").write_bytes(buffer.getvalue())
    return folder


def jpeginfo_seconds(folder: Path) -> float:
    command = f"find {shlex.quote(str(folder))} -name '*.jpg' -print0 | xargs -0 -P 2 -n 64 jpeginfo -c"
    start = time.perf_counter()
    subprocess.run(command, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    today = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    lines = [
        f"# scrub on photos of real sizes ({today}, {os.cpu_count()} cores, median of {args.repeat})",
        "",
        "| photos | naive s | jpeginfo -c (2 processes) s | scrub s | scrub vs naive (goal >= 4x) "
        "| scrub vs jpeginfo |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    manifest = args.workdir / "photos.jsonl"
    for name, count, size in SETS:
        folder = photos(args.workdir, name, count, size)
        benchdata.warm(folder)
        theirs, ours = benchdata.naive_and_scrub(args.python, NAIVE, folder, manifest, args.repeat)
        c_tool = statistics.median(jpeginfo_seconds(folder) for _ in range(args.repeat))
        lines.append(
            f"| {count:,} of {size[0]}x{size[1]} | {theirs:.2f} | {c_tool:.2f} | {ours:.2f} "
            f"| {theirs / ours:.2f}x | {c_tool / ours:.2f}x |"
        )
        print(lines[-1], flush=True)
    manifest.unlink(missing_ok=True)
    benchdata.report(lines, args.markdown_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
