"""COCO detection annotations: an ``instances_*.json`` (``images``, ``annotations``,
``categories``) and the folder of its images.

A record is one entry of ``images`` with its annotations: the image file is checked as any
image, its boxes (``bbox`` = ``[x, y, width, height]`` in pixels) by the box checks
(`scrub.checks.boxes`), against the image's declared ``width``/``height`` and the declared
category ids. The key is the image's ``file_name``. The images are found in ``--root``, else
beside the annotations as COCO lays them out (``annotations/instances_val2017.json`` and
``val2017/``), else in an ``images/`` folder there. The JSON is loaded whole, as pycocotools
loads it; annotations of no listed image are named in a note and kept by `fix`.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from scrub.checks.base import problem
from scrub.checks.boxes import Box
from scrub.errors import UnusableDataset
from scrub.readers.base import DatasetInfo, Reader, split_records
from scrub.records import Carries, Record
from scrub.wording import agreeing, counted

SNIFF_BYTES = 1 << 16


class CocoImage(NamedTuple):
    """One ``images`` entry and what its boxes are."""

    index: int  # type: ignore[assignment]  # the record's index (shadows tuple.index)
    key: str  # file_name
    image_id: Any
    width: Any
    height: Any
    #: (annotation id, category id, bbox) of its annotations, as the JSON has them
    boxes: tuple[tuple[Any, Any, Any], ...]


def load_coco(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UnusableDataset(f"{path}: cannot read ({error.strerror})") from None
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:  # NaN and Infinity, which Python's json (and so pycocotools) reads and writes
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError) as error:
            raise UnusableDataset(f"{path}: not readable COCO JSON ({str(error).splitlines()[0]})") from None
    if not isinstance(document, dict) or not isinstance(document.get("images"), list):
        raise UnusableDataset(f"{path}: not COCO annotations (no 'images' list)")
    for name in ("annotations", "categories"):
        if not isinstance(document.get(name, []), list):
            raise UnusableDataset(f"{path}: '{name}' is not a list")
    return document


def image_folder(path: Path, first: str | None, root: Path | None) -> Path:
    """Where the images of the annotations at ``path`` lie (see the module docstring)."""
    if root is not None:
        return root
    stem = path.stem.removesuffix(".clean")  # scrub's cleaned copy lies beside its source
    split = stem.split("_", 1)[-1]  # instances_val2017 -> val2017
    # the JSON's folder and the two above it (a quarantine's JSON lies one deeper)
    ancestors = [path.parent, *list(path.parents)[1:3]]
    candidates = [base / split for base in ancestors] + [base / "images" for base in ancestors] + ancestors
    for folder in candidates:
        if folder.is_dir() and (first is None or (folder / first).is_file()):
            return folder
    looked = ", ".join(str(c) for c in candidates[:3])
    raise UnusableDataset(
        f"{path}: cannot find its images (looked for {first} in {looked}); name the folder with --root"
    )


class CocoReader(Reader[Sequence[CocoImage]]):
    format = "coco"
    forks_cleanly = True  # its scan holds the parsed annotations, no handle
    records_per_task = 500
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.BOXES})
    options_used = frozenset({"root"})
    worker_imports = ("PIL.Image",)

    #: the declared category ids (the workers' box checks judge against them)
    category_ids: frozenset = frozenset()
    images: str = ""

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if not (path.is_file() and path.suffix.lower() == ".json"):
            return False
        try:
            with open(path, "rb") as file:
                head = file.read(SNIFF_BYTES)
        except OSError:
            return False
        return b'"images"' in head or (b'"annotations"' in head and b'"categories"' in head)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[Sequence[CocoImage]]]:
        document = load_coco(self.path)
        entries = [entry for entry in document["images"] if isinstance(entry, dict)]
        first = next((str(e["file_name"]) for e in entries if "file_name" in e), None)
        folder = image_folder(self.path, first, self.options.root)
        self.images = self.root = str(folder)
        self.category_ids = frozenset(
            c["id"] for c in document.get("categories", []) if isinstance(c, dict) and "id" in c
        )
        by_image: dict[Any, list[tuple[Any, Any, Any]]] = defaultdict(list)
        for annotation in document.get("annotations", []):
            if isinstance(annotation, dict):
                by_image[annotation.get("image_id")].append(
                    (annotation.get("id"), annotation.get("category_id"), annotation.get("bbox"))
                )
        records = []
        listed = set()
        for number, entry in enumerate(entries):
            listed.add(entry.get("id"))
            records.append(
                CocoImage(
                    number,
                    str(entry.get("file_name", f"#{number}")),
                    entry.get("id"),
                    entry.get("width"),
                    entry.get("height"),
                    tuple(by_image.get(entry.get("id"), ())),
                )
            )
        orphans = sum(len(boxes) for image_id, boxes in by_image.items() if image_id not in listed)
        info = DatasetInfo(
            format=self.format,
            layout="instances",
            root=self.root,
            labelled=True,
            records=len(records),
            classes=[str(c.get("name")) for c in document.get("categories", []) if isinstance(c, dict)],
        )
        info.files[self.path.name] = {
            "images": len(entries),
            "annotations": sum(len(b) for b in by_image.values()),
            "categories": len(self.category_ids),
            "image_folder": str(folder),
        }
        if orphans:
            info.notes.append(
                f"{counted(orphans, 'annotation')} {agreeing(orphans, 'belongs', 'belong')} to no listed "
                f"image: not checked; fix keeps {agreeing(orphans, 'it', 'them')}"
            )
        info.notes.append(f"classes: category ids must be one of the {len(self.category_ids)} declared")
        info.image_root = self.images
        return info, split_records(records, partition_size)

    def read(
        self, partition: Sequence[CocoImage], start: int = 0, stop: int | None = None
    ) -> Iterator[Record]:
        for image in partition[start:stop]:
            record = Record(
                image.key, image.key, image.index, None, None, {"kind": "image", "label_known": False}
            )
            record.meta["categories"] = self.category_ids
            if isinstance(image.width, (int, float)) and isinstance(image.height, (int, float)):
                record.meta["image_size"] = (image.width, image.height)
            boxes, malformed = [], []
            for annotation_id, category, bbox in image.boxes:
                ref = f"annotation {annotation_id}"
                if (
                    not isinstance(bbox, list)
                    or len(bbox) != 4
                    or not all(isinstance(v, (int, float)) for v in bbox)
                ):
                    malformed.append((ref, f"bbox is {str(bbox)[:40]}, not [x, y, width, height]"))
                    continue
                cls = float(category) if isinstance(category, (int, float)) else float("nan")
                x, y, width, height = map(float, bbox)
                boxes.append(Box(ref, cls, x, y, width, height, normalized=False))
            record.meta["boxes"], record.meta["malformed_boxes"] = boxes, malformed
            path = os.path.join(self.images, image.key)
            try:
                with open(path, "rb") as file:
                    record.payload = file.read()
            except OSError as error:
                record.problems.append(
                    problem(record, "missing-file", f"cannot read {image.key}: {error.strerror}")
                )
            yield record

    def members(self, partitions: Sequence[Sequence[CocoImage]]) -> Iterator[str]:
        yield str(self.path)
        for partition in partitions:
            for image in partition:
                yield os.path.join(self.images, image.key)

    def locate(self, partition: Sequence[CocoImage], offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition[o].key, partition[o].key, partition[o].index) for o in offsets]
