"""Magnitude checks: the exact overflow limits of float16, float32 and float32 squares, the
training precision, the dataset-relative outlier, float images, on real files.

The limits are checked against what the casts themselves do (NumPy's float16/float32 casts and
float32 squaring), not against constants copied from the code.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import REPO, findings, write
from PIL import Image

import scrub
from scrub.errors import UsageError


def write_h5(path, data, label=None):
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data, chunks=(min(16, len(data)), *data.shape[1:]))
        if label is not None:
            file["label"] = label
    return path


def flagged(result, check: str) -> set[int]:
    return {int(i.key) for i in result.issues() if i.check == check}


def first_overflowing(cast, start: float) -> float:
    """The smallest float64 magnitude >= ``start`` that ``cast`` turns into Inf (bisection on
    the real cast)."""
    low, high = start, start * 4
    with np.errstate(over="ignore"):
        assert not np.isinf(cast(low)) and np.isinf(cast(high))
        for _ in range(200):
            middle = (low + high) / 2
            if middle in (low, high):
                break
            low, high = (low, middle) if np.isinf(cast(middle)) else (middle, high)
    return high


def test_the_limits_are_those_of_the_casts_themselves(tmp_path):
    f16 = first_overflowing(lambda v: np.float64(v).astype(np.float16), 60000.0)
    f32 = first_overflowing(lambda v: np.float64(v).astype(np.float32), 3e38)
    square = first_overflowing(lambda v: np.float64(v).astype(np.float32) ** 2, 1e19)
    data = np.ones((8, 4))
    data[1, 0], data[2, 0] = f16, np.nextafter(f16, 0)
    data[3, 0], data[4, 0] = f32, np.nextafter(f32, 0)
    data[5, 0], data[6, 0] = square, np.nextafter(square, 0)
    result = scrub.scan(write_h5(tmp_path / "d.h5", data))
    assert flagged(result, "float32-overflow") == {3}
    assert flagged(result, "square-overflow") == {4, 5}  # row 3 is Inf once cast: float32-overflow
    assert 1 in flagged(result, "fp16-overflow") and 2 not in flagged(result, "fp16-overflow")


def test_a_row_whose_squares_overflow_together(tmp_path):
    data = np.ones((6, 768), np.float32)
    data[1] = 1e18  # each square is 1e36, the row's sum 7.7e38: Inf in float32
    data[2] = 5e17  # sum of squares 1.9e38: still finite
    data[3, 0] = 2e19
    data[4, 0] = -2e19
    result = scrub.scan(write_h5(tmp_path / "d.h5", data))
    assert flagged(result, "square-overflow") == {1, 3, 4}
    with np.errstate(over="ignore"):  # the reference: float32's own sum of squares
        sums = np.einsum("ij,ij->i", data, data)
    assert set(np.flatnonzero(np.isinf(sums)).tolist()) == {1, 3, 4}
    issue = next(i for i in result.issues() if i.check == "square-overflow" and i.key == "1")
    assert issue.severity.value == "error" and issue.details["norm"] == pytest.approx(
        1e18 * np.sqrt(768), rel=1e-6
    )


def test_integers_and_float16_data(tmp_path):
    ints = np.full((4, 3), 7, np.int64)
    ints[1, 0] = 70000
    ints[2, 0] = -65520
    ints[3, 0] = 65519
    result = scrub.scan(write_h5(tmp_path / "i.h5", ints))
    assert flagged(result, "fp16-overflow") == {1, 2}
    assert not flagged(result, "float32-overflow") and not flagged(result, "square-overflow")
    halves = np.ones((3, 3), np.float16)
    halves[1, 1] = np.float16(65504)  # float16's largest: fine in float16 by definition
    assert not flagged(scrub.scan(write_h5(tmp_path / "h.h5", halves)), "fp16-overflow")


@pytest.mark.parametrize(
    ("precision", "severity"), [("float32", "warning"), ("float16", "error"), ("bfloat16", None)]
)
def test_the_training_precision_decides_fp16_overflow(tmp_path, precision, severity):
    data = np.ones((4, 3), np.float32)
    data[2, 1] = 7e4
    result = scrub.scan(write_h5(tmp_path / "d.h5", data), precision=precision)
    found = [i.severity.value for i in result.issues() if i.check == "fp16-overflow"]
    assert found == ([severity] if severity else [])
    assert result.summary.options["precision"] == precision
    assert result.exit_code("error") == (1 if severity == "error" else 0)


def test_an_unknown_precision_is_refused():
    with pytest.raises(UsageError, match="--precision: 'float8' is not one of float32, float16, bfloat16"):
        scrub.scan(REPO / "sample_data" / "hdf5" / "train.h5", precision="float8")


def test_fix_with_precision_float16_quarantines_what_overflows_there(tmp_path):
    data = np.ones((40, 3), np.float32)
    data[7, 0] = 7e4
    path = write_h5(tmp_path / "d.h5", data)
    plain = scrub.fix(path, out=tmp_path / "plain.h5")
    half = scrub.fix(path, out=tmp_path / "half.h5", precision="float16")
    assert (plain.report["kept"], half.report["kept"]) == (40, 39)
    manifest = tmp_path / "m.jsonl"
    scrub.scan(path, manifest=manifest)
    with pytest.raises(
        UsageError, match='--precision: .* was scanned with precision = "float32", not "float16"'
    ):
        scrub.fix(path, out=tmp_path / "again.h5", manifest=manifest, precision="float16")


# -- the dataset-relative outlier ------------------------------------------------------------


def test_a_row_orders_of_magnitude_above_the_rest_is_a_warning(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(2000, 32)).astype(np.float32)
    data[123, 4] = 1e6
    data[1500] *= 400  # large, but within the factor
    data[1600] = 0  # zero rows are not magnitudes
    result = scrub.scan(write_h5(tmp_path / "d.h5", data), partition_size=300)
    issues = [i for i in result.issues() if i.check == "magnitude-outlier"]
    assert [i.key for i in issues] == ["123"]
    details = issues[0].details
    median = float(np.median(np.abs(np.delete(data, [1600], axis=0)).max(axis=1)))
    assert details["median_max_abs"] == pytest.approx(median, rel=0.05)  # bins 9% wide
    assert details["factor"] == pytest.approx(1e6 / details["median_max_abs"])
    assert issues[0].severity.value == "warning" and result.summary.notes == []


def test_heavy_tailed_data_has_no_outliers(tmp_path):
    data = np.random.default_rng(1).lognormal(0, 2, (20000, 16))
    assert not flagged(scrub.scan(write_h5(tmp_path / "d.h5", data)), "magnitude-outlier")


def test_a_second_population_is_not_outliers_and_the_summary_says_so(tmp_path):
    data = np.random.default_rng(2).normal(size=(3000, 8))
    data[:60] *= 1e5  # 2% of the rows: a unit change, not outliers
    result = scrub.scan(write_h5(tmp_path / "d.h5", data))
    assert not flagged(result, "magnitude-outlier")
    (note,) = result.summary.notes
    assert note.startswith("magnitude-outlier: 60 of 3,000 rows") and "none flagged" in note


def test_outliers_in_lmdb_arrays(tmp_path):
    import lmdb

    environment = lmdb.open(str(tmp_path / "db"), map_size=1 << 24)
    rng = np.random.default_rng(3)
    with environment.begin(write=True) as transaction:
        for i in range(50):
            value = rng.normal(size=(2, 3))
            if i == 17:
                value[1, 1] = -5e5
            buffer = io.BytesIO()
            np.save(buffer, value)
            transaction.put(f"{i:03d}".encode(), buffer.getvalue())
    environment.close()
    result = scrub.scan(tmp_path / "db")
    assert findings(result) == {("017", "magnitude-outlier"), ("017", "fp16-overflow")}


# -- float images ----------------------------------------------------------------------------


def tiff(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, "TIFF")
    return buffer.getvalue()


def test_float_tiffs_are_looked_into(tmp_path):
    root = tmp_path / "depth"
    rng = np.random.default_rng(4)
    for i in range(6):
        write(root / f"{i}.tif", tiff(rng.uniform(0.5, 20, (16, 16)).astype(np.float32)))
    nan = rng.uniform(0.5, 20, (16, 16)).astype(np.float32)
    nan[3, 4] = np.nan
    write(root / "nan.tif", tiff(nan))
    write(root / "huge.tif", tiff(np.full((16, 16), 1e30, np.float32)))
    write(root / "fp16.tif", tiff(np.full((16, 16), 7e4, np.float32)))
    write(root / "zero.tif", tiff(np.zeros((16, 16), np.float32)))
    counts = np.full((16, 16), 1000, np.int32)
    counts[0, 0] = 100_000
    write(root / "counts.tif", tiff(counts))  # mode I: 32-bit integers
    result = scrub.scan(root, scheduler="sync")
    assert findings(result) == {
        ("nan.tif", "nonfinite-data"),
        ("huge.tif", "square-overflow"),
        ("huge.tif", "fp16-overflow"),
        ("huge.tif", "magnitude-outlier"),
        ("huge.tif", "constant-row"),  # 1e30 in every pixel: the rows' rule for float images
        ("fp16.tif", "fp16-overflow"),
        ("fp16.tif", "magnitude-outlier"),  # 7e4 where the rest is < 20
        ("fp16.tif", "constant-row"),
        ("zero.tif", "zero-norm"),
        ("counts.tif", "fp16-overflow"),
        ("counts.tif", "magnitude-outlier"),
        ("counts.tif", "shape-mismatch"),  # mode I among mode F images
    }
    assert result.exit_code("error") == 1
    stats = result.summary.datasets["pixels:F"]
    assert stats["nonfinite_values"] == 1 and stats["max"] == pytest.approx(1e30)
    assert result.summary.stats["modes"] == {"F": 10, "I": 1}


def test_eight_bit_images_are_not_numeric_rows(tmp_path):
    root = tmp_path / "rgb"
    for i in range(3):
        buffer = io.BytesIO()
        Image.new("RGB", (16 + i, 16)).save(buffer, "PNG")  # all black: no zero-norm row
        write(root / f"{i}.png", buffer.getvalue())
    result = scrub.scan(root, scheduler="sync")
    # judged as images (one colour: constant-image), not as numeric rows (zero-norm, constant-row)
    assert findings(result) == {(f"{i}.png", "constant-image") for i in range(3)}
    assert "pixels:RGB" not in result.summary.datasets


def test_the_cli_takes_precision_and_prints_notes(tmp_path):
    data = np.random.default_rng(5).normal(size=(500, 4))
    data[:10] *= 1e6
    data[300, 0] = 7e4
    path = write_h5(tmp_path / "d.h5", data)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrub",
            "scan",
            str(path),
            "--precision",
            "float16",
            "--manifest",
            str(tmp_path / "m.jsonl"),
            "--json",
            str(tmp_path / "s.json"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 1, done.stderr
    assert "note: magnitude-outlier: 11 of 500 rows" in done.stdout
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["options"]["precision"] == "float16" and len(summary["notes"]) == 1


@pytest.mark.parametrize("dtype", ["<f2", "<f4", "<f8", ">f4", "<i8", "<u2"])
@pytest.mark.parametrize("width", [1, 7, 64, 127, 128, 300])
def test_the_profile_matches_a_reference(dtype, width):
    """Each row's non-finite, all-zero and largest-magnitude verdicts against plain NumPy, on
    both paths (narrow rows by their bits, wide rows by their extremes)."""
    from scrub.checks.numeric import profile
    from scrub.records import Batch

    rng = np.random.default_rng(width)
    data = (rng.normal(size=(60, width)) * 100).astype(dtype)
    data[3] = 0
    if data.dtype.kind == "f":
        data[4] = -0.0
        data[5, -1] = np.nan
        data[6, 0], data[7, width // 2] = np.inf, -np.inf
        data[8, 0] = np.float32(np.nan) if dtype != "<f2" else np.nan
        data[9] = np.finfo(data.dtype).max
        data[10, 0] = -np.finfo(data.dtype).tiny / 4  # a subnormal
    found = profile(Batch("s", 0, 0, data))
    values = data.astype(np.float64)
    with np.errstate(invalid="ignore"):
        expected_nonfinite = np.flatnonzero(~np.isfinite(values).all(axis=1))
        magnitudes = np.abs(values).max(axis=1)
    assert found.nonfinite_rows.tolist() == expected_nonfinite.tolist()
    assert found.zero_rows.tolist() == np.flatnonzero(~values.any(axis=1)).tolist()
    finite = np.setdiff1d(np.arange(60), expected_nonfinite)
    assert found.magnitudes[finite].tolist() == magnitudes[finite].tolist()
    nan_rows = [r for r in expected_nonfinite if np.isnan(values[r]).any()]
    assert np.isnan(found.magnitudes[nan_rows]).all()
    assert found.low == np.nanmin(np.where(np.isfinite(values), values, np.nan))
    assert found.high == np.nanmax(np.where(np.isfinite(values), values, np.nan))


@pytest.mark.parametrize("dtype", ["<f2", "<f4", "<f8", ">f4", "<i4", "<u2"])
@pytest.mark.parametrize("width", [1, 64, 128, 1024])
def test_the_sum_behind_the_mean_matches_a_float64_sum(dtype, width):
    """The total of clean rows (einsum for native float32 and float64), against NumPy's float64
    sum: integers near their type's limit must not wrap, float16 must not lose its sum, and
    float32 values whose sum overflows float32 fall back to float64."""
    from scrub.checks.numeric import profile
    from scrub.records import Batch

    rng = np.random.default_rng(width)
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else np.finfo(dtype)
    data = rng.uniform(0.5, 1.0, size=(4096 // width + 3, width)) * min(float(info.max) / 2, 1e300)
    data = data.astype(dtype)
    found = profile(Batch("s", 0, 0, data))
    assert found.total == pytest.approx(float(data.sum(dtype=np.float64)), rel=1e-6)
    rows = (rng.normal(size=(50, width)) * 100).astype(dtype)
    found = profile(Batch("s", 0, 0, rows))
    assert found.total == pytest.approx(float(rows.sum(dtype=np.float64)), rel=1e-6, abs=1e-3)


def test_a_partition_sends_back_only_the_tails_of_its_magnitudes():
    """Millions of narrow rows must not travel to the driver one value each: common bins go
    back as counts, only rows of rare bins with their positions."""
    from scrub.scanning.runner import rare_only

    rng = np.random.default_rng(6)
    values = np.abs(rng.normal(size=200_000)) + 1
    values[[10, 20]] = [1e6, 3e7]
    offsets, kept, (bins, counts) = rare_only(np.arange(len(values)), values, "magnitude")
    assert counts.sum() == len(values) and len(kept) < 3000
    assert {10, 20} <= set(offsets.tolist()) and set(kept.tolist()) >= {1e6, 3e7}


def test_the_replay_keeps_the_values_of_float_images():
    from scrub.records import Record
    from scrub.replay import FeatureSpec, featurize_records

    huge = np.full((20, 20), 1e30, np.float32)
    records = [
        Record("d", "huge.tif", 0, tiff(huge), None, {"kind": "image"}),
        Record("d", "counts.tif", 1, tiff(np.full((8, 8), 70000, np.int32)), None, {"kind": "image"}),
    ]
    features = featurize_records(records, FeatureSpec.for_images())
    assert features.X.shape == (2, 768)
    assert np.all(features.X[0] == np.float32(1e30)) and np.all(features.X[1] == 70000)  # not clipped to 255


def test_a_selected_check_that_ran_on_no_record_is_said(tmp_path):
    """`--select nonfinite-data` on 8-bit images (a PNG among JPEGs, so the check can run on a
    float image, but none is one): no NaN can hide in them, and the scan says it looked at none."""
    from conftest import image_bytes

    root = tmp_path / "photos"
    write(root / "a.jpg", image_bytes(1))
    write(root / "b.png", image_bytes(2, fmt="PNG"))
    result = scrub.scan(root, select=["nonfinite-data"], scheduler="sync")
    assert result.summary.issues == 0
    assert "--select nonfinite-data: ran on no record: none of the 2 records holds numeric values " in (
        "\n".join(result.summary.notes)
    )
    write(root / "depth.tif", tiff(np.ones((8, 8), np.float32)))  # one float image: it ran
    rerun = scrub.scan(root, select=["nonfinite-data"], scheduler="sync")
    assert not any("ran on no record" in note for note in rerun.summary.notes)
