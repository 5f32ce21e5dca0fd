"""The result cache's side of a scan: the work on the records it does not hold (`SubsetWork`),
and the results it holds, made partition results again (`Reuse`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from scrub import checks as _catalogue  # noqa: F401 - registers the built-in checks
from scrub.checks.base import (
    COLUMN_KINDS,
    Check,
)
from scrub.readers.base import Reader
from scrub.records import Issue
from scrub.scanning.results import Columns, NumericStats, PartitionResult
from scrub.scanning.runner import PartitionWork, finish_columns

if TYPE_CHECKING:
    from scrub.scanning.cache import Snapshot


@dataclass(frozen=True)
class Subset:
    """Some records of a partition (the ones a cache could not answer for), and where they sit."""

    partition_no: int
    records: Sequence[Any]  # a partition of the reader's, of only these records
    offsets: tuple[int, ...]  # their offsets in the original partition

    def __len__(self) -> int:
        return len(self.offsets)


class SubsetWork:
    """Runs a `PartitionWork` on `Subset` s, giving results in the original partitions' terms
    (the same partition number and offsets a full scan gives, so dataset checks judge alike)."""

    def __init__(self, work: PartitionWork) -> None:
        self.work = work

    def __call__(
        self,
        number: int,
        subset: Subset,
        start: int = 0,
        stop: int | None = None,
        on_record: Callable[[int], None] | None = None,
    ) -> PartitionResult:
        result = self.work(subset.partition_no, subset.records, start, stop, on_record)
        mapping = np.asarray(subset.offsets, dtype=np.int64)
        for name, column in result.columns.items():
            offsets = np.asarray(column[0], dtype=np.int64)
            result.columns[name] = (mapping[offsets] if len(offsets) else offsets, *column[1:])
        result.captured = [
            (subset.offsets[offset], digest, outcome, values)
            for offset, digest, outcome, values in result.captured
        ]
        result.offsets = [subset.offsets[offset] for offset in result.offsets]
        result.file_versions = [
            (subset.offsets[offset], size, mtime) for offset, size, mtime in result.file_versions
        ]
        return result

    def failure(self, number: int, subset: Subset, offset: int, reason: str) -> PartitionResult:
        return self.work.failure(subset.partition_no, subset.records, offset, reason)


class Reuse:
    """Partial results rebuilt from a cache's stored outcomes (driver side).

    Works on the snapshot's columns: the statistics of the reused records are their outcomes'
    counts times each distinct outcome's (most records share a few), and only the records
    whose outcome holds issues become objects."""

    def __init__(self, reader: Reader, checks: Sequence[Check]) -> None:
        self.reader = reader
        self.dataset = [c for c in checks if c.kind in COLUMN_KINDS]  # the cache's columns, in order
        self.ids = {c.id for c in checks}
        self._decoded: dict[bytes, tuple] = {}

    def result(
        self,
        partition_no: int,
        partition: Sequence[Any],
        offsets: Sequence[int],
        rows: np.ndarray,
        snapshot: Snapshot,
    ) -> PartitionResult:
        """The result of the records at ``offsets`` of ``partition``, stored at ``rows``."""
        result = PartitionResult(partition_no, records=len(offsets))
        numbers = snapshot.profile_numbers[rows]
        counts = np.bincount(numbers, minlength=len(snapshot.profiles)) if len(numbers) else numbers
        with_issues: list[tuple[int, list[str]]] = []
        with_numeric: list[tuple[int, dict]] = []
        for number in np.flatnonzero(counts).tolist():
            issues, stats, numeric = self._decode(snapshot.profiles[number])
            count = int(counts[number])
            for name, items in stats.items():
                for value, n in items:
                    result.stats[name][value] += n * count
            if issues or numeric:
                at = [offsets[i] for i in np.flatnonzero(numbers == number).tolist()]
                with_issues += [(offset, issues) for offset in at] if issues else []
                with_numeric += [(offset, numeric) for offset in at] if numeric else []
        with_numeric.sort(key=lambda item: item[0])
        for _, numeric in with_numeric:  # record by record, in order, as a scan adds them: the same sums
            for group, (finite, nonfinite, total, low, high) in numeric.items():
                result.numeric.setdefault(group, NumericStats()).add(finite, nonfinite, total, low, high)
        columns: Columns = {}
        row_list = rows.tolist()
        for check, column in zip(self.dataset, snapshot.values):
            found = [(offset, column[row]) for offset, row in zip(offsets, row_list)]
            columns[check.id] = (
                [offset for offset, value in found if value is not None],
                [value for _, value in found if value is not None],
            )
        with_issues.sort(key=lambda item: item[0])
        identities = self.reader.locate(partition, [offset for offset, _ in with_issues])
        for (source, key, index), (offset, issues) in zip(identities, with_issues):
            for line in issues:
                issue = Issue.from_dict(json.loads(line) | {"source": source, "key": key, "index": index})
                if issue.check in self.ids:
                    result.issues.append(issue)
                    result.offsets.append(offset)
        finish_columns(result, columns, self.dataset)
        return result

    def _decode(self, stored: bytes) -> tuple:
        decoded = self._decoded.get(stored)
        if decoded is None:
            issues, stats, numeric = msgpack.unpackb(stored, raw=False, strict_map_key=False)
            decoded = self._decoded[stored] = (
                issues,
                {name: [tuple(item) for item in items] for name, items in stats.items()},
                numeric,
            )
        return decoded
