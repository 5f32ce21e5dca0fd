"""The profile of each other kind of data, read from real files: token stores (nanoGPT's .bin,
JSON Lines of token ids and labels), LMDB arrays, Parquet vectors, detection boxes (YOLO),
segmentation masks; and records reused from the cache (counted, not sketched)."""

from __future__ import annotations

import io
import json
import math

import lmdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from conftest import image_bytes, write
from PIL import Image
from test_profile import assert_quantiles_match, valid_profile

import scrub
from scrub.profile.collect import ROWS_SAMPLED


def test_nanogpt_bin_lengths_and_top_ids_exact(tmp_path):
    rng = np.random.default_rng(0)
    ids = (rng.zipf(1.5, 64 * 40 + 7) % 3000).astype(np.uint16)
    ids.tofile(tmp_path / "train.bin")
    profile = scrub.scan(tmp_path / "train.bin", max_length=64, scheduler="sync").summary.profile
    valid_profile(profile)
    tokens = profile["tokens"]
    assert profile["records"] == tokens["records"] == 41
    assert tokens["length"]["count"] == 41
    assert tokens["length"]["min"] == 7 and tokens["length"]["max"] == 64
    assert tokens["length"]["mean"] == len(ids) / 41
    counts = np.bincount(ids)
    expected = sorted(range(len(counts)), key=lambda i: (-counts[i], i))[:64]
    assert [token for token, _ in tokens["top_ids"]] == expected
    assert [count for _, count in tokens["top_ids"]] == [int(counts[i]) for i in expected]
    assert tokens["max_id"] == int(ids.max())
    assert "supervised" not in tokens  # a flat store has no labels of its own
    assert "arrays" not in profile and "labels" not in profile


def test_jsonl_token_records_supervised_share(tmp_path):
    lines, shares, lengths = [], [], []
    rng = np.random.default_rng(1)
    for _ in range(300):
        length = int(rng.integers(4, 40))
        ids = rng.integers(0, 500, length).tolist()
        prompt = int(rng.integers(0, length))
        labels = [-100] * prompt + ids[prompt:]
        lines.append(json.dumps({"input_ids": ids, "labels": labels}))
        lengths.append(length)
        shifted = labels[1:]  # the causal shift: label i is predicted at i - 1
        shares.append(sum(label != -100 for label in shifted) / len(shifted))
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    tokens = scrub.scan(tmp_path / "train.jsonl", scheduler="sync").summary.profile["tokens"]
    assert tokens["records"] == 300
    assert_quantiles_match(tokens["length"], np.asarray(lengths, float))
    assert_quantiles_match(tokens["supervised"], np.asarray(shares))
    every_id = np.concatenate([json.loads(line)["input_ids"] for line in lines])
    assert tokens["top_ids"][0] == [int(np.bincount(every_id).argmax()), int(np.bincount(every_id).max())]


def test_lmdb_array_values(tmp_path):
    rng = np.random.default_rng(2)
    rows = rng.normal(size=(200, 6)).astype(np.float32)
    rows[10, 1] = np.nan
    env = lmdb.open(str(tmp_path / "arrays.lmdb"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, row in enumerate(rows):
            buffer = io.BytesIO()
            np.save(buffer, row)
            txn.put(f"sample-{i:04d}".encode(), buffer.getvalue())
    env.close()
    profile = scrub.scan(tmp_path / "arrays.lmdb", scheduler="sync").summary.profile
    valid_profile(profile)
    group = profile["arrays"]["6"]
    assert profile["records"] == 200 and group["records"] == 200 and group["dtypes"] == {"float32": 200}
    assert group["features"]["1"]["nan"] == 1
    assert_quantiles_match(group["features"]["4"], rows[:, 4].astype(np.float64))
    assert_quantiles_match(group["row"], rows.reshape(-1).astype(np.float64))


def test_parquet_vectors_and_class_labels(tmp_path):
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(500, 4)).astype(np.float32)
    labels = rng.integers(0, 3, 500)
    table = pa.table(
        {"emb": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4), "label": labels}
    )
    pq.write_table(table, tmp_path / "emb.parquet", row_group_size=128)
    profile = scrub.scan(tmp_path / "emb.parquet", scheduler="sync").summary.profile
    valid_profile(profile)
    assert profile["labels"]["classes"] == {str(c): int((labels == c).sum()) for c in range(3)}
    group = profile["arrays"]["4"]
    assert group["records"] == 500
    assert_quantiles_match(group["features"]["2"], vectors[:, 2].astype(np.float64))


def test_yolo_boxes_per_image_and_classes(tmp_path):
    boxes = {"a": "0 0.5 0.5 0.2 0.3\n1 0.2 0.2 0.1 0.1\n", "b": "2 0.5 0.5 0.2 0.2\n", "c": "", "d": None}
    for seed, (name, text) in enumerate(boxes.items()):
        write(tmp_path / "images" / "train" / f"{name}.jpg", image_bytes(seed, size=32))
        if text is not None:
            write(tmp_path / "labels" / "train" / f"{name}.txt", text.encode())
    (tmp_path / "data.yaml").write_text("path: .\ntrain: images/train\nnames:\n  0: a\n  1: b\n  2: c\n")
    profile = scrub.scan(tmp_path, scheduler="sync").summary.profile
    valid_profile(profile)
    assert profile["boxes"] == {"per_image": {"0": 2, "1": 1, "2": 1}, "classes": {"0": 1, "1": 1, "2": 1}}
    assert profile["images"]["records"] == 4


def test_segmentation_mask_pixels(tmp_path):
    rng = np.random.default_rng(4)
    expected = np.zeros(256, int)
    for i in range(6):
        image = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
        mask = rng.integers(0, 4, (24, 32), dtype=np.uint8)
        mask[:2] = 255
        (tmp_path / "images").mkdir(exist_ok=True)
        (tmp_path / "masks").mkdir(exist_ok=True)
        Image.fromarray(image).save(tmp_path / "images" / f"{i}.jpg")
        Image.fromarray(mask).save(tmp_path / "masks" / f"{i}.png")
        expected += np.bincount(mask.reshape(-1), minlength=256)
    profile = scrub.scan(tmp_path, num_classes=4, scheduler="sync").summary.profile
    valid_profile(profile)
    assert profile["masks"]["pixels"] == {str(v): int(expected[v]) for v in np.flatnonzero(expected)}
    assert profile["images"]["records"] == 6


def test_records_reused_from_the_cache_are_counted_but_not_sketched(tmp_path):
    root = tmp_path / "images"
    for i in range(10):
        write(root / ("cat" if i % 2 else "dog") / f"{i}.png", image_bytes(i, fmt="PNG", size=16 + i))
    cache = tmp_path / "cache"
    first = scrub.scan(root, cache=cache, scheduler="sync").summary
    assert first.profile["reused"] == 0 and first.profile["images"]["width"]["count"] == 10
    write(root / "cat" / "new.png", image_bytes(99, fmt="PNG", size=40))
    again = scrub.scan(root, cache=cache, scheduler="sync").summary
    profile = valid_profile(again.profile)
    assert profile["records"] == 11 and profile["reused"] == 10
    assert profile["labels"]["classes"] == {"0": 6, "1": 5}  # counts: every record
    assert profile["images"]["records"] == 11 and sum(profile["images"]["modes"].values()) == 11
    assert profile["images"]["width"]["count"] == 1  # sketches: the record read
    assert profile["images"]["width"]["min"] == 40
    assert any("10 records reused from the cache" in note for note in again.notes)
    assert not any("reused from the cache are counted" in note for note in first.notes)


def test_sampled_token_sequences_same_however_partitioned(tmp_path):
    rng = np.random.default_rng(8)
    ids = (rng.zipf(1.4, 8 * 40000) % 2000).astype(np.uint16)  # 40,000 windows of 8: sampled
    ids.tofile(tmp_path / "train.bin")
    one = scrub.scan(tmp_path / "train.bin", max_length=8, scheduler="sync").summary.profile
    many = scrub.scan(
        tmp_path / "train.bin", max_length=8, scheduler="sync", partition_size=7001
    ).summary.profile
    tokens = one["tokens"]
    assert tokens["records"] == 40000
    stride = math.ceil(40000 / ROWS_SAMPLED)
    assert stride > 1 and tokens["length"]["count"] == len(range(0, 40000, stride))  # by its index
    assert many["tokens"]["length"]["count"] == tokens["length"]["count"]
    assert many["tokens"]["top_ids"] == tokens["top_ids"]  # the same sample, counted exactly
    true_top = np.argsort(-np.bincount(ids), kind="stable")[:5].tolist()
    assert [token for token, _ in tokens["top_ids"][:5]] == true_top


def test_wide_rows_give_a_spread_of_their_elements(tmp_path):
    rng = np.random.default_rng(9)
    data = rng.normal(size=(200, 2000)).astype(np.float32)
    data[:, 1500:] = rng.exponential(size=(200, 500))  # the tail of each row differs
    np.save(tmp_path / "wide.npy", data)
    one = scrub.scan(tmp_path / "wide.npy", scheduler="sync").summary.profile["arrays"]["2000"]
    many = scrub.scan(tmp_path / "wide.npy", scheduler="sync", partition_size=33).summary.profile
    assert one["positions"] == 2000 and len(one["features"]) == 32
    assert 200 * 1000 < one["row"]["count"] < 200 * 2000  # some of each row's elements
    assert many["arrays"]["2000"]["row"]["count"] == one["row"]["count"]
    assert many["arrays"]["2000"]["row"]["zero"] == one["row"]["zero"]
    assert_quantiles_match(
        {
            **one["row"],
            "count": data.size,
            "min": data.min(),
            "max": data.max(),
            "mean": data.mean(dtype=np.float64),
        },
        data.reshape(-1).astype(np.float64),
    )


def test_float_images_are_array_rows_grouped_by_size(tmp_path):
    rng = np.random.default_rng(10)
    depths = {}
    for i in range(6):
        shape = (12, 16) if i % 2 else (20, 10)
        depths[i] = rng.normal(5, 2, shape).astype(np.float32)
        Image.fromarray(depths[i], mode="F").save(tmp_path / f"{i}.tif")
    profile = scrub.scan(tmp_path, scheduler="sync").summary.profile
    valid_profile(profile)
    assert {name: group["records"] for name, group in profile["arrays"].items()} == {"12x16": 3, "20x10": 3}
    pooled = np.concatenate([depths[i].reshape(-1) for i in (1, 3, 5)]).astype(np.float64)
    assert_quantiles_match(profile["arrays"]["12x16"]["row"], pooled)
    assert profile["images"]["modes"] == {"F": 6}
    assert profile["images"]["channels"] == {}  # values, not 8-bit levels: they are in "arrays"


def test_scrub_profile_prints_each_dataset_of_a_run(tmp_path):
    from typer.testing import CliRunner

    from scrub.cli import app
    from scrub.manifest import scan_record_path

    for name, size in (("a", 3), ("b", 5)):
        np.save(tmp_path / f"{name}.npy", np.arange(size * 4, dtype=np.float32).reshape(size, 4))
    result = scrub.scan([tmp_path / "a.npy", tmp_path / "b.npy"], manifest=tmp_path / "two.scrub.jsonl")
    done = CliRunner().invoke(app, ["profile", str(scan_record_path(result.manifest))])
    assert done.exit_code == 0, done.output
    headings = [line for line in done.output.splitlines() if line.endswith(" records")]
    assert [heading.split(" (")[0].rsplit("/", 1)[-1] for heading in headings] == ["a.npy", "b.npy"]
    assert headings[0].endswith(": 3 records") and headings[1].endswith(": 5 records")
