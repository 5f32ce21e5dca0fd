"""Regenerate the bundled sample datasets, deterministically: ``python sample_data/make_samples.py``.

Every dataset holds a few clean records and one planted problem per check (see EXPECTED.md).
Images are synthetic (gradients, shapes and seeded noise) so that nothing is downloaded.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import simplejpeg
from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
SIZE = 64


def picture(seed: int, mode: str = "RGB") -> Image.Image:
    """A small, photo-ish synthetic image: a gradient, a few shapes, some noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    base = np.stack([(x * rng.uniform(1, 4) + y * rng.uniform(0, 2)) % 256 for _ in range(3)], axis=-1)
    image = Image.fromarray(base.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(4):
        x0, y0 = rng.integers(0, SIZE - 16, 2)
        w, h = rng.integers(8, 24, 2)
        draw.ellipse(
            [int(x0), int(y0), int(x0 + w), int(y0 + h)], fill=tuple(int(v) for v in rng.integers(0, 256, 3))
        )
    noisy = np.asarray(image, dtype=np.int16) + rng.normal(0, 6, (SIZE, SIZE, 3)).astype(np.int16)
    return Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).convert(mode)


def encode(image: Image.Image, fmt: str = "JPEG") -> bytes:
    buffer = io.BytesIO()
    options = {"quality": 90} if fmt == "JPEG" else {}
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def bit_flipped_jpeg(seed: int) -> bytes:
    """A JPEG with flipped bits in its entropy-coded data that Pillow's load() accepts but that
    libjpeg reports as "Corrupt JPEG data" (as `jpeginfo -c` and scrub do)."""
    data = encode(picture(seed))
    start = data.index(b"\xff\xda") + 20  # past the start-of-scan header
    rng = np.random.default_rng(seed)
    for _ in range(1000):
        damaged = bytearray(data)
        for position in rng.integers(start, len(data) - 2, 3):
            damaged[position] ^= 1 << int(rng.integers(0, 8))
        damaged = bytes(damaged)
        try:
            Image.open(io.BytesIO(damaged)).load()
        except Exception:  # noqa: BLE001 - we want one that Pillow accepts
            continue
        try:
            simplejpeg.decode_jpeg(damaged, colorspace="GRAY", strict=True)
        except ValueError:
            return damaged
    raise RuntimeError("no suitable bit flip found")


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def make_image_folder(root: Path) -> None:
    """Class folders bird/cat/dog (labels 0/1/2) with the image problems planted."""
    for number, name in enumerate(["bird", "cat", "dog"]):
        for i in range(8):
            write(root / name / f"{name}_{i:03d}.jpg", encode(picture(100 * number + i)))
    cat_jpeg = (root / "cat" / "cat_001.jpg").read_bytes()
    write(root / "cat" / "truncated.jpg", encode(picture(7))[:1200])  # corrupt-image
    write(root / "cat" / "grayscale.jpg", encode(picture(8, "L")))  # shape-mismatch
    write(root / "dog" / "bitflip.jpg", bit_flipped_jpeg(9))  # corrupt-image (Pillow misses it)
    write(root / "dog" / "copy_of_cat_001.jpg", cat_jpeg)  # duplicate
    write(root / "dog" / "empty.jpg", b"")  # empty-record
    write(root / "dog" / "cmyk.jpg", encode(picture(10, "CMYK")))  # shape-mismatch
    write(root / "bird" / "really_a_png.jpg", encode(picture(11), "PNG"))  # format-mismatch
    write(root / "bird" / "broken.png", encode(picture(12), "PNG")[:-300])  # corrupt-image
    huge = io.BytesIO()
    Image.new("1", (10_000, 10_000)).save(huge, "PNG", optimize=True)  # 100 Mpx: decompression-bomb
    write(root / "bird" / "huge.png", huge.getvalue())
    write(root / "stray.jpg", encode(picture(13)))  # missing-label: outside every class folder
    os.symlink("../../imagelist/img/a_000.jpg", root / "bird" / "outside.jpg")  # unsafe-path
    write(root / "README.txt", b"Not an image: skipped and counted.\n")
    write(root / ".DS_Store", b"\x00\x00\x00\x01Bud1")


def make_image_list(root: Path) -> None:
    """A Caffe ImageData list file with the label and path problems planted."""
    lines = []
    for i in range(12):
        write(root / "img" / f"a_{i:03d}.jpg", encode(picture(500 + i)))
        lines.append(f"img/a_{i:03d}.jpg {i % 10}")
    for i in range(12, 18):
        write(root / "img" / f"a_{i:03d}.jpg", encode(picture(500 + i)))
    lines += [
        "img/a_012.jpg",  # missing-label
        "img/a_013.jpg 3.5",  # non-integer-label
        "img/a_014.jpg cat",  # non-integer-label
        "img/a_015.jpg 8000",  # label-outlier, or label-out-of-range with --num-classes 10
        "img/a_016.jpg -1",  # label-outlier, or label-out-of-range with --num-classes 10
        "img/gone.jpg 4",  # missing-file
        "../images/cat/cat_000.jpg 1",  # unsafe-path
        "img/a_017.jpg 7",
    ]
    write(root / "train.txt", ("\n".join(lines) + "\n").encode())
    # the same list as CSV with a header (pandas' to_csv layout): `scrub scan .../train.csv`
    rows = ["image,label"] + [",".join(line.partition(" ")[::2]) for line in lines]
    write(root / "train.csv", ("\n".join(rows) + "\n").encode())


def make_hdf5(root: Path) -> None:
    """Caffe HDF5Data files (data N x 3 x 8 x 8 float32, label N float32) and their list."""
    import h5py

    rng = np.random.default_rng(2024)
    data = rng.normal(0, 1, (200, 3, 8, 8)).astype(np.float32)
    label = (np.arange(200) % 10).astype(np.float32)
    data[3, 1, 2, 3] = np.nan  # nonfinite-data
    data[10, 0, 0, 0], data[10, 2, 7, 7] = np.inf, -np.inf  # nonfinite-data
    data[30, 0, 4, 4] = 70_000.0  # fp16-overflow (and magnitude-outlier: ~30,000x the typical row)
    data[90, 2, 0, 0] = 1e20  # square-overflow: its square is Inf in float32 (and fp16, magnitude)
    data[40] = 0.0  # zero-norm
    label[50] = np.nan  # nonfinite-label
    label[60] = 8000  # label-outlier, or label-out-of-range with --num-classes 10
    label[70] = 2.5  # non-integer-label
    label[80] = -1  # label-outlier, or label-out-of-range with --num-classes 10
    root.mkdir(parents=True)
    with h5py.File(root / "train.h5", "w") as file:
        file.create_dataset("data", data=data, chunks=(32, 3, 8, 8))
        file.create_dataset("label", data=label)
    with h5py.File(root / "val.h5", "w") as file:  # row-count-mismatch: 50 rows, 49 labels
        file.create_dataset(
            "data", data=rng.normal(0, 1, (50, 3, 8, 8)).astype(np.float32), chunks=(25, 3, 8, 8)
        )
        file.create_dataset("label", data=(np.arange(49) % 10).astype(np.float32))
    (root / "train_list.txt").write_text("train.h5\nval.h5\n")


def write_lmdb(path: Path, items: list[tuple[bytes, bytes]], subdir: bool = True) -> None:
    """An LMDB environment holding ``items`` (key order), without its lock file."""
    import lmdb

    path.parent.mkdir(parents=True, exist_ok=True)
    environment = lmdb.open(str(path), subdir=subdir, map_size=64 << 20)
    with environment.begin(write=True) as transaction:
        for key, value in items:
            transaction.put(key, value)
    environment.close()
    lock = path / "lock.mdb" if subdir else Path(str(path) + "-lock")
    lock.unlink(missing_ok=True)


def make_lmdb(root: Path) -> None:
    """A Caffe Datum db (encoded, raw and float_data), an LSUN-style db and an .npy db."""
    from scrub.readers.caffe_datum import datum_class

    def datum(**fields) -> bytes:
        return datum_class()(**fields).SerializeToString()

    rng = np.random.default_rng(7)
    items = []
    for i in range(8):  # convert_imageset --encoded keys: %08d_<path as listed>
        items.append(
            (
                f"{i:08d}_img/{i:03d}.jpg".encode(),
                datum(data=encode(picture(900 + i)), label=i % 4, encoded=True),
            )
        )
    items.append(
        (b"00000008_img/008.jpg", datum(data=encode(picture(908))[:900], label=1, encoded=True))
    )  # corrupt-image
    items.append(
        (b"00000009_img/009.jpg", datum(data=encode(picture(909)), label=8000, encoded=True))
    )  # label-outlier
    for i in range(10, 14):  # raw uint8 CHW (BGR) Datums
        items.append(
            (
                f"{i:08d}_raw".encode(),
                datum(
                    channels=3,
                    height=8,
                    width=8,
                    data=rng.integers(0, 256, 192, dtype=np.uint8).tobytes(),
                    label=2,
                ),
            )
        )
    items.append(
        (b"00000014_raw", datum(channels=3, height=8, width=8, data=bytes(100), label=2))
    )  # shape-mismatch
    floats = rng.normal(size=(5, 192)).astype(np.float32)
    floats[1, 5] = np.nan  # nonfinite-data
    floats[2, 9] = 70_000  # fp16-overflow
    floats[3] = 0  # zero-norm
    for i, row in enumerate(floats):
        items.append(
            (
                f"{15 + i:08d}_float".encode(),
                datum(channels=3, height=8, width=8, float_data=row.tolist(), label=3),
            )
        )
    items.append((b"00000020_bad", b"\x00\x01garbage that is not a Datum"))  # undecodable-record
    items.append((b"00000021_empty", b""))  # empty-record
    items.append((b"__len__", b"22"))  # metadata: skipped
    write_lmdb(root / "datum_lmdb", sorted(items))
    DATUM_ITEMS[:] = sorted(items)

    lsun = [(f"{i:040x}".encode(), encode(picture(950 + i))) for i in range(6)]
    lsun.append((b"f" * 40, encode(picture(956))[:700]))  # corrupt-image
    lsun.append((b"e" * 40, lsun[0][1]))  # duplicate
    lsun.append((b"d" * 40, b"\x80\x04\x95" + bytes(20)))  # pickled: undecodable-record, never unpickled
    write_lmdb(root / "lsun_lmdb", sorted(lsun))

    arrays = rng.normal(size=(6, 4, 4)).astype(np.float32)
    arrays[1, 0, 0] = np.inf  # nonfinite-data
    arrays[2] = 0  # zero-norm
    npy = []
    for i, array in enumerate(arrays):
        buffer = io.BytesIO()
        np.save(buffer, array)
        npy.append((f"sample-{i:04d}".encode(), buffer.getvalue()))
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    npy.append((b"sample-0006", buffer.getvalue()))  # object .npy: undecodable-record
    beyond = rng.normal(size=(4, 4))
    beyond[3, 3] = 1e39  # float32-overflow: finite in float64, Inf once cast (and fp16, magnitude)
    buffer = io.BytesIO()
    np.save(buffer, beyond)
    npy.append((b"sample-0007", buffer.getvalue()))
    write_lmdb(root / "npy.lmdb", sorted(npy), subdir=False)


DATUM_ITEMS: list[tuple[bytes, bytes]] = []  # datum_lmdb's, for the LevelDB sample


def make_leveldb(root: Path) -> None:
    """The Caffe Datum sample as Caffe's other backend writes it (convert_imageset --backend
    leveldb): the same keys and values, compacted into a table file. Needs plyvel."""
    import plyvel

    database = plyvel.DB(str(root / "datum_leveldb"), create_if_missing=True)
    for key, value in DATUM_ITEMS:
        database.put(key, value)
    database.compact_range()
    database.close()
    for name in ("LOCK", "LOG", "LOG.old"):  # the process's lock and logs: not the database
        (root / "datum_leveldb" / name).unlink(missing_ok=True)


def make_numpy(root: Path) -> None:
    """A .npy of 200 rows x 16 float32 with NaN, Inf, a zero row and a 1e5."""
    rng = np.random.default_rng(2026)
    x = rng.normal(size=(200, 16)).astype(np.float32)
    x[13, 5] = np.nan  # nonfinite-data
    x[42] = 0.0  # zero-norm
    x[77, 0] = np.inf  # nonfinite-data
    x[150, 3] = 1e5  # fp16-overflow (warning), magnitude-outlier
    root.mkdir(parents=True)
    np.save(root / "features.npy", x)
    y = np.arange(200) % 5
    y[60] = 9  # label-out-of-range with --num-classes 5
    np.savez_compressed(root / "train.npz", x=x[:, :8], y=y)  # the layout of np.load(f)["x"], ["y"]


def make_webdataset(root: Path) -> None:
    """Two WebDataset shards of 8 samples (``.jpg``, ``.cls``, ``.json``), as webdataset's
    TarWriter lays them out: a truncated and a bit-flipped JPEG, a label 12 (with
    --num-classes 10), a sample without ``.cls``, one without an image, a broken ``.json``; the
    second shard was cut short inside its last image (a download that stopped)."""
    import tarfile

    root.mkdir(parents=True)
    for shard in range(2):
        path = root / f"train-{shard:06d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(8):
                n = shard * 8 + i
                members = {
                    "jpg": encode(picture(300 + n)),
                    "cls": str(n % 10).encode(),
                    "json": b'{"source": "synthetic"}',
                }
                if n == 2:
                    members["jpg"] = members["jpg"][: len(members["jpg"]) // 2]  # corrupt-image
                if n == 3:
                    members["jpg"] = bit_flipped_jpeg(303)  # corrupt-image (Pillow accepts it)
                if n == 5:
                    members["cls"] = b"12"  # label-out-of-range with --num-classes 10
                if n == 9:
                    del members["cls"]  # missing-label
                if n == 11:
                    del members["jpg"]  # malformed-sample: nothing to train on
                if n == 12:
                    members["json"] = b'{"source": '  # malformed-sample: not JSON
                for extension, data in members.items():
                    info = tarfile.TarInfo(f"{n:06d}.{extension}")
                    info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o444
                    tar.addfile(info, io.BytesIO(data))
        if shard == 1:  # cut 300 bytes into the last sample's image: malformed-sample
            data = path.read_bytes()
            with tarfile.open(path) as tar:
                last = tar.getmember("000015.jpg")
            path.write_bytes(data[: last.offset_data + 300])


def make_parquet(root: Path) -> None:
    """Parquet as Hugging Face ``datasets`` writes an image classification split (an ``Image``
    struct of {bytes, path} and a ``ClassLabel`` of 3 names in the schema's metadata), row groups
    of 5: a truncated and a bit-flipped JPEG, label 5 (the ClassLabel declares 3 classes) and -1
    (datasets' "no label"); and a table of 64 embeddings (fixed-size lists of 16 float32) with a
    NaN, a row whose square overflows and an all-zero row. Needs pyarrow."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True)
    images = [{"bytes": encode(picture(400 + i)), "path": f"{i:04d}.jpg"} for i in range(16)]
    labels = [i % 3 for i in range(16)]
    images[3]["bytes"] = images[3]["bytes"][: len(images[3]["bytes"]) // 2]  # corrupt-image
    images[8]["bytes"] = bit_flipped_jpeg(408)  # corrupt-image that Pillow accepts
    labels[10] = 5  # label-out-of-range: the ClassLabel has 3 names
    labels[12] = -1  # label-out-of-range: datasets' "no label" breaks cross-entropy
    features = {
        "image": {"_type": "Image"},
        "label": {"_type": "ClassLabel", "names": ["cat", "dog", "bird"]},
    }
    table = pa.table(
        {
            "image": pa.array(images, pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            "label": pa.array(labels, pa.int64()),
        }
    ).replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, root / "train.parquet", row_group_size=5)
    rng = np.random.default_rng(7)
    embeddings = rng.normal(size=(64, 16)).astype(np.float32)
    embeddings[9, 4] = np.nan  # nonfinite-data
    embeddings[21, 0] = 3e19  # square-overflow
    embeddings[40] = 0.0  # zero-norm
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(embeddings.ravel()), 16)
    pq.write_table(
        pa.table({"id": [f"doc-{i:03d}" for i in range(64)], "embedding": vectors}),
        root / "embeddings.parquet",
    )


def make_hf_tokens(root: Path) -> None:
    """A tokenized language-model split as Hugging Face ``datasets`` saves it (``save_to_disk``:
    ``data-00000-of-00001.arrow``, ``state.json``, ``dataset_info.json``): 24 rows of uint16
    ``input_ids`` with ``labels`` and ``attention_mask``, scanned with ``--vocab-size 1000``:
    id 1500 (token-out-of-range), labels all -100 (no-supervised-tokens), a mask of zeros
    (empty-attention), an empty row (empty-sequence). Needs datasets."""
    import json

    import datasets

    rng = np.random.default_rng(11)
    ids = [rng.integers(1, 1000, size=int(rng.integers(6, 16))).tolist() for _ in range(24)]
    ids[15] = []  # empty-sequence
    ids[3][2] = 1500  # token-out-of-range
    labels = [list(row) for row in ids]
    labels[7] = [-100] * len(ids[7])  # no-supervised-tokens
    masks = [[1] * len(row) for row in ids]
    masks[11] = [0] * len(ids[11])  # empty-attention
    features = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("uint16")),
            "labels": datasets.Sequence(datasets.Value("int32")),
            "attention_mask": datasets.Sequence(datasets.Value("int8")),
        }
    )
    columns = {"input_ids": ids, "labels": labels, "attention_mask": masks}
    datasets.Dataset.from_dict(columns, features=features).save_to_disk(str(root))
    state = json.loads((root / "state.json").read_text())
    state["_fingerprint"] = "5c2b0a7e11f3d9a4"  # datasets draws one at random: fixed, to regenerate alike
    (root / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))


def make_segmentation(root: Path) -> None:
    """images/ + masks/ of 5 classes (ignore index 255), 10 pairs of 64x64: a mask with class 7,
    an all-void mask (NaN under cross_entropy(ignore_index=255)), one of the wrong size, an RGB
    colour mask, an image without its mask, and a palette mask (VOC's kind: fine)."""
    rng = np.random.default_rng(11)
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for i in range(10):
        write(root / "images" / f"{i:04d}.jpg", encode(picture(500 + i)))
        mask = np.zeros((SIZE, SIZE), np.uint8)
        for c in range(1, 5):  # a few blobs of each class, a void border
            y, x = rng.integers(0, SIZE - 16, 2)
            mask[y : y + 16, x : x + 16] = c
        mask[:2] = 255
        image = Image.fromarray(mask)
        if i == 2:
            mask[30, 30] = 7  # mask-out-of-range with --num-classes 5
            image = Image.fromarray(mask)
        elif i == 4:
            image = Image.fromarray(np.full((SIZE, SIZE), 255, np.uint8))  # mask-all-void
        elif i == 5:
            image = Image.fromarray(mask[: SIZE // 2, : SIZE // 2])  # mask-size-mismatch
        elif i == 6:
            image = Image.fromarray(np.stack([mask * 50] * 3, axis=-1))  # mask-not-class-map
        elif i == 7:
            continue  # missing-mask
        elif i == 8:
            image = image.convert("P")  # a palette mask: class ids, fine
        write(root / "masks" / f"{i:04d}.png", encode(image, "PNG"))


def make_yolo(root: Path) -> None:
    """Ultralytics' layout: images/train + labels/train and a data.yaml of 3 names. Planted: a
    class id 5, a NaN coordinate, a zero-area box, pixel coordinates, a 4-number line, a
    duplicate box (warning), an image without labels (warning) and labels without an image."""
    labels = {
        0: "0 0.50 0.50 0.30 0.40\n1 0.20 0.25 0.10 0.12\n",
        1: "5 0.50 0.50 0.20 0.30\n",  # box-class-invalid: 3 names
        2: "0 nan 0.50 0.20 0.30\n",  # box-nonfinite
        3: "2 0.40 0.60 0.25 0.20\n1 0.50 0.50 0.00 0.00\n",  # box-degenerate, line 2
        4: "0 320 240 50 80\n",  # box-out-of-bounds: pixels, not fractions
        5: "0 0.50 0.50 0.20\n",  # box-malformed
        6: "1 0.50 0.50 0.20 0.30\n1 0.50 0.50 0.20 0.30\n",  # duplicate-box (warning)
        7: "2 0.30 0.70 0.20 0.20\n",
    }
    for i in range(9):
        write(root / "images" / "train" / f"{i:04d}.jpg", encode(picture(600 + i)))
        if i in labels:  # 8 has none: missing-boxes (a background image: warning)
            write(root / "labels" / "train" / f"{i:04d}.txt", labels[i].encode())
    write(root / "labels" / "train" / "0099.txt", b"0 0.5 0.5 0.1 0.1\n")  # label-without-image
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/train\nnames:\n  0: cat\n  1: dog\n  2: bird\n")


def make_coco(root: Path) -> None:
    """COCO: annotations/instances_val2017.json and val2017/. Planted: a zero-width box, a box
    past its image, a NaN coordinate, an undeclared category, a 3-number bbox, a duplicate
    (warning), and an annotation of no listed image (a note)."""
    import json

    boxes = {
        0: [[4, 4, 30, 20], [36, 30, 20, 24]],
        1: [[10, 10, 0, 12]],  # box-degenerate
        2: [[40, 40, 40, 40]],  # box-out-of-bounds (64x64)
        3: [[float("nan"), 5, 10, 10]],  # box-nonfinite (Python's json writes NaN)
        4: [[5, 5, 10, 10]],  # category 7: box-class-invalid
        5: [[1, 2, 3]],  # box-malformed
        6: [[8, 8, 16, 16], [8, 8, 16, 16]],  # duplicate-box (warning)
        7: [[20, 20, 30, 30]],
    }
    images, annotations = [], []
    for i, image_boxes in boxes.items():
        name = f"{700 + i:012d}.jpg"
        write(root / "val2017" / name, encode(picture(700 + i)))
        images.append({"id": 700 + i, "file_name": name, "width": SIZE, "height": SIZE})
        for box in image_boxes:
            annotations.append(
                {"id": len(annotations) + 1, "image_id": 700 + i, "category_id": 7 if i == 4 else 1 + i % 2,
                 "bbox": box, "area": box[2] * box[3] if len(box) == 4 else 0, "iscrowd": 0}  # fmt: skip
            )
    annotations.append({"id": 999, "image_id": 12345, "category_id": 1, "bbox": [1, 1, 2, 2], "area": 4, "iscrowd": 0})
    document = {"info": {"description": "scrub sample"}, "images": images, "annotations": annotations,
                "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]}  # fmt: skip
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(document, indent=1))


def make_mds(root: Path) -> None:
    """MosaicML Streaming datasets as streaming's own MDSWriter writes them, one per folder:
    ``sft/`` (input_ids int32 and labels int64, shards of ~400 bytes: sample 2 holds id 1500,
    beyond a vocabulary of 1000; sample 4's labels are all -100) and ``pretrain/`` (llm-foundry's
    ``tokens`` column of int64 bytes: sample 3 is empty). Needs mosaicml-streaming (and torch)."""
    import importlib.util
    import sys
    import types

    try:
        import streaming.base
    except ImportError:  # its top-level package imports torchvision; streaming.base needs torch only
        for name in [name for name in sys.modules if name.split(".")[0] == "streaming"]:
            del sys.modules[name]  # what the failed import left half-done
        spec = importlib.util.find_spec("streaming")
        assert spec is not None and spec.submodule_search_locations is not None
        package = types.ModuleType("streaming")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["streaming"] = package
        import streaming.base
    columns = {"input_ids": "ndarray:int32", "labels": "ndarray:int64"}
    with streaming.base.MDSWriter(out=str(root / "sft"), columns=columns, size_limit=400) as out:
        for row in range(8):
            ids = np.arange(1, 9, dtype=np.int32) * (row + 1) % 1000
            labels = np.where(np.arange(8) < 3, -100, ids).astype(np.int64)  # the prompt is masked
            if row == 2:
                ids[5] = 1500  # token-out-of-range with a vocabulary of 1000
            if row == 4:
                labels[:] = -100  # no-supervised-tokens: the answer was truncated away
            out.write({"input_ids": ids, "labels": labels})
    with streaming.base.MDSWriter(out=str(root / "pretrain"), columns={"tokens": "bytes"}) as out:
        for row in range(6):
            tokens = np.arange(16, dtype=np.int64) + 10 * row
            out.write({"tokens": b"" if row == 3 else tokens.tobytes()})  # empty-sequence
def make_jsonl(root: Path) -> None:
    """A JSON Lines file of 24 language-model records (texts, chats, prompt/completion pairs and
    tokenized records, scanned with --vocab-size 1000) and a blank line: a line that is not JSON
    (line 7), an empty completion (line 10), labels all -100 (line 17: no-supervised-tokens), a
    token id 1000 (line 21: token-out-of-range), an all-zero attention mask (line 25). Line 13 is
    blank: no record, as datasets skips it; keys are line numbers counted from 1."""
    import json

    rng = np.random.default_rng(30)
    records: list[dict | str] = []
    for i in range(24):
        ids = [int(v) for v in rng.integers(1, 1000, size=12)]
        records.append(
            [
                {"text": f"Document {i}: the quick brown fox jumps over the lazy dog."},
                {"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                              {"role": "assistant", "content": f"{2 * i}."}]},
                {"prompt": f"Translate 'cat' ({i}) into French:", "completion": " chat"},
                {"input_ids": ids, "labels": [-100] * 4 + ids[4:], "attention_mask": [1] * 12},
            ][i % 4]
        )  # fmt: skip
    records[6] = '{"text": "a line cut off by a crash'  # malformed-record: not JSON
    records[9] = {"prompt": "Translate 'dog' into French:", "completion": ""}  # empty-sequence
    records[15]["labels"] = [-100] * 12  # type: ignore[index]  # no-supervised-tokens
    records[19]["input_ids"][5] = 1000  # type: ignore[index]  # token-out-of-range (--vocab-size 1000)
    records[23]["attention_mask"] = [0] * 12  # type: ignore[index]  # empty-attention
    lines = [record if isinstance(record, str) else json.dumps(record) for record in records]
    lines.insert(12, "")  # a blank line: no record, as datasets skips it
    root.mkdir(parents=True)
    (root / "train.jsonl").write_text("\n".join(lines) + "\n")
def megatron_pair(prefix: Path, documents: list[np.ndarray], dtype: str = "uint16") -> None:
    """A Megatron-LM indexed dataset written per its layout (indexed_dataset.py: MMIDIDX header,
    version 1, dtype code, counts, int32 lengths, int64 byte pointers, int64 document indices),
    one sequence per document as preprocess_data.py writes it."""
    codes = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint16": 8}
    arrays = [np.asarray(d, dtype=dtype) for d in documents]
    lengths = np.array([len(a) for a in arrays], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)]) * np.dtype(dtype).itemsize
    indices = np.arange(len(arrays) + 1, dtype=np.int64)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.bin").write_bytes(b"".join(a.tobytes() for a in arrays))
    header = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, codes[dtype], len(arrays), len(indices))
    Path(f"{prefix}.idx").write_bytes(header + lengths.tobytes() + pointers.astype(np.int64).tobytes() + indices.tobytes())


def make_megatron(root: Path) -> None:
    """A Megatron pair (uint16) of 40 documents for a vocabulary of 1000: document 3 holds id
    1500 (token-out-of-range with --vocab-size 1000), 7 is empty (empty-sequence), 9 is one
    token (no finding: GPTDataset packs documents into samples)."""
    rng = np.random.default_rng(30)
    documents = [rng.integers(0, 1000, int(rng.integers(2, 50))) for _ in range(40)]
    documents[3][5] = 1500
    documents[7] = np.zeros(0, dtype=np.int64)
    documents[9] = np.array([42])
    megatron_pair(root / "my_text_document", documents)


def make_tokenbin(root: Path) -> None:
    """nanoGPT's raw uint16 ``train.bin`` and an llm.c shard (header version 1), each 961 tokens
    for a vocabulary of 1000 read in windows of 64: window 2 holds id 1200 (token-out-of-range
    with --vocab-size 1000), and the last window is one token (no finding: training packs)."""
    rng = np.random.default_rng(31)
    tokens = rng.integers(0, 1000, 15 * 64 + 1).astype(np.uint16)
    tokens[2 * 64 + 10] = 1200
    root.mkdir(parents=True)
    tokens.tofile(root / "train.bin")
    header = np.zeros(256, "<i4")
    header[:3] = (20240520, 1, len(tokens))
    (root / "fineweb_train_000001.bin").write_bytes(header.tobytes() + tokens.tobytes())


def make_tfrecord(root: Path) -> None:
    """Two TFRecord shards of 6 ``tf.Example`` records (TFDS's ``image/encoded``,
    ``image/class/label`` and a float ``bbox``), named as TFDS names shards: a truncated and a
    bit-flipped JPEG, label 12 (with --num-classes 10), a NaN box, a record that is not an
    Example, one whose data fails its CRC; the second shard was cut short inside its last record."""
    import sys

    sys.path.insert(0, str(HERE.parent))
    from scrub.readers.tfexample import serialize_example
    from scrub.readers.tfframes import frame

    root.mkdir(parents=True)
    for shard in range(2):
        frames = []
        for i in range(6):
            n = shard * 6 + i
            image = encode(picture(400 + n).resize((24, 24)))
            features = {
                "image/encoded": ("bytes", [image]),
                "image/class/label": ("int64", [n % 10]),
                "bbox": ("float", [0.1, 0.2, 0.5, 0.6]),
            }
            if n == 1:
                features["image/encoded"] = ("bytes", [image[: len(image) // 2]])  # corrupt-image
            if n == 2:
                features["image/encoded"] = ("bytes", [bit_flipped_jpeg(402)])  # corrupt-image
            if n == 3:
                features["image/class/label"] = ("int64", [12])  # label-out-of-range
            if n == 4:
                features["bbox"] = ("float", [0.1, float("nan"), 0.5, 0.6])  # nonfinite-data
            data = serialize_example(features)
            if n == 7:
                data = b"\x0a\xff\x01not an Example"  # malformed-record
            framed = bytearray(frame(data))
            if n == 8:
                framed[40] ^= 0x10  # record-crc-mismatch: a flipped bit in the data
            frames.append(bytes(framed))
        data = b"".join(frames)
        if shard == 1:
            data = data[: len(data) - 200]  # truncated-record: the last record is cut short
        (root / f"train.tfrecord-{shard:05d}-of-00002").write_bytes(data)


def main() -> None:
    for name, make in [
        ("images", make_image_folder),
        ("imagelist", make_image_list),
        ("hdf5", make_hdf5),
        ("lmdb", make_lmdb),
        ("leveldb", make_leveldb),
        ("numpy", make_numpy),
        ("webdataset", make_webdataset),
        ("parquet", make_parquet),
        ("hf_tokens", make_hf_tokens),
        ("segmentation", make_segmentation),
        ("yolo", make_yolo),
        ("coco", make_coco),
        ("mds", make_mds),
        ("jsonl", make_jsonl),
        ("megatron", make_megatron),
        ("tokenbin", make_tokenbin),
        ("tfrecord", make_tfrecord),
    ]:
        target = HERE / name
        if target.exists() or target.is_symlink():
            shutil.rmtree(target)
        make(target)
        print(f"wrote {target.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
