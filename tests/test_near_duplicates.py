"""Near copies inside one dataset: a re-encoded, resized or brightened copy of an image is a
`near-duplicate` warning naming the earlier image and its group, in every container of
encoded images (written by each format's own library); a copy with the same bytes stays a
`duplicate`; distinct pictures are not paired; `--near-distance 0` turns the check off."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageEnhance
from test_splits import encoded, scene

import scrub
from scrub.checks.perceptual import near_pairs


def payloads() -> list[bytes]:
    """Six pictures, then changed copies of the first three (quality 50, half the size, 10%
    brighter) and a copy of the fourth's bytes."""
    pictures = [scene(seed) for seed in range(6)]
    w, h = pictures[1].size
    return [
        *(encoded(picture) for picture in pictures),
        encoded(pictures[0], quality=50),
        encoded(pictures[1].resize((w // 2, h // 2))),
        encoded(ImageEnhance.Brightness(pictures[2]).enhance(1.1)),
        encoded(pictures[3]),
    ]


def image_folder(path: Path, images: list[bytes]) -> Path:
    (path / "a").mkdir(parents=True)
    for number, data in enumerate(images):
        (path / "a" / f"{number:02d}.jpg").write_bytes(data)
    return path


def lmdb_store(path: Path, images: list[bytes]) -> Path:
    lmdb = pytest.importorskip("lmdb")
    with lmdb.open(str(path), map_size=64 << 20) as environment, environment.begin(write=True) as transaction:
        for number, data in enumerate(images):
            transaction.put(f"{number:02d}".encode(), data)
    return path


def webdataset_shard(path: Path, images: list[bytes]) -> Path:
    path.mkdir()
    with tarfile.open(path / "shard-000000.tar", "w") as tar:
        for number, data in enumerate(images):
            for suffix, member in ((".jpg", data), (".cls", b"0")):
                info = tarfile.TarInfo(f"{number:06d}{suffix}")
                info.size = len(member)
                tar.addfile(info, io.BytesIO(member))
    return path


def parquet_table(path: Path, images: list[bytes]) -> Path:
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = [{"bytes": data, "path": f"{number:02d}.jpg"} for number, data in enumerate(images)]
    table = pa.table({"image": pa.array(rows, image), "label": pa.array([0] * len(images), pa.int64())})
    parquet.write_table(table, path)
    return path


def tfrecord_file(path: Path, images: list[bytes]) -> Path:
    writer_module = pytest.importorskip("tfrecord.writer")
    writer = writer_module.TFRecordWriter(str(path))
    for data in images:
        writer.write({"image/encoded": (data, "byte"), "image/class/label": (0, "int")})
    writer.close()
    return path


#: each container: what writes it, its name, and the options it is scanned with
CONTAINERS: dict[str, tuple[Callable[[Path, list[bytes]], Path], str, dict]] = {
    "images": (image_folder, "data", {}),
    "lmdb": (lmdb_store, "data.lmdb", {}),
    "webdataset": (webdataset_shard, "shards", {"num_classes": 2}),
    "parquet": (parquet_table, "data.parquet", {}),
    "tfrecord": (tfrecord_file, "data.tfrecord", {"num_classes": 2}),
}


@pytest.mark.parametrize("container", list(CONTAINERS))
def test_changed_copies_are_near_duplicates_of_the_first_and_a_same_bytes_copy_a_duplicate(
    container, tmp_path
):
    write, name, options = CONTAINERS[container]
    result = scrub.scan(write(tmp_path / name, payloads()), **options)
    near = {i.index: i.details for i in result.issues() if i.check == "near-duplicate"}
    assert {index: details["first"]["index"] for index, details in near.items()} == {6: 0, 7: 1, 8: 2}
    assert all(0 <= d["distance"] <= 6 and d["group"]["size"] == 2 for d in near.values())
    assert all(d["group"]["first"] == d["first"] for d in near.values())
    duplicates = {i.index: i.details["first"]["index"] for i in result.issues() if i.check == "duplicate"}
    assert duplicates == {9: 3}  # same bytes: a duplicate, never also a near-duplicate


def test_a_group_is_named_by_its_first_image_and_counts_its_members(tmp_path):
    """Copies of copies form one group: each names the earlier image it is nearest to, and the
    group's first."""
    picture = scene(7)
    w, h = picture.size
    images = [
        encoded(picture),
        encoded(picture, quality=60),
        encoded(picture.resize((w * 3 // 4, h * 3 // 4))),
        encoded(scene(8)),
    ]
    result = scrub.scan(image_folder(tmp_path / "data", images))
    near = {i.key: i for i in result.issues() if i.check == "near-duplicate"}
    assert set(near) == {"a/01.jpg", "a/02.jpg"}
    assert all(
        i.details["group"] == {"first": near["a/01.jpg"].details["first"], "size": 3} for i in near.values()
    )
    assert near["a/01.jpg"].details["group"]["first"]["key"] == "a/00.jpg"
    assert "a group of 3" in near["a/02.jpg"].message


def test_near_distance_zero_turns_the_check_off_and_fix_can_set_copies_aside(tmp_path):
    data = image_folder(tmp_path / "data", payloads())
    assert not [i for i in scrub.scan(data, near_distance=0).issues() if i.check == "near-duplicate"]
    fixed = scrub.fix(data, out=tmp_path / "clean", check_severity=["near-duplicate=error"])
    assert sorted(p.name for p in (tmp_path / "clean" / "a").iterdir()) == [
        f"{n:02d}.jpg" for n in range(6)
    ] + ["09.jpg"]
    assert fixed.report["kept"] == 7
    rescanned = scrub.scan(tmp_path / "clean")
    assert not [i for i in rescanned.issues() if i.check == "near-duplicate"]


def test_near_pairs_among_earlier_hashes_equal_a_brute_force_search():
    rng = np.random.default_rng(11)
    hashes = rng.integers(0, 1 << 63, 2000, dtype=np.int64).astype(np.uint64)
    copies = rng.integers(0, 2000, 150)
    flips = np.left_shift(np.uint64(1), rng.integers(0, 63, 150).astype(np.uint64))
    hashes[1850:] = hashes[copies] ^ flips
    hashes[[3, 1900]] = 0  # NO_HASH: never paired
    for radius in (0, 1, 4, 6):
        found, nearest, distance = near_pairs(hashes, hashes, radius, earlier=True)
        table = np.bitwise_count(hashes[:, None] ^ hashes[None, :]).astype(int)
        table[np.triu_indices(len(hashes))] = 99  # earlier images only, never itself
        table[:, hashes == 0] = 99
        table[hashes == 0, :] = 99
        expected = np.flatnonzero(table.min(axis=1) <= radius)
        assert found.tolist() == expected.tolist()
        assert nearest.tolist() == table.argmin(axis=1)[expected].tolist()
        assert distance.tolist() == table.min(axis=1)[expected].tolist()


def test_images_near_a_constant_image_are_not_paired(tmp_path):
    """A constant image has no hash: two of them in other shades are no near-duplicates."""
    images = []
    for shade in (10, 200):
        buffer = io.BytesIO()
        Image.new("RGB", (64, 64), (shade, shade, shade)).save(buffer, "JPEG")
        images.append(buffer.getvalue())
    result = scrub.scan(image_folder(tmp_path / "data", images))
    assert not [i for i in result.issues() if i.check == "near-duplicate"]
