"""Where `fix` writes: the cleaned copy and the quarantine, each staged until committed (renamed
into place on a disk, copied into place in object storage: `scrub.storage.buckets`), never
overlapping the source, and a killed run's orphaned quarantine told apart from a user's."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from scrub.errors import UsageError
from scrub.fixing.outputs import StagedOutput
from scrub.manifest import scan_record_path
from scrub.paths import is_within, overlaps
from scrub.scanning.opening import OpenedDataset
from scrub.storage import (
    Location,
    Publication,
    location,
    on_this_machine,
    overlapping,
    same_place,
    storage_of,
)
from scrub.writers.base import Writer

#: the record of a fix, in its quarantine (what `scrub restore` reads)
FIX_RECORD = "fix.json"
#: the manifest a fix quarantined by, in its quarantine
QUARANTINE_MANIFEST = "manifest.jsonl"


def inside_folder(folder: Location | None, name: str) -> Location | None:
    return folder / name if folder is not None else None


def absolute(place: Location) -> str:
    """What names ``place`` from anywhere (a fix record's paths: `scrub restore` runs elsewhere)."""
    return same_place(place)


class FixOutputs:
    """The cleaned copy and the quarantine folder: where they go, staged until committed."""

    def __init__(
        self,
        dataset: OpenedDataset,
        writer: Writer,
        out: str | Path | None,
        quarantine: bool,
        quarantine_dir: str | Path | None,
        force: bool,
        storage: dict[str, Any] | None = None,
    ) -> None:
        self.writer = writer
        clean_path = location(out, storage) if out else dataset.path.parent / writer.clean_name()
        if clean_path.suffix in writer.output_suffixes:  # --out NAME.bin of a pair: its prefix NAME
            clean_path = clean_path.with_suffix("")
        quarantine_path = None
        if quarantine:
            quarantine_path = (
                location(quarantine_dir, storage)
                if quarantine_dir
                else clean_path.parent / f"{writer.base_name()}.quarantine"
            )
        _refuse_overlaps(dataset, clean_path, quarantine_path)
        self.clean: Publication = storage_of(clean_path).publish(
            clean_path, force=force, what="cleaned copy", suffixes=writer.output_suffixes
        )
        self.quarantine: Publication | None = None
        if quarantine_path is not None:  # a killed run's, on a disk: see `_is_orphan`
            orphan = on_this_machine(quarantine_path) and _is_orphan(
                quarantine_path, clean_path, dataset, writer.output_suffixes
            )
            self.quarantine = storage_of(quarantine_path).publish(
                quarantine_path, force=force or orphan, what="quarantine"
            )
        #: whether an output is sent elsewhere once written (object storage: `scrub.storage.buckets`)
        self.remote = any(output is not None and output.uploads for output in (self.clean, self.quarantine))
        for output in (self.clean, self.quarantine):
            if output is not None:
                output.check()
        self.clean_target: Path | None = None
        self.folder: Path | None = None  # the staged quarantine folder

    def stage(self) -> None:
        if self.quarantine is not None:
            self.folder = self.quarantine.stage()
            self.folder.mkdir()  # the quarantine is always a folder
        self.clean_target = self.clean.stage()

    @property
    def quarantine_target(self) -> Path | None:
        return self.folder / self.writer.quarantine_name() if self.folder else None

    @property
    def manifest_target(self) -> Path | None:
        """Where a fresh scan writes its manifest: inside the staged quarantine."""
        return self.folder / QUARANTINE_MANIFEST if self.folder else None

    @property
    def final_manifest(self) -> Path | None:
        return self.quarantine.destination / QUARANTINE_MANIFEST if self.quarantine else None

    def keep_manifest(self, manifest: Path) -> None:
        """Copy a reused manifest (and its scan record) into the quarantine."""
        target = self.manifest_target  # None without a quarantine
        if target is not None:
            shutil.copyfile(manifest, target)
            shutil.copyfile(scan_record_path(manifest), scan_record_path(target))

    def describe(self) -> dict[str, str | None]:
        held = self.quarantine.destination if self.quarantine else None
        return {
            "clean": str(self.clean.destination),
            "dataset": str(self.writer.dataset_in(self.clean.destination)),
            "quarantine": str(held) if held else None,
            "quarantined_dataset": str(held / self.writer.quarantine_name()) if held else None,
        }

    def commit(self, report: dict[str, Any]) -> None:
        """The quarantine first (with the fix record), then the cleaned copy: see `_is_orphan`."""
        if self.quarantine is not None:
            assert self.folder is not None  # staged with the quarantine
            (self.folder / FIX_RECORD).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        for output in (self.quarantine, self.clean):  # into object storage: every object staged first
            if output is not None:
                output.upload()
        if self.quarantine is not None:
            self.quarantine.commit()
        self.clean.commit()

    def discard(self) -> None:
        for output in (self.clean, self.quarantine):
            if output is not None:
                output.discard()


def _refuse_overlaps(dataset: OpenedDataset, clean: Path, quarantine: Path | None) -> None:
    """Outputs must not be, contain or lie inside the source: fix never touches it (and
    ``--force`` would delete what an output replaces)."""
    outputs = [("--out", clean)] + ([("--quarantine-dir", quarantine)] if quarantine is not None else [])
    for option, output in outputs:
        if overlapping(output, dataset.path):
            raise UsageError(
                f"{option} {output}: overlaps the source dataset {dataset.path}; choose another path"
            )
    for option, output in outputs:  # a folder that holds files a list or a pair names
        if (
            on_this_machine(output)
            and on_this_machine(dataset.path)
            and os.path.lexists(output)
            and overlaps(output, dataset.info.root)
            and any(
                is_within(os.path.abspath(member), os.path.abspath(output), itself=False)
                or is_within(os.path.realpath(member), os.path.realpath(output), itself=False)
                for member in dataset.reader.members(dataset.partitions)
            )
        ):
            raise UsageError(f"{option} {output}: holds files of the source dataset; choose another path")
    if quarantine is not None and overlapping(clean, quarantine):
        raise UsageError(f"--out {clean} and --quarantine-dir {quarantine} overlap; choose separate paths")


def _is_orphan(quarantine: Path, clean: Path, dataset: OpenedDataset, suffixes: tuple[str, ...] = ()) -> bool:
    """A quarantine left by a fix of this same dataset that was killed between renaming the
    quarantine and the cleaned copy into place: safe to replace without --force."""
    try:
        record = json.loads((quarantine / FIX_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and os.path.abspath(str(record.get("clean"))) == os.path.abspath(clean)
        and not StagedOutput(clean, force=False, what="", suffixes=suffixes).exists()
        and (record.get("fingerprint") or {}).get("digest") == fingerprint_now(dataset)["digest"]
    )


def fingerprint_now(dataset: OpenedDataset) -> dict[str, Any]:
    """The dataset's fingerprint, taken here when opening left it to a cached scan's lookups."""
    return dataset.fingerprint if dataset.fingerprint is not None else dataset.take_fingerprint()
