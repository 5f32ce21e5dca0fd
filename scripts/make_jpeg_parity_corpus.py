"""Make tests/data/jpeg_parity/: small damaged JPEGs and what `jpeginfo -c` says of each.

Why: scrub's JPEG verdicts must agree with jpeginfo, which counts libjpeg's recoverable warnings
("Corrupt JPEG data: ...", "Premature end of JPEG file") as damage. The corpus freezes jpeginfo's
verdicts so the tests can hold scrub to them on machines without jpeginfo.

Deterministic: one seed drives every choice. The JPEG bytes still depend on the libjpeg-turbo
inside Pillow, so regenerate only to change the corpus, and commit the result as a whole.
The files are crops of scikit-image's bundled photos (no download), encoded with a mix of
baseline, progressive, 4:4:4, grayscale, optimised-Huffman and restart-marker settings; most
get 1-6 random bit flips anywhere in the file (headers included), some are cut short, a few stay
clean. Needs `jpeginfo` on PATH (Debian: apt-get install jpeginfo).

Usage: python scripts/make_jpeg_parity_corpus.py [--out DIR] [--seed N]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import skimage.data
from PIL import Image

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "jpeg_parity"
SEED = 20240611
COUNTS = {"clean": 8, "flip": 40, "trunc": 12}
MAX_TOTAL_BYTES = 300_000
PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "camera",
    "coins",
    "immunohistochemistry",
    "hubble_deep_field",
)


def crop(rng: np.random.Generator, photos: list[np.ndarray]) -> Image.Image:
    """A random 64..128 pixel crop of a random photo."""
    photo = photos[int(rng.integers(len(photos)))]
    height, width = (int(v) for v in rng.integers(64, 129, size=2))
    top = int(rng.integers(0, photo.shape[0] - height + 1))
    left = int(rng.integers(0, photo.shape[1] - width + 1))
    return Image.fromarray(photo[top : top + height, left : left + width])


def encode(rng: np.random.Generator, image: Image.Image) -> bytes:
    """JPEG bytes with one of several encoder settings, so more libjpeg code paths are hit."""
    style = int(rng.integers(6))
    options: dict = {"quality": int(rng.integers(50, 91))}
    if style == 1:
        options["progressive"] = True
    elif style == 2:
        options["subsampling"] = 0
    elif style == 3:
        image = image.convert("L")
    elif style == 4:
        options["optimize"] = True
    elif style == 5:
        options["restart_marker_blocks"] = 4
    buffer = io.BytesIO()
    image.convert("L" if image.mode == "L" else "RGB").save(buffer, "JPEG", **options)
    return buffer.getvalue()


def flip_bits(rng: np.random.Generator, data: bytes) -> bytes:
    damaged = bytearray(data)
    for _ in range(int(rng.integers(1, 7))):
        damaged[int(rng.integers(len(damaged)))] ^= 1 << int(rng.integers(8))
    return bytes(damaged)


def truncate(rng: np.random.Generator, data: bytes) -> bytes:
    return data[: int(rng.integers(len(data) // 10, len(data)))]


def jpeginfo(path: Path) -> tuple[bool, str]:
    """(OK?, message) from `jpeginfo -c`; WARNING and ERROR both mean damage."""
    result = subprocess.run(
        ["jpeginfo", "-c", "--csv", str(path)], capture_output=True, text=True, check=False
    )
    row = next(csv.reader(io.StringIO(result.stdout)))
    status, message = row[-2], row[-1]
    if status not in ("OK", "WARNING", "ERROR"):
        raise RuntimeError(f"unexpected jpeginfo output for {path}: {result.stdout!r} {result.stderr!r}")
    return status == "OK", message


def make(out: Path, seed: int) -> dict[str, dict]:
    rng = np.random.default_rng(seed)
    photos = [getattr(skimage.data, name)() for name in PHOTOS]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    verdicts: dict[str, dict] = {}
    for kind, count in COUNTS.items():
        for i in range(count):
            data = encode(rng, crop(rng, photos))
            if kind == "flip":
                data = flip_bits(rng, data)
            elif kind == "trunc":
                data = truncate(rng, data)
            name = f"{kind}_{i:03d}.jpg"
            (out / name).write_bytes(data)
            ok, message = jpeginfo(out / name)
            verdicts[name] = {"jpeginfo_ok": ok, "jpeginfo_message": message}
    (out / "verdicts.json").write_text(json.dumps(verdicts, indent=1, sort_keys=True) + "\n")
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    if shutil.which("jpeginfo") is None:
        print("jpeginfo not found (Debian: apt-get install jpeginfo)", file=sys.stderr)
        return 2
    verdicts = make(args.out, args.seed)
    total = sum(p.stat().st_size for p in args.out.iterdir())
    damaged = sum(not v["jpeginfo_ok"] for v in verdicts.values())
    version = subprocess.run(
        ["jpeginfo", "--version"], capture_output=True, text=True, check=False
    ).stdout.splitlines()[0]
    print(f"{len(verdicts)} files, {damaged} damaged per {version.strip()}, {total:,} bytes in {args.out}")
    if total > MAX_TOTAL_BYTES:
        print(f"corpus is over {MAX_TOTAL_BYTES:,} bytes: make the crops smaller", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
