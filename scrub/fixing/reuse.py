"""The verdicts `fix --manifest` reuses instead of scanning: a scan's manifest (its scan record's
fingerprint must match the dataset as it is now, and its checking options the ones given), and
NaN guards' (`scrub.guard`), whose records are found in the dataset by their names."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from scrub.checks.base import CheckOptions
from scrub.errors import ScrubError, UsageError
from scrub.manifest import (
    GUARD_KIND,
    ManifestWriter,
    read_manifest,
    read_scan_record,
    write_scan_record,
)
from scrub.options.model import FixOptions, ScanOptions, build, flatten, given_values
from scrub.readers.base import ReadOptions
from scrub.records import Issue, Severity
from scrub.scanning.opening import OpenedDataset
from scrub.wording import agreeing, counted

#: reading options a scan's record holds that `fix --manifest` does not take over unasked:
#: unpickling runs code, and consent is given per run (the fix then reads the values again)
NOT_TAKEN = frozenset({"allow_pickle"})


@dataclass
class Reused:
    """The manifests a fix reuses instead of scanning: at most one scan's (fingerprinted), and
    NaN guards' (`scrub.guard`), whose records are found in the dataset by their names."""

    scans: list[Path]
    guards: list[Path]
    summary: dict[str, Any]  # the scan's record, or what a guard-only fix can say of the dataset

    def describe(self) -> list[dict[str, str]]:
        return [{"manifest": str(m), "kind": "scan"} for m in self.scans] + [
            {"manifest": str(m), "kind": GUARD_KIND} for m in self.guards
        ]

    def merge(self, target: Path, dataset: OpenedDataset, threshold: Severity) -> list[str]:
        """Write the verdicts of every reused manifest to ``target`` as one manifest (with the
        scan's record beside it, or the guard's): the guards' lines named as this dataset names
        its records (their index is scrub's; ``details.training_index`` the training's). Returns
        the notes to say (guard lines below ``threshold`` that name no record of the dataset, and
        the records the guards named below it only: kept)."""
        writer = ManifestWriter(target)
        set_aside: set[int | None] = set()  # the records a line at or above the threshold names
        below: dict[int | None, str] = {}  # those a guard's line below it names, and its check
        try:
            for scan in self.scans:
                for issue in read_manifest(scan):
                    writer.write(issue)
                    if issue.severity.at_least(threshold) and issue.status != "resolved":
                        set_aside.add(issue.index)
            unknown = 0
            for named in _named_in(dataset, self.guards, threshold):
                if named is None:
                    unknown += 1
                    continue
                writer.write(named)
                if named.severity.at_least(threshold) and named.status != "resolved":
                    set_aside.add(named.index)
                elif named.status != "resolved":
                    below.setdefault(named.index, named.check)
        except BaseException:
            writer.discard()
            raise
        writer.commit()
        write_scan_record(target, self.summary)
        notes = []
        if unknown:
            notes.append(
                f"{counted(unknown, 'guard line')} below --severity {threshold.value} "
                f"{agreeing(unknown, 'names', 'name')} no record of {dataset.path}: left out"
            )
        kept = Counter(check for index, check in below.items() if index not in set_aside)
        if kept:
            checks = ", ".join(f"{check} {count:,}" for check, count in sorted(kept.items()))
            notes.append(
                f"kept {counted(kept.total(), 'record')} the NaN guard named with warnings only ({checks}): "
                "--severity warning sets them aside too"
            )
        return notes


def reused_verdicts(manifests: Sequence[Path], dataset: OpenedDataset, options: ScanOptions) -> Reused:
    """The manifests ``fix --manifest`` names, each checked (`_reusable_scan` for a scan's)."""
    scans, guards = [], []
    summary = None
    for manifest in map(Path, manifests):
        record = read_scan_record(manifest)
        if record.get("kind") == GUARD_KIND:
            guards.append(manifest)
            continue
        summary = reusable_scan(manifest, dataset, options, record)
        scans.append(manifest)
    if len(scans) > 1:
        raise UsageError(
            f"--manifest: {scans[0]} and {scans[1]} are both scans' manifests: reuse one (with the NaN "
            "guard's findings if you like), or scan again"
        )
    if summary is None:  # a guard's findings only: no scan fingerprinted the dataset; say what it is now
        summary = {
            "kind": GUARD_KIND,
            "path": str(dataset.path),
            "records": dataset.info.records,
            "reading": dataset.reading,
            "fingerprint": dataset.fingerprint,
            "manifests": [str(m) for m in guards],
        }
    return Reused(scans, guards, summary)


def recorded_reading(record: dict[str, Any]) -> dict[str, Any]:
    """The reading options a scan record holds (`ReadOptions.recorded`: the format, the options
    that decide what a record is), by attribute, those left at their default aside."""
    reading = record.get("reading") or {}
    # a check option is recorded with the reading where it shaped the records (`Reader.shaped_by`)
    known = set(ReadOptions().recorded("")) | {item.name for item in fields(CheckOptions)}
    return {name: value for name, value in reading.items() if name in known and value not in (None, False)}


def with_scan_reading(options: FixOptions) -> tuple[FixOptions, list[str]]:
    """``options`` with the reading options of the scan whose manifest ``fix --manifest`` reuses
    taken from its record where not given now (``--max-length`` of a token file, ``--data-key``,
    ``--format``...): the records must be read as the scan read them for its verdicts to name
    them, and asking again for what the record holds helps no one. Returns the options and a
    note naming what was taken (nothing is taken silently)."""
    scans = [m for m in map(Path, options.manifest) if read_scan_record(m).get("kind") != GUARD_KIND]
    if not scans:
        return options, []
    record = read_scan_record(scans[0])
    now = flatten(options)
    taken = {
        name.replace("_", "-"): value
        for name, value in recorded_reading(record).items()
        if name not in NOT_TAKEN
        and name.replace("_", "-") in now
        and now[name.replace("_", "-")] in (None, False, ())  # not given now
    }
    if not taken:
        return options, []
    origins = dict(options.scan.origins)
    values = given_values(options) | taken
    where = origins | {name: f"{scans[0]}'s scan record: {name}" for name in taken}
    shown = ", ".join(f"--{name} {value}" for name, value in taken.items())
    return build(FixOptions, values, where), [f"read as {scans[0]} was scanned: {shown} (its scan record)"]


def _named_in(dataset: OpenedDataset, guards: Sequence[Path], threshold: Severity) -> Iterator[Issue | None]:
    """The lines of NaN guards' manifests as this dataset's issues: each record found by its
    (source, key), as the guard named it, through the reader (`Reader.locate`); None for a line
    below ``threshold`` that names no record here. One at or above it is an error: a fix must
    not guess which record a finding meant."""
    lines = [issue for guard in guards for issue in read_manifest(guard)]
    wanted = {(issue.source, issue.key) for issue in lines}
    found: dict[tuple[str, str], int] = {}
    reader = dataset.reader
    for partition in dataset.partitions:
        for source, key, index in reader.locate(partition, range(len(partition))):
            if (source, key) in wanted:
                found[(source, key)] = index
    missing = [
        issue
        for issue in lines
        if (issue.source, issue.key) not in found
        and issue.severity.at_least(threshold)
        and issue.status != "resolved"
    ]
    if missing:
        first = missing[0]
        how = first.details.get("named_by", "?")
        hint = (
            "the guard could name them by index only: give NanGuard key=, or the dataset a record_key(index)"
            if how == "index"
            else "was the run trained on this dataset?"
        )
        raise UsageError(
            f"--manifest: the NaN guard's findings name {len(missing):,} records that {dataset.path} does "
            f"not hold (the first: {first.source}:{first.key}, named by {how}); {hint}"
        )
    for issue in lines:
        position = found.get((issue.source, issue.key))
        if position is None:
            yield None
            continue
        yield replace(issue, index=position, details={**issue.details, "training_index": issue.index})


def reusable_scan(
    manifest: Path, dataset: OpenedDataset, options: ScanOptions, record: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The scan record of ``manifest``, if it describes this dataset as it is now and was
    judged with the checking options given now (an option not given takes the scan's value)."""
    record = record if record is not None else read_scan_record(manifest)
    defaults = ScanOptions().verdict_options()
    recorded = {**defaults, **(record.get("options") or {})}
    for name, value in options.verdict_options().items():
        if value != defaults[name] and value != recorded[name]:
            flag = options.origin(name.replace("_", "-") if name != "plugins" else "plugin")
            raise UsageError(
                f"{flag}: {manifest} was scanned with {name.replace('_', '-')} = {_shown(recorded[name])}, "
                f"not {_shown(value)}: its verdicts are not the ones asked for; scan again with these "
                "options, "
                "or run fix without --manifest"
            )
    fingerprint = record.get("fingerprint") or {}
    assert dataset.fingerprint is not None  # taken on opening: --manifest excludes --cache
    if fingerprint.get("digest") != dataset.fingerprint["digest"]:
        raise ScrubError(
            f"{manifest}: this manifest does not describe {dataset.path} as it is now (the dataset "
            f"changed since the scan, or the scan was of another dataset or with other reading options: "
            f"{fingerprint.get('files', '?')} files then, {dataset.fingerprint['files']} now); scan again, "
            "or run fix without --manifest"
        )
    return record


def _shown(value: Any) -> str:
    return "not set" if value in (None, [], {}) else json.dumps(value)
