"""The result cache's side of a scan: the work on the records it does not hold (`SubsetWork`),
and the results it holds, made partition results again (`Reuse`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from scrub import checks as _catalogue  # noqa: F401 - registers the built-in checks
from scrub.checks.base import (
    Check,
)
from scrub.readers.base import Reader
from scrub.records import Issue
from scrub.results import Columns, NumericStats, PartitionResult
from scrub.runner import PartitionWork, finish_columns


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
        return result

    def failure(self, number: int, subset: Subset, offset: int, reason: str) -> PartitionResult:
        return self.work.failure(subset.partition_no, subset.records, offset, reason)


class Reuse:
    """Partial results rebuilt from a cache's stored outcomes (driver side)."""

    def __init__(self, reader: Reader, checks: Sequence[Check]) -> None:
        self.reader = reader
        self.dataset = [c for c in checks if c.kind == "dataset"]
        self.ids = {c.id for c in checks}
        self._decoded: dict[bytes, tuple] = {}

    def result(
        self, partition_no: int, partition: Sequence[Any], reused: Iterable[tuple[int, bytes, list]]
    ) -> PartitionResult:
        result = PartitionResult(partition_no)
        columns: Columns = {c.id: ([], []) for c in self.dataset}
        names = list(columns)
        counts: Counter[bytes] = Counter()
        with_issues: list[tuple[int, list[str]]] = []
        for offset, stored, values in reused:
            result.records += 1
            counts[stored] += 1
            issues, _, numeric = self._decode(stored)
            if issues:
                with_issues.append((offset, issues))
            for group, (finite, nonfinite, total, low, high) in numeric.items():
                result.numeric.setdefault(group, NumericStats()).add(finite, nonfinite, total, low, high)
            for name, value in zip(names, values):
                if value is not None:
                    columns[name][0].append(offset)
                    columns[name][1].append(value)
        for stored, count in counts.items():
            for name, items in self._decode(stored)[1].items():
                for value, n in items:
                    result.stats[name][value] += n * count
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
