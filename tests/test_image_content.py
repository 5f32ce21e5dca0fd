"""Images and rows that break a normalization: `constant-image`, `tiny-image`,
`extreme-aspect-ratio`, `constant-row` (with `zero-norm`), and `--normalization per-record`,
which makes a constant record an error. Real files written into tmp_path, the real scan and fix."""

from __future__ import annotations

import io
from pathlib import Path

import h5py
import numpy as np
import pytest
import simplejpeg
from conftest import findings, one_line_error
from PIL import Image
from typer.testing import CliRunner

import scrub
from scrub.checks.imagedecode import inspect_image
from scrub.cli import app
from scrub.readers import numpy as npy_reader

runner = CliRunner()
#: the checks this file is about (a folder of grayscale and RGB images also has shape-mismatch)
OURS = {"constant-image", "tiny-image", "extreme-aspect-ratio", "constant-row", "zero-norm", "nonfinite-data"}


def ours(result) -> set[tuple[str, str]]:
    return {(key, check) for key, check in findings(result) if check in OURS}


def noise(width: int, height: int, seed: int, mode: str = "RGB") -> Image.Image:
    """An image of random pixels: nothing constant about it."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels).convert(mode)


def encoded(image: Image.Image, fmt: str, **save) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **save)
    return buffer.getvalue()


def checkerboard(size: int = 64) -> Image.Image:
    """Pixels of 100 and 156 alternating: every 8x8 block averages 128, so a 1/8-scale decode (one
    value per block) is constant while the image is not."""
    rows, columns = np.indices((size, size))
    return Image.fromarray(np.where((rows + columns) % 2, 156, 100).astype(np.uint8))


def image_folder(root: Path) -> Path:
    """Two classes of 32x32 images, grayscale and RGB, PNG and JPEG, with constant ones among them."""
    for folder in ("cat", "dog"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for number in range(3):
        noise(32, 32, number).save(root / "cat" / f"rgb{number}.png")
        noise(32, 32, 10 + number, "L").save(root / "dog" / f"gray{number}.jpg", quality=90)
    Image.new("L", (32, 32), 128).save(root / "cat" / "flat_gray.png")
    Image.new("RGB", (40, 24), (200, 30, 30)).save(root / "dog" / "flat_red.jpg", quality=75)  # 4:2:0
    Image.new("L", (37, 23), 7).save(root / "dog" / "flat_dark.jpg", quality=95)
    checkerboard().save(root / "cat" / "checkerboard.jpg", quality=95)
    return root


# -- constant-image ------------------------------------------------------------------------------


def test_constant_images_are_warned_of_with_their_colour(tmp_path):
    root = image_folder(tmp_path / "images")
    result = scrub.scan(root, scheduler="sync")
    assert ours(result) == {
        ("cat/flat_gray.png", "constant-image"),
        ("dog/flat_red.jpg", "constant-image"),
        ("dog/flat_dark.jpg", "constant-image"),
    }
    by_key = {issue.key: issue for issue in result.issues() if issue.check == "constant-image"}
    assert by_key["cat/flat_gray.png"].details == {"value": [128]}
    assert by_key["cat/flat_gray.png"].severity.value == "warning"
    assert "standard deviation is 0: per-image standardization" in by_key["cat/flat_gray.png"].message
    red = by_key["dog/flat_red.jpg"]
    # a JPEG of one colour decodes to exactly one colour (here 202, 30, 30: the codec's rounding)
    decoded = np.asarray(Image.open(root / "dog" / "flat_red.jpg").convert("RGB"))
    assert red.details == {"value": decoded[0, 0].tolist()} and (decoded == decoded[0, 0]).all()
    assert "per-channel standardization divides by zero" in red.message  # not gray: each channel


def test_a_constant_reduced_jpeg_is_not_taken_for_a_constant_image(tmp_path):
    """The verdict's 1/8-scale decode averages each 8x8 block: a checkerboard's is constant. Only
    the full decode may say an image is constant, and this one's is not."""
    data = encoded(checkerboard(), "JPEG", quality=95)
    reduced = simplejpeg.decode_jpeg(data, colorspace="GRAY", min_height=1, min_width=1, min_factor=8)
    assert reduced.min() == reduced.max()  # the case this test is about: the reduced decode is constant
    full = np.asarray(Image.open(io.BytesIO(data)))
    assert full.min() < full.max()
    assert inspect_image(data, None).constant is None
    flat = encoded(Image.new("L", (64, 64), 128), "JPEG", quality=95)
    assert inspect_image(flat, None).constant == (128,)


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: Image.new("RGB", (16, 16), (1, 2, 3)), (1, 2, 3)),
        (lambda: Image.new("1", (16, 16), 1), (255,)),
        (lambda: Image.new("CMYK", (16, 16), (10, 20, 30, 0)), (10, 20, 30, 0)),
        (lambda: noise(16, 16, 0), None),
        (lambda: noise(16, 16, 0, "L"), None),
    ],
    ids=["rgb", "bilevel", "cmyk", "noise", "noise-gray"],
)
@pytest.mark.parametrize("fmt", ["PNG", "TIFF", "BMP"])
def test_lossless_formats_give_their_exact_colour(make, expected, fmt):
    image = make()
    if fmt != "TIFF" and image.mode == "CMYK":
        pytest.skip(f"{fmt} holds no CMYK")
    assert inspect_image(encoded(image, fmt), None).constant == expected


def test_alpha_is_left_out_and_a_palette_image_is_judged_by_its_colours():
    """ImageFolder's loader converts to RGB: an image whose only variation is its alpha is one
    colour to it. A palette image with two indices of one colour is one colour; one with one
    index of one colour too."""
    pixels = np.zeros((16, 16, 4), np.uint8)
    pixels[..., :3] = (9, 9, 9)
    pixels[..., 3] = np.arange(16)  # alpha varies
    assert inspect_image(encoded(Image.fromarray(pixels, "RGBA"), "PNG"), None).constant == (9, 9, 9)
    palette = Image.new("P", (16, 16), 0)
    palette.putpalette([5, 6, 7] * 256)  # every index is the colour (5, 6, 7)
    palette.putpixel((3, 3), 9)  # another index, the same colour
    assert inspect_image(encoded(palette, "PNG"), None).constant == (5, 6, 7)
    palette.putpalette([5, 6, 7] * 9 + [200, 6, 7] + [5, 6, 7] * 246)  # index 9: another colour
    assert inspect_image(encoded(palette, "PNG"), None).constant is None
    assert inspect_image(encoded(palette, "GIF"), None).constant is None


def test_a_jpeg_whose_noise_left_one_pixel_different_is_not_constant():
    """Standardizing such an image divides by a small standard deviation, not by 0: finite."""
    image = Image.new("L", (64, 64), 100)
    image.putpixel((20, 30), 160)
    data = encoded(image, "JPEG", quality=95)
    decoded = np.asarray(Image.open(io.BytesIO(data)))
    assert decoded.min() < decoded.max()
    assert inspect_image(data, None).constant is None


def test_images_that_do_not_decode_make_no_claim():
    data = encoded(Image.new("RGB", (64, 64), (50, 50, 50)), "PNG")
    facts = inspect_image(data[: len(data) // 2], None)
    assert facts.error is not None and facts.constant is None


# -- tiny-image and extreme-aspect-ratio ---------------------------------------------------------


def test_tiny_and_extreme_aspect_ratio_images(tmp_path):
    root = tmp_path / "shapes" / "any"
    root.mkdir(parents=True)
    sizes = {
        "normal.png": (32, 32),
        "strip.png": (5, 300),  # tiny, and 60:1
        "pixel.png": (1, 1),  # tiny (and constant: one pixel)
        "banner.jpg": (2000, 20),  # 100:1, not tiny
        "edge10.png": (10, 10),  # a side of 10 is enough
        "nine.png": (9, 40),  # tiny
        "ten_to_one.png": (100, 10),  # exactly 10:1: not over it
        "over.png": (101, 10),
    }
    for number, (name, (width, height)) in enumerate(sizes.items()):
        noise(width, height, number).save(root / name)
    result = scrub.scan(root.parent, scheduler="sync")
    assert findings(result) == {
        ("any/strip.png", "tiny-image"),
        ("any/strip.png", "extreme-aspect-ratio"),
        ("any/pixel.png", "tiny-image"),
        ("any/pixel.png", "constant-image"),
        ("any/banner.jpg", "extreme-aspect-ratio"),
        ("any/nine.png", "tiny-image"),
        ("any/over.png", "extreme-aspect-ratio"),
    }
    by_check = {(issue.key, issue.check): issue for issue in result.issues()}
    tiny = by_check[("any/strip.png", "tiny-image")]
    assert tiny.severity.value == "error" and tiny.details == {"width": 5, "height": 300, "minimum": 10}
    wide = by_check[("any/banner.jpg", "extreme-aspect-ratio")]
    assert wide.severity.value == "warning" and wide.details["ratio"] == 100.0
    assert wide.message == "2000x20: aspect ratio 100:1, over 10:1 (--max-aspect-ratio)"
    relaxed = scrub.scan(root.parent, min_image_side=2, max_aspect_ratio=200, scheduler="sync")
    assert findings(relaxed) == {("any/pixel.png", "tiny-image"), ("any/pixel.png", "constant-image")}


@pytest.mark.slow  # two processes
def test_bad_values_are_one_line(tmp_path):
    root = image_folder(tmp_path / "images")
    assert "--min-image-side" in one_line_error("scan", root, "--min-image-side", "0")
    (tmp_path / "bad.toml").write_text('normalization = "per-image"\n')
    message = one_line_error("scan", root, "--config", tmp_path / "bad.toml")
    assert "bad.toml:1" in message and "normalization" in message


def test_the_options_are_checked_and_recorded(tmp_path):
    root = image_folder(tmp_path / "images")
    assert runner.invoke(app, ["scan", str(root), "--normalization", "per-image"]).exit_code == 2
    assert runner.invoke(app, ["scan", str(root), "--max-aspect-ratio", "0.5"]).exit_code == 2
    (tmp_path / "scrub.toml").write_text('normalization = "per-record"\nmax-aspect-ratio = 3.5\n')
    done = runner.invoke(
        app, ["scan", str(root), "--config", str(tmp_path / "scrub.toml"), "--json", str(tmp_path / "s.json")]
    )
    assert done.exit_code == 1, done.output  # constant images are errors now
    import json

    options = json.loads((tmp_path / "s.json").read_text())["options"]
    assert options["normalization"] == "per-record" and options["max_aspect_ratio"] == 3.5
    assert options["min_image_side"] == 10


# -- constant-row and zero-norm ------------------------------------------------------------------


def rows_with_constants(width: int = 16) -> np.ndarray:
    data = np.random.default_rng(0).normal(size=(12, width)).astype(np.float32)
    data[2] = 0.5  # constant-row
    data[3] = 0.0  # zero-norm
    data[4] = -3.0  # constant-row
    data[5, :] = data[5, 0]
    data[5, -1] = -data[5, 0]  # the same magnitude, another sign: not constant
    data[6] = np.inf  # nonfinite-data only
    data[7] = 2.0
    data[7, 3] = np.nan  # nonfinite-data only
    data[8] = 1.0
    data[8, width // 2] = 1.0000001  # one ulp away: not constant
    return data


def test_constant_rows_of_an_hdf5_file(tmp_path):
    path = tmp_path / "features.h5"
    with h5py.File(path, "w") as file:
        file["data"] = rows_with_constants()
    result = scrub.scan(path, scheduler="sync")
    assert findings(result) == {
        ("2", "constant-row"),
        ("3", "zero-norm"),
        ("4", "constant-row"),
        ("6", "nonfinite-data"),
        ("7", "nonfinite-data"),
    }
    by_key = {(issue.key, issue.check): issue for issue in result.issues()}
    assert by_key[("2", "constant-row")].message == "all 16 values are 0.5"
    assert by_key[("4", "constant-row")].details == {"value": -3.0}
    assert by_key[("2", "constant-row")].severity.value == "warning"


@pytest.mark.parametrize("dtype", ["float16", "float64", "int32", "uint8", ">f4"])
def test_constant_rows_of_any_dtype(tmp_path, dtype):
    data = np.arange(6 * 300).reshape(6, 300) % 251
    data[1] = 7
    data[4] = 0
    path = tmp_path / "x.npy"
    np.save(path, data.astype(dtype))
    assert findings(scrub.scan(path, scheduler="sync")) == {("1", "constant-row"), ("4", "zero-norm")}


def test_rows_of_one_value_have_no_spread_to_judge(tmp_path):
    path = tmp_path / "column.npy"
    np.save(path, np.array([[3.0], [4.0], [0.0]], np.float32))
    assert findings(scrub.scan(path, scheduler="sync")) == {("2", "zero-norm")}


def test_rows_read_in_pieces_are_judged_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(npy_reader, "BLOCK_BYTES", 4096)
    data = (np.arange(4 * 16**3) % 5 + 1).astype(np.float32).reshape(4, 16, 16, 16)  # 16 KiB rows: 4 pieces
    data[1] = 2.5
    data[2] = 2.5
    data[2, 15, 15, 15] = 2.75  # the last piece differs
    data[3] = 0
    path = tmp_path / "volumes.npy"
    np.save(path, data)
    result = scrub.scan(path, scheduler="sync")
    assert findings(result) == {("1", "constant-row"), ("3", "zero-norm")}


def test_float_images_follow_the_rows_rule(tmp_path):
    root = tmp_path / "depth" / "all"
    root.mkdir(parents=True)
    for number in range(3):
        pixels = np.random.default_rng(number).uniform(1, 5, (16, 16)).astype(np.float32)
        Image.fromarray(pixels).save(root / f"{number}.tif")
    Image.fromarray(np.full((16, 16), 2.5, np.float32)).save(root / "flat.tif")
    Image.fromarray(np.zeros((16, 16), np.float32)).save(root / "zero.tif")
    result = scrub.scan(root.parent, scheduler="sync")
    assert findings(result) == {("all/flat.tif", "constant-row"), ("all/zero.tif", "zero-norm")}


# -- --normalization per-record ----------------------------------------------------------------


def test_per_record_normalization_makes_constant_records_errors(tmp_path):
    root = image_folder(tmp_path / "images")
    result = scrub.scan(root, normalization="per-record", scheduler="sync")
    constant = [issue for issue in result.issues() if issue.check in OURS]
    severities = {(issue.key, issue.check): issue.severity.value for issue in constant}
    assert severities == {
        ("cat/flat_gray.png", "constant-image"): "error",
        ("dog/flat_red.jpg", "constant-image"): "error",
        ("dog/flat_dark.jpg", "constant-image"): "error",
    }
    assert all(issue.message.endswith("(--normalization per-record)") for issue in constant)
    path = tmp_path / "features.h5"
    with h5py.File(path, "w") as file:
        file["data"] = rows_with_constants()
    rows = scrub.scan(path, normalization="per-record", scheduler="sync")
    severities = {(issue.key, issue.check): issue.severity.value for issue in rows.issues()}
    assert severities == {
        ("2", "constant-row"): "error",
        ("3", "zero-norm"): "error",  # all zero is constant too: 0/0 under per-row standardization
        ("4", "constant-row"): "error",
        ("6", "nonfinite-data"): "error",
        ("7", "nonfinite-data"): "error",
    }
    # --check-severity still has the last word
    kept = scrub.scan(
        path, normalization="per-record", check_severity=["constant-row=warning"], scheduler="sync"
    )
    assert {i.key: i.severity.value for i in kept.issues() if i.check == "constant-row"} == {
        "2": "warning",
        "4": "warning",
    }


def test_fix_quarantines_what_per_record_normalization_cannot_take(tmp_path):
    root = image_folder(tmp_path / "images")
    plain = scrub.fix(root, out=tmp_path / "plain.clean", scheduler="sync")
    assert plain.verified and plain.report["quarantined"] == 0  # warnings: kept
    done = runner.invoke(
        app,
        ["fix", str(root), "--normalization", "per-record", "--quarantine", "--out", str(tmp_path / "clean")],
    )
    assert done.exit_code == 0, done.output
    clean = tmp_path / "clean"
    (quarantine,) = tmp_path.glob("*.quarantine")
    kept = sorted(str(p.relative_to(clean)) for p in clean.rglob("*.*"))
    assert "cat/flat_gray.png" not in kept and "dog/flat_red.jpg" not in kept and len(kept) == 7
    held = sorted(
        str(p.relative_to(quarantine)) for p in quarantine.rglob("*.*") if p.suffix in (".png", ".jpg")
    )
    assert held == ["images/cat/flat_gray.png", "images/dog/flat_dark.jpg", "images/dog/flat_red.jpg"]
    path = tmp_path / "features.h5"
    with h5py.File(path, "w") as file:
        file["data"] = rows_with_constants()
    fixed = scrub.fix(path, normalization="per-record", out=tmp_path / "features.clean.h5", scheduler="sync")
    assert fixed.verified and fixed.report["quarantined"] == 5 and fixed.report["kept"] == 7
    with h5py.File(fixed.clean) as file:
        left = file["data"][:]
    assert not any((row == row[0]).all() for row in left)


@pytest.mark.slow  # imports torch
@pytest.mark.torch
def test_per_image_standardization_is_finite_on_what_fix_kept(tmp_path):
    torch = pytest.importorskip("torch")

    def standardized(path: Path):
        pixels = torch.from_numpy(np.asarray(Image.open(path).convert("RGB"), dtype=np.float32))
        return (pixels - pixels.mean()) / pixels.std()

    root = image_folder(tmp_path / "images")
    assert torch.isnan(standardized(root / "cat" / "flat_gray.png")).all()  # the guard's own example
    Image.fromarray(np.full((16, 16), 2.5, np.float32)).save(tmp_path / "flat.tif")  # constant-row's claim
    depth = torch.from_numpy(np.array(Image.open(tmp_path / "flat.tif"), dtype=np.float32))
    assert torch.isnan((depth - depth.mean()) / depth.std()).all()
    assert not torch.isfinite(standardized(root / "dog" / "flat_dark.jpg")).any()
    fixed = scrub.fix(root, normalization="per-record", out=tmp_path / "clean", scheduler="sync")
    assert fixed.verified and fixed.report["quarantined"] == 3
    kept = sorted(fixed.clean.rglob("*.*"))
    assert len(kept) == 7 and all(torch.isfinite(standardized(path)).all() for path in kept)
