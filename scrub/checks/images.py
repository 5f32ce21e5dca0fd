"""Checks on encoded image payloads.

They judge the `ImageFacts` that the properties stage computed once per record
(`record.meta["image"]`), so an image is decoded once however many checks look at it.
"""

from __future__ import annotations

from scrub.checks.base import CheckOptions, Finding, make_issue, record_check
from scrub.paths import extension
from scrub.records import Carries, Issue, Record, Severity

#: File extensions and the Pillow formats whose content they may hold.
EXTENSION_FORMATS: dict[str, frozenset[str]] = {
    ".jpg": frozenset({"JPEG", "MPO"}),
    ".jpeg": frozenset({"JPEG", "MPO"}),
    ".jpe": frozenset({"JPEG", "MPO"}),
    ".jfif": frozenset({"JPEG", "MPO"}),
    ".png": frozenset({"PNG"}),
    ".gif": frozenset({"GIF"}),
    ".bmp": frozenset({"BMP", "DIB"}),
    ".webp": frozenset({"WEBP"}),
    ".tif": frozenset({"TIFF"}),
    ".tiff": frozenset({"TIFF"}),
    ".ppm": frozenset({"PPM"}),
    ".pgm": frozenset({"PPM"}),
    ".pbm": frozenset({"PPM"}),
    ".pnm": frozenset({"PPM"}),
}
IMAGE_EXTENSIONS = frozenset(EXTENSION_FORMATS)


@record_check("corrupt-image", Severity.ERROR, needs=Carries.IMAGE)
def corrupt_image(record: Record, options: CheckOptions) -> Finding | None:
    """Undecodable, truncated or damaged image data.

    What it finds:
        Images whose compressed stream does not decode cleanly from the first byte to the last:
        truncated files, flipped bits in JPEG entropy data (libjpeg's recoverable "Corrupt JPEG
        data" warnings count as damage, as with `jpeginfo -c`), bad PNG CRCs, unknown formats,
        and images whose decoder crashed or timed out (the scan goes on without them).
    Why it breaks training:
        Loaders raise in the middle of an epoch, or (OpenCV, Caffe) silently pad the image with
        grey or garbage pixels that the model then learns from. One undecodable encoded Datum
        aborts a Caffe run.
    Example:
        `cat/0007.jpg` stops after 6 KB of its 20 KB: "Premature end of JPEG file".
    What fix does:
        Moves the record to the quarantine.
    """
    facts = record.meta.get("image")
    if facts is None or facts.bomb or facts.error is None:
        return None
    return Finding(
        f"image does not decode: {facts.error}",
        {"reason": facts.error, "format": facts.format},
    )


@record_check("decompression-bomb", Severity.ERROR, needs=Carries.IMAGE)
def decompression_bomb(record: Record, options: CheckOptions) -> Finding | None:
    """An image whose header declares more pixels than `--max-pixels`; never decoded.

    What it finds:
        Images whose declared width x height exceeds the limit (default: Pillow's
        `Image.MAX_IMAGE_PIXELS`, about 89.5 megapixels). The size comes from the header alone.
    Why it breaks training:
        Decoding one such image can take gigabytes of memory and kill a data-loader worker (or
        the whole job) with an out-of-memory error; Pillow refuses them with an exception.
    Example:
        A 20 KB PNG that declares 50000 x 50000 pixels.
    What fix does:
        Moves the record to the quarantine.
    """
    facts = record.meta.get("image")
    if facts is None or not facts.bomb or facts.width is None or facts.height is None:
        return None
    pixels = facts.width * facts.height
    return Finding(
        f"declares {facts.width}x{facts.height} = {pixels:,} pixels, above the limit",
        {"width": facts.width, "height": facts.height, "pixels": pixels},
    )


@record_check("format-mismatch", Severity.WARNING, needs=Carries.IMAGE)
def format_mismatch(record: Record, options: CheckOptions) -> Finding | None:
    """The content's format differs from what the file extension says.

    What it finds:
        A PNG named `.jpg`, a GIF named `.png`, and so on (judged from the content's magic bytes
        and header, not from the name).
    Why it breaks training:
        Loaders that pick a decoder by extension (TensorFlow's `decode_jpeg`, DALI, some Caffe
        forks) fail or decode garbage; a GIF named `.jpg` is often an animation or a banner
        scraped by mistake.
    Example:
        `dog/0003.jpg` is a PNG.
    What fix does:
        Nothing by default (a warning); with `--severity warning` the record is quarantined.
    """
    facts = record.meta.get("image")
    if facts is None or facts.format is None:
        return None
    written = extension(record.meta.get("name", record.key))
    suffix = written.lower()
    expected = EXTENSION_FORMATS.get(suffix)
    if expected is None or facts.format in expected:
        return None
    return Finding(
        f"content is {facts.format} but the name ends in {written}",  # as named: `.JPEG`, not `.jpeg`
        {"format": facts.format, "extension": written},
    )


def decoder_failure(source: str, key: str, index: int | None, reason: str) -> Issue:
    """The issue for a record whose decoding crashed its worker process or never finished."""
    return make_issue(
        "corrupt-image",
        source,
        key,
        index,
        Finding(f"image does not decode: {reason}", {"reason": reason}),
    )
