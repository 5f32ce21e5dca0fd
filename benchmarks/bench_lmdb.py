"""Benchmark ``scrub scan`` on an LMDB of encoded-JPEG Caffe Datums against the naive loop.

It wraps the JPEGs that ``bench_images.py`` generates (20,000 256x256 photos, 1% truncated, 1%
bit-flipped; generated first if missing) into Datums as Caffe's ``convert_imageset --encoded``
writes them (keys ``%08d_<path>``, label = class), then times, in one run, as whole processes
with a warm page cache (best of ``--repeat``):

* the naive loop: one process, a cursor over the environment, protobuf ``ParseFromString``,
  ``Image.open(BytesIO(datum.data)).load()`` per record;
* ``scrub scan DB``.

and compares what each flagged. ``python benchmarks/bench_lmdb.py [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script

NAIVE = r"""
import io, sys, lmdb
from PIL import Image
from scrub.readers.caffe_datum import datum_class
Datum = datum_class()
bad = []
env = lmdb.open(sys.argv[1], readonly=True, lock=False)
with env.begin() as txn:
    for key, value in txn.cursor():
        datum = Datum()
        try:
            datum.ParseFromString(value)
            Image.open(io.BytesIO(datum.data)).load()
        except Exception:
            bad.append(key.decode())
print("\n".join(bad))
"""


def build(images: Path, db: Path) -> int:
    import lmdb

    sys.path.insert(0, str(HERE.parent))
    from scrub.readers.caffe_datum import datum_class

    files = sorted(images.rglob("*.jpg"))
    if db.exists():
        return len(files)
    temporary = db.with_name(db.name + ".tmp")
    environment = lmdb.open(str(temporary), map_size=4 << 30)
    Datum = datum_class()
    with environment.begin(write=True) as transaction:
        for number, path in enumerate(files):
            relative = path.relative_to(images).as_posix()
            datum = Datum(data=path.read_bytes(), label=int(relative[6:8]), encoded=True)
            transaction.put(f"{number:08d}_{relative}".encode(), datum.SerializeToString(), append=True)
    environment.close()
    (temporary / "lock.mdb").unlink(missing_ok=True)
    temporary.rename(db)
    return len(files)


def timed(command: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode not in (0, 1):
        raise RuntimeError(f"{command[:4]} failed: {result.stderr.strip()[-400:]}")
    return seconds, result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--markdown-out", type=Path)
    args = parser.parse_args()
    images = benchdata.images(args.workdir, args.python)
    db = args.workdir / "datum_lmdb"
    count = build(images, db)
    subprocess.run(["cat", str(db / "data.mdb")], stdout=subprocess.DEVNULL, check=True)
    out = Path(tempfile.mkdtemp())
    runs: dict[str, list[float]] = {"naive": [], "scrub": []}
    for _ in range(args.repeat):
        seconds, naive_out = timed([args.python, "-c", NAIVE, str(db)])
        runs["naive"].append(seconds)
        seconds, _ = timed(
            [
                args.python,
                "-m",
                "scrub",
                "scan",
                str(db),
                "--quiet",
                "--fail-on",
                "never",
                "--manifest",
                str(out / "m.jsonl"),
                "--json",
                str(out / "s.json"),
            ]
        )
        runs["scrub"].append(seconds)
    naive_bad = set(filter(None, naive_out.splitlines()))
    scrub_bad = {
        json.loads(line)["key"]
        for line in (out / "m.jsonl").read_text().splitlines()
        if json.loads(line)["check"] == "corrupt-image"
    }
    best = {name: min(values) for name, values in runs.items()}
    report = "\n".join(
        [
            f"## scrub LMDB benchmark ({datetime.now(timezone.utc):%Y-%m-%d}): {count} encoded-JPEG Datums, "
            f"{(db / 'data.mdb').stat().st_size / 2**20:.0f} MiB",
            "",
            "| tool | best s | records/s | all runs (s) | flagged |",
            "|---|---:|---:|---|---:|",
            f"| naive loop (cursor, protobuf, Pillow load) | {best['naive']:.2f} | "
            f"{count / best['naive']:,.0f} | "
            f"{', '.join(f'{s:.2f}' for s in runs['naive'])} | {len(naive_bad)} |",
            f"| scrub scan | {best['scrub']:.2f} | {count / best['scrub']:,.0f} | "
            f"{', '.join(f'{s:.2f}' for s in runs['scrub'])} | {len(scrub_bad)} |",
            "",
            f"scrub vs naive: **{best['naive'] / best['scrub']:.2f}x** (target >= 3x). "
            f"Flagged by both: {len(naive_bad & scrub_bad)}; only by scrub: {len(scrub_bad - naive_bad)} "
            "(bit flips that Pillow decodes without a word); only by the naive loop: "
            f"{len(naive_bad - scrub_bad)}.",
        ]
    )
    print(report)
    if args.markdown_out:
        args.markdown_out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
