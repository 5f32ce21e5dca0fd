"""inspect_image on real bytes: jpeginfo parity, truncation in every format, bombs, garbage."""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from scrub.checks.imagedecode import ImageFacts, inspect_image

PARITY = Path(__file__).resolve().parent / "data" / "jpeg_parity"
VERDICTS = json.loads((PARITY / "verdicts.json").read_text())


def pixels(width: int = 80, height: int = 64, seed: int = 0) -> np.ndarray:
    """Textured RGB pixels, so that compressed streams are not trivially short."""
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    ramp = np.linspace(0, 255, width, dtype=np.uint8)[None, :, None]
    return (noise // 2 + ramp // 2).astype(np.uint8)


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def rgb(seed: int = 0, width: int = 80, height: int = 64) -> Image.Image:
    return Image.fromarray(pixels(width, height, seed))


def frames(count: int = 3) -> list[Image.Image]:
    return [rgb(seed) for seed in range(count)]


def roundtrip(tmp_path: Path, name: str, data: bytes) -> bytes:
    """Bytes as read back from a file, as scrub's readers hand them over."""
    path = tmp_path / name
    path.write_bytes(data)
    return path.read_bytes()


# ---------------------------------------------------------------------------------------------
# Parity with jpeginfo -c


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_jpeg_verdict_equals_jpeginfo(name: str) -> None:
    facts = inspect_image((PARITY / name).read_bytes(), None)
    expected = VERDICTS[name]
    assert (facts.error is None) == expected["jpeginfo_ok"], (facts, expected)


def test_parity_corpus_has_both_verdicts_and_stays_small() -> None:
    oks = [v["jpeginfo_ok"] for v in VERDICTS.values()]
    assert len(oks) >= 50 and 10 <= sum(oks) <= len(oks) - 10
    assert sum(p.stat().st_size for p in PARITY.iterdir()) < 300_000


def test_libjpeg_warnings_come_through_word_for_word() -> None:
    """Where jpeginfo saw a recoverable warning, the message is libjpeg's own text."""
    warnings_only = ("Corrupt JPEG", "Premature")
    warned = [n for n, v in VERDICTS.items() if v["jpeginfo_message"].startswith(warnings_only)]
    assert warned
    for name in warned:
        assert inspect_image((PARITY / name).read_bytes(), None).error == VERDICTS[name]["jpeginfo_message"]


@pytest.mark.skipif(shutil.which("jpeginfo") is None, reason="jpeginfo not installed")
def test_parity_on_fresh_damage(tmp_path: Path) -> None:
    """Not only the frozen corpus: fresh bit flips and cuts, judged by the jpeginfo on this machine."""
    rng = np.random.default_rng(7)
    for i in range(40):
        data = bytearray(encode(rgb(i, 96, 96), "JPEG", quality=85, progressive=bool(i % 2)))
        if i % 4 == 3:
            data = data[: int(rng.integers(len(data) // 10, len(data)))]
        else:
            for _ in range(3):
                data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(data)
        out = subprocess.run(
            ["jpeginfo", "-c", "--csv", str(path)], capture_output=True, text=True, check=False
        ).stdout
        jpeginfo_ok = out.rstrip().split(",")[-2].strip('"') == "OK"
        assert (inspect_image(bytes(data), None).error is None) == jpeginfo_ok, (i, out)


# ---------------------------------------------------------------------------------------------
# Valid images are not flagged


VALID = {
    "jpeg-rgb": (lambda: encode(rgb(), "JPEG", quality=90), "JPEG", "RGB"),
    "jpeg-l": (lambda: encode(rgb().convert("L"), "JPEG"), "JPEG", "L"),
    "jpeg-cmyk": (lambda: encode(rgb().convert("CMYK"), "JPEG"), "JPEG", "CMYK"),
    "jpeg-progressive": (lambda: encode(rgb(), "JPEG", progressive=True), "JPEG", "RGB"),
    "jpeg-444-restart": (
        lambda: encode(rgb(), "JPEG", subsampling=0, restart_marker_blocks=1),
        "JPEG",
        "RGB",
    ),
    "jpeg-1x1": (lambda: encode(rgb(width=1, height=1), "JPEG"), "JPEG", "RGB"),
    "mpo": (lambda: encode(rgb(0), "MPO", save_all=True, append_images=[rgb(1)]), "MPO", "RGB"),
    "png-rgba": (lambda: encode(rgb().convert("RGBA"), "PNG"), "PNG", "RGBA"),
    "png-l": (lambda: encode(rgb().convert("L"), "PNG"), "PNG", "L"),
    "apng": (lambda: encode(rgb(0), "PNG", save_all=True, append_images=frames()[1:]), "PNG", "RGB"),
    "gif-p": (lambda: encode(rgb().convert("P"), "GIF"), "GIF", "P"),
    "gif-animated": (
        lambda: encode(
            rgb(0).convert("P"), "GIF", save_all=True, append_images=[f.convert("P") for f in frames()]
        ),
        "GIF",
        "P",
    ),
    "webp-lossy": (lambda: encode(rgb(), "WEBP", quality=80), "WEBP", "RGB"),
    "webp-animated": (
        lambda: encode(rgb(0), "WEBP", save_all=True, append_images=frames()[1:]),
        "WEBP",
        "RGB",
    ),
    "bmp": (lambda: encode(rgb(), "BMP"), "BMP", "RGB"),
    "tiff-lzw": (lambda: encode(rgb(), "TIFF", compression="tiff_lzw"), "TIFF", "RGB"),
    "tiff-pages": (lambda: encode(rgb(0), "TIFF", save_all=True, append_images=frames()[1:]), "TIFF", "RGB"),
}


@pytest.mark.parametrize("kind", sorted(VALID))
def test_valid_images_are_clean(kind: str, tmp_path: Path) -> None:
    make, fmt, mode = VALID[kind]
    data = roundtrip(tmp_path, kind, make())
    facts = inspect_image(data, None)
    expected_size = (1, 1) if kind == "jpeg-1x1" else (80, 64)
    assert facts == ImageFacts(fmt, mode, *expected_size, error=None, bomb=False)


def test_facts_are_frozen() -> None:
    facts = inspect_image(encode(rgb(), "PNG"), None)
    with pytest.raises(AttributeError):
        facts.error = "x"  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# Truncated and damaged images are flagged


TRUNCATABLE = [
    "jpeg-rgb",
    "jpeg-progressive",
    "png-rgba",
    "apng",
    "gif-p",
    "gif-animated",
    "webp-lossy",
    "webp-animated",
    "bmp",
    "tiff-lzw",
    "tiff-pages",
]


@pytest.mark.parametrize("kind", TRUNCATABLE)
@pytest.mark.parametrize("keep", [0.3, 0.8, 0.97])
def test_truncated_images_are_flagged(kind: str, keep: float, tmp_path: Path) -> None:
    data = VALID[kind][0]()
    facts = inspect_image(roundtrip(tmp_path, kind, data[: int(len(data) * keep)]), None)
    assert facts.error is not None and not facts.bomb


def test_truncated_last_frame_is_flagged_although_the_first_decodes() -> None:
    """A download cut short damages the last frame; the first frame alone would look fine."""
    gif = VALID["gif-animated"][0]()
    tiff = VALID["tiff-pages"][0]()
    for data in (gif[: len(gif) - 200], tiff[: len(tiff) - 4000]):
        first_frame = Image.open(io.BytesIO(data))
        first_frame.load()  # Pillow on its own: fine
        assert inspect_image(data, None).error is not None


def test_png_bit_flip_in_idat_is_caught_by_crc() -> None:
    data = bytearray(encode(rgb(), "PNG"))
    data[len(data) // 2] ^= 0x01
    assert "checksum" in inspect_image(bytes(data), None).error


def test_damaged_second_mpo_image_is_flagged() -> None:
    """jpeginfo reads only the first image of an MPO; the second is a whole JPEG of its own."""
    data = VALID["mpo"][0]()
    facts = inspect_image(data[:-300], None)  # the cut falls in the second image
    assert facts.format == "MPO" and facts.error == "MPO image 2: Premature end of JPEG file"


def test_mpo_index_pointing_past_the_end_is_ignored() -> None:
    """Some cameras index images they never stored; the first image is what loaders read."""
    data = VALID["mpo"][0]()
    first_only = data[: data.rfind(b"\xff\xd8\xff")]
    assert inspect_image(first_only, None) == ImageFacts("MPO", "RGB", 80, 64, None, False)


def test_jpeg_warning_is_damage_although_pillow_loads_it() -> None:
    data = bytearray(encode(rgb(), "JPEG", quality=90))
    data = data[:-2]  # no EOI: libjpeg warns "Premature end of JPEG file", Pillow pads quietly
    assert inspect_image(bytes(data), None).error == "Premature end of JPEG file"


# ---------------------------------------------------------------------------------------------
# JPEGs the fast path cannot take


def lossless_jpeg(image: np.ndarray) -> bytes:
    """A grayscale 8-bit lossless JPEG (SOF3, predictor 1): Pillow cannot write one."""
    height, width = image.shape
    ints = image.astype(np.int32)
    predicted = np.empty_like(ints)
    predicted[0, 0] = 128
    predicted[0, 1:] = ints[0, :-1]
    predicted[1:, 0] = ints[:-1, 0]
    predicted[1:, 1:] = ints[1:, :-1]
    bits, nbits, out = 0, 0, bytearray()

    def put(value: int, length: int) -> None:
        nonlocal bits, nbits
        bits, nbits = (bits << length) | value, nbits + length
        while nbits >= 8:
            nbits -= 8
            byte = (bits >> nbits) & 0xFF
            out.append(byte)
            if byte == 0xFF:
                out.append(0)

    for diff in (ints - predicted).ravel().tolist():
        size = abs(diff).bit_length()  # Huffman symbol = magnitude category; code = 4-bit symbol
        put(size, 4)
        if size:
            put(diff if diff > 0 else diff + (1 << size) - 1, size)
    if nbits:
        put((1 << (8 - nbits)) - 1, 8 - nbits)
    sof = struct.pack(">HBHHBBBB", 11, 8, height, width, 1, 1, 0x11, 0)
    dht = struct.pack(">HB", 2 + 1 + 16 + 9, 0x00) + bytes([0, 0, 0, 9] + [0] * 12) + bytes(range(9))
    sos = struct.pack(">HBBBBBB", 8, 1, 1, 0x00, 1, 0, 0)
    segments = [b"\xff\xd8", b"\xff\xc3", sof, b"\xff\xc4", dht, b"\xff\xda", sos, bytes(out), b"\xff\xd9"]
    return b"".join(segments)


def test_lossless_jpeg_is_decoded_unscaled_and_clean() -> None:
    """A scaled TurboJPEG decode of a lossless JPEG overflows its buffer: this would crash."""
    data = lossless_jpeg(pixels(96, 64)[..., 0])
    assert Image.open(io.BytesIO(data)).mode == "L"  # the hand-made stream is valid
    assert inspect_image(data, None) == ImageFacts("JPEG", "L", 96, 64, None, False)
    assert inspect_image(data[: len(data) // 2], None).error == "Premature end of JPEG file"


def test_sof_flipped_to_lossless_does_not_crash() -> None:
    data = bytearray(encode(rgb(), "JPEG", progressive=True))
    data[data.find(b"\xff\xc2") + 1] = 0xC3  # one bit: progressive SOF2 -> lossless SOF3
    assert inspect_image(bytes(data), None).error is not None


def test_12_bit_jpeg_is_reported_like_jpeginfo() -> None:
    data = bytearray(encode(rgb(), "JPEG"))
    sof = data.find(b"\xff\xc0")
    data[sof + 4] = 12  # precision byte
    facts = inspect_image(bytes(data), None)
    assert facts == ImageFacts("JPEG", None, 80, 64, "Unsupported JPEG data precision 12", False)


@pytest.mark.skipif(shutil.which("cjpeg") is None, reason="cjpeg (libjpeg-turbo-progs) not installed")
def test_sampling_factors_turbojpeg_refuses_fall_back_to_pillow(tmp_path: Path) -> None:
    source = tmp_path / "in.ppm"
    rgb().save(source)
    command = ["cjpeg", "-sample", "1x2,2x1,1x1", str(source)]
    data = subprocess.run(command, capture_output=True, check=True).stdout
    assert inspect_image(data, None) == ImageFacts("JPEG", "RGB", 80, 64, None, False)
    assert inspect_image(data[: len(data) // 2], None).error is not None


# ---------------------------------------------------------------------------------------------
# Decompression bombs


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF"])
def test_bomb_is_reported_from_the_header_without_decoding(fmt: str) -> None:
    data = encode(rgb(width=100, height=100).convert("P" if fmt == "GIF" else "RGB"), fmt)
    # Keep only the header: had the pixels been decoded, the missing data would be an error.
    # (Pillow cannot open a WebP whose RIFF container is cut, so that one stays whole.)
    header_only = data if fmt == "WEBP" else data[:60] if fmt in ("PNG", "BMP") else data[: len(data) // 3]
    facts = inspect_image(header_only, 5000)
    assert (facts.bomb, facts.error, facts.width, facts.height, facts.format) == (True, None, 100, 100, fmt)
    assert inspect_image(data, 10_000).bomb is False and inspect_image(data, 10_000).error is None


def with_jpeg_size(data: bytes, width: int, height: int) -> bytes:
    damaged = bytearray(data)
    sof = damaged.find(b"\xff\xc0")
    struct.pack_into(">HH", damaged, sof + 5, height, width)
    return bytes(damaged)


def test_default_limit_is_pillows_and_pillows_own_check_stays_out_of_the_way() -> None:
    small = encode(rgb(), "JPEG")
    huge = with_jpeg_size(small, 60000, 60000)  # 3.6e9 pixels: Image.open would raise
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a DecompressionBombWarning would fail the test
        facts = inspect_image(huge, None)
        assert (facts.bomb, facts.width, facts.height, facts.error) == (True, 60000, 60000, None)
        between = with_jpeg_size(small, 10000, 10000)  # 1e8: Pillow would warn; our limit allows it
        facts = inspect_image(between, 200_000_000)
    assert not facts.bomb and facts.error is not None  # decoded (at 1/8 scale) and found broken
    assert Image.MAX_IMAGE_PIXELS < 10000 * 10000 < 2 * Image.MAX_IMAGE_PIXELS


def test_bomb_frame_after_the_first_is_not_decoded() -> None:
    big_page = rgb(width=100, height=100)
    pages = encode(rgb(width=40, height=40), "TIFF", save_all=True, append_images=[big_page])
    facts = inspect_image(pages, 5000)
    assert (facts.bomb, facts.error, facts.width) == (True, None, 40)


# ---------------------------------------------------------------------------------------------
# Bad input never raises


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"garbage " * 50,
        bytes(range(256)) * 4,
        b"\xff\xd8",
        b"\xff\xd8\xff",
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00",
        b"\x89PNG\r\n\x1a\n",
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 30,
        b"GIF89a\x10\x00\x10\x00",
        b"RIFF\x10\x00\x00\x00WEBPVP8 ",
        b"BM" + b"\xff" * 60,
        b"II*\x00\x08\x00\x00\x00\xff\xff",
        b"MM\x00*" + b"\x00" * 12,
    ],
)
def test_garbage_gives_an_error_not_an_exception(data: bytes) -> None:
    facts = inspect_image(data, None)
    assert facts.error and not facts.bomb
    assert facts.format is None or facts.format in {"JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF"}


def test_empty_bytes() -> None:
    assert inspect_image(b"", None) == ImageFacts(None, None, None, None, "empty file", False)


def test_load_truncated_images_set_elsewhere_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(RuntimeError, match="LOAD_TRUNCATED_IMAGES"):
        inspect_image(encode(rgb(), "PNG"), None)
