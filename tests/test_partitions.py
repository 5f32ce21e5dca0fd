"""Property tests: every reader's partitions cover every record exactly once, in order, at any
partition size, and any slice of a partition reads exactly those records (what crash isolation
and cluster bisection rely on)."""

from __future__ import annotations

import pickle

import h5py
import lmdb
import numpy as np
import pytest
from conftest import image_bytes, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrub.readers.base import ReadOptions, open_reader
from scrub.records import Batch

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def identities(reader, partition, start=0, stop=None) -> list[tuple[str, str, int]]:
    found = []
    for item in reader.read(partition, start, stop):
        if isinstance(item, Batch):
            found += [(item.source, item.key(row), item.start + row) for row in range(len(item))]
        else:
            found.append((item.source, item.key, item.index))
    return found


def check_cover(path, size: int, cut: tuple[int, int]) -> None:
    reader = open_reader(path, ReadOptions())
    info, partitions = reader.open(size)
    reader = pickle.loads(pickle.dumps(reader))  # as a worker receives it
    everything = [i for p in partitions for i in identities(reader, p)]
    assert len(everything) == info.records == sum(len(p) for p in partitions)
    assert len(set(everything)) == len(everything)
    for source in {source for source, _, _ in everything}:  # in order (per file, where rows are)
        indices = [index for name, _, index in everything if name == source]
        assert indices == sorted(indices)
    for partition in partitions:
        whole = identities(reader, partition)
        start, stop = sorted(min(c, len(partition)) for c in cut)
        assert identities(reader, partition, start, stop) == whole[start:stop]
        assert reader.locate(partition, list(range(len(partition)))) == whole
    reader.close()


@SETTINGS
@given(
    count=st.integers(1, 25), size=st.integers(1, 30), cut=st.tuples(st.integers(0, 30), st.integers(0, 30))
)
def test_image_folder_partitions(tmp_path_factory, count, size, cut):
    root = tmp_path_factory.mktemp("images")
    for i in range(count):
        write(root / f"c{i % 3}" / f"{i:03d}.png", image_bytes(i, fmt="PNG", size=8))
    check_cover(root, size, cut)


@pytest.mark.slow  # over half a second: out of the quick subset
@SETTINGS
@given(
    rows=st.integers(1, 300),
    chunk=st.integers(1, 64),
    size=st.integers(1, 120),
    cut=st.tuples(st.integers(0, 120), st.integers(0, 120)),
)
def test_hdf5_partitions(tmp_path_factory, rows, chunk, size, cut):
    path = tmp_path_factory.mktemp("h5") / "d.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset(
            "data", data=np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), chunks=(min(chunk, rows), 3)
        )
        file.create_dataset("label", data=np.zeros(rows, dtype=np.float32))
    check_cover(path, size, cut)


@SETTINGS
@given(
    keys=st.sets(st.binary(min_size=1, max_size=8), min_size=1, max_size=60),
    size=st.integers(1, 70),
    cut=st.tuples(st.integers(0, 70), st.integers(0, 70)),
)
def test_lmdb_partitions(tmp_path_factory, keys, size, cut):
    path = tmp_path_factory.mktemp("lmdb") / "db"
    environment = lmdb.open(str(path), map_size=16 << 20)
    with environment.begin(write=True) as transaction:
        for key in keys:
            transaction.put(key, b"\x00payload")
    environment.close()
    check_cover(path, size, cut)


@SETTINGS
@given(
    rows=st.integers(1, 300),
    size=st.integers(1, 120),
    form=st.sampled_from(["npy", "npz", "npz-compressed"]),
    cut=st.tuples(st.integers(0, 120), st.integers(0, 120)),
)
def test_numpy_partitions(tmp_path_factory, rows, size, form, cut):
    folder = tmp_path_factory.mktemp("numpy")
    data = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    if form == "npy":
        path = folder / "d.npy"
        np.save(path, data)
    else:
        path = folder / "d.npz"
        (np.savez if form == "npz" else np.savez_compressed)(path, data=data, label=np.zeros(rows))
    check_cover(path, size, cut)


@SETTINGS
@given(
    keys=st.sets(st.binary(min_size=1, max_size=8), min_size=1, max_size=60),
    size=st.integers(1, 70),
    cut=st.tuples(st.integers(0, 70), st.integers(0, 70)),
)
def test_leveldb_partitions(tmp_path_factory, keys, size, cut):
    import pytest

    plyvel = pytest.importorskip("plyvel")
    path = tmp_path_factory.mktemp("leveldb") / "db"
    database = plyvel.DB(str(path), create_if_missing=True)
    for key in keys:
        database.put(key, b"\x00payload")
    database.close()
    check_cover(path, size, cut)


@SETTINGS
@given(
    count=st.integers(1, 25),
    size=st.integers(1, 30),
    header=st.booleans(),
    cut=st.tuples(st.integers(0, 30), st.integers(0, 30)),
)
def test_csv_list_partitions(tmp_path_factory, count, size, header, cut):
    root = tmp_path_factory.mktemp("csv")
    rows = ["path,label"] if header else []
    for i in range(count):
        write(root / f"{i:03d}.png", image_bytes(i, fmt="PNG", size=8))
        rows.append(f"{i:03d}.png,{i % 3}")
    (root / "list.csv").write_text("\n".join(rows) + "\n")
    check_cover(root / "list.csv", size, cut)


@SETTINGS
@given(
    shards=st.lists(st.integers(0, 12), min_size=1, max_size=4),
    members=st.integers(1, 3),
    compress=st.booleans(),
    size=st.integers(1, 15),
    cut=st.tuples(st.integers(0, 15), st.integers(0, 15)),
)
def test_webdataset_partitions(tmp_path_factory, shards, members, compress, size, cut):
    import io
    import tarfile

    root = tmp_path_factory.mktemp("shards")
    for number, samples in enumerate(shards):
        mode, suffix = ("w:gz", ".tar.gz") if compress else ("w", ".tar")
        with tarfile.open(root / f"shard-{number:02d}{suffix}", mode) as tar:
            for sample in range(samples):
                for extension in ("jpg", "cls", "json")[:members]:
                    info = tarfile.TarInfo(f"{number}-{sample:03d}.{extension}")
                    info.size = 3
                    tar.addfile(info, io.BytesIO(b"abc"))
    if sum(shards):
        check_cover(root, size, cut)


@SETTINGS
@given(
    files=st.lists(st.integers(1, 20), min_size=1, max_size=3),
    group=st.integers(1, 7),
    kind=st.sampled_from(["fixed", "ragged", "table", "image"]),
    arrow=st.booleans(),
    size=st.integers(1, 25),
    cut=st.tuples(st.integers(0, 25), st.integers(0, 25)),
)
def test_parquet_and_arrow_partitions(tmp_path_factory, files, group, kind, arrow, size, cut):
    import pytest

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root = tmp_path_factory.mktemp("parquet")
    for number, rows in enumerate(files):
        if kind == "fixed":
            data = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(rows * 3, dtype=np.float32)), 3)
        elif kind == "ragged":
            data = pa.array([[float(i)] * (i % 3) for i in range(rows)], pa.list_(pa.float32()))
        elif kind == "image":
            data = pa.array([b"\x89PNG not really"] * rows)
        else:
            data = pa.array(np.arange(rows, dtype=np.float64))
        table = pa.table({"image" if kind == "image" else "x": data, "label": np.arange(rows) % 4})
        if arrow:  # record batches of `group` rows, Arrow's IPC file form
            with pa.ipc.new_file(str(root / f"part-{number}.arrow"), table.schema) as writer:
                writer.write_table(table, max_chunksize=group)
        else:
            pq.write_table(table, root / f"part-{number}.parquet", row_group_size=group)
    check_cover(root, size, cut)


@SETTINGS
@given(
    count=st.integers(1, 20),
    size=st.integers(1, 25),
    cut=st.tuples(st.integers(0, 25), st.integers(0, 25)),
)
def test_segmentation_partitions(tmp_path_factory, count, size, cut):
    root = tmp_path_factory.mktemp("seg")
    for i in range(count):
        write(root / "images" / f"s{i % 2}" / f"{i:03d}.png", image_bytes(i, fmt="PNG", size=8))
        if i % 3:
            write(root / "masks" / f"s{i % 2}" / f"{i:03d}.png", image_bytes(i, mode="L", fmt="PNG", size=8))
    write(
        root / "masks" / "extra.png", image_bytes(99, mode="L", fmt="PNG", size=8)
    )  # a masks folder of images
    check_cover(root, size, cut)


@SETTINGS
@given(
    count=st.integers(1, 20),
    size=st.integers(1, 25),
    cut=st.tuples(st.integers(0, 25), st.integers(0, 25)),
)
def test_yolo_and_coco_partitions(tmp_path_factory, count, size, cut):
    import json

    root = tmp_path_factory.mktemp("detection")
    images = []
    for i in range(count):
        write(root / "images" / f"{i:03d}.png", image_bytes(i, fmt="PNG", size=8))
        if i % 3:
            write(root / "labels" / f"{i:03d}.txt", b"0 0.5 0.5 0.1 0.1\n")
        images.append({"id": i, "file_name": f"{i:03d}.png", "width": 8, "height": 8})
    write(root / "labels" / "orphan.txt", b"0 0.5 0.5 0.1 0.1\n")  # a record without an image
    check_cover(root, size, cut)
    document = {"images": images, "annotations": [], "categories": [{"id": 0, "name": "x"}]}
    write(root / "annotations" / "instances_images.json", json.dumps(document).encode())
    check_cover(root / "annotations" / "instances_images.json", size, cut)
