"""Does an encoded image decode cleanly from its first byte to its last?

`inspect_image` answers from bytes in memory, with no other I/O. Its verdict (`ImageFacts.error`)
is None only when the decoder consumed the whole compressed stream without a single complaint;
for JPEG it is built to agree with ``jpeginfo -c``, which counts libjpeg's recoverable warnings
("Corrupt JPEG data: ...", "Premature end of JPEG file") as damage.

JPEG (and MPO)
    simplejpeg (libjpeg-turbo 3.x, TurboJPEG API) with ``strict=True`` (stop on the first libjpeg
    warning), grayscale output at 1/8 DCT scale, like jpeginfo (which also asks libjpeg for
    grayscale at 1/8 scale). Reduced-scale decoding still Huffman/arithmetic-decodes every
    entropy-coded byte, so it finds exactly what a full decode finds; it releases the GIL, and
    it is faster on one core than Pillow's full ``load()`` (see docs/benchmarks.md, "Design
    measurements"). Pillow's ``load()`` is not good enough here: it discards libjpeg's
    warnings, so a bit flip that desynchronises the Huffman stream passes as clean. Fallbacks,
    each for a valid file that the fast path cannot take:

    * Lossless JPEG (SOF3/SOF11): TurboJPEG ignores the scaling factor for lossless images but
      sizes its output buffer for it, so a scaled decode writes past the end of the heap buffer
      (measured: glibc aborts with "munmap_chunk(): invalid pointer" or "corrupted double-linked
      list", or memory is silently damaged). The SOF marker is therefore read first (the same
      marker walk as libjpeg's) and lossless, or any stream whose SOF cannot be found, is
      decoded at full scale. Still strict, still every byte.
    * "Unsupported color conversion request": lossless JPEGs cannot be colour-converted at all
      (an RGB lossless image cannot become GRAY), so RGB then CMYK output is tried; that error
      is raised before any entropy data is read, so retrying costs nothing. CMYK/YCCK lossy
      JPEGs do not need this: simplejpeg decodes them as CMYK internally whatever is asked.
    * "tjDecompressHeader3(): Could not determine subsampling level" (or colorspace): TurboJPEG
      refuses valid JPEGs with unusual sampling factors (e.g. 4:2:0 with h1v2/h2v1 chroma, 3x1,
      4x2) that libjpeg decodes. These go to Pillow (its own libjpeg-turbo) with ``draft`` at
      1/8 scale: every entropy-coded byte is still decoded and fatal errors and truncation are
      caught, but Pillow drops libjpeg's warnings, so a bit flip in such a file may pass.
    * 12- and 16-bit JPEGs: neither simplejpeg's nor Pillow's libjpeg will decode them (Pillow
      cannot even identify them). There is no fallback; the verdict is libjpeg's error
      "Unsupported JPEG data precision 12", as with jpeginfo, with format 'JPEG', the size from
      the SOF marker, and mode None.
    * MPO (stereo pairs, and phone/camera JPEGs whose MPF index points at a preview image):
      every image of the index is verified the same way, since each is a complete JPEG
      (jpeginfo checks only the first). EXIF thumbnails are not verified (neither jpeginfo nor
      training loaders read them).

    Deliberate differences from jpeginfo 1.7 (Debian's, libjpeg-turbo 2.1.5): jpeginfo reports
    ERROR for valid CMYK/YCCK JPEGs ("Unsupported color conversion request", since it asks
    for grayscale output) and for valid 8-bit lossless JPEGs ("Unsupported JPEG process: SOF
    type 0xc3"); both are clean here.

    What comes out, measured on 2,400 JPEGs (256x256 crops of scikit-image's photos, baseline,
    progressive, 4:4:4, grayscale and optimised; 1,800 with 5 random bit flips anywhere in the
    file, 600 cut short): the verdict equals jpeginfo's for all 2,400, and the message is
    jpeginfo's word for word for 2,319. jpeginfo status, its message, ``error`` here, count:

    ========  ===============================================  ===============================  =====
    jpeginfo  jpeginfo's message (libjpeg's)                   ``error``                        count
    ========  ===============================================  ===============================  =====
    OK        (none)                                           None                               580
    WARNING   Corrupt JPEG data: N extraneous bytes before     the same                           602
              marker 0xXX
    WARNING   Premature end of JPEG file                       the same                           597
    WARNING   Corrupt JPEG data: premature end of data         the same                           387
              segment
    WARNING   Corrupt JPEG data: bad Huffman code              the same                            71
    WARNING   Warning: unknown JFIF revision number X.Y        the same                             3
    WARNING   Invalid SOS parameters for sequential JPEG       the same                             1
    ERROR     Unsupported marker type 0xXX                     the same: 48                        52
    ERROR     Bogus Huffman table definition, Bogus marker     the same: 30                       107
              length, Huffman/Quantization table 0xXX was not
              defined, Invalid component ID N in SOS, Bogus
              DHT/DQT index, Invalid JPEG file structure: ...
              (SOS before SOF, two SOF markers, missing SOS),
              Unsupported JPEG process: SOF type 0xXX,
              Invalid progressive parameters ..., Fractional
              sampling not implemented yet, JPEG datastream
              contains no image, Not a JPEG file
    ========  ===============================================  ===============================  =====

    Every WARNING and ERROR is damage: whether libjpeg recovers does not matter to a loader (it
    pads what it cannot decode with grey, or the loader raises). Where the message differs, the
    verdict still agrees: 76 header errors carry Pillow's wording ("broken data stream when
    reading image file", "cannot identify image file (JPEG: ...)"), because TurboJPEG's header
    reader reports any libjpeg error in the header as "Could not determine subsampling level" and
    so sends the file to the Pillow fallback; in 3 a warning came before the fatal error (strict
    mode stops at the first message, jpeginfo reports the last); 2 are libjpeg-turbo 3's wording
    "Invalid progressive/lossless parameters". Pillow's own ``load()`` flags only 156 of the 1,220
    damaged bit-flipped files (and all 600 cut ones).

    Other kinds of JPEG, 60 files each (one clean, the rest with 5 bit flips or, every 4th, cut
    short; made by cjpeg or Pillow): arithmetic-coded, arithmetic progressive, restart markers,
    4:1:1, 4:4:0, EXIF, ICC profile and RGB (Adobe, untransformed) agree with jpeginfo 60/60;
    CMYK agrees 60/60 with ``jpegtran`` (jpeginfo errors on every CMYK file, clean or not);
    unusual sampling factors (the Pillow fallback) agree 41/60: Pillow catches truncation and
    fatal errors, but the 19 files whose only damage was a libjpeg warning pass.

Other formats (PNG, GIF, WebP, BMP, TIFF, ... anything Pillow opens)
    Pillow's full ``load()`` of every frame: a damaged or truncated later frame of an animated
    GIF/PNG/WebP or a multi-page TIFF is still damage (a truncated download cuts the *last*
    frame, so checking only the first would pass it). PNG is also ``verify()``-ed first, which
    checks the CRC of every chunk and the presence of IEND: ``load()`` alone accepts a bit flip
    in IDAT data whenever the zlib stream stays valid. Pillow's truncation errors ("image file is
    truncated", "could not create decoder object" for WebP, "Missing dimensions"/"cannot
    identify" for TIFFs whose strips lie beyond the end) are damage. This relies on
    ``ImageFile.LOAD_TRUNCATED_IMAGES`` being False, Pillow's default; it is never changed here,
    and `inspect_image` raises RuntimeError if someone else in the process set it. Uncompressed
    data (BMP, raw TIFF), LZW (GIF) and VP8 (lossy WebP) carry no checksum, so a bit flip there
    decodes to wrong pixels without any error: no decoder can tell.

Constant images (`ImageFacts.constant`)
    Whether every pixel of the first frame (what a loader reads) has the same colour comes from
    the pixels the verdict decoded, never from a decode of its own: Pillow formats from the
    loaded frame, JPEGs from the 1/8-scale grayscale decode. That reduced image is a block
    average of the luminance, so a constant one proves nothing: only then (a rare event) is the
    JPEG decoded at full size by Pillow, as loaders decode it, and called constant when every
    pixel of that decode is. A JPEG whose full RGB decode is constant although its luminance
    varies (possible only where the colour conversion clips, e.g. a saturated red) is missed.

Decompression bombs
    The size comes from the header only; Pillow's own bomb check (a warning above
    ``Image.MAX_IMAGE_PIXELS``, an error above twice that) is bypassed by opening through
    Pillow's plugin registry, so only ``max_pixels`` decides and no global is touched. Each frame
    of a multi-frame image is checked before it is decoded.
"""

from __future__ import annotations

import io
import re
import struct
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import simplejpeg
from PIL import Image, ImageFile

from scrub.checks.perceptual import SIDE as PHASH_SIDE
from scrub.checks.perceptual import reduced

__all__ = ["ImageFacts", "inspect_image", "uniform_colour"]


@dataclass(frozen=True)
class ImageFacts:
    """What the header says and whether the whole compressed stream decoded cleanly."""

    format: str | None  # Pillow's format name ('JPEG', 'MPO', 'PNG', ...), None if unrecognised
    mode: str | None  # Pillow's mode ('RGB', 'L', 'CMYK', 'P', ...), None if unknown
    width: int | None
    height: int | None
    error: str | None  # None: decoded cleanly (or a bomb, never decoded); else the decoder's message
    bomb: bool = False  # width * height > max_pixels: pixel data was not decoded
    #: the first frame's pixels, for images whose values are numbers rather than 8-bit levels
    #: (modes F, I, I;16: depth maps, remote sensing, microscopy), which the numeric checks judge
    pixels: Any = field(default=None, compare=False, repr=False)
    #: the levels of the decode that judged it (8-bit images that decode cleanly), for the
    #: dataset's profile (`scrub.profile`): no second decode
    levels: "ImageLevels | None" = field(default=None, compare=False, repr=False)
    #: the colour of every pixel of the first frame when they are all the same (one value per
    #: band, alpha left out; a palette image's colour, not its index), found from the decode
    #: that judged it (`uniform_colour`); None when two pixels differ, for images whose pixels
    #: are numbers (`pixels`: the numeric checks judge those), and for images not decoded
    constant: tuple[int, ...] | None = field(default=None, compare=False)
    #: the first frame's 32 x 32 grayscale that its perceptual hash is made of
    #: (`scrub.checks.perceptual.reduced`), from the decode that judged it, when asked (a split
    #: check compares images by their hashes, made a partition at a time); None when not asked,
    #: for an image not decoded, and for images whose pixels are numbers
    reduced: Any = field(default=None, compare=False, repr=False)


class ImageLevels(NamedTuple):
    """An 8-bit image's pixel levels as its decode gave them. A JPEG's are the pixels of the
    grayscale 1/8-scale decode its verdict comes from (``pixels``: its one band is ``L``, the
    histograms are made per block of images, by `scrub.profile`); another format's, 256-level
    histograms of each band of its first frame and of its grayscale (Pillow's ``L``)."""

    pixels: Any  # the grayscale pixels (uint8), or None
    gray: Any  # np.ndarray of 256 pixel counts, or None (``pixels`` given)
    bands: dict[str, Any] | None  # band name ("R", "G", "B", "A", "L") -> 256 pixel counts


#: Pillow modes whose pixels are values a loader passes on unscaled: 32-bit float, 32-bit and
#: 16-bit integers (`ToTensor` divides only 8-bit images by 255).
NUMERIC_MODES = frozenset({"F", "I", "I;16", "I;16L", "I;16B", "I;16N"})


def inspect_image(
    data: bytes, max_pixels: int | None, levels: bool = False, perceptual: bool = False
) -> ImageFacts:
    """Identify `data` and decode all of it; `max_pixels` None means ``Image.MAX_IMAGE_PIXELS``;
    with `levels`, keep the decode's pixel levels (`ImageLevels`) for the dataset's profile; with
    `perceptual`, what its perceptual hash is made of (`ImageFacts.reduced`).

    Never raises for bad input (empty, garbage, truncated, hostile headers): every failure is
    reported in `ImageFacts.error`.
    """
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        # A silent pass for every truncated PNG/GIF/TIFF would be worse than failing loudly.
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is set: truncated images would pass")
    limit = Image.MAX_IMAGE_PIXELS if max_pixels is None else max_pixels
    if not data:
        return ImageFacts(None, None, None, None, "empty file")
    if data[:2] == _SOI:
        return _inspect_jpeg(data, limit, levels, perceptual)
    return _inspect_other(data, limit, levels, perceptual)


# --------------------------------------------------------------------------------------------
# Opening with Pillow, without its global decompression-bomb limit


def _open(data: bytes, formats: tuple[str, ...] | None = None) -> tuple[Image.Image | None, str | None]:
    """``Image.open`` minus its bomb check: the image, or None and why it could not be opened.

    Image.open would warn above Image.MAX_IMAGE_PIXELS and raise above twice that, before we can
    read the size; lowering or raising that module global to avoid it would race with other
    threads. So this walks the same plugin registry, in the same order, as Image.open does
    (`formats` restricts it, like Image.open's argument of that name).
    """
    Image.preinit()
    Image.init()
    prefix = data[:16]
    failures: list[str] = []
    for name in Image.ID if formats is None else formats:
        factory, accept = Image.OPEN[name]
        try:
            accepted = accept is None or accept(prefix)
        except Exception:
            continue
        if not accepted or isinstance(accepted, str):
            continue
        try:
            return factory(io.BytesIO(data), ""), None
        except Exception as exc:
            if accept is not None:  # plugins without a magic-number test fail on every input
                failures.append(f"{name}: {_message(exc)}")
    detail = f" ({'; '.join(failures)})" if failures else ""
    return None, f"cannot identify image file{detail}"


def _message(exc: BaseException) -> str:
    """The exception's own text; its type name when it has none (EOFError(), struct.error)."""
    return str(exc) or type(exc).__name__


def _exceeds(width: int, height: int, limit: int | None) -> bool:
    return limit is not None and width * height > limit


# --------------------------------------------------------------------------------------------
# JPEG

_SOI = b"\xff\xd8"
_JPEG_FORMATS = ("JPEG",)  # its factory returns MPO images too
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # not DHT, JPG, DAC
_LOSSLESS_SOF = frozenset({0xC3, 0xC7, 0xCB, 0xCF})
_NO_LENGTH = frozenset(range(0xD0, 0xD8)) | {0x01}  # RSTn, TEM
_HEADER_END = frozenset({0xD8, 0xD9, 0xDA})  # SOI again, EOI, SOS before any SOF: libjpeg errors
_SCALED = {"min_height": 1, "min_width": 1, "min_factor": 8}
_NO_CONVERSION = "Unsupported color conversion request"
_TURBOJPEG_LIMITS = ("tjDecompressHeader3(): Could not determine",)
_COLORSPACES = ("GRAY", "RGB", "CMYK")
_NO_SOF = "no readable SOF marker in the JPEG header"
_MPF_SEGMENT = re.compile(rb"\xff\xe2..MPF\x00", re.DOTALL)  # APP2, length, MP Format identifier


class _Sof(NamedTuple):  # a tuple: a frozen dataclass is slower to build, once per JPEG
    marker: int
    precision: int
    width: int
    height: int
    components: int
    offset: int  # where the SOF segment starts: everything before it is the header


def _find_sof(data: bytes) -> _Sof | None:
    """The first SOF marker, found the way libjpeg's read_markers finds it, or None.

    Mirrors jdmarker.c: SOI first, then skip non-0xFF garbage, fill bytes and stuffed zeros
    before each marker, and skip every other segment by its length (libjpeg either consumes
    exactly that length or stops with an error, so both walks meet the same SOF).
    """
    if data[:2] != _SOI:
        return None
    pos, end = 2, len(data)
    marker: int | None
    while True:
        if pos + 1 < end and data[pos] == 0xFF and 0 < data[pos + 1] < 0xFF:
            marker, pos = data[pos + 1], pos + 2  # a marker right where the segment ended: most files
        else:
            marker, pos = _next_marker(data, pos)
        if marker is None or marker in _HEADER_END:
            return None
        if marker in _SOF_MARKERS:
            if pos + 8 > end:
                return None
            _, precision, height, width, components = struct.unpack_from(">HBHHB", data, pos)
            return _Sof(marker, precision, width, height, components, pos)
        if marker in _NO_LENGTH:
            continue
        if pos + 2 > end:
            return None
        pos += max(2, data[pos] << 8 | data[pos + 1])


def _next_marker(data: bytes, pos: int) -> tuple[int | None, int]:
    """The next marker code at or after `pos` and the position after it (jdmarker.c next_marker)."""
    end = len(data)
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0:
            return None, end
        while pos < end and data[pos] == 0xFF:
            pos += 1
        if pos >= end:
            return None, end
        if data[pos] != 0:
            return data[pos], pos + 1
        pos += 1


_PLAIN_MODES = {1: "L", 3: "RGB", 4: "CMYK"}  # Pillow's mode for 8-bit JPEGs by component count


def _inspect_jpeg(
    data: bytes, limit: int | None, levels: bool = False, perceptual: bool = False
) -> ImageFacts:
    """Header facts from Pillow (or the SOF marker when Pillow cannot parse it), then libjpeg.

    A plain JPEG (8-bit, 1/3/4 components, no MPF index) skips Pillow: its header parse is a
    large share of the whole check (see docs/benchmarks.md, "Design measurements"), and the SOF
    marker gives the same mode and size.
    """
    sof = _find_sof(data)
    if (
        sof is not None
        and sof.precision == 8
        and sof.components in _PLAIN_MODES
        and sof.width > 0
        and sof.height > 0
        and _MPF_SEGMENT.search(data, 0, sof.offset) is None
    ):
        mode: str | None = _PLAIN_MODES[sof.components]  # below: None when Pillow cannot open it
        if _exceeds(sof.width, sof.height, limit):
            return ImageFacts("JPEG", mode, sof.width, sof.height, None, bomb=True)
        error, decoded = _decode_jpeg(data, sof)
        gray = decoded if levels and _is_gray(decoded) else None
        kept = ImageLevels(gray, None, None) if gray is not None else None
        constant = _jpeg_constant(data, decoded) if error is None else None
        hashed = _jpeg_reduced(data, decoded) if perceptual and error is None else None
        return ImageFacts(
            "JPEG", mode, sof.width, sof.height, error, levels=kept, constant=constant, reduced=hashed
        )
    image, open_error = _open(data, _JPEG_FORMATS)  # not TGA & co., which take any bytes
    if image is not None:
        fmt, mode, (width, height) = image.format, image.mode, image.size
    else:
        size = _jpeg_size(data, sof)
        if isinstance(size, str):
            return ImageFacts(None, None, None, None, open_error if size == _NO_SOF else size)
        fmt, mode, (width, height) = "JPEG", None, size
    if _exceeds(width, height, limit):
        return ImageFacts(fmt, mode, width, height, None, bomb=True)
    error, decoded = _decode_jpeg(data, sof)
    if error is None and image is not None and image.format == "MPO":
        error, bomb = _verify_mpo_images(data, image, limit)
        if bomb:
            return ImageFacts(fmt, mode, width, height, None, bomb=True)
    if error is None and image is None:
        error = open_error  # libjpeg can read it, but Pillow-based loaders cannot open it
    constant = _jpeg_constant(data, decoded) if error is None else None
    hashed = _jpeg_reduced(data, decoded) if perceptual and error is None else None
    return ImageFacts(fmt, mode, width, height, error, constant=constant, reduced=hashed)


def _jpeg_size(data: bytes, sof: _Sof | None) -> tuple[int, int] | str:
    """(width, height) from the header alone, or why there is none."""
    if sof is not None:
        return sof.width, sof.height
    try:  # TurboJPEG's own header parse: still no pixel data
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except Exception as exc:
        message = _message(exc)  # TurboJPEG blames "subsampling" for any header it cannot read
        return _NO_SOF if message.startswith(_TURBOJPEG_LIMITS) else message
    return width, height


def _verify_jpeg(data: bytes, sof: _Sof | None) -> str | None:
    """libjpeg's first warning or error for one JPEG stream, None if it decodes cleanly."""
    return _decode_jpeg(data, sof)[0]


def _decode_jpeg(data: bytes, sof: _Sof | None) -> tuple[str | None, Any]:
    """`_verify_jpeg`'s verdict, and what it decoded (a NumPy array from TurboJPEG, reduced and
    grayscale on the fast path; a reduced Pillow image from the fallback; None on failure): the
    profile's levels (`_is_gray`) and `constant` come from this one decode."""
    # Lossless (or unknown) streams must be decoded unscaled: see the module docstring.
    scaled = _SCALED if sof is not None and sof.marker not in _LOSSLESS_SOF else {}
    message = _NO_CONVERSION
    for colorspace in _COLORSPACES:
        try:
            return None, simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=True, **scaled)
        except Exception as exc:
            message = _message(exc)
        if message != _NO_CONVERSION:
            break
    if message == _NO_CONVERSION or message.startswith(_TURBOJPEG_LIMITS):
        return _verify_jpeg_with_pillow(data)
    return message, None


def _verify_jpeg_with_pillow(data: bytes) -> tuple[str | None, Any]:
    """Fallback for what TurboJPEG refuses: Pillow's libjpeg at 1/8 scale (warnings are lost).
    The verdict, and the reduced image (None on failure)."""
    image, open_error = _open(data, _JPEG_FORMATS)
    if image is None:
        return open_error, None
    try:
        image.draft(None, (1, 1))
        image.load()
    except Exception as exc:
        return _message(exc), None
    return None, image


def _jpeg_reduced(data: bytes, decoded: Any) -> Any:
    """What a JPEG's perceptual hash is made of, from the reduced decode that judged it where
    that is grayscale and at least `PHASH_SIDE` pixels a side; else from Pillow's decode reduced
    no further than that (a small image, or one decoded in colour or by the fallback)."""
    try:
        if isinstance(decoded, np.ndarray) and decoded.shape == (PHASH_SIDE, PHASH_SIDE, 1):
            return decoded[:, :, 0]  # a 256-pixel JPEG's 1/8 decode: the size a hash is made of
        if _is_gray(decoded) and min(decoded.shape[:2]) >= PHASH_SIDE:
            return reduced(decoded.reshape(decoded.shape[0], decoded.shape[1]))
        image, _ = _open(data, _JPEG_FORMATS)
        if image is None:
            return None
        image.draft("L", (PHASH_SIDE, PHASH_SIDE))
        return reduced(image.convert("L"))
    except Exception:  # the verdict stands; the image has no hash
        return None


def _jpeg_constant(data: bytes, decoded: Any) -> tuple[int, ...] | None:
    """The colour of every pixel of the JPEG as Pillow decodes it at full size, or None.

    ``decoded`` is what the verdict's decode gave (reduced, often grayscale): when two of its
    pixels differ, so do two of the full image's (each reduced pixel is a block's average, of
    the luminance that the full colour is converted from; but for colours that clip, see the
    module docstring), and nothing more is done. When they are all equal, the full image is
    decoded to know.
    """
    if decoded is None:
        return None
    if isinstance(decoded, np.ndarray):
        if not _same_pixels(decoded):
            return None
    elif uniform_colour(decoded) is None:
        return None
    image, _ = _open(data, _JPEG_FORMATS)
    if image is None:
        return None
    try:
        image.load()
    except Exception:  # what libjpeg read cleanly at 1/8 scale, Pillow cannot at full: no claim
        return None
    return uniform_colour(image)


def _is_gray(decoded: Any) -> bool:
    """Whether a JPEG's decode is the grayscale one (one band): the profile's levels."""
    return (
        isinstance(decoded, np.ndarray) and decoded.size > 0 and (decoded.ndim == 2 or decoded.shape[2] == 1)
    )


def _same_pixels(pixels: np.ndarray) -> bool:
    """Whether every pixel of a decoded (height, width[, channels]) uint8 array is the same.

    The first value against the last and the middle pixel's (almost every image stops there,
    without copying anything), then the bytes against the first pixel's repeated. About half
    a microsecond for a 1/8-scale decode; NumPy's min and max cost several.
    """
    size = pixels.size
    channels = pixels.shape[2] if pixels.ndim == 3 else 1
    if not size:
        return False
    item = pixels.item
    first = item(0)
    if item(size - channels) != first or item((size // channels // 2) * channels) != first:
        return False
    raw = pixels.tobytes()
    return raw == raw[:channels] * (size // channels)


def _verify_mpo_images(data: bytes, image: Any, limit: int | None) -> tuple[str | None, bool]:
    """(error, bomb) over the 2nd and later images of an MPO; each is a complete JPEG stream."""
    for number, stream in enumerate(_mpo_streams(data, image), start=2):
        sof = _find_sof(stream)
        size = _jpeg_size(stream, sof)
        if isinstance(size, str):
            return f"MPO image {number}: {size}", False
        if _exceeds(*size, limit):
            return None, True
        error = _verify_jpeg(stream, sof)
        if error is not None:
            return f"MPO image {number}: {error}", False
    return None, False


def _mpo_streams(data: bytes, image: Any) -> list[bytes]:
    """The 2nd and later images of the MP index, each from its SOI to the end of `data`.

    Entries that do not point at an SOI marker are skipped, not reported: cameras write MP
    indexes that promise images they never stored (Pillow issue #1631), and loaders read only
    the first image. libjpeg stops at the image's EOI, so what follows it does not matter.
    """
    match = _MPF_SEGMENT.search(data)
    entries = getattr(image, "mpinfo", {}).get(0xB002) or []
    if match is None:
        return []
    starts = (match.end() + entry.get("DataOffset", 0) for entry in entries[1:] if isinstance(entry, dict))
    return [data[start:] for start in starts if start > 0 and data[start : start + 2] == _SOI]


# --------------------------------------------------------------------------------------------
# Everything else Pillow can open


def _inspect_other(
    data: bytes, limit: int | None, levels: bool = False, perceptual: bool = False
) -> ImageFacts:
    image, open_error = _open(data)
    if image is None:
        return ImageFacts(None, None, None, None, open_error)
    fmt, mode, (width, height) = image.format, image.mode, image.size
    if _exceeds(width, height, limit):
        return ImageFacts(fmt, mode, width, height, None, bomb=True)
    error, bomb, pixels, kept, constant, hashed = _decode_frames(data, image, limit, levels, perceptual)
    if error or bomb:
        return ImageFacts(fmt, mode, width, height, error, bomb)
    return ImageFacts(fmt, mode, width, height, error, bomb, pixels, kept, constant, hashed)


def _decode_frames(
    data: bytes, image: Any, limit: int | None, levels: bool = False, perceptual: bool = False
) -> tuple[str | None, bool, Any, Any, tuple[int, ...] | None, Any]:
    """(error, bomb, the first frame's numeric pixels or None, with `levels` its `ImageLevels`
    or None, its colour when every pixel has the same (`uniform_colour`) or None, with
    `perceptual` what its perceptual hash is made of or None) after the plugin's own verify() (PNG: CRCs) and
    load() of every frame."""
    pixels = kept = constant = hashed = None
    try:
        if type(image).verify is not ImageFile.ImageFile.verify:
            _plugin_verify(data)
        for frame in range(getattr(image, "n_frames", 1)):
            if frame:
                image.seek(frame)
                frame_width, frame_height = image.size
                if _exceeds(frame_width, frame_height, limit):
                    return None, True, None, None, None, None
            image.load()
            if frame == 0 and image.mode in NUMERIC_MODES:
                pixels = np.array(image)  # a copy: the image object moves on to the next frame
            elif frame == 0:
                constant = uniform_colour(image)
                if levels:
                    kept = _frame_levels(image)
                if perceptual:
                    hashed = _frame_reduced(image)
    except Image.DecompressionBombError:  # Pillow's own check inside seek(), above 2x its limit
        return None, True, None, None, None, None
    except Exception as exc:
        return _message(exc), False, None, None, None, None
    return None, False, pixels, kept, constant, hashed


def _frame_reduced(image: Any) -> Any:
    """What a decoded 8-bit frame's perceptual hash is made of, from its grayscale (``L``)."""
    try:
        return reduced(image.convert("L"))
    except Exception:  # a mode Pillow cannot convert: no hash (the verdict stands)
        return None


#: 8-bit modes whose bands are levels as they are (a palette image's are indices: converted)
_LEVEL_MODES = frozenset({"L", "LA", "RGB", "RGBA", "RGBX", "CMYK"})


def _frame_levels(image: Any) -> ImageLevels | None:
    """The levels of a decoded 8-bit frame: Pillow's histogram of each band (one pass in C),
    and of its grayscale."""
    try:
        if image.mode not in _LEVEL_MODES:
            image = image.convert("RGBA" if "transparency" in image.info or image.mode == "PA" else "RGB")
        counts = image.histogram()
        bands = {
            band: np.asarray(counts[i * 256 : (i + 1) * 256], np.int64)
            for i, band in enumerate(image.getbands())
        }
        gray = (
            bands["L"] if image.mode in ("L", "LA") else np.asarray(image.convert("L").histogram(), np.int64)
        )
    except Exception:  # a mode Pillow cannot convert: no levels (the verdict stands)
        return None
    return ImageLevels(None, gray, bands)


#: bands that are opacity, not colour: ImageFolder's loader (``convert("RGB")``) drops them
_ALPHA_BANDS = frozenset({"A", "a"})


def uniform_colour(image: Any) -> tuple[int, ...] | None:
    """The colour every pixel of a decoded 8-bit Pillow image has (one value per band, alpha
    left out; a palette image's palette colour), or None when two pixels differ.

    Nine pixels (corners, edge middles, centre) are compared first: in almost every image two of
    them differ, and no pass over the pixels is made. Only when they agree are the bands'
    extrema computed (one pass in C), which decide exactly. Never raises: a mode whose pixels
    Pillow cannot read gives None (no claim).
    """
    try:
        width, height = image.size
        if not width or not height or image.mode in NUMERIC_MODES:
            return None
        colour = _palette_colour(image)
        bands = [i for i, band in enumerate(image.getbands()) if band not in _ALPHA_BANDS]
        first = colour(image.getpixel((0, 0)))
        for x in (0, width // 2, width - 1):
            for y in (0, height // 2, height - 1):
                if colour(image.getpixel((x, y))) != first:
                    return None
        if image.mode in ("P", "PA"):  # indices may differ where colours do not (or the reverse)
            image = image.convert("RGB")
            bands = [0, 1, 2]
        extrema = image.getextrema()
        if isinstance(extrema[0], (int, float)):  # one band: (min, max)
            extrema = (extrema,)
        if any(extrema[i][0] != extrema[i][1] for i in bands):
            return None
        return tuple(int(extrema[i][0]) for i in bands)
    except Exception:
        return None


def _palette_colour(image: Any) -> Any:
    """How to compare two pixels of ``image`` by their colour: a palette index by its entry
    (alpha left out), other modes by their colour bands."""
    if image.mode in ("P", "PA"):
        palette = image.getpalette() or []

        def entry(pixel: Any) -> tuple[int, ...]:
            index = pixel[0] if isinstance(pixel, tuple) else pixel
            return tuple(palette[3 * index : 3 * index + 3])

        return entry
    alpha = [i for i, band in enumerate(image.getbands()) if band in _ALPHA_BANDS]
    if not alpha:
        return lambda pixel: pixel
    return lambda pixel: tuple(v for i, v in enumerate(pixel) if i not in alpha)


def _plugin_verify(data: bytes) -> None:
    """Run the plugin's verify() on a fresh image: it must come right after open, and spends it."""
    image, open_error = _open(data)
    if image is None:
        raise OSError(open_error)
    image.verify()
