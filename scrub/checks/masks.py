"""Checks on segmentation masks: the per-pixel class maps paired with images.

They judge the `MaskFacts` the properties stage computed once per record
(`record.meta["mask_facts"]`), as the image checks judge `ImageFacts`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scrub.checks.base import CheckOptions, Finding, batch_check, reader_check, record_check, value_counts
from scrub.records import Batch, Carries, Record, Severity
from scrub.wording import agreeing, counted

#: Pillow modes whose pixels are class ids (a palette's indices count: VOC's masks are "P")
CLASS_MAP_MODES = frozenset({"1", "L", "P", "I", "I;16", "I;16L", "I;16B", "I;16N"})


@dataclass
class MaskFacts:
    """What decoding a mask found."""

    error: str | None = None  # None: it decoded
    mode: str | None = None
    width: int | None = None
    height: int | None = None
    #: pixel value -> count (class maps, and RGB masks read through a palette)
    counts: dict[int, int] = field(default_factory=dict)
    #: an RGB mask read through a palette: its pixels of colours the palette does not have, and
    #: the first few of those colours
    unmapped: int = 0
    unmapped_colours: list[list[int]] = field(default_factory=list)


def inspect_mask(
    data: bytes, palette: tuple[tuple[int, tuple[int, int, int]], ...] | None = None
) -> MaskFacts:
    """Decode a mask and count its pixel values (an RGB mask's through ``palette``)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            facts = MaskFacts(mode=image.mode, width=image.width, height=image.height)
            if image.mode in CLASS_MAP_MODES:
                facts.counts = mask_pixel_counts(np.asarray(image))
            elif palette is not None and image.mode in ("RGB", "RGBA"):
                _through_palette(np.asarray(image)[..., :3], palette, facts)
    except Exception as error:
        message = re.sub(r" ?<_io\.BytesIO object at 0x[0-9a-f]+>", "", str(error))  # Pillow's repr
        return MaskFacts(error=message or type(error).__name__)
    return facts


MISSING_MASK = reader_check(
    "missing-mask",
    Severity.ERROR,
    """An image of a segmentation dataset without its mask.

    What it finds:
        A file in `images/` (or `JPEGImages/`, `img_dir/`) with no file of the same name, any
        image extension, in `masks/` (or `SegmentationClass/`, `annotations/`, `ann_dir/`,
        `labels/`).
    Why it breaks training:
        The dataset's `__getitem__` raises `FileNotFoundError` when it reaches the image, hours
        into an epoch; a loader that skips it silently trains on fewer images than you think.
    Example:
        `images/0042.jpg` exists, `masks/0042.png` does not.
    What fix does:
        Moves the image to the quarantine.
    """,
    needs=Carries.MASKS,
)


def _through_palette(
    pixels: np.ndarray, palette: tuple[tuple[int, tuple[int, int, int]], ...], facts: MaskFacts
) -> None:
    """Class ids of an RGB mask's pixels by their colours (``--mask-palette``)."""
    codes = (
        (pixels[..., 0].astype(np.uint32) << 16) | (pixels[..., 1].astype(np.uint32) << 8) | pixels[..., 2]
    )
    known = np.array(sorted((r << 16 | g << 8 | b, index) for index, (r, g, b) in palette), dtype=np.int64)
    colours, counts = np.unique(codes, return_counts=True)
    where = np.clip(np.searchsorted(known[:, 0], colours), 0, len(known) - 1)
    found = known[where, 0] == colours
    for colour, count, place, hit in zip(colours, counts, where, found):
        if hit:
            index = int(known[place, 1])
            facts.counts[index] = facts.counts.get(index, 0) + int(count)
        else:
            facts.unmapped += int(count)
            if len(facts.unmapped_colours) < 8:
                facts.unmapped_colours.append(
                    [int(colour) >> 16, (int(colour) >> 8) & 255, int(colour) & 255]
                )
    facts.mode = f"{facts.mode} (palette)"


def _facts(record: Record) -> MaskFacts | None:
    return record.meta.get("mask_facts")


@record_check("mask-undecodable", Severity.ERROR, needs=Carries.MASKS)
def mask_undecodable(record: Record, options: CheckOptions) -> Finding | None:
    """A mask file that does not decode.

    What it finds:
        Truncated or damaged mask files, and files that are not images at all.
    Why it breaks training:
        The loader raises when it reaches the pair, ending the epoch.
    Example:
        `masks/0007.png` stops after 300 bytes.
    What fix does:
        Moves the image and its mask to the quarantine.
    """
    facts = _facts(record)
    if facts is None or facts.error is None:
        return None
    return Finding(
        f"mask does not decode: {facts.error}", {"mask": record.meta.get("mask_name"), "reason": facts.error}
    )


@record_check("mask-size-mismatch", Severity.ERROR, needs=Carries.MASKS)
def mask_size_mismatch(record: Record, options: CheckOptions) -> Finding | None:
    """A mask whose width and height differ from its image's.

    What it finds:
        Pairs whose mask was resized, cropped or saved from another image.
    Why it breaks training:
        `cross_entropy` raises on mismatched logits and targets, or, after a joint random crop,
        the labels land on the wrong pixels: the model learns noise.
    Example:
        `images/0003.jpg` is 512x384, `masks/0003.png` is 256x192.
    What fix does:
        Moves the pair to the quarantine.
    """
    facts = _facts(record)
    image = record.meta.get("image")
    if facts is None or facts.error is not None or image is None or image.width is None:
        return None
    if (facts.width, facts.height) == (image.width, image.height):
        return None
    return Finding(
        f"mask is {facts.width}x{facts.height}, its image {image.width}x{image.height}",
        {"mask_size": [facts.width, facts.height], "image_size": [image.width, image.height]},
    )


@record_check("mask-not-class-map", Severity.ERROR, needs=Carries.MASKS)
def mask_not_class_map(record: Record, options: CheckOptions) -> Finding | None:
    """A mask with several channels where a class map (one class id per pixel) is expected.

    What it finds:
        RGB or RGBA masks: colour-coded visualisations (VOC's or Cityscapes' colours) saved
        instead of the class ids; palette (`P`) masks are class maps and pass. With
        `--mask-palette` (`voc`, or a JSON file of colours by class id) RGB masks are read
        through it, and only pixels of a colour it lacks are this finding.
    Why it breaks training:
        Read as labels, a colour such as (128, 64, 128) becomes values far above the class
        count: `IndexError: Target 128 is out of bounds` on CPU, a device-side assert on GPU.
    Example:
        `masks/0001.png` is an RGB image of road-purple and car-blue.
    What fix does:
        Moves the pair to the quarantine (convert the colours to class ids, then rescan).
    """
    facts = _facts(record)
    if facts is None or facts.error is not None or facts.mode in CLASS_MAP_MODES:
        return None
    if facts.mode is not None and facts.mode.endswith("(palette)"):
        if not facts.unmapped:
            return None
        return Finding(
            f"{counted(facts.unmapped, 'pixel')} of colours not in --mask-palette: "
            + ", ".join(str(tuple(c)) for c in facts.unmapped_colours[:4]),
            {"pixels": facts.unmapped, "colours": facts.unmapped_colours},
        )
    return Finding(
        f"mask is {facts.mode} (colours), not a class map of one id per pixel (give --mask-palette)",
        {"mode": facts.mode},
    )


@record_check("mask-out-of-range", Severity.ERROR, needs=Carries.MASKS)
def mask_out_of_range(record: Record, options: CheckOptions) -> Finding | None:
    """A mask pixel whose class id is ≥ `--num-classes` and is not `--ignore-index`.

    What it finds:
        Class ids past the last class: a label map of 21 classes in a 19-class model, a stray
        value from anti-aliased resizing. Runs when a class count is given.
    Why it breaks training:
        `F.cross_entropy` raises `IndexError: Target 7 is out of bounds` on CPU and a device-side
        assert on GPU.
    Example:
        `masks/0009.png` holds value 7 with `--num-classes 5`.
    What fix does:
        Moves the pair to the quarantine.
    """
    facts = _facts(record)
    declared = options.declared_range
    if facts is None or declared is None or not facts.counts:
        return None
    low, high = declared
    outside = {
        value: count
        for value, count in facts.counts.items()
        if not low <= value < high and value != options.mask_ignore_index
    }
    if not outside:
        return None
    values = sorted(outside)
    return Finding(
        f"{counted(sum(outside.values()), 'pixel')} {agreeing(sum(outside.values()), 'holds', 'hold')} "
        f"class ids outside [{low}, {high}): " + ", ".join(map(str, values[:8])),
        {"values": values[:32], "pixels": sum(outside.values()), "low": low, "high": high},
    )


@record_check("mask-all-void", Severity.ERROR, needs=Carries.MASKS)
def mask_all_void(record: Record, options: CheckOptions) -> Finding | None:
    """A mask every pixel of which is `--ignore-index`: nothing to learn from.

    What it finds:
        Masks that are all void (255), common after random crops of sparse annotations or
        masks written empty.
    Why it breaks training:
        `F.cross_entropy(logits, mask, ignore_index=255)` averages over zero pixels: 0/0 = NaN,
        and one NaN loss makes every weight NaN after the step.
    Example:
        `masks/0011.png` is 64x64 pixels of 255.
    What fix does:
        Moves the pair to the quarantine.
    """
    facts = _facts(record)
    if facts is None or not facts.counts or options.mask_ignore_index is None:
        return None
    if set(facts.counts) != {options.mask_ignore_index}:
        return None
    return Finding(
        f"every pixel is the ignore index {options.mask_ignore_index}: a mean loss over it is NaN",
        {"ignore_index": options.mask_ignore_index},
    )


def _batch_masks(batch: Batch):
    return batch.meta.get("masks")


@batch_check("mask-out-of-range")
def mask_out_of_range_rows(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """`mask-out-of-range` on (N, H, W) mask arrays (HDF5, NumPy), row by row, vectorized."""
    masks = _batch_masks(batch)
    declared = options.declared_range
    if masks is None or declared is None or not len(masks):
        return []
    low, high = declared
    flat = masks.reshape(len(masks), -1)
    outside = (flat < low) | (flat >= high)
    if options.mask_ignore_index is not None:
        outside &= flat != options.mask_ignore_index
    counts = outside.sum(axis=1)
    found = []
    for row in np.flatnonzero(counts):
        values = sorted({int(v) for v in flat[row][outside[row]]})
        found.append(
            (
                int(row),
                Finding(
                    f"{counted(int(counts[row]), 'pixel')} {agreeing(int(counts[row]), 'holds', 'hold')} "
                    f"class ids outside [{low}, {high}): " + ", ".join(map(str, values[:8])),
                    {"values": values[:32], "pixels": int(counts[row]), "low": low, "high": high},
                ),
            )
        )
    return found


@batch_check("mask-all-void")
def mask_all_void_rows(batch: Batch, options: CheckOptions) -> list[tuple[int, Finding]]:
    """`mask-all-void` on (N, H, W) mask arrays (HDF5, NumPy), vectorized."""
    masks = _batch_masks(batch)
    if masks is None or options.mask_ignore_index is None or not len(masks):
        return []
    void = (masks.reshape(len(masks), -1) == options.mask_ignore_index).all(axis=1)
    finding = Finding(
        f"every pixel is the ignore index {options.mask_ignore_index}: a mean loss over it is NaN",
        {"ignore_index": options.mask_ignore_index},
    )
    return [(int(row), finding) for row in np.flatnonzero(void)]


def mask_pixel_counts(masks: np.ndarray) -> dict[int, int]:
    """Pixels of each value of a mask or a block of masks (the summary's ``stats.mask_pixels``)."""
    values, counts = value_counts(masks)
    return {int(value): int(count) for value, count in zip(values.tolist(), counts.tolist())}


def ignore_note(mask_pixels: dict | None, options: CheckOptions, origin: Callable[[str], str]) -> list[str]:
    """Which ignore index the masks were judged with (the default depends on what is checked)."""
    if not mask_pixels:
        return []
    ignore = options.mask_ignore_index
    if ignore is None:
        return ["masks: every value is a class (--ignore-index none)"]
    how = "by default for masks" if options.ignore_index == "auto" else origin("ignore-index")
    return [f"masks: ignore index {ignore} ({how})"]
