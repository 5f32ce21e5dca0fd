"""What a partition's work gives back to the scan (`PartitionResult`), below the work that makes
it (`scrub.scanning.runner`) and the aggregate that folds it in (`scrub.scanning.summary`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np
import xxhash

from scrub import checks as _catalogue  # noqa: F401 - registers the built-in checks
from scrub.manifest import dumps
from scrub.records import Batch, Issue, Pieces
from scrub.replay.standardize import Moments
from scrub.reports.findings import Collector

if TYPE_CHECKING:
    from scrub.profile import PartitionProfile

#: dataset check id -> (offsets within the partition, collected values) as a partition collects
#: them: scalars from records, arrays from batches (`finish_columns` packs them)
Columns = dict[str, tuple[list[Any], list[Any]]]


@dataclass(frozen=True)
class LeftPart:
    """A partition's column left on the cluster worker that collected it (`scrub.pipeline.Leaving`),
    in place of its values: the future of the worker's columns left behind (a dict by check id;
    None until the driver attaches it) and how many values it holds."""

    future: Any
    count: int


@dataclass
class PartitionResult:
    """What one partition (or a piece of one) contributes to the scan."""

    partition: int
    records: int = 0
    issues: list[Issue] = field(default_factory=list)
    #: dataset check id -> (offsets within the partition, collected values), packed (see
    #: `finish_columns`; a magnitude column also holds the histogram of every row), or a
    #: `LeftPart` for a column left on a cluster
    columns: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    #: source -> statistics of its numeric values (array datasets)
    numeric: dict[str, NumericStats] = field(default_factory=dict)
    #: row shape (or ``pixels``) -> per-feature moments of the typical rows, for the replay
    moments: dict[str, Moments] = field(default_factory=dict)
    #: with a result cache: (offset, content digest, outcome, column values) of each record
    captured: list[tuple[int, bytes | None, bytes, list]] = field(default_factory=list)
    #: the offset within the partition of each issue's record (worker side, beside ``issues``)
    offsets: list[int] = field(default_factory=list)
    #: with an `Encoding`: ``issues`` as manifest lines, encoded in the worker, and how many
    lines: list[bytes] = field(default_factory=list)  # in pieces: one join would copy them all
    line_count: int = 0
    #: with an `Encoding`: severity -> the offsets of the records with an issue of it
    flagged: dict[str, np.ndarray] = field(default_factory=dict)
    #: with an `Encoding`: what the reports name, of this partition's issues
    findings: Collector | None = None
    #: (offset, size, mtime_ns) of each record read from a file of its own, where the reader
    #: says (`RecordFacts.file_version`)
    file_versions: list[tuple[int, int, int]] = field(default_factory=list)
    #: what the partition read, as the dataset's profile merges it (None: not profiled,
    #: ``--no-profile``, or a record that crashed its worker)
    profile: PartitionProfile | None = None


@dataclass
class NumericStats:
    """Min, max, mean of the finite values of a dataset, merged across partitions."""

    finite_values: int = 0
    nonfinite_values: int = 0
    total: float = 0.0
    low: float | None = None
    high: float | None = None

    def add(self, finite: int, nonfinite: int, total: float, low: float | None, high: float | None) -> None:
        self.finite_values += finite
        self.nonfinite_values += nonfinite
        self.total += total
        if low is not None:
            assert high is not None  # the extremes come together
            self.low = low if self.low is None else min(self.low, low)
            self.high = high if self.high is None else max(self.high, high)

    def merge(self, other: "NumericStats") -> None:
        self.add(other.finite_values, other.nonfinite_values, other.total, other.low, other.high)

    def to_dict(self) -> dict[str, Any]:
        mean = self.total / self.finite_values if self.finite_values else None
        return {
            "min": self.low,
            "max": self.high,
            "mean": mean,
            "finite_values": self.finite_values,
            "nonfinite_values": self.nonfinite_values,
        }


def row_digest(batch: Batch, row: int) -> str:
    """A row's identity where its key is only its position: a hash of its values and label."""
    if not isinstance(batch.data, Pieces):  # one call on the row's bytes (and its label's)
        values = batch.data[row].tobytes()
        if batch.labels is not None:
            values += batch.labels[row].tobytes()
        return "xxh3:" + xxhash.xxh3_64_hexdigest(values)
    digest = xxhash.xxh3_64()
    for piece in batch.data.read():  # pieces of C-order bytes: the digest of the whole row
        digest.update(np.ascontiguousarray(piece).data)
    if batch.labels is not None:
        digest.update(np.ascontiguousarray(batch.labels[row]).tobytes())
    return "xxh3:" + digest.hexdigest()


#: what a record's reading found that says nothing of its bytes: never stored in the cache
NOT_REUSABLE = frozenset({"missing-file", "unsafe-path"})


class Outcomes:
    """What a record's checks found, without its identity or column values: the part of its
    result the cache stores once for all the records that share it (most clean records do).
    Encoded once per distinct outcome (a record's own statistics are a few counts of one)."""

    def __init__(self) -> None:
        self._encoded: dict[tuple, bytes] = {}

    def get(self, own: PartitionResult) -> bytes:
        signature = (
            tuple(dumps(issue) for issue in own.issues),
            tuple(sorted((name, tuple(counter.items())) for name, counter in own.stats.items() if counter)),
            tuple(
                (group, s.finite_values, s.nonfinite_values, s.total, s.low, s.high)
                for group, s in own.numeric.items()
            ),
        )
        encoded = self._encoded.get(signature)
        if encoded is None:
            issues, stats, numeric = signature
            encoded = self._encoded[signature] = msgpack.packb(
                [
                    list(issues),
                    {name: [list(item) for item in items] for name, items in stats},
                    {group: list(values) for group, *values in numeric},
                ],
                use_bin_type=True,
            )
        return encoded
