"""Checks on encoded image payloads.

They judge the `ImageFacts` that the properties stage computed once per record
(`record.meta["image"]`), so an image is decoded once however many checks look at it.
"""

from __future__ import annotations

from scrub.checks.base import CheckOptions, Finding, make_issue, record_check
from scrub.checks.numeric import constant_hint, constant_severity
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


@record_check("constant-image", Severity.WARNING, needs=Carries.IMAGE)
def constant_image(record: Record, options: CheckOptions) -> Finding | None:
    """An image all of whose pixels have the same colour: its standard deviation is 0.

    What it finds:
        Encoded 8-bit images (JPEG, PNG, GIF, ...) whose first frame, decoded as a loader decodes
        it, holds one colour in every pixel: a blank or black frame, a placeholder, a failed
        render. Alpha is left out (ImageFolder's loader converts to RGB and drops it); a palette
        image is judged by its colours. Found from the decode the scan does anyway (see
        `corrupt-image`): a JPEG's reduced decode must be constant before it is decoded in full,
        and only a constant full decode counts, so a JPEG whose compression noise left one pixel
        different is not flagged (its standard deviation is small but not 0). Float and 16/32-bit
        images follow the rule of array rows (`constant-row`, `zero-norm`). A warning; an
        **error** with `--normalization per-record`, which declares that training standardizes
        each image by its own statistics. Details: `value` (the colour, one value per band).
    Why it breaks training:
        Per-image standardization, (x - mean) / std, divides 0 by 0: the whole image becomes NaN,
        then the loss, then every weight (measured in PyTorch on a constant PNG:
        `(x - x.mean()) / x.std()` is NaN in every pixel; the NaN guard's own example, found in
        a live run by `training-nonfinite`, is such an image). A single-colour image that is not
        gray has a spread across its channels but none within each: per-channel standardization
        divides by 0 too. Without such a normalization it is an image with no content.
    Example:
        `dog/gray.png` is 64 x 64 pixels of (128, 128, 128).
    What fix does:
        Nothing by default (a warning); with `--normalization per-record` (an error), or with
        `--severity warning`, the image is moved to the quarantine.
    """
    facts = record.meta.get("image")
    if facts is None or facts.constant is None:
        return None
    colour = facts.constant
    shown = str(colour[0]) if len(colour) == 1 else str(colour)
    if len(set(colour)) == 1:
        spread = "its standard deviation is 0: per-image standardization divides by zero"
    else:
        spread = "each channel's standard deviation is 0: per-channel standardization divides by zero"
    return Finding(
        f"every pixel is {shown}: {spread}{constant_hint(options)}",
        {"value": list(colour)},
        constant_severity(options),
    )


@record_check("tiny-image", Severity.ERROR, needs=Carries.IMAGE)
def tiny_image(record: Record, options: CheckOptions) -> Finding | None:
    """An image with a side shorter than `--min-image-side` pixels (default 10).

    What it finds:
        Encoded images whose width or height, read from the header, is below the minimum: 1 x 1
        tracking pixels, icons, slivers cut off by a bad crop, thumbnails of a failed download.
        The default, 10, is where Ultralytics refuses an image (its dataset check asserts both
        sides are at least 10 pixels and drops the image as corrupt). Details: `width`,
        `height`, `minimum`.
    Why it breaks training:
        A loader that crops without resizing first (`RandomCrop(224)`) raises on it; a network
        fed it unresized fails in its first pooling ("Output size is too small"); resized up to
        the training size it is a smear of a few pixels with a label it cannot show.
        Detection frameworks drop such images and their boxes (Ultralytics), so the data trained
        on differs from the data listed.
    Example:
        `cat/pixel.gif` is 1 x 1; `dog/strip.png` is 5 x 300.
    What fix does:
        Moves the image to the quarantine (`--min-image-side 1` turns the check off for a
        dataset of small images, such as 8 x 8 digits).
    """
    facts = record.meta.get("image")
    if facts is None or facts.bomb or facts.width is None or facts.height is None:
        return None
    minimum = options.min_image_side
    if min(facts.width, facts.height) >= minimum:
        return None
    return Finding(
        f"{facts.width}x{facts.height}: a side is under {minimum} pixels (--min-image-side)",
        {"width": facts.width, "height": facts.height, "minimum": minimum},
    )


@record_check("extreme-aspect-ratio", Severity.WARNING, needs=Carries.IMAGE)
def extreme_aspect_ratio(record: Record, options: CheckOptions) -> Finding | None:
    """An image whose long side is more than `--max-aspect-ratio` times its short side
    (default 10).

    What it finds:
        Encoded images whose width / height (or height / width), read from the header, exceeds
        the ratio: banners, scanned strips, panoramas stitched wrong, two images concatenated
        by a bad script. The default, 10, is chosen for what it does to a pipeline rather than
        how an image looks: cleanvision's `odd_aspect_ratio` (short side / long side below 0.35,
        about 2.9:1) flags ordinary 3:1 panoramas and 21:9 frames, which train fine. Details:
        `width`, `height`, `ratio`, `maximum`.
    Why it breaks training:
        The ImageNet recipe, `Resize(256)` (the short side to 256) then `CenterCrop(224)`,
        makes a 10:1 image 2560 x 256, ten times a square image's pixels and memory, and its
        crop keeps a tenth of it; a 2000 x 20 strip becomes 25600 x 256, and a 1000:1 one
        overflows a worker's memory. A square resize instead squashes it tenfold or more.
        Either way the label rarely matches what is left.
    Example:
        `bird/banner.jpg` is 2000 x 20 (100:1).
    What fix does:
        Nothing by default (a warning); with `--severity warning` the image is quarantined.
    """
    facts = record.meta.get("image")
    if facts is None or facts.bomb or not facts.width or not facts.height:
        return None
    long, short = max(facts.width, facts.height), min(facts.width, facts.height)
    ratio = long / short
    if ratio <= options.max_aspect_ratio:
        return None
    return Finding(
        f"{facts.width}x{facts.height}: aspect ratio {ratio:.3g}:1, over {options.max_aspect_ratio:g}:1 "
        "(--max-aspect-ratio)",
        {"width": facts.width, "height": facts.height, "ratio": ratio, "maximum": options.max_aspect_ratio},
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
