"""Checks on detection boxes: YOLO label files and COCO annotations.

Readers parse the boxes (format knowledge) into ``record.meta["boxes"]``, a list of `Box`, and
the lines they could not parse into ``record.meta["malformed_boxes"]``; these checks judge them.
A finding names the record (the image) and each box it concerns (a YOLO line number or a COCO
annotation id) in ``details["boxes"]``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from scrub.checks.base import CheckOptions, Finding, reader_check, record_check
from scrub.records import Carries, Record, Severity

#: how far a YOLO box edge may lie outside [0, 1] (rounding of normalized coordinates)
YOLO_TOLERANCE = 0.01
#: how far a COCO box may extend past its image, in pixels
COCO_TOLERANCE = 1.0


@dataclass(frozen=True)
class Box:
    """One box as its file states it."""

    ref: str  # where it is: "line 3" (YOLO) or "annotation 1234" (COCO)
    cls: float  # the class id as written (checked for being an integer)
    x: float  # YOLO: centre x, normalized; COCO: left, pixels
    y: float
    w: float
    h: float
    normalized: bool  # YOLO's [0, 1] coordinates, else pixels (COCO)


def _boxes(record: Record) -> list[Box]:
    return record.meta.get("boxes") or []


def _finding(message: str, refs: list[str], **details) -> Finding:
    shown = ", ".join(refs[:5]) + (f" and {len(refs) - 5} more" if len(refs) > 5 else "")
    return Finding(f"{message}: {shown}", {"boxes": refs[:64], "count": len(refs), **details})


MISSING_BOXES = reader_check(
    "missing-boxes",
    Severity.WARNING,
    """An image of a YOLO dataset without a label file.

    What it finds:
        `images/x.jpg` with no `labels/x.txt`.
    Why it breaks training:
        Ultralytics trains on it as a background image (no objects): right when that was meant,
        a silent loss of every object in it when the label file was forgotten.
    Example:
        `images/train/0042.jpg` has no `labels/train/0042.txt`.
    What fix does:
        Nothing by default (a warning): background images are legitimate.
    """,
    needs=Carries.BOXES,
)

LABEL_WITHOUT_IMAGE = reader_check(
    "label-without-image",
    Severity.WARNING,
    """A YOLO label file whose image does not exist.

    What it finds:
        `labels/x.txt` with no `images/x.*`.
    Why it breaks training:
        Its objects are never trained on; usually a sign that images were deleted or renamed
        after labelling, so other pairs may be mismatched too.
    Example:
        `labels/val/0007.txt` and no `images/val/0007.jpg`.
    What fix does:
        Nothing by default (a warning): the label file stays in the cleaned copy.
    """,
    needs=Carries.BOXES,
)


@record_check("box-malformed", Severity.ERROR, needs=Carries.BOXES)
def box_malformed(record: Record, options: CheckOptions) -> Finding | None:
    """A label line or annotation that is not a box.

    What it finds:
        YOLO lines that are not `class cx cy w h` (5 numbers) or a polygon (`class x1 y1 x2 y2
        x3 y3 ...`), text that is not numbers; COCO annotations without a 4-number `bbox`.
    Why it breaks training:
        Ultralytics drops the whole image's labels with a warning ("labels require 5 columns");
        other loaders raise mid-epoch.
    Example:
        `labels/0003.txt` line 2 is `0 0.5 0.5 0.2`.
    What fix does:
        Moves the image and its labels to the quarantine.
    """
    malformed = record.meta.get("malformed_boxes") or []
    if not malformed:
        return None
    return _finding("not a box", [ref for ref, _ in malformed], reasons=[why for _, why in malformed[:16]])


@record_check("box-class-invalid", Severity.ERROR, needs=Carries.BOXES)
def box_class_invalid(record: Record, options: CheckOptions) -> Finding | None:
    """A box whose class id is not an integer, or lies outside the class range.

    What it finds:
        Class ids like `3.5`, `-1`, or ≥ the number of names in YOLO's `data.yaml` (or
        `--num-classes`); COCO `category_id`s that no category declares.
    Why it breaks training:
        The classification loss indexes its logits with the id: out of range it raises
        (`IndexError`, a device-side assert) or, in one-hot code, silently trains a wrong class.
    Example:
        `labels/0005.txt` line 1 says class 80 in an 80-class dataset.
    What fix does:
        Moves the image and its labels to the quarantine.
    """
    declared = record.meta.get("categories")  # COCO: the declared category ids
    span = options.declared_range
    fractional: list[Box] = []
    outside: list[Box] = []
    for box in _boxes(record):
        if not math.isfinite(box.cls) or box.cls != int(box.cls):
            fractional.append(box)
        elif declared is not None:
            if int(box.cls) not in declared:
                outside.append(box)
        elif span is not None and not span[0] <= box.cls < span[1]:
            outside.append(box)
    said = []
    if fractional:
        said.append("not an integer: " + _classes_shown(fractional))
    if outside:
        where = (
            "declared by no category"
            if span is None or declared is not None
            else f"outside [{span[0]}, {span[1]})"
        )
        said.append(f"{where}: " + _classes_shown(outside))
    boxes = fractional + outside
    if not boxes:
        return None
    details = {
        "boxes": [box.ref for box in boxes[:64]],
        "classes": [_class_id(box.cls) for box in boxes[:64]],
        "count": len(boxes),
    }
    return Finding(f"class id{'s' if len(boxes) > 1 else ''} " + "; ".join(said), details)


def _class_id(value: float) -> int | float | str:
    """A class id as its file wrote it: ``5``, ``3.5``, ``nan`` (JSON has no NaN)."""
    if not math.isfinite(value):
        return str(value)
    return int(value) if value == int(value) else value


def _classes_shown(boxes: list[Box]) -> str:
    """``5 (line 1), 7 (line 3)``: each class id with where it is, the first five."""
    shown = ", ".join(f"{_class_id(box.cls)} ({box.ref})" for box in boxes[:5])
    return shown + (f" and {len(boxes) - 5} more" if len(boxes) > 5 else "")


@record_check("box-nonfinite", Severity.ERROR, needs=Carries.BOXES)
def box_nonfinite(record: Record, options: CheckOptions) -> Finding | None:
    """A box with a NaN or infinite coordinate.

    What it finds:
        `nan`, `inf` in a YOLO line or a COCO `bbox`.
    Why it breaks training:
        Every IoU-based loss (`complete_box_iou_loss`, GIoU, DIoU) of that box is NaN, and one NaN
        loss makes every weight NaN after the step.
    Example:
        `labels/0002.txt` line 4 is `1 nan 0.5 0.1 0.1`.
    What fix does:
        Moves the image and its labels to the quarantine.
    """
    bad = [box.ref for box in _boxes(record) if not all(map(math.isfinite, (box.x, box.y, box.w, box.h)))]
    return _finding("a coordinate is NaN or infinite", bad) if bad else None


@record_check("box-degenerate", Severity.ERROR, needs=Carries.BOXES)
def box_degenerate(record: Record, options: CheckOptions) -> Finding | None:
    """A box of zero or negative width or height.

    What it finds:
        Boxes with `w <= 0` or `h <= 0`: a click instead of a drag, a box clipped to nothing.
    Why it breaks training:
        `torchvision.ops.complete_box_iou_loss` on a zero-area box returns NaN (its IoU is
        0/0); GIoU and DIoU divide by areas as well.
    Example:
        `labels/0006.txt` line 1 is `2 0.4 0.4 0.0 0.1`.
    What fix does:
        Moves the image and its labels to the quarantine.
    """
    bad = [
        box.ref
        for box in _boxes(record)
        if all(map(math.isfinite, (box.w, box.h))) and (box.w <= 0 or box.h <= 0)
    ]
    return _finding("zero or negative width or height", bad) if bad else None


@record_check("box-out-of-bounds", Severity.ERROR, needs=Carries.BOXES)
def box_out_of_bounds(record: Record, options: CheckOptions) -> Finding | None:
    """A box that lies outside its image.

    What it finds:
        YOLO coordinates outside [0, 1] (not normalized: pixel values written as-is) or a box
        whose edges pass the image's by more than 1% of its size; COCO boxes extending more than
        1 pixel past the image's declared width or height, or starting at a negative position.
    Why it breaks training:
        Regression targets far outside the image make the box loss explode; Ultralytics drops
        the image's labels ("non-normalized or out of bounds coordinates").
    Example:
        `labels/0008.txt` line 3 is `0 320 240 50 80`: pixels, not fractions.
    What fix does:
        Moves the image and its labels to the quarantine.
    """
    bad = []
    for box in _boxes(record):
        values = (box.x, box.y, box.w, box.h)
        if not all(map(math.isfinite, values)) or box.w <= 0 or box.h <= 0:
            continue  # the other box checks' business
        if box.normalized:
            left, right = box.x - box.w / 2, box.x + box.w / 2
            top, bottom = box.y - box.h / 2, box.y + box.h / 2
            inside = all(0 <= v <= 1 for v in values) and (
                left >= -YOLO_TOLERANCE
                and top >= -YOLO_TOLERANCE
                and right <= 1 + YOLO_TOLERANCE
                and bottom <= 1 + YOLO_TOLERANCE
            )
        else:
            size = record.meta.get("image_size")
            if size is None:
                continue
            width, height = size
            inside = (
                box.x >= -COCO_TOLERANCE
                and box.y >= -COCO_TOLERANCE
                and box.x + box.w <= width + COCO_TOLERANCE
                and box.y + box.h <= height + COCO_TOLERANCE
            )
        if not inside:
            bad.append(box.ref)
    return _finding("outside the image", bad) if bad else None


@record_check("duplicate-box", Severity.WARNING, needs=Carries.BOXES)
def duplicate_box(record: Record, options: CheckOptions) -> Finding | None:
    """The same box twice: the same class and coordinates.

    What it finds:
        Exact duplicate lines in a YOLO label file, or COCO annotations of an image with the same
        category and `bbox`.
    Why it breaks training:
        The object counts twice in the loss; Ultralytics removes such duplicates with a warning.
    Example:
        `labels/0010.txt` lines 1 and 4 are both `0 0.5 0.5 0.2 0.3`.
    What fix does:
        Nothing by default (a warning).
    """
    boxes = _boxes(record)
    seen = Counter((box.cls, box.x, box.y, box.w, box.h) for box in boxes)
    bad = [box.ref for box in boxes if seen[(box.cls, box.x, box.y, box.w, box.h)] > 1]
    return _finding("the same class and coordinates more than once", bad) if bad else None
