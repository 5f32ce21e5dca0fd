"""Benchmark ``scrub scan`` on the newer formats against the naive loop over the same data.

In one run, as whole processes with a warm page cache, median of ``--repeat``:

* **NumPy**: a ``.npy`` of N rows x 64 float32 (N = ``--npy-rows``, 1,000,000 = 256 MB) with 3
  NaN rows. Naive: ``np.load(mmap_mode="r")`` and ``np.isfinite(row).all()`` per row, the loop
  people write (as for HDF5 in ``bench_hdf5.py``).
* **CSV list**: ``path,label`` rows with a header over the 20,000 JPEGs ``bench_images.py``
  generates (1% truncated, 1% bit-flipped). Naive: ``csv.DictReader`` and Pillow's
  ``Image.open(path).load()`` per row.
* **LevelDB**: the same JPEGs as encoded Caffe Datums (``convert_imageset --backend leveldb``).
  Naive: a plyvel iterator, protobuf ``ParseFromString``, Pillow ``load()`` per record.
* **WebDataset**: the same JPEGs with ``.cls`` labels in 20 tar shards of 1,000 samples.
  Naive: ``webdataset.WebDataset`` over the shards and Pillow ``load()`` of each ``.jpg``.
* **Parquet**: the same JPEGs in Hugging Face's layout (an ``Image`` struct column, a
  ``ClassLabel``), 4 files of row groups of 500. Naive: ``pyarrow`` ``iter_batches`` over the
  files and Pillow ``load()`` of each image.
* **TFRecord**: the same JPEGs as ``tf.Example``s (``image/encoded``, ``image/class/label``) in
  20 TFDS-named shards of 1,000. Naive: the ``tfrecord`` package's ``tfrecord_loader`` (which
  checks no CRC) and Pillow ``load()`` of each image.

Goal (issue 14): scrub at least 2x faster than the naive loop on 2 cores.

    python benchmarks/bench_formats.py [--repeat 3] [--npy-rows 1000000] [--only NAME ...] [--markdown-out F]
    (needs plyvel and webdataset: pip install -e '.[test]')
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchdata  # noqa: E402 - beside this script

NAIVE_NPY = r"""
import sys, numpy as np
x = np.load(sys.argv[1], mmap_mode="r")
print(sum(not np.isfinite(row).all() for row in x))
"""

NAIVE_CSV = r"""
import csv, os, sys
from PIL import Image
root = os.path.dirname(sys.argv[1])
bad = 0
with open(sys.argv[1], newline="") as file:
    for row in csv.DictReader(file):
        try:
            with Image.open(os.path.join(root, row["path"])) as image:
                image.load()
        except Exception:
            bad += 1
print(bad)
"""


NAIVE_LEVELDB = r"""
import io, sys, plyvel
from PIL import Image
from scrub.readers.caffe_datum import datum_class
Datum = datum_class()
bad = 0
db = plyvel.DB(sys.argv[1])
for key, value in db.iterator():
    datum = Datum()
    try:
        datum.ParseFromString(value)
        Image.open(io.BytesIO(datum.data)).load()
    except Exception:
        bad += 1
db.close()
print(bad)
"""


def leveldb_of(images: Path, workdir: Path) -> Path:
    """The JPEGs as Caffe's convert_imageset --backend leveldb --encoded writes them."""
    import plyvel

    from scrub.readers.caffe_datum import datum_class

    path = workdir / "datum_leveldb"
    if not path.exists():
        temporary = workdir / "datum_leveldb.tmp"
        database = plyvel.DB(str(temporary), create_if_missing=True)
        Datum = datum_class()
        with database.write_batch() as batch:
            for number, file in enumerate(sorted(images.rglob("*.jpg"))):
                relative = file.relative_to(images).as_posix()
                value = Datum(
                    data=file.read_bytes(), label=int(relative[6:8]), encoded=True
                ).SerializeToString()
                batch.put(f"{number:08d}_{relative}".encode(), value)
        database.compact_range()
        database.close()
        temporary.rename(path)
    return path


NAIVE_WEBDATASET = r"""
import glob, io, os, sys, webdataset as wds
from PIL import Image
bad = 0
shards = sorted(glob.glob(os.path.join(sys.argv[1], "*.tar")))
for sample in wds.WebDataset(shards, shardshuffle=False):
    try:
        with Image.open(io.BytesIO(sample["jpg"])) as image:
            image.load()
    except Exception:
        bad += 1
print(bad)
"""


NAIVE_PARQUET = r"""
import glob, io, os, sys, pyarrow.parquet as pq
from PIL import Image
bad = 0
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.parquet"))):
    for batch in pq.ParquetFile(path).iter_batches(columns=["image", "label"]):
        for cell in batch.column(0).to_pylist():
            try:
                with Image.open(io.BytesIO(cell["bytes"])) as image:
                    image.load()
            except Exception:
                bad += 1
print(bad)
"""


def parquet_of(images: Path, workdir: Path, files: int = 4) -> Path:
    """The image folder's JPEGs as Hugging Face writes an image split: 4 Parquet files."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = workdir / "parquet"
    if folder.exists():
        return folder
    staging = workdir / "parquet.tmp"
    staging.mkdir(exist_ok=True)
    paths = sorted(images.rglob("*.jpg"))
    classes = sorted({path.parent.name for path in paths})
    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": classes}}
    step = -(-len(paths) // files)
    for number, first in enumerate(range(0, len(paths), step)):
        chunk = paths[first : first + step]
        table = pa.table(
            {
                "image": pa.array(
                    [{"bytes": p.read_bytes(), "path": p.name} for p in chunk],
                    pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
                ),
                "label": pa.array([classes.index(p.parent.name) for p in chunk], pa.int64()),
            }
        ).replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
        pq.write_table(table, staging / f"train-{number:05d}-of-{files:05d}.parquet", row_group_size=500)
    staging.rename(folder)
    return folder


def shards_of(images: Path, workdir: Path, per_shard: int = 1000) -> Path:
    """The image folder's JPEGs as WebDataset shards (``.jpg`` + ``.cls``), as TarWriter writes them."""
    import io
    import tarfile

    folder = workdir / "shards"
    if folder.exists():
        return folder
    staging = workdir / "shards.tmp"
    staging.mkdir(exist_ok=True)
    files = sorted(images.rglob("*.jpg"))
    for number, first in enumerate(range(0, len(files), per_shard)):
        with tarfile.open(staging / f"train-{number:06d}.tar", "w") as tar:
            for index, path in enumerate(files[first : first + per_shard], start=first):
                for extension, data in (("jpg", path.read_bytes()), ("cls", path.parent.name[-2:].encode())):
                    info = tarfile.TarInfo(f"{index:08d}.{extension}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    staging.rename(folder)
    return folder


NAIVE_TFRECORD = r"""
import glob, io, os, sys
from PIL import Image
from tfrecord.reader import tfrecord_loader
bad = 0
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.tfrecord-*"))):
    for record in tfrecord_loader(path, None, {"image/encoded": "byte", "image/class/label": "int"}):
        try:
            with Image.open(io.BytesIO(record["image/encoded"])) as image:
                image.load()
        except Exception:
            bad += 1
print(bad)
"""


def tfrecords_of(images: Path, workdir: Path, per_file: int = 1000) -> Path:
    """The image folder's JPEGs as TFDS-named TFRecord shards of tf.Examples (``image/encoded``,
    ``image/class/label``), written by the ``tfrecord`` package."""
    from tfrecord.writer import TFRecordWriter

    folder = workdir / "tfrecord"
    if folder.exists():
        return folder
    staging = workdir / "tfrecord.tmp"
    staging.mkdir(exist_ok=True)
    files = sorted(images.rglob("*.jpg"))
    shards = -(-len(files) // per_file)
    for number, first in enumerate(range(0, len(files), per_file)):
        writer = TFRecordWriter(str(staging / f"train.tfrecord-{number:05d}-of-{shards:05d}"))
        for path in files[first : first + per_file]:
            label = int(path.parent.name[-2:])
            writer.write({"image/encoded": (path.read_bytes(), "byte"), "image/class/label": (label, "int")})
        writer.close()
    staging.rename(folder)
    return folder


def npy_file(workdir: Path, rows: int) -> Path:
    path = workdir / f"rows-{rows}.npy"
    if not path.exists():
        temporary = workdir / f"rows-{rows}.tmp.npy"
        data = np.lib.format.open_memmap(temporary, mode="w+", dtype=np.float32, shape=(rows, 64))
        rng = np.random.default_rng(0)
        for start in range(0, rows, 1 << 16):
            block = data[start : start + (1 << 16)]
            block[:] = rng.normal(size=block.shape).astype(np.float32)
        for row in (rows // 7, rows // 2, rows - 1):
            data[row, 5] = np.nan
        data.flush()
        del data
        temporary.rename(path)
    return path


def csv_list(images: Path) -> Path:
    path = images / "train.csv"
    if not path.exists():
        files = sorted(p.relative_to(images).as_posix() for p in images.rglob("*.jpg"))
        lines = ["path,label"] + [f"{name},{name[6:8]}" for name in files]
        path.write_text("\n".join(lines) + "\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scrub-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--npy-rows", type=int, default=1_000_000)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--markdown-out", type=Path)
    parser.add_argument("--only", nargs="*", help="run the cases whose name contains one of these words")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    images = benchdata.images(args.workdir, args.python)
    cases = [
        (
            f"NumPy .npy, {args.npy_rows:,} rows x 64 float32",
            npy_file(args.workdir, args.npy_rows),
            NAIVE_NPY,
        ),
        ("CSV list of 20,000 JPEGs (256x256)", csv_list(images), NAIVE_CSV),
        ("LevelDB of 20,000 encoded-JPEG Datums", leveldb_of(images, args.workdir), NAIVE_LEVELDB),
        ("WebDataset, 20 shards of 1,000 JPEGs + .cls", shards_of(images, args.workdir), NAIVE_WEBDATASET),
        (
            "Parquet (Hugging Face Image + ClassLabel), 4 files",
            parquet_of(images, args.workdir),
            NAIVE_PARQUET,
        ),
        (
            "TFRecord, 20 TFDS shards of 1,000 JPEG Examples",
            tfrecords_of(images, args.workdir),
            NAIVE_TFRECORD,
        ),
    ]
    if args.only:
        cases = [case for case in cases if any(word.lower() in case[0].lower() for word in args.only)]
    today = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    lines = [
        f"# scrub vs the naive loop ({today}, {os.cpu_count()} cores, median of {args.repeat})",
        "",
        "| data | naive s | scrub s | scrub vs naive (goal >= 2x) |",
        "|---|---:|---:|---:|",
    ]
    manifest = args.workdir / "formats.jsonl"
    for name, path, naive in cases:
        benchdata.warm(path)
        theirs, ours = benchdata.naive_and_scrub(args.python, naive, path, manifest, args.repeat)
        lines.append(f"| {name} | {theirs:.2f} | {ours:.2f} | {theirs / ours:.2f}x |")
        print(lines[-1], flush=True)
    manifest.unlink(missing_ok=True)
    benchdata.report(lines, args.markdown_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
