"""The per-partition chain: read → properties → checks → partial result.

`PartitionWork` is the picklable function the pipeline maps over partitions. It is plain
Python, testable on a list, and knows nothing of Dask.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scrub import checks as _catalogue  # noqa: F401 - registers the built-in checks
from scrub.checks.base import REGISTRY, Check, CheckOptions, make_issue
from scrub.checks.images import decoder_failure
from scrub.checks.properties import annotate, tally
from scrub.errors import ScrubError
from scrub.readers.base import Reader
from scrub.records import Issue, Record


@dataclass
class PartitionResult:
    """What one partition (or a piece of one) contributes to the scan."""

    partition: int
    records: int = 0
    issues: list[Issue] = field(default_factory=list)
    #: dataset check id -> (offsets within the partition, collected values)
    columns: dict[str, tuple[list[int], list[Any]]] = field(default_factory=dict)
    stats: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))


def select_checks(
    select: Iterable[str] | None, ignore: Iterable[str] | None, options: CheckOptions
) -> list[Check]:
    """The checks to run: all by default, narrowed by ``--select`` and ``--ignore``."""
    wanted = list(select) if select else sorted(REGISTRY)
    unknown = [c for c in [*wanted, *(ignore or ())] if c not in REGISTRY]
    if unknown:
        raise ScrubError(f"unknown check id: {', '.join(unknown)} (see `scrub checks`)")
    dropped = set(ignore or ())
    chosen = [REGISTRY[c] for c in wanted if c not in dropped]
    return [c for c in chosen if c.needs != "label" or options.labelled]


class PartitionWork:
    """Runs every selected check on every record of a partition."""

    def __init__(self, reader: Reader, options: CheckOptions, checks: Sequence[Check]) -> None:
        self.reader = reader
        self.options = options
        # Check objects pickle by reference to their functions, so a worker imports the module
        # that defines a check (and registers it) even when the check is not a built-in one.
        self.checks = tuple(checks)

    def __call__(
        self,
        partition_no: int,
        partition: Sequence[Any],
        start: int = 0,
        stop: int | None = None,
        on_record: Callable[[int], None] | None = None,
    ) -> PartitionResult:
        record_checks = [c for c in self.checks if c.kind == "record"]
        dataset_checks = [c for c in self.checks if c.kind == "dataset"]
        wanted = {c.id for c in self.checks}
        result = PartitionResult(partition_no)
        columns = {c.id: ([], []) for c in dataset_checks}
        for offset, record in enumerate(self.reader.read(partition, start, stop), start=start):
            if on_record is not None:
                on_record(offset)
            result.records += 1
            result.issues.extend(p for p in record.problems if p.check in wanted)
            annotate(record, self.options)
            tally(record, result.stats, self.options)
            for check in record_checks:
                finding = _run_check(check, record, self.options)
                if finding is not None:
                    result.issues.append(make_issue(check.id, record.source, record.key, record.index, finding))
            for check in dataset_checks:
                value = check.collect(record)
                if value is not None:
                    offsets, values = columns[check.id]
                    offsets.append(offset)
                    values.append(value)
        result.columns = columns
        return result

    def failure(self, partition_no: int, partition: Sequence[Any], offset: int, reason: str) -> PartitionResult:
        """The partial result for a record that crashed or hung its worker."""
        source, key, index = self.reader.locate(partition, [offset])[0]
        return PartitionResult(partition_no, records=1, issues=[decoder_failure(source, key, index, reason)])


def _run_check(check: Check, record: Record, options: CheckOptions):
    try:
        return check.func(record, options)
    except Exception as error:  # a bug in a check is scrub's bug: say where, then stop
        raise ScrubError(
            f"internal error: check {check.id} failed on {record.source}:{record.key}: {error!r}"
        ) from error
