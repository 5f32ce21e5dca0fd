"""`restore`: put quarantined records back into the cleaned copy, as `fix` would have kept them.

A restore rewrites the cleaned copy and the quarantine from the source `fix` read, with the
verdicts of the records restored dropped from the quarantine's manifest. The source is never
changed by either, and a restore refuses one that changed since (the fingerprint `fix` recorded);
the outputs are written, read back, verified and renamed into place exactly as `fix` writes them,
in the dataset's own format, every format alike. So restoring everything gives back the source's
records, verified record by record, and restoring some leaves the others in the quarantine, with
their manifest lines.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from scrub.errors import UnusableDataset, UsageError
from scrub.fixing.cleaning import FixResult, fix
from scrub.fixing.destinations import FIX_RECORD, QUARANTINE_MANIFEST
from scrub.fixing.outputs import scratch_directory
from scrub.fixing.reuse import recorded_reading
from scrub.manifest import (
    ManifestWriter,
    read_json_record,
    read_manifest,
    read_scan_record,
    scan_record_path,
    write_scan_record,
)
from scrub.options.model import FixOptions
from scrub.readers.base import names_dataset
from scrub.records import Issue
from scrub.scanning.summary import Progress
from scrub.storage import Location, location, on_this_machine, remote_errors, same_place
from scrub.wording import counted


def restore(
    quarantine: str | Path,
    keys: Sequence[str] | None = None,
    into: str | Path | None = None,
    *,
    progress: Callable[[Progress], None] | None = None,
    **keywords: Any,
) -> FixResult:
    """Put the records of ``quarantine`` (a folder `fix --quarantine` wrote) back into the cleaned
    copy: all of them, or those whose key is in ``keys`` (a record's key, or ``SOURCE:KEY`` where
    keys repeat across files). ``into``: the cleaned copy to write (default: the one that fix
    wrote, replaced). Raises `ScrubError` with one line when the quarantine, the source or a key
    is not what it should be. ``keywords``: how to run (``scheduler``, ``workers``, ``quiet``,
    ...), as for `scrub.fix`."""
    storage = FixOptions.build(**keywords).scan.read.storage
    quarantine = location(quarantine, storage)
    scratch = scratch_directory("restore")
    try:
        held = _held_here(quarantine, Path(scratch.name) / "quarantine")
        record = _fix_record(quarantine, held)
        manifest = held / QUARANTINE_MANIFEST
        scan_record = read_scan_record(manifest)
        source = location(record.get("source_path") or record["source"], storage)
        if not names_dataset(source):
            raise UnusableDataset(
                f"{quarantine}: the source fix read, {source}, is gone: restore writes the cleaned copy "
                "from it (copy the quarantined records back by hand)"
            )
        issues = list(read_manifest(manifest))
        restored = _chosen(issues, keys, quarantine)
        kept = [issue for issue in issues if (issue.source, issue.key) not in restored]
        options = FixOptions.build(
            **recorded_reading(scan_record),
            out=str(into) if into is not None else _clean_of(record),
            quarantine_dir=str(quarantine),
            severity=record.get("severity", "error"),
            link=bool(record.get("link")),
            force=True,
            **keywords,
        )
        _unchanged(source, options, record)
        verdicts = Path(scratch.name) / QUARANTINE_MANIFEST
        writer = ManifestWriter(verdicts)
        for issue in kept:
            writer.write(issue)
        writer.commit()
        write_scan_record(verdicts, scan_record)
        said = f"restored {counted(len(restored), 'record')} from {quarantine}"
        return fix(source, replace(options, manifest=(verdicts,)), progress=progress, extra_notes=[said])
    finally:
        scratch.cleanup()


def _unchanged(source: Location, options: FixOptions, record: dict[str, Any]) -> None:
    """Refuse a source that changed since the fix: the cleaned copy would then not be the one the
    quarantine's records were taken from (a restore puts back records, it does not fix anew)."""
    from scrub.scanning.opening import open_dataset

    dataset = open_dataset(source, options.scan)
    try:
        now = (dataset.fingerprint or {}).get("digest")
    finally:
        dataset.close()
    if now != (record.get("fingerprint") or {}).get("digest"):
        raise UnusableDataset(
            f"{source}: changed since the fix that wrote this quarantine: a restore puts its records back "
            "into that fix's cleaned copy; run scrub fix again instead"
        )


def _clean_of(record: dict[str, Any]) -> str:
    """The cleaned copy fix wrote: as it was named when it still names it from here."""
    named, absolute = record["clean"], record.get("clean_path")
    if absolute is None or same_place(named) == same_place(absolute):
        return str(named)
    return str(absolute)


def _held_here(quarantine: Location, scratch: Path) -> Path:
    """The folder that holds the quarantine's fix record and manifest on this machine: the
    quarantine itself, or, for one in object storage, ``scratch`` with a copy of those files."""
    if on_this_machine(quarantine):
        return Path(quarantine)
    scratch.mkdir()
    for name in (FIX_RECORD, QUARANTINE_MANIFEST, scan_record_path(Path(QUARANTINE_MANIFEST)).name):
        with remote_errors(quarantine), contextlib.suppress(FileNotFoundError):
            quarantine.fs.get_file(f"{quarantine.path.rstrip('/')}/{name}", str(scratch / name))
    return scratch


def _fix_record(quarantine: Location, held: Path) -> dict[str, Any]:
    missing = UnusableDataset(
        f"{quarantine}: not a quarantine `scrub fix --quarantine` wrote (no {FIX_RECORD})"
    )
    return read_json_record(held / FIX_RECORD, "a fix record", "source", missing)


def _chosen(
    issues: Sequence[Issue], keys: Sequence[str] | None, quarantine: Location
) -> set[tuple[str, str]]:
    """The records to restore, as (source, key): every record the manifest names, or those
    ``keys`` name; a key that names none is an error (a typo must not pass for a restore)."""
    held = {(issue.source, issue.key) for issue in issues if issue.status != "resolved"}
    if keys is None:
        return held
    chosen: set[tuple[str, str]] = set()
    for key in keys:
        found = {record for record in held if key in (record[1], f"{record[0]}:{record[1]}")}
        if not found:
            raise UsageError(
                f"--key {key}: {quarantine} holds no such record (see its {QUARANTINE_MANIFEST})"
            )
        chosen |= found
    return chosen
