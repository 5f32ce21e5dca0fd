"""Datasets of paired files (segmentation images and masks, YOLO images and label files): the
cleaned copy and the quarantine keep the layout (the same folders and sub-folders), each image
with its partner on the same side, byte for byte. Partner files that pair with no image
(segmentation) and the dataset's other files (a README, VOC's ``ImageSets/``, YOLO's
``data.yaml``) go into the cleaned copy unchanged; a YOLO ``data.yaml`` goes into the quarantine
too, so that it is a dataset Ultralytics opens. Each record is checksummed over its files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from scrub.fixing.ledger import Ledger, identity_seed
from scrub.paths import is_within
from scrub.readers.segmentation import SegmentationReader
from scrub.writers.base import Tally, Verdicts, Writer, link_again


class PairsWriter(Writer[SegmentationReader]):
    """The writer of the paired-file readers (`scrub.readers.segmentation`,
    `scrub.readers.yolo`): they say which files a record is (`files_of`) and where records lie
    in a copy (`pairs_in`)."""

    format = "segmentation"

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        tally = Tally()
        reader: Any = self.reader
        clean.mkdir()
        if quarantine is not None:
            quarantine.mkdir()
        went: dict[int, bool] = {}  # record index -> whether it was set aside
        for partition in self.dataset.partitions:
            for pair in partition:
                files = reader.files_of(pair)
                contents = [_read(reader.root, folder, relative) for folder, relative in files]
                quarantined = verdicts.quarantined(pair.key, pair.index)
                if files[0][1] is not None and contents[0] is None and not quarantined:
                    quarantined = True  # an image that cannot be read cannot be kept
                    tally.forced.append(f"{pair.key}: unreadable")
                went[pair.index] = quarantined
                ledger = tally.quarantined if quarantined else tally.kept
                ledger.add_record(identity_seed(pair.key, pair.partner), *contents)
                if quarantined:
                    tally.records_quarantined += 1
                else:
                    tally.records_kept += 1
                target = quarantine if quarantined else clean
                if target is None:
                    continue
                for (folder, relative), data in zip(files, contents):
                    if relative is None:
                        continue
                    if data is not None and _inside(str(target), folder, relative):
                        destination = target / folder / relative
                        destination.parent.mkdir(parents=True, exist_ok=True)
                        destination.write_bytes(data)
                    elif data is None:
                        _link_again(reader.root, folder, relative, target)
        if getattr(reader, "list_file", None) is not None:
            self._write_lists(went, clean, quarantine)
        else:
            tally.other_files = self._copy_the_rest(clean, quarantine)
        return tally

    def _write_lists(self, went: dict[int, bool], clean: Path, quarantine: Path | None) -> None:
        """A pair list's lines, as they were, into the list of the side each pair went to."""
        reader: Any = self.reader
        with open(self.source, encoding="utf-8") as source:
            lines = [line.rstrip("\r\n") for line in source if line.strip()]
        outputs = {False: clean / reader.list_file}
        if quarantine is not None:
            outputs[True] = quarantine / reader.list_file
        sides: dict[bool, list[str]] = {False: [], True: []}
        for index, quarantined in sorted(went.items()):
            sides[quarantined].append(lines[index])
        for side, path in outputs.items():
            path.write_text("".join(f"{line}\n" for line in sides[side]), encoding="utf-8")

    def _copy_the_rest(self, clean: Path, quarantine: Path | None) -> int:
        """Partner files of no record, and every file outside the two folders."""
        reader: Any = self.reader
        copied = 0
        _, orphans = reader.pairs_in(Path(reader.root))
        for orphan in orphans if reader.format == "segmentation" else ():
            destination = clean / reader.partner_folder / orphan
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(os.path.join(reader.root, reader.partner_folder, orphan), destination)
            copied += 1
        for directory, folders, files in os.walk(reader.root):
            relative = os.path.relpath(directory, reader.root)
            if relative == ".":
                folders[:] = [f for f in folders if f not in (reader.image_folder, reader.partner_folder)]
            folders[:] = sorted(f for f in folders if not f.startswith("."))
            for name in files:
                if name.startswith("."):
                    continue
                destination = clean / relative / name
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(os.path.join(directory, name), destination)
                copied += 1
        yaml_name = getattr(reader, "yaml_name", None)
        if yaml_name is not None and quarantine is not None:
            shutil.copyfile(os.path.join(reader.root, yaml_name), quarantine / yaml_name)
        return copied

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not target.exists():
            return ledger
        reader: Any = self.reader
        pairs, orphans = reader.pairs_in(target)
        for pair in pairs:
            contents = [_read(str(target), folder, relative) for folder, relative in reader.files_of(pair)]
            ledger.add_record(identity_seed(pair.key, pair.partner), *contents)
        if reader.format == "segmentation":  # a mask that lost its image on the way must not pass unseen
            _, source_orphans = reader.pairs_in(Path(reader.root))
            for orphan in sorted(set(orphans) - (set(source_orphans) if side == "clean" else set())):
                ledger.add_record(
                    identity_seed("orphan", orphan), _read(str(target), reader.partner_folder, orphan)
                )
        return ledger


class YoloWriter(PairsWriter):
    format = "yolo"


def _read(root: str, folder: str, relative: str | None) -> bytes | None:
    """A record's file, or None: missing, or outside the dataset (a list line's ``../x``: never
    read, never written; its line goes to the quarantine's list)."""
    if relative is None or not _inside(root, folder, relative):
        return None
    try:
        with open(os.path.join(root, folder, relative), "rb") as file:
            return file.read()
    except OSError:
        return None


def _link_again(root: str, folder: str, relative: str, target: Path) -> None:
    """A file of the folders that is a link leaving the dataset (never read: `unsafe-path`) is
    recreated in the output (`link_again`, as `scrub.writers.images` does); anything else that
    could not be read is simply not there."""
    source = os.path.join(root, folder, relative)
    if os.path.islink(source) and is_within(os.path.abspath(source), os.path.abspath(root), itself=False):
        link_again(source, target / folder / relative)


def _inside(root: str, folder: str, relative: str) -> bool:
    real = os.path.realpath(root)
    return is_within(os.path.realpath(os.path.join(root, folder, relative)), real, itself=False)
