"""The splits of a run: which of its datasets are training and which evaluation splits, by their
names, and the split checks (`scrub.checks.base.split_check`) judged across them once every
dataset of the run is scanned."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from scrub.checks.base import CheckOptions, Finding
from scrub.paths import EVALUATION, TRAINING
from scrub.wording import counted

if TYPE_CHECKING:
    from scrub.options import ScanOptions
    from scrub.scanning.dataset import DatasetScan


def describe_splits(scans: Sequence[DatasetScan]) -> str | None:
    """The run's note on what its split checks compare (None: the run has no splits)."""
    names = {role: [_name(scan) for scan in scans if scan.split == role] for role in (TRAINING, EVALUATION)}
    if not names[TRAINING]:
        return None
    return (
        f"splits: each evaluation split ({', '.join(names[EVALUATION])}) is compared with the training "
        f"split{'s' if len(names[TRAINING]) > 1 else ''} ({', '.join(names[TRAINING])})"
    )


def unused_near_distance(scans: Sequence[DatasetScan], options: ScanOptions) -> str | None:
    """``--near-distance`` set where no image is hashed: said, not passed over."""
    distance = options.checks.near_distance
    if distance == CheckOptions().near_distance or any(scan.checking.perceptual_hashes for scan in scans):
        return None
    return (
        f"{options.origin('near-distance')} {distance}: not used: it compares images (near-duplicate, "
        "split-leak), and this run compared none"
    )


def judge_splits(scans: Sequence[DatasetScan]) -> None:
    """Judge each split check over the run's splits: every evaluation split's column against the
    training splits' columns; the findings go to the evaluation split's records. The columns
    leave the aggregates (their memory goes once the run's findings are made)."""
    checks = {check.id: check for scan in scans if scan.split for check in scan.checks}
    checks = {name: check for name, check in checks.items() if check.kind == "split"}
    for check in checks.values():
        assert check.func is not None  # a split check's judge
        judged = [scan for scan in scans if scan.split and check in scan.checks]
        column_of = {scan: scan.aggregate.columns.pop(check.id).column() for scan in judged}
        training = [scan for scan in judged if scan.split == TRAINING]
        columns = [column_of[scan] for scan in training]
        for scan in judged:
            _note_unnamed(scan, check.id, len(column_of[scan].values))
            if scan.split != EVALUATION:
                continue
            column = column_of[scan]
            leaks = check.func(columns, column, scan.checking)
            copies = _locate_copies(training, columns, [copy for _, copy, _ in leaks])
            judgement = [
                (
                    (int(column.positions[row][0]), int(column.positions[row][1])),
                    _finding(training[owner], copy, distance),
                )
                for (row, (owner, _), distance), copy in zip(leaks, copies)
            ]
            locate, contents = scan.identities()
            scan.aggregate.add_findings(check.id, judgement, locate, contents)


def _locate_copies(
    training: Sequence[DatasetScan], columns: Sequence[Any], copies: Sequence[tuple[int, int]]
) -> list[tuple[str, str, int]]:
    """The identity (source, key, index) of each training copy, located split by split."""
    by_owner: dict[int, list[int]] = {}
    for number, (owner, _) in enumerate(copies):
        by_owner.setdefault(owner, []).append(number)
    found: list[Any] = [None] * len(copies)
    for owner, numbers in by_owner.items():
        positions = [
            (int(columns[owner].positions[copies[n][1]][0]), int(columns[owner].positions[copies[n][1]][1]))
            for n in numbers
        ]
        locate, _ = training[owner].identities()
        for number, identity in zip(numbers, locate(positions)):
            found[number] = tuple(identity)
    return found


def _finding(training: DatasetScan, copy: tuple[str, str, int], distance: int | None) -> Finding:
    """An exact copy (``distance`` None), or an image whose perceptual hash is ``distance`` bits
    from the training image's."""
    source, key, index = copy
    name = _name(training)
    details: dict[str, Any] = {
        "train": {"dataset": str(training.dataset.path), "source": source, "key": key, "index": index},
        "match": "exact" if distance is None else "perceptual",
    }
    if distance is None:
        return Finding(f"also in the training split {name}: {key}", details)
    details["distance"] = distance
    return Finding(
        f"nearly the same image as {key} of the training split {name} (perceptual hashes {distance} "
        "bits apart)",
        details,
    )


def _note_unnamed(scan: DatasetScan, check_id: str, named: int) -> None:
    """Records of a split that carry no content identity are said, never passed over."""
    records = scan.aggregate.records
    if named < records:
        scan.aggregate.notes.append(
            f"{check_id}: no content identity for {counted(records - named, 'record')} of {records:,} "
            "(records that could not be read): not compared across the splits"
        )


def _name(scan: DatasetScan) -> str:
    return PurePath(str(scan.dataset.path).rstrip("/")).name
