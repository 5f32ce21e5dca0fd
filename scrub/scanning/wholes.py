"""The result cache of whole partitions: a nightly ``--cache`` scan of a table that barely changed
reads the files that changed, for readers whose records are checked in blocks.

The result cache (`scrub.scanning.cache`) keeps each record's result, which a record checked on
its own hands back as it is checked. A Parquet row group's rows are checked as blocks (NumPy over
a column, the batch checks), whose statistics are the block's, not a row's: there is no record's
result to keep. What a partition gives back is a function of the bytes it read, how the dataset is
read and the checks that run, so its whole result is kept instead, by the version of its file
(`scrub.storage.base.Storage.version`: size + mtime and inode locally, size + ETag in a bucket,
from the listing) and its place in the file (`Reader.partition_entry`): an unchanged file's
partitions are not read again, a rewritten file's are.

Kept in the dataset's memo (`scrub.storage.memo`: one hashed file per dataset in the cache
directory, never trusted when damaged, holding what this run used), as plain msgpack: issues as
manifest lines, statistics, and the dataset checks' columns (arrays as their dtype, shape and
bytes). A partition is kept only whole: not one a worker crashed on (its records were re-run one
by one), not one whose columns stayed on a cluster, not one with an issue whose record must be
looked at again (`NOT_REUSABLE`). A reused partition counts its records in the profile but
sketches nothing of them, as the per-record cache's reused records.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from scrub.manifest import dumps
from scrub.records import Issue
from scrub.scanning.results import NOT_REUSABLE, LeftPart, NumericStats, PartitionResult
from scrub.storage import Location
from scrub.storage.memo import Memo, packed_array, unpacked_array

#: the memo's kind of the facts kept here
KIND = "partition-result"


class PartitionResults:
    """Whole partitions' results kept in a memo for the next scan (see the module's docstring);
    what the scan's summary says of the cache (`describe`), as `ResultCache` says it."""

    def __init__(self, memo: Memo, scope: str) -> None:
        self.memo, self.scope = memo, scope
        self.hits = self.misses = 0  # records reused, records scanned
        self.notes: list[str] = []
        #: partition number -> (its file, what it is of it, the file's version when looked up)
        self._entries: dict[int, tuple[Location, str, list]] = {}
        self._failed: set[int] = set()

    def lookup(
        self, number: int, partition: Any, entry: tuple[Location, str] | None, usable: bool = True
    ) -> PartitionResult | None:
        """The kept result of partition ``number`` where its file is the version it was kept
        at; None where it must be scanned (its result is kept for the next scan then), or where
        no kept result is ``usable`` (the replay reads every record)."""
        if entry is None:
            self.misses += len(partition)
            return None
        place, extra = entry
        held, version = self.memo.recall(KIND, place, f"{self.scope}|{extra}")
        if held is not None and usable:
            self.hits += len(partition)
            return loaded(held, number)
        self.misses += len(partition)
        if version is not None:
            self._entries[number] = (place, f"{self.scope}|{extra}", version)
        return None

    def failed(self, number: int) -> None:
        """A record of partition ``number`` crashed or hung its worker: its result is not kept."""
        self._failed.add(number)

    def keep(self, result: PartitionResult, records: int) -> None:
        """Keep ``result`` for the next scan, where it is a whole partition's (``records``)."""
        entry = self._entries.pop(result.partition, None)
        if (
            entry is None
            or result.partition in self._failed
            or result.records != records
            or any(isinstance(column, LeftPart) for column in result.columns.values())
            or any(issue.check in NOT_REUSABLE for issue in result.issues)
        ):
            return
        place, extra, version = entry
        self.memo.keep(KIND, place, extra, version, dumped(result))

    def save(self) -> None:
        unsaved = self.memo.save()
        if unsaved is not None:
            self.notes.append(unsaved)

    def describe(self) -> dict[str, Any]:
        directory = self.memo.path.parent if self.memo.path is not None else None
        return {
            "dir": str(directory),
            "file": str(self.memo.path),
            "reused": self.hits,
            "scanned": self.misses,
            "from": None,
        }


def dumped(result: PartitionResult) -> list:
    """What a partition's result keeps, as msgpack holds it."""
    return [
        result.records,
        [dumps(issue) for issue in result.issues],
        list(result.offsets),
        [
            [name, [[_plain(value), count] for value, count in counter.items()]]
            for name, counter in result.stats.items()
        ],
        {
            group: [s.finite_values, s.nonfinite_values, s.total, s.low, s.high]
            for group, s in result.numeric.items()
        },
        {check: _plain(column) for check, column in result.columns.items()},
    ]


def loaded(held: Sequence[Any], number: int) -> PartitionResult:
    """A kept result (`dumped`) as partition ``number``'s."""
    records, issues, offsets, stats, numeric, columns = held
    result = PartitionResult(number, records=records)
    result.issues = [Issue.from_dict(json.loads(line)) for line in issues]
    result.offsets = list(offsets)
    for name, counts in stats:
        result.stats[name] = Counter({_back(value): count for value, count in counts})
    for group, values in numeric.items():
        result.numeric[group] = NumericStats(*values)
    result.columns = {check: _back(column) for check, column in columns.items()}
    return result


def _plain(value: Any) -> Any:
    """``value`` as msgpack holds it: an array as its dtype, shape and bytes (objects one by
    one), a tuple tagged as one, a NumPy scalar as Python's."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":
            return {"o": [_plain(item) for item in value.tolist()]}
        return {"a": packed_array(value)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"t": [_plain(item) for item in value]}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _back(value: Any) -> Any:
    """`_plain`'s ``value`` as it was."""
    if isinstance(value, dict):
        if "a" in value:
            return unpacked_array(value["a"])
        if "o" in value:
            items = np.empty(len(value["o"]), dtype=object)
            for position, item in enumerate(value["o"]):  # one by one: a tuple is an item, not a row
                items[position] = _back(item)
            return items
        return tuple(_back(item) for item in value["t"])
    if isinstance(value, list):
        return [_back(item) for item in value]
    return value
