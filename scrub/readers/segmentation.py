"""Segmentation datasets: a folder of images and a folder of masks with matching names.

The layouts people train from: ``images/`` + ``masks/`` (or ``labels/``, ``annotations/``),
Pascal VOC's ``JPEGImages/`` + ``SegmentationClass/``, mmsegmentation's ``img_dir/`` +
``ann_dir/``, with the same sub-folders (``train/``, ``val/``) on both sides. A record is one
image with its mask: the mask whose path, relative to the masks folder and without its
extension, is the image's (``images/train/0001.jpg`` pairs with ``masks/train/0001.png``). The
record's key is the image's path relative to the images folder; the mask's bytes ride along in
``meta["mask"]`` and the mask checks (`scrub.checks.masks`) judge them. Masks without an image
are named in a note and copied into the cleaned copy.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from scrub.checks.base import problem
from scrub.errors import UnusableDataset, UsageError
from scrub.paths import is_within
from scrub.readers.base import DatasetInfo, ReadAhead, Reader, split_records
from scrub.readers.images import IMAGE_EXTENSIONS, holds_a_file
from scrub.records import Carries, Record
from scrub.wording import agreeing, counted

IMAGE_FOLDERS = ("images", "JPEGImages", "img_dir", "imgs", "img")
MASK_FOLDERS = ("masks", "SegmentationClass", "annotations", "ann_dir", "labels", "mask", "gt")


class Pair(NamedTuple):
    """An image and its partner file (its mask, its YOLO label file; None: missing), as paths
    relative to their folders."""

    index: int  # type: ignore[assignment]  # the field is the record's index (shadows tuple.index)
    key: str
    partner: str | None


def is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def files_below(folder: Path, wanted: Callable[[str], bool] = is_image_name) -> list[str]:
    """The files below ``folder`` whose names are ``wanted`` (hidden ones skipped), as sorted
    POSIX relative paths."""
    found = []
    for directory, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        relative = os.path.relpath(directory, folder)
        for name in files:
            if not name.startswith(".") and wanted(name):
                found.append(name if relative == "." else f"{relative}/{name}".replace(os.sep, "/"))
    return sorted(found)


def pair_files(
    images: Path, masks: Path, is_partner: Callable[[str], bool] = is_image_name
) -> tuple[list[Pair], tuple[str, ...]]:
    """Every image below ``images`` with its partner below ``masks`` (a mask, a YOLO label file:
    the same relative path without the extension), and the partners that pair with no image."""
    by_stem: dict[str, str] = {}
    for mask in files_below(masks, is_partner) if masks.is_dir() else []:
        by_stem.setdefault(os.path.splitext(mask)[0], mask)
    pairs = []
    used = set()
    for number, key in enumerate(files_below(images) if images.is_dir() else []):
        found = by_stem.get(os.path.splitext(key)[0])
        if found is not None:
            used.add(found)
        pairs.append(Pair(number, key, found))
    return pairs, tuple(sorted(set(by_stem.values()) - used))


def is_pair_list(path: Path, sample: int = 20) -> bool:
    """A text file whose first lines are each two image paths: an image and its mask."""
    if path.suffix.lower() not in (".txt", ".lst", ".list", ""):
        return False
    try:
        with open(path, encoding="utf-8") as file:
            lines = [line.split() for _, line in zip(range(sample), (x for x in file if x.strip()))]
    except (OSError, UnicodeDecodeError):
        return False
    return bool(lines) and all(len(parts) == 2 and all(map(is_image_name, parts)) for parts in lines)


def list_lines(path: Path) -> list[tuple[str, str | None]]:
    """(image, mask) of each non-empty line of a pair list (mask None on a line without one)."""
    try:
        with open(path, encoding="utf-8") as file:
            parts = [line.split() for line in file if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise UnusableDataset(f"{path}: not a readable list file ({error})") from None
    return [(p[0], p[1] if len(p) > 1 else None) for p in parts]


def _listed_pair(number: int, root: Path, line: tuple[str, str | None]) -> Pair:
    image, mask = line
    return Pair(number, _relative(root, image) or image, _relative(root, mask))


def _relative(root: Path, path: str | None) -> str | None:
    """A listed path as scrub keeps it: relative to the root; a leading ``/`` that names no file
    is the root's (DeepLab's ``/JPEGImages/x.jpg``)."""
    if path is None:
        return None
    if path.startswith("/") and not os.path.exists(path):
        return path.lstrip("/")
    return os.path.relpath(path, root) if os.path.isabs(path) else path


def find_folders(path: Path) -> tuple[Path, Path] | None:
    """(images folder, masks folder) of a segmentation dataset, or None: both must exist, and the
    masks folder must hold images (a ``labels/`` of ``.txt`` files is YOLO's, not masks)."""
    images = next((path / name for name in IMAGE_FOLDERS if (path / name).is_dir()), None)
    if images is None:
        return None
    for name in MASK_FOLDERS:
        masks = path / name
        if masks.is_dir() and holds_a_file(masks, is_image_name):
            return images, masks
    return None


def first_outside(real_root: str, files: Sequence[tuple[str | None, str | None]]) -> str | None:
    """The first of a record's files, as (shown, path to read), whose path leads out of the
    dataset's ``real_root`` (its real path), through any link: a list line's ``../x``, or a file
    of the folders that is a link to elsewhere. Such a file is never read (`unsafe-path`)."""
    for shown, path in files:
        if path is not None and not is_within(os.path.realpath(path), real_root, itself=False):
            return shown
    return None


def read_ahead_pairs(
    root: str | Path, files: Sequence[tuple[tuple[str | None, str | None], tuple[str | None, str | None]]]
) -> tuple[list[str | None], ReadAhead, ReadAhead]:
    """For a partition's records, each with two files as (shown, path to read): which file of
    each leads out of the dataset (`first_outside`, checked before anything is read ahead), and
    a `ReadAhead` over each side that never opens a file of such a record."""
    real_root = os.path.realpath(root)
    outside = [first_outside(real_root, record_files) for record_files in files]
    first, second = (
        ReadAhead([None if out else record_files[side][1] for out, record_files in zip(outside, files)])
        for side in (0, 1)
    )
    return outside, first, second


def unsafe_file(record: Record, shown: str) -> None:
    """The problem of a record whose file leads out of the dataset: it is not read."""
    record.problems.append(
        problem(record, "unsafe-path", f"not read: {shown} resolves outside the dataset root")
    )


class SegmentationReader(Reader[Sequence[Pair]]):
    format = "segmentation"
    forks_cleanly = True  # its scan holds pairs of file names, no handle
    records_per_task = 500
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.MASKS})
    worker_imports = ("PIL.Image", "numpy")

    #: the images and masks folders, relative to the dataset (set by `open`)
    image_folder: str = ""
    partner_folder: str = ""
    #: masks that pair with no image, relative to the masks folder
    orphans: tuple[str, ...] = ()

    options_used = frozenset({"root"})
    #: a list file of ``image mask`` lines (mmsegmentation's and DeepLab's): its name
    list_file: str | None = None

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_file():
            return is_pair_list(path)
        return path.is_dir() and find_folders(path) is not None

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[Sequence[Pair]]]:
        if self.path.is_file():
            return self._open_list(partition_size)
        if self.options.root is not None:
            raise UsageError(f"--root: applies to list files; {self.path} is a folder")
        folders = find_folders(self.path)
        if folders is None:
            raise UnusableDataset(
                f"{self.path}: not a segmentation dataset (expected an images folder, one of "
                f"{', '.join(IMAGE_FOLDERS)}, and a masks folder of images, one of {', '.join(MASK_FOLDERS)})"
            )
        images, masks = folders
        self.image_folder, self.partner_folder = images.name, masks.name
        self.root = str(self.path)
        pairs, self.orphans = pair_files(images, masks)
        if not pairs:
            raise UnusableDataset(f"{images}: no images")
        paired = sum(pair.partner is not None for pair in pairs)
        info = DatasetInfo(
            format=self.format,
            layout=f"{self.image_folder}/ + {self.partner_folder}/",
            root=self.root,
            labelled=True,  # the masks are the labels
            records=len(pairs),
        )
        info.files[self.partner_folder] = {"masks": paired + len(self.orphans), "paired": paired}
        if self.orphans:
            shown = ", ".join(self.orphans[:5]) + (
                f" and {len(self.orphans) - 5} more" if len(self.orphans) > 5 else ""
            )
            info.notes.append(
                f"{counted(len(self.orphans), 'mask')} {agreeing(len(self.orphans), 'pairs', 'pair')} "
                f"with no image ({shown}): not records; "
                "copied into the cleaned copy"
            )
        info.image_root = os.path.join(self.root, self.image_folder)
        return info, split_records(pairs, partition_size)

    def _open_list(self, partition_size: int) -> tuple[DatasetInfo, list[Sequence[Pair]]]:
        """A list file: each line an image and its mask, relative to ``--root`` or the list's
        folder (a leading ``/`` too, as DeepLab's lists write them, where no such file exists)."""
        root = self.options.root or self.path.parent
        self.root, self.list_file = str(root), self.path.name
        pairs = [_listed_pair(number, root, line) for number, line in enumerate(list_lines(self.path))]
        if not pairs:
            raise UnusableDataset(f"{self.path}: the list file is empty")
        info = DatasetInfo(
            format=self.format,
            layout=DatasetInfo.LIST_FILE,
            root=self.root,
            labelled=True,
            records=len(pairs),
        )
        info.files[self.path.name] = {"pairs": len(pairs)}
        info.image_root = os.path.join(self.root, self.image_folder)
        return info, split_records(pairs, partition_size)

    def read(self, partition: Sequence[Pair], start: int = 0, stop: int | None = None) -> Iterator[Record]:
        pairs = partition[start:stop]
        names = [
            None if pair.partner is None else posixpath.join(self.partner_folder, pair.partner)
            for pair in pairs
        ]
        outside, image_reading, mask_reading = read_ahead_pairs(
            self.root,
            [
                (
                    (pair.key, os.path.join(self.root, self.image_folder, pair.key)),
                    (name, None if name is None else os.path.join(self.root, name)),
                )
                for pair, name in zip(pairs, names)
            ],
        )
        for number, pair in enumerate(pairs):
            record = Record(
                pair.key, pair.key, pair.index, None, None, {"kind": "image", "label_known": False}
            )
            shown = outside[number]
            if shown is not None:
                unsafe_file(record, shown)
                yield record
                continue
            record.payload = image_reading.read(number, record, pair.key)
            name = names[number]
            if name is None:
                record.problems.append(
                    problem(record, "missing-mask", f"no mask for {pair.key} in {self.partner_folder}/")
                )
            else:
                record.meta["mask_name"] = name
                mask = mask_reading.read(number, record, name, "missing-mask")
                if mask is not None:
                    record.meta["mask"] = mask
            yield record

    def files_of(self, pair: Pair) -> list[tuple[str, str | None]]:
        """(folder, path in it) of each file of a record, the image first (None: it has none)."""
        return [(self.image_folder, pair.key), (self.partner_folder, pair.partner)]

    def pairs_in(self, root: Path) -> tuple[list[Pair], tuple[str, ...]]:
        """The records of a copy of this dataset at ``root`` (a written output), and its
        partner files that are no record's."""
        if self.list_file is not None:
            listed = root / self.list_file
            lines = list_lines(listed) if listed.is_file() else []
            return [_listed_pair(n, root, line) for n, line in enumerate(lines)], ()
        return pair_files(root / self.image_folder, root / self.partner_folder)

    def members(self, partitions: Sequence[Sequence[Pair]]) -> Iterator[str]:
        for partition in partitions:
            for pair in partition:
                yield os.path.join(self.root, self.image_folder, pair.key)
                if pair.partner is not None:
                    yield os.path.join(self.root, self.partner_folder, pair.partner)

    def locate(self, partition: Sequence[Pair], offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition[o].key, partition[o].key, partition[o].index) for o in offsets]
