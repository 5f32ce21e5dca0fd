"""YOLO detection datasets, as Ultralytics lays them out: ``images/`` and ``labels/`` with the
same sub-folders (``train/``, ``val/``), one ``labels/x.txt`` per ``images/x.jpg`` of lines
``class cx cy w h`` (normalized to the image; a polygon ``class x1 y1 x2 y2 ...`` for
segmentation labels), and a ``data.yaml`` whose ``names`` declare the classes.

A record is an image with its label file: the image is checked as any image, its boxes by the
box checks (`scrub.checks.boxes`). An image without a label file is a background image (a
warning, ``missing-boxes``); a label file without its image is a record of its own (a warning,
``label-without-image``), so that `fix` keeps or sets it aside like any record.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from scrub.checks.base import problem
from scrub.checks.boxes import Box
from scrub.errors import UnusableDataset
from scrub.readers.base import DatasetInfo, Reader, split_records
from scrub.readers.images import holds_a_file
from scrub.readers.segmentation import (
    IMAGE_FOLDERS,
    Pair,
    pair_files,
    read_ahead_pairs,
    unsafe_file,
)
from scrub.records import Carries, Record
from scrub.wording import counted

LABEL_FOLDER = "labels"
YAML_NAMES = ("data.yaml", "dataset.yaml", "data.yml")


def is_label_file(name: str) -> bool:
    return name.endswith(".txt")


def find_yolo_folders(path: Path) -> tuple[Path, Path] | None:
    """(images folder, labels folder) of a YOLO dataset, or None (``labels/`` must hold .txt)."""
    images = next((path / name for name in IMAGE_FOLDERS if (path / name).is_dir()), None)
    labels = path / LABEL_FOLDER
    if images is None or not labels.is_dir() or not holds_a_file(labels, is_label_file):
        return None
    return images, labels


def class_names(path: Path) -> tuple[list[str] | None, str | None]:
    """The class names of the dataset's ``data.yaml`` (``names`` as a list or an id -> name
    mapping, or ``nc`` alone), and the file's name; (None, None) without one."""
    for name in YAML_NAMES:
        file = path / name
        if file.is_file():
            import yaml

            try:
                document = yaml.safe_load(file.read_text(encoding="utf-8"))
            except (yaml.YAMLError, UnicodeDecodeError, OSError) as error:
                raise UnusableDataset(f"{file}: not readable YAML ({str(error).splitlines()[0]})") from None
            if not isinstance(document, dict):
                return None, name
            names: Any = document.get("names")
            if isinstance(names, dict):
                return [str(names[k]) for k in sorted(names)], name
            if isinstance(names, list):
                return [str(n) for n in names], name
            count = document.get("nc")
            if isinstance(count, int) and count > 0:
                return [str(i) for i in range(count)], name
            return None, name
    return None, None


def parse_labels(text: bytes) -> tuple[list[Box], list[tuple[str, str]]]:
    """The boxes of a YOLO label file, and its lines that are not boxes (ref, why)."""
    boxes: list[Box] = []
    malformed: list[tuple[str, str]] = []
    try:
        lines = text.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return [], [("file", "not UTF-8 text")]
    for number, line in enumerate(lines, start=1):
        parts = line.split()
        if not parts:
            continue
        ref = f"line {number}"
        try:
            values = [float(part) for part in parts]
        except ValueError:
            malformed.append((ref, f"not numbers: {line.strip()[:60]!r}"))
            continue
        if len(values) == 5:
            boxes.append(Box(ref, values[0], values[1], values[2], values[3], values[4], True))
        elif len(values) >= 7 and len(values) % 2 == 1:  # a polygon: its bounding box
            xs, ys = values[1::2], values[2::2]
            if not all(map(math.isfinite, xs + ys)):
                boxes.append(Box(ref, values[0], math.nan, math.nan, math.nan, math.nan, True))
                continue
            left, right, top, bottom = min(xs), max(xs), min(ys), max(ys)
            boxes.append(
                Box(ref, values[0], (left + right) / 2, (top + bottom) / 2, right - left, bottom - top, True)
            )
        else:
            malformed.append((ref, f"{counted(len(values), 'number')}, not 5 (class cx cy w h) or a polygon"))
    return boxes, malformed


class YoloReader(Reader[Sequence[Pair]]):
    format = "yolo"
    forks_cleanly = True  # its scan holds pairs of file names, no handle
    records_per_task = 500
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.BOXES})
    worker_imports = ("PIL.Image",)

    image_folder: str = ""
    partner_folder: str = LABEL_FOLDER
    #: the data.yaml (or dataset.yaml) the class names came from, copied by `fix`
    yaml_name: str | None = None

    @classmethod
    def sniff(cls, path: Path) -> bool:
        return path.is_dir() and find_yolo_folders(path) is not None

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[Sequence[Pair]]]:
        folders = find_yolo_folders(self.path)
        if folders is None:
            raise UnusableDataset(
                f"{self.path}: not a YOLO dataset (expected images/ and labels/ of .txt files)"
            )
        self.image_folder = folders[0].name
        self.root = str(self.path)
        pairs, orphans = self.pairs_in(self.path)
        if not pairs:
            raise UnusableDataset(f"{folders[0]}: no images")
        names, self.yaml_name = class_names(self.path)
        info = DatasetInfo(
            format=self.format,
            layout=f"{self.image_folder}/ + {LABEL_FOLDER}/",
            root=self.root,
            labelled=True,  # the boxes' classes are the labels
            records=len(pairs),
            classes=names,
        )
        label_files = sum(pair.partner is not None for pair in pairs)
        info.files[LABEL_FOLDER] = {"label_files": label_files, "without_image": len(orphans)}
        if names:
            info.class_range = (0, len(names))
            info.notes.append(
                f"classes: {len(names)} names from {self.yaml_name}: class ids must lie in [0, {len(names)})"
            )
        else:
            info.notes.append(
                "classes: no data.yaml with names: class ids are checked against --num-classes "
                "(or --label-range) when given, else for being integers only"
            )
        info.image_root = os.path.join(self.root, self.image_folder)
        return info, split_records(pairs, partition_size)

    def pairs_in(self, root: Path) -> tuple[list[Pair], tuple[str, ...]]:
        """The records at ``root``: each image with its label file, then each label file
        without an image, a record of its own (key ``labels/PATH``); and those label files."""
        pairs, orphans = pair_files(root / self.image_folder, root / LABEL_FOLDER, is_label_file)
        pairs += [Pair(len(pairs) + n, f"{LABEL_FOLDER}/{label}", label) for n, label in enumerate(orphans)]
        return pairs, orphans

    def files_of(self, pair: Pair) -> list[tuple[str, str | None]]:
        """(folder, path in it) of each file of a record, the image first (None: it has none)."""
        image = None if self.is_orphan(pair) else pair.key
        return [(self.image_folder, image), (LABEL_FOLDER, pair.partner)]

    def is_orphan(self, pair: Pair) -> bool:
        return pair.key.startswith(f"{LABEL_FOLDER}/") and pair.key == f"{LABEL_FOLDER}/{pair.partner}"

    def read(self, partition: Sequence[Pair], start: int = 0, stop: int | None = None) -> Iterator[Record]:
        pairs = partition[start:stop]
        images = [
            None if self.is_orphan(pair) else os.path.join(self.root, self.image_folder, pair.key)
            for pair in pairs
        ]
        labels = [
            None if pair.partner is None else os.path.join(self.root, LABEL_FOLDER, pair.partner)
            for pair in pairs
        ]
        outside, image_reading, label_reading = read_ahead_pairs(
            self.root,
            [
                ((pair.key, image), (f"{LABEL_FOLDER}/{pair.partner}", label))
                for pair, image, label in zip(pairs, images, labels)
            ],
        )
        for number, pair in enumerate(pairs):
            record = Record(pair.key, pair.key, pair.index, None, None, {"label_known": False})
            shown = outside[number]
            if shown is not None:
                unsafe_file(record, shown)
                yield record
                continue
            if images[number] is None:
                record.problems.append(
                    problem(record, "label-without-image", f"no image for {pair.key} in {self.image_folder}/")
                )
            else:
                record.meta["kind"] = "image"
                record.payload = image_reading.read(number, record, pair.key)
            if labels[number] is None:
                record.problems.append(
                    problem(record, "missing-boxes", f"no label file for {pair.key}: a background image")
                )
            else:
                try:
                    text = label_reading.read_or_raise(number)
                except OSError as error:
                    record.meta["malformed_boxes"] = [("file", f"cannot read: {error.strerror}")]
                else:
                    record.meta["boxes"], record.meta["malformed_boxes"] = parse_labels(text)
            yield record

    def members(self, partitions: Sequence[Sequence[Pair]]) -> Iterator[str]:
        for partition in partitions:
            for pair in partition:
                if not self.is_orphan(pair):
                    yield os.path.join(self.root, self.image_folder, pair.key)
                if pair.partner is not None:
                    yield os.path.join(self.root, LABEL_FOLDER, pair.partner)

    def locate(self, partition: Sequence[Pair], offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition[o].key, partition[o].key, partition[o].index) for o in offsets]
