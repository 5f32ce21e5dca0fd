"""Segmentation datasets: the cleaned copy and the quarantine keep the layout (the same images
and masks folders and sub-folders), each image with its mask on the same side, byte for byte.
Masks that pair with no image and the dataset's other files (a README, VOC's ``ImageSets/``)
go into the cleaned copy unchanged. Each pair is checksummed over both files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from scrub.ledger import Ledger, identity_seed
from scrub.readers.segmentation import SegmentationReader, pair_files
from scrub.writers.base import Tally, Verdicts, Writer


class SegmentationWriter(Writer):
    format = "segmentation"

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        tally = Tally()
        reader: SegmentationReader = self.reader
        clean.mkdir()
        if quarantine is not None:
            quarantine.mkdir()
        for partition in self.dataset.partitions:
            for pair in partition:
                image = os.path.join(reader.root, reader.image_folder, pair.key)
                mask = os.path.join(reader.root, reader.mask_folder, pair.mask) if pair.mask else None
                quarantined = verdicts.quarantined(pair.key, pair.index)
                contents = [_read(image), _read(mask) if mask else None]
                if contents[0] is None and not quarantined:  # an image that cannot be read cannot be kept
                    quarantined = True
                    tally.forced.append(f"{pair.key}: unreadable")
                ledger = tally.quarantined if quarantined else tally.kept
                ledger.add_record(identity_seed(pair.key, pair.mask), *contents)
                if quarantined:
                    tally.records_quarantined += 1
                else:
                    tally.records_kept += 1
                target = quarantine if quarantined else clean
                if target is None:
                    continue
                for folder, relative, data in (
                    (reader.image_folder, pair.key, contents[0]),
                    (reader.mask_folder, pair.mask, contents[1]),
                ):
                    if relative is not None and data is not None:
                        destination = target / folder / relative
                        destination.parent.mkdir(parents=True, exist_ok=True)
                        destination.write_bytes(data)
        tally.other_files = self._copy_the_rest(clean)
        return tally

    def _copy_the_rest(self, clean: Path) -> int:
        """Orphan masks and every file outside the images and masks folders."""
        reader: SegmentationReader = self.reader
        copied = 0
        for orphan in reader.orphans:
            destination = clean / reader.mask_folder / orphan
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(os.path.join(reader.root, reader.mask_folder, orphan), destination)
            copied += 1
        for directory, folders, files in os.walk(reader.root):
            relative = os.path.relpath(directory, reader.root)
            if relative == ".":
                folders[:] = [f for f in folders if f not in (reader.image_folder, reader.mask_folder)]
            folders[:] = sorted(f for f in folders if not f.startswith("."))
            for name in files:
                if name.startswith("."):
                    continue
                destination = clean / relative / name
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(os.path.join(directory, name), destination)
                copied += 1
        return copied

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not target.exists():
            return ledger
        reader: SegmentationReader = self.reader
        images, masks = target / reader.image_folder, target / reader.mask_folder
        pairs, orphans = pair_files(images, masks)
        for pair in pairs:
            mask = str(masks / pair.mask) if pair.mask else None
            ledger.add_record(identity_seed(pair.key, pair.mask), _read(str(images / pair.key)), _read(mask))
        # a mask that lost its image on the way is no pair any more: it must not pass unseen
        for orphan in sorted(set(orphans) - (set(reader.orphans) if side == "clean" else set())):
            ledger.add_record(identity_seed("orphan", orphan), _read(str(masks / orphan)))
        return ledger


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None
