"""The dataset's profile (`scrub.profile`), made in the scan's pass, on real files of each kind:
exact counts, quantiles within the sketch's error of NumPy's, the same profile however the
dataset is partitioned, a scan record whose size does not grow with the records."""

from __future__ import annotations

import json
import math
import pickle
from importlib import resources

import h5py
import jsonschema
import numpy as np
import pytest
from PIL import Image

import scrub
from scrub.errors import ScrubError
from scrub.manifest import scan_record_path
from scrub.profile import PartitionProfile, collect, finish_profile, load_profile
from scrub.profile.collect import ROWS_SAMPLED
from scrub.profile.render import profiles_in
from scrub.profile.sketches import RANKS, Numeric, Quantiles, TopCounts, describe_columns

#: a quantile's rank may be off by the KLL sketch's error (~1.3% at k=200, 99% confidence)
RANK_TOLERANCE = 0.02


def assert_ranks(quantiles: list[float], values: np.ndarray, tolerance: float = RANK_TOLERANCE) -> None:
    """Each of the 101 quantiles lies at its rank among ``values`` (finite, sorted) within ``tolerance``."""
    stated = np.asarray(quantiles)
    assert stated.shape == (101,)
    below = np.searchsorted(values, stated, side="left") / values.size
    at_most = np.searchsorted(values, stated, side="right") / values.size
    # the rank a quantile stands for lies between the shares of values below it and at most it
    off = np.maximum(below - RANKS, RANKS - at_most)
    assert off.max() <= tolerance, (off.max(), int(off.argmax()))


def assert_quantiles_match(numeric: dict, values: np.ndarray, tolerance: float = RANK_TOLERANCE) -> None:
    """A Numeric of exactly ``values``: its counts and extremes exact, its quantiles within
    ``tolerance`` of their ranks."""
    values = np.sort(values[np.isfinite(values)])
    assert numeric["count"] == values.size
    assert numeric["min"] == pytest.approx(values[0])
    assert numeric["max"] == pytest.approx(values[-1])
    assert numeric["mean"] == pytest.approx(values.mean(), rel=1e-6, abs=1e-9)
    assert_ranks(numeric["quantiles"], values, tolerance)


def write_h5(path, data, label=None):
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data)
        if label is not None:
            file.create_dataset("label", data=label)
    return path


def valid_profile(profile: dict) -> dict:
    """``profile`` as JSON holds it, checked against the summary schema's form of it."""
    schema = json.loads(resources.files("scrub.schemas").joinpath("summary.schema.json").read_text())
    profile = json.loads(json.dumps(profile))
    jsonschema.validate(profile, {**schema["properties"]["profile"], "$defs": schema["$defs"]})
    return profile


def scanned_profile(path, **options) -> dict:
    result = scrub.scan(path, **options)
    assert result.summary.profile is not None
    valid_profile(result.summary.profile)
    record = json.loads(scan_record_path(result.manifest).read_text()) if result.manifest.exists() else None
    if record is not None:
        assert record["profile"] == json.loads(json.dumps(result.summary.profile))
    return result.summary.profile


# --------------------------------------------------------------------------------------------
# Arrays


def test_hdf5_rows_counts_exact_and_each_feature_within_the_sketch_error(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.normal(size=(3000, 40)).astype(np.float32)
    data[:, 3] = rng.exponential(size=3000)  # a skewed feature
    data[:100, 5] = 0.0
    data[7, 2] = np.nan
    data[8, 2] = np.inf
    labels = rng.integers(0, 3, 3000)
    path = write_h5(tmp_path / "rows.h5", data, labels)
    profile = scanned_profile(path)
    assert profile["version"] == 1 and profile["records"] == 3000 and profile["reused"] == 0
    assert profile["labels"]["kind"] == "class"
    assert profile["labels"]["classes"] == {str(c): int((labels == c).sum()) for c in range(3)}
    assert profile["labels"]["labelled"] == 3000 and profile["labels"]["missing"] == 0
    group = profile["arrays"]["40"]
    assert group["records"] == 3000 and group["dtypes"] == {"float32": 3000}
    assert group["positions"] == 40
    assert sorted(group["features"], key=int) == [str(i) for i in range(40)]  # narrow: every position
    for position in (0, 3, 31):
        assert_quantiles_match(group["features"][str(position)], data[:, position].astype(np.float64))
    assert group["features"]["5"]["zero"] == 100
    assert group["features"]["2"]["nan"] == 1 and group["features"]["2"]["inf"] == 1
    row = group["row"]
    assert row["nan"] == 1 and row["inf"] == 1
    assert_quantiles_match(row, data.reshape(-1).astype(np.float64))
    assert "images" not in profile and "tokens" not in profile


def test_numpy_rows_with_value_labels(tmp_path):
    rng = np.random.default_rng(2)
    data = rng.integers(0, 100, size=(1500, 3, 4)).astype(np.int16)
    path = tmp_path / "x.npy"
    np.save(path, data)
    targets = rng.normal(50, 10, 1500)
    np.save(tmp_path / "y.npy", targets)
    profile = scanned_profile(path, labels=tmp_path / "y.npy", label_kind="value")
    group = profile["arrays"]["3x4"]
    assert group["dtypes"] == {"int16": 1500} and group["positions"] == 12
    assert_quantiles_match(group["features"]["11"], data.reshape(1500, -1)[:, 11].astype(np.float64))
    assert group["row"]["zero"] == int((data == 0).sum())
    labels = profile["labels"]
    assert labels["kind"] == "value" and labels["labelled"] == 1500
    assert "classes" not in labels
    assert_quantiles_match(labels["values"], targets)


# --------------------------------------------------------------------------------------------
# Images


def _save(path, size, mode, fmt, seed):
    rng = np.random.default_rng(seed)
    width, height = size
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).convert(mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, fmt)
    return image


def test_image_folder_sizes_modes_formats_and_levels(tmp_path):
    root = tmp_path / "images"
    pngs = []
    for i in range(12):
        pngs.append(_save(root / "cat" / f"{i}.png", (20 + i, 30), "RGB", "PNG", i))
    for i in range(8):
        pngs.append(_save(root / "dog" / f"{i}.png", (16, 16 + 2 * i), "L", "PNG", 100 + i))
    for i in range(5):
        _save(root / "dog" / f"j{i}.jpg", (64, 48), "RGB", "JPEG", 200 + i)
    (root / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    profile = scanned_profile(root)
    assert profile["records"] == 26
    assert profile["labels"]["classes"] == {"0": 12, "1": 14}
    images = profile["images"]
    assert images["records"] == 25  # the broken one does not decode
    assert images["modes"] == {"L": 8, "RGB": 17}
    assert images["formats"] == {"JPEG": 5, "PNG": 20, "unrecognised": 1}
    widths = np.array([20 + i for i in range(12)] + [16] * 8 + [64] * 5, float)
    heights = np.array([30] * 12 + [16 + 2 * i for i in range(8)] + [48] * 5, float)
    assert_quantiles_match(images["width"], widths)
    assert_quantiles_match(images["height"], heights)
    # R, G, B from the RGB PNGs' full decode; L from the grayscale PNGs and every JPEG's 1/8 decode
    assert sorted(images["channels"]) == ["B", "G", "L", "R"]
    rgb_pixels = sum(image.width * image.height for image in pngs if image.mode == "RGB")
    gray_pixels = sum(image.width * image.height for image in pngs if image.mode == "L") + 5 * 8 * 6
    assert sum(images["channels"]["R"]) == rgb_pixels
    assert sum(images["channels"]["L"]) == gray_pixels
    expected_red = np.zeros(32, int)
    for image in pngs:
        if image.mode == "RGB":
            expected_red += np.bincount(np.asarray(image)[..., 0].reshape(-1) // 8, minlength=32)
    assert images["channels"]["R"] == expected_red.tolist()
    # brightness: each image's mean gray level, exact for the PNGs (Pillow's L conversion)
    brightness = [float(np.asarray(image.convert("L"), float).mean()) for image in pngs]
    assert images["brightness"]["count"] == 25
    assert min(brightness) >= images["brightness"]["min"] - 1e-9
    assert 0 <= images["contrast"]["min"] <= images["contrast"]["max"] <= 128


def test_a_large_folder_has_the_levels_of_a_sample_and_the_size_of_every_image(tmp_path, monkeypatch):
    """Above `IMAGES_SAMPLED` images, one in ``image_stride`` (by its index) gives its levels:
    brightness, contrast and channels count the sample, sizes count every image; the same
    sample however the folder is partitioned."""
    monkeypatch.setattr(collect, "IMAGES_SAMPLED", 4)  # 12 images: one in 3
    root = tmp_path / "images"
    saved = [_save(root / "cat" / f"{i:02}.png", (10 + i, 12), "L", "PNG", 400 + i) for i in range(12)]
    whole = scanned_profile(root, scheduler="sync")["images"]
    parted = scanned_profile(root, scheduler="sync", partition_size=5)["images"]
    assert whole["width"]["count"] == 12 and whole["brightness"]["count"] == 4  # indices 0, 3, 6, 9
    sample = saved[::3]
    assert sum(whole["channels"]["L"]) == sum(image.width * image.height for image in sample)
    expected = [float(np.asarray(image, np.float64).mean()) for image in sample]
    assert whole["brightness"]["min"] == pytest.approx(min(expected))
    assert whole["brightness"]["max"] == pytest.approx(max(expected))
    assert parted == whole


def test_a_constant_image_has_zero_contrast(tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    Image.new("RGB", (32, 32), (10, 200, 30)).save(root / "a.png")
    Image.new("L", (32, 32), 7).save(root / "b.jpg", quality=95)
    images = scanned_profile(root)["images"]
    assert images["contrast"]["max"] == pytest.approx(0.0, abs=1e-6)
    assert images["contrast"]["zero"] == 2


# --------------------------------------------------------------------------------------------
# The scan record, options, load_profile


def test_profile_in_the_scan_record_and_load_profile(tmp_path):
    path = write_h5(tmp_path / "a.h5", np.ones((50, 4), np.float32))
    result = scrub.scan(path, manifest=tmp_path / "a.scrub.jsonl")
    record = json.loads(scan_record_path(result.manifest).read_text())
    assert record["profile"]["records"] == 50
    assert load_profile(record) == record["profile"]
    assert load_profile(record, str(path)) == record["profile"]
    assert load_profile({"records": 3}) is None


def test_several_datasets_each_part_has_its_own_profile(tmp_path):
    first = write_h5(tmp_path / "a.h5", np.ones((30, 4), np.float32))
    second = write_h5(tmp_path / "b.h5", np.zeros((20, 2), np.float32))
    result = scrub.scan([first, second], manifest=tmp_path / "both.scrub.jsonl")
    record = json.loads(scan_record_path(result.manifest).read_text())
    assert "profile" not in record
    parts = {part["path"]: part for part in record["parts"]}
    assert {p["profile"]["records"] for p in parts.values()} == {30, 20}
    for part in record["parts"]:
        assert load_profile(record, part["path"]) == part["profile"]
        assert load_profile(record, part["absolute_path"]) == part["profile"]
    assert load_profile(record, str(tmp_path / "other.h5")) is None
    assert load_profile(record) is None  # two parts: which one must be said


def test_no_profile_leaves_it_out(tmp_path):
    path = write_h5(tmp_path / "a.h5", np.ones((10, 4), np.float32))
    result = scrub.scan(path, profile=False, manifest=tmp_path / "a.scrub.jsonl")
    assert result.summary.profile is None
    assert "profile" not in json.loads(scan_record_path(result.manifest).read_text())


def test_scan_record_size_does_not_grow_with_the_records(tmp_path):
    rng = np.random.default_rng(3)
    sizes = {}
    for count in (1000, 20000):
        path = write_h5(
            tmp_path / f"r{count}.h5",
            rng.normal(size=(count, 8)).astype(np.float32),
            rng.integers(0, 5, count),
        )
        result = scrub.scan(path, manifest=tmp_path / f"r{count}.scrub.jsonl")
        sizes[count] = len(json.dumps(json.loads(scan_record_path(result.manifest).read_text())["profile"]))
    assert sizes[20000] <= sizes[1000] * 1.1, sizes


# --------------------------------------------------------------------------------------------
# The sketches and the partition profile


def test_partition_profiles_pickle_and_merge_like_one():
    rng = np.random.default_rng(4)
    values = rng.normal(size=20000)
    whole, parts = Numeric(), [Numeric() for _ in range(4)]
    whole.add(values)
    for part, chunk in zip(parts, np.array_split(values, 4)):
        part.add(chunk)
    merged = Numeric()
    for part in parts:
        merged.merge(pickle.loads(pickle.dumps(part)))
    a, b = whole.to_dict(), merged.to_dict()
    assert {k: a[k] for k in ("count", "nan", "inf", "zero", "min", "max")} == {
        k: b[k] for k in ("count", "nan", "inf", "zero", "min", "max")
    }
    assert_quantiles_match(b, values)
    profile = PartitionProfile(records=5)
    profile.width.add_one(3.0)
    copy = pickle.loads(pickle.dumps(profile))
    assert finish_profile(copy) == finish_profile(profile)
    assert Quantiles.rank_error() < RANK_TOLERANCE


@pytest.mark.parametrize(
    "rows, dtype",
    [(1, "float32"), (3, "float32"), (100, "float32"), (999, "float64"), (8192, "float32")]
    + [(300, dtype) for dtype in ("int16", "uint8", "int64", "bool", "float16", "complex64")],
)
def test_columns_described_at_once_equal_one_numeric_each(rows, dtype):
    """A sample of at most `PENDING` rows is stated with a few calls for all its columns
    (`describe_columns`, sorted in their own dtype): what a Numeric given each column states,
    to the last bit."""
    rng = np.random.default_rng(rows)
    block = (rng.normal(size=(rows, 5)) * 50).astype(dtype)
    block[:, 3] = 0
    if rows > 2 and block.dtype.kind in "fc":
        block[0, 1], block[1, 2] = np.nan, -np.inf
    described = describe_columns(block, 4)
    assert len(described) == 4
    for column, stated in enumerate(described):
        alone = Numeric()
        alone.add(block[:, column])
        expected = alone.to_dict()
        assert stated["quantiles"] == expected["quantiles"]
        assert stated["mean"] == pytest.approx(expected["mean"])
        assert {k: v for k, v in stated.items() if k != "mean"} == {
            k: v for k, v in expected.items() if k != "mean"
        }


def test_jpeg_pixels_and_histograms_give_the_same_levels():
    """A JPEG's levels come as its 1/8 decode's pixels (moments from the stacked pixels, one
    histogram for the block), other formats' as histograms: the two paths agree."""
    from scrub.checks.imagedecode import ImageLevels

    rng = np.random.default_rng(12)
    decodes = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in [(6, 8)] * 5 + [(3, 4), (7, 7)]]
    as_pixels, as_histograms = PartitionProfile(), PartitionProfile()
    for pixels in decodes:
        as_pixels.add_image(64, 48, ImageLevels(pixels, None, None))
        gray = np.bincount(pixels.reshape(-1), minlength=256)
        as_histograms.add_image(64, 48, ImageLevels(None, gray, {"L": gray}))
    one, other = finish_profile(as_pixels)["images"], finish_profile(as_histograms)["images"]
    assert one["channels"] == other["channels"]
    for name in ("brightness", "contrast"):
        assert one[name]["count"] == other[name]["count"] == 7
        assert one[name]["quantiles"] == pytest.approx(other[name]["quantiles"], abs=1e-9)


def test_top_counts_exact_below_capacity_and_bounded_above():
    rng = np.random.default_rng(5)
    ids = rng.zipf(1.3, 200000) % 50000
    whole = TopCounts()
    whole.add(ids)
    merged = TopCounts()
    for chunk in np.array_split(ids, 7):
        part = TopCounts()
        part.add(chunk)
        merged.merge(pickle.loads(pickle.dumps(part)))
    counts = np.bincount(ids)
    expected = sorted(((int(c), -i) for i, c in enumerate(counts) if c), reverse=True)[:64]
    top = merged.top(64)
    assert [i for i, _ in top] == [-i for _, i in expected]
    for token, count in top:
        assert count <= counts[token] <= count + merged.dropped
    assert merged.max_id == int(ids.max())


# --------------------------------------------------------------------------------------------
# Partitioning does not change the profile


def _comparable(profile: dict) -> tuple[dict, list[tuple[str, dict]]]:
    """(the profile without its quantiles, each Numeric's quantiles by where it is)."""
    quantiles: list[tuple[str, dict]] = []

    def strip(node, where):
        if isinstance(node, dict):
            if "quantiles" in node:
                quantiles.append((where, node))
                return {
                    k: (round(v, 6) if k == "mean" and v is not None else v)
                    for k, v in node.items()
                    if k != "quantiles"
                }
            return {k: strip(v, f"{where}/{k}") for k, v in node.items()}
        return node

    return strip(profile, ""), quantiles


@pytest.mark.slow
def test_sharded_run_on_processes_equals_the_single_process_profile(tmp_path):
    rng = np.random.default_rng(6)
    data = rng.normal(size=(40000, 6)).astype(np.float32)  # 40,000 rows: sampled
    data[::97, 1] = np.nan
    path = write_h5(tmp_path / "big.h5", data, rng.integers(0, 4, 40000))
    single = scanned_profile(path, scheduler="sync")
    sharded = scanned_profile(path, scheduler="processes", partition_size=3001, workers=2)
    counts_single, quantiles_single = _comparable(single)
    counts_sharded, quantiles_sharded = _comparable(sharded)
    assert counts_sharded == counts_single  # every count exact, the same sample
    stride = math.ceil(40000 / ROWS_SAMPLED)
    assert stride > 1
    sampled = data[::stride].astype(np.float64)
    # a sampled row gives `row` one of its elements, at a position set by its index
    indices = np.arange(0, 40000, stride)
    pooled = sampled[np.arange(len(sampled)), (indices * 7919) % 6]
    expected = {f"/arrays/6/features/{i}": sampled[:, i] for i in range(6)} | {"/arrays/6/row": pooled}
    assert sorted(where for where, _ in quantiles_sharded) == sorted(expected)
    for (where, one), (_, other) in zip(quantiles_single, quantiles_sharded):
        assert_quantiles_match(one, expected[where].reshape(-1))  # each within the sketch's error
        assert_quantiles_match(other, expected[where].reshape(-1))


@pytest.mark.slow
def test_a_dask_distributed_run_merges_to_the_same_profile(tmp_path):
    distributed = pytest.importorskip("distributed")
    root = tmp_path / "images"
    for i in range(24):
        _save(
            root / ("a" if i % 3 else "b") / f"{i}.png",
            (10 + i, 12 + i % 5),
            "RGB" if i % 2 else "L",
            "PNG",
            i,
        )
    single = scanned_profile(root, scheduler="sync")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        clustered = scanned_profile(root, scheduler=cluster.scheduler_address, partition_size=5)
    counts_single, quantiles_single = _comparable(single)
    counts_clustered, quantiles_clustered = _comparable(clustered)
    assert counts_clustered == counts_single
    # 24 values: the sketches hold every one, and their quantiles are exact whatever the merge
    assert [q["quantiles"] for _, q in quantiles_clustered] == [q["quantiles"] for _, q in quantiles_single]


# --------------------------------------------------------------------------------------------
# scrub profile SCANRECORD


def test_scrub_profile_prints_each_section_for_people(tmp_path):
    from typer.testing import CliRunner

    from scrub.cli import app

    rng = np.random.default_rng(7)
    data = rng.normal(size=(400, 3)).astype(np.float32)
    path = write_h5(tmp_path / "rows.h5", data, rng.integers(0, 2, 400))
    result = scrub.scan(path, manifest=tmp_path / "rows.scrub.jsonl")
    record = scan_record_path(result.manifest)
    for given in (record, result.manifest):  # the record, or the manifest it lies beside
        done = CliRunner().invoke(app, ["profile", str(given)])
        assert done.exit_code == 0, done.output
        lines = done.output.splitlines()
        assert lines[0] == f"{path} (hdf5, file): 400 records"
        assert "labels (class): 400 labelled, 0 missing" in lines
        assert any(line.startswith("arrays 3: 400 rows (float32 400); every position") for line in lines)
        median = next(line for line in lines if line.strip().startswith("[1]")).split()
        assert median[1] == "400"
        assert float(median[5]) == pytest.approx(float(np.median(data[:, 1])), abs=0.05)  # p50


def test_scrub_profile_refuses_what_is_not_a_scan_record_in_one_line(tmp_path):
    from conftest import one_line_error

    path = write_h5(tmp_path / "a.h5", np.ones((5, 2), np.float32))
    result = scrub.scan(path, profile=False, manifest=tmp_path / "a.scrub.jsonl")
    assert "holds no profile" in one_line_error("profile", scan_record_path(result.manifest))
    (tmp_path / "other.json").write_text('{"a": 1}')
    for given, message in (
        (path, "not a scan record"),
        (tmp_path / "other.json", "not a scan record"),
        (tmp_path / "missing.scan.json", "no such file"),
        (tmp_path, "a folder"),
    ):
        with pytest.raises(ScrubError, match=message):
            profiles_in(given)


def test_no_profile_flag_and_config_key(tmp_path):
    from typer.testing import CliRunner

    from scrub.cli import app

    path = write_h5(tmp_path / "a.h5", np.ones((10, 4), np.float32))
    config = tmp_path / "scrub.toml"
    config.write_text("profile = false\n")
    runs = {
        "flag": ["--no-profile"],
        "config": ["--config", str(config)],
        "flag over config": ["--config", str(config), "--profile"],
    }
    held = {}
    for name, options in runs.items():
        manifest = tmp_path / f"{name.replace(' ', '-')}.scrub.jsonl"
        done = CliRunner().invoke(app, ["scan", str(path), "--manifest", str(manifest), "-q", *options])
        assert done.exit_code == 0, done.output
        held[name] = "profile" in json.loads(scan_record_path(manifest).read_text())
    assert held == {"flag": False, "config": False, "flag over config": True}


def test_brightness_and_contrast_of_each_png_are_its_grayscale_mean_and_spread(tmp_path):
    root = tmp_path / "pngs"
    images = [
        _save(root / f"{i}.png", (8 + i, 10), "RGB" if i % 2 else "L", "PNG", 300 + i) for i in range(15)
    ]
    profile = scanned_profile(root)["images"]
    grays = [np.asarray(image.convert("L"), np.float64) for image in images]
    for name, expected in (("brightness", [g.mean() for g in grays]), ("contrast", [g.std() for g in grays])):
        # the same numbers by another sum (a histogram's): equal to 9 decimals, and exact in rank
        # (every value is held: no sketch)
        stated = {**profile[name], "quantiles": np.round(profile[name]["quantiles"], 9)}
        assert_quantiles_match(stated, np.round(np.array(expected), 9), tolerance=0.0)
