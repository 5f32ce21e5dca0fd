"""The splits of a run: which of its datasets are training and which evaluation splits, by their
names, and the split checks (`scrub.checks.base.split_check`) judged across them once every
dataset of the run is scanned."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from scrub.checks.base import Check, CheckOptions, Finding, Position
from scrub.checks.splits import column_layout
from scrub.paths import EVALUATION, TRAINING
from scrub.scanning.columnstores import ColumnStore, RareValueStore
from scrub.scanning.joins import joined_on_cluster, leaks_on_cluster
from scrub.wording import counted

if TYPE_CHECKING:
    from scrub.options.model import ScanOptions
    from scrub.scanning.dataset import DatasetScan
    from scrub.scanning.history import History

#: the split check whose columns a store of kept training splits holds (``--against``)
KEPT = "split-leak"


def describe_splits(scans: Sequence[DatasetScan], kept: Sequence[str] = ()) -> str | None:
    """The run's note on what its split checks compare (None: the run has no splits);
    ``kept``: the names of the training splits earlier runs kept (``--against``)."""
    names = {role: [_name(scan) for scan in scans if scan.split == role] for role in (TRAINING, EVALUATION)}
    training = names[TRAINING] + [f"{name} (kept)" for name in kept]
    if not training or not names[EVALUATION]:
        return None
    return (
        f"splits: each evaluation split ({', '.join(names[EVALUATION])}) is compared with the training "
        f"split{'s' if len(training) > 1 else ''} ({', '.join(training)})"
    )


def unused_comparisons(scans: Sequence[DatasetScan], options: ScanOptions) -> list[str]:
    """``--near-distance`` set where no image is hashed, ``--near-text`` where no split's texts
    are signed: each said, not passed over."""
    unused = []
    distance = options.checks.near_distance
    if distance != CheckOptions().near_distance and not any(
        scan.checking.perceptual_hashes for scan in scans
    ):
        unused.append(
            f"{options.origin('near-distance')} {distance}: not used: it compares images (near-duplicate, "
            "split-leak), and this run compared none"
        )
    signing = any(
        c.id == "near-duplicate-text"
        or c.kind == "split"
        and column_layout(np.dtype(c.column_dtype).itemsize)[1]
        for s in scans
        for c in s.checks
    )
    if options.checks.near_text and not signing:
        unused.append(
            f"{options.origin('near-text')} {options.checks.near_text:g}: not used: it compares texts (JSON "
            "Lines text, chat, prompt and completion: near-duplicate-text, split-leak), and this run read "
            "no token data"
        )
    return unused


class TrainingSplit(Protocol):
    """A training split as a split check's judgement sees it: scanned in this run
    (`ScannedSplit`) or kept by an earlier one (`scrub.scanning.history.KeptSplit`)."""

    column: Any

    @property
    def path(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def kept(self) -> str | None:
        """When an earlier run kept it (UTC, ISO 8601); None for a split of this run."""

    def locate(self, positions: Sequence[Position]) -> list[tuple[str, str, int]]: ...


@dataclass
class ScannedSplit:
    """A training split of this run, with its column."""

    scan: DatasetScan
    column: Any

    @property
    def path(self) -> str:
        return str(self.scan.dataset.path)

    @property
    def name(self) -> str:
        return _name(self.scan)

    @property
    def kept(self) -> str | None:
        return None

    def locate(self, positions: Sequence[Position]) -> list[tuple[str, str, int]]:
        locate, _ = self.scan.identities()
        return [tuple(identity) for identity in locate(positions)]


def judge_splits(scans: Sequence[DatasetScan], history: History | None = None) -> list[str]:
    """Judge each split check over the run's splits: every evaluation split's column against the
    training splits' columns (with ``history``, the kept ones too; then this run's training
    splits are kept); the findings go to the evaluation split's records. The columns leave the
    aggregates (their memory goes once the run's findings are made). Returns the names of the
    kept training splits compared."""
    checks = {check.id: check for scan in scans if scan.split for check in scan.checks}
    checks = {name: check for name, check in checks.items() if check.kind == "split"}
    kept_names: list[str] = []
    for check in checks.values():
        assert check.func is not None  # a split check's judge
        judged = [scan for scan in scans if scan.split and check.id in {c.id for c in scan.checks}]
        stores = {scan: scan.aggregate.columns.pop(check.id) for scan in judged}
        on_cluster = joined_on_cluster(list(stores.values()))
        column_of = {} if on_cluster else {scan: store.column() for scan, store in stores.items()}
        training: list[TrainingSplit] = [
            ScannedSplit(scan, column_of.get(scan)) for scan in judged if scan.split == TRAINING
        ]
        kept = (
            history.kept([str(scan.dataset.path) for scan in scans]) if history and check.id == KEPT else []
        )
        training += kept
        kept_names += [split.name for split in kept]
        if history is not None and check.id == KEPT and not training:
            history.notes.append(
                f"{history.given} {history.folder}: holds no training split yet, nor does this run: "
                "the evaluation splits were compared with nothing"
            )
        for scan in judged:
            _note_unnamed(scan, check.id, _count(stores[scan]))
            if scan.split != EVALUATION:
                continue
            if on_cluster:
                leaks = _leaks_on_cluster(judged, stores, scan, training)
            else:
                leaks = _leaks_here(check, training, column_of[scan], scan)
            copies = _locate_copies(training, [(owner, copy) for _, owner, copy, _ in leaks])
            judgement = [
                (position, _finding(training[owner], copy, distance))
                for (position, owner, _, distance), copy in zip(leaks, copies)
            ]
            locate, contents = scan.identities()
            scan.aggregate.add_findings(check.id, judgement, locate, contents)
        if history is not None and check.id == KEPT:
            for split in training[: len(training) - len(kept)]:
                assert isinstance(split, ScannedSplit)
                kept_records = history.keep(split.path, split.column, split.scan.identities()[0])
                history.notes.append(
                    f"{history.given} {history.folder}: kept the training split {split.name} "
                    f"({counted(kept_records, 'record')}) for later runs"
                )
    return kept_names


#: a leak as the judgement takes it: the evaluation record's position, the index of the training
#: split holding its copy, the copy's position, the distance (None: an exact copy)
PlacedLeak = tuple[Position, int, Position, "int | float | None"]


def _leaks_here(
    check: Check, training: Sequence[TrainingSplit], column: Any, scan: DatasetScan
) -> list[PlacedLeak]:
    """The split check's own judgement, in this process, of the columns it holds."""
    assert check.func is not None
    leaks = check.func([split.column for split in training], column, scan.checking)
    return [
        (_position(column, row), owner, _position(training[owner].column, copy), distance)
        for row, (owner, copy), distance in leaks
    ]


def _leaks_on_cluster(
    judged: Sequence[DatasetScan], stores: dict, scan: DatasetScan, training: Sequence[TrainingSplit]
) -> list[PlacedLeak]:
    """`split-leak` of columns left on the cluster, joined there (`scrub.scanning.joins`): the
    training splits and the evaluation split tagged by their place in ``judged``."""
    tags = {scan: tag for tag, scan in enumerate(judged)}
    scanned = [(owner, split) for owner, split in enumerate(training) if isinstance(split, ScannedSplit)]
    owners = {tags[split.scan]: owner for owner, split in scanned}
    found = leaks_on_cluster(
        [(tags[split.scan], stores[split.scan]) for _, split in scanned],
        (tags[scan], stores[scan]),
        scan.checking.near_distance,
    )
    return [(position, owners[tag], copy, distance) for position, tag, copy, distance in found]


def _count(store: ColumnStore | RareValueStore) -> int:
    assert isinstance(store, ColumnStore)  # a split check's column holds identities
    return store.count


def _position(column: Any, row: int) -> Position:
    return int(column.positions[row][0]), int(column.positions[row][1])


def _locate_copies(
    training: Sequence[TrainingSplit], copies: Sequence[tuple[int, Position]]
) -> list[tuple[str, str, int]]:
    """The identity (source, key, index) of each training copy (owner, position), located split
    by split."""
    by_owner: dict[int, list[int]] = {}
    for number, (owner, _) in enumerate(copies):
        by_owner.setdefault(owner, []).append(number)
    found: list[Any] = [None] * len(copies)
    for owner, numbers in by_owner.items():
        positions = [copies[number][1] for number in numbers]
        for number, identity in zip(numbers, training[owner].locate(positions)):
            found[number] = tuple(identity)
    return found


def _finding(training: TrainingSplit, copy: tuple[str, str, int], distance: int | float | None) -> Finding:
    """An exact copy (``distance`` None), an image whose perceptual hash is ``distance`` bits
    from the training image's, or a text whose estimated Jaccard similarity is ``distance`` (a
    float) (of a split kept by an earlier run: ``train.kept``, when)."""
    source, key, index = copy
    name = training.name
    details: dict[str, Any] = {
        "train": {"dataset": training.path, "source": source, "key": key, "index": index},
        "match": "exact" if distance is None else "perceptual",
    }
    if training.kept is not None:
        details["train"]["kept"] = training.kept
    if distance is None:
        return Finding(f"also in the training split {name}: {key}", details)
    if isinstance(distance, float):
        details.update(match="minhash", similarity=distance)
        return Finding(
            f"nearly the same text as {key} of the training split {name} (estimated Jaccard similarity "
            f"{distance:.2f})",
            details,
        )
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
            "(records that could not be read, or empty): not compared across the splits"
        )


def _name(scan: DatasetScan) -> str:
    return PurePath(str(scan.dataset.path).rstrip("/")).name
