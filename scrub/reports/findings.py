"""The few issues a report names, picked from a manifest of any size in one streaming pass."""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from scrub.manifest import read_manifest
from scrub.records import Issue, Severity

#: keys a report names per check (JUnit failures, the HTML report)
KEYS_PER_CHECK = 10


@dataclass
class Findings:
    """What the reports name: the first errors in dataset order, and the first keys per check."""

    errors: list[Issue] = field(default_factory=list)  # the first ``show`` errors, by record index
    error_count: int = 0  # every error of tonight's scan (resolved baseline lines are not)
    #: check -> the first records it flagged (dataset order); its issues counted by status
    #: (new, persisting, reappeared; "found" without a baseline) and by (status, severity)
    keys: dict[str, list[str]] = field(default_factory=dict)
    statuses: dict[str, Counter] = field(default_factory=dict)
    severities: dict[str, Counter] = field(default_factory=dict)
    #: issues a thumbnail can show: (source, key, index, check, message) of errors on images
    quarantined: list[Issue] = field(default_factory=list)

    @property
    def more_errors(self) -> int:
        return self.error_count - len(self.errors)


def record_name(issue: Issue) -> str:
    """How reports name a record: its key, after its source file where that is another name
    (``train.h5:3`` for row 3 of one of several HDF5 files)."""
    name = issue.key if issue.source == issue.key else f"{issue.source}:{issue.key}"
    if issue.dataset is None:
        return name
    if issue.source == issue.dataset.rstrip("/").rsplit("/", 1)[-1]:  # an LMDB's source is its own name
        return f"{issue.dataset}:{issue.key}"
    return f"{issue.dataset}:{name}"


def _order(issue: Issue) -> tuple:
    return (issue.index if issue.index is not None else -1, issue.source, issue.key, issue.check)


def collect(manifest: Path, show: int = 10, per_check: int = KEYS_PER_CHECK, images: int = 0) -> Findings:
    """One pass over ``manifest``: the first ``show`` errors, ``per_check`` keys per check, and
    the first ``images`` errors (for thumbnails), each in dataset order; memory stays flat."""
    found = Findings()
    errors: list[tuple] = []  # a max-heap (negated order) of the smallest ``show``
    keys: dict[str, list[tuple]] = {}
    counter = 0
    for issue in read_manifest(manifest):
        if issue.status == "resolved":
            continue
        counter += 1
        order = _order(issue)
        status = issue.status or "found"
        found.statuses.setdefault(issue.check, Counter())[status] += 1
        found.severities.setdefault(issue.check, Counter())[(status, issue.severity.value)] += 1
        _keep(keys.setdefault(issue.check, []), order, counter, issue, per_check)
        if issue.severity is Severity.ERROR:
            found.error_count += 1
            _keep(errors, order, counter, issue, max(show, images))
    ranked = [item[2] for item in sorted(errors, key=lambda item: _order(item[2]))]
    found.errors = ranked[:show]
    found.quarantined = ranked[:images]
    found.keys = {check: [record_name(item[2]) for item in sorted(heap, key=lambda item: _order(item[2]))]
                  for check, heap in sorted(keys.items())}
    return found


def _keep(heap: list, order: tuple, counter: int, issue: Issue, limit: int) -> None:
    """Keep the ``limit`` smallest by ``order`` (a heap of negated keys: the largest on top)."""
    if limit <= 0:
        return
    item = (_Reversed(order), counter, issue)
    if len(heap) < limit:
        heapq.heappush(heap, item)
    elif item[0] > heap[0][0]:
        heapq.heapreplace(heap, item)


class _Reversed:
    """Orders in reverse, so that heapq's min-heap keeps the largest of the kept on top."""

    __slots__ = ("order",)

    def __init__(self, order: tuple) -> None:
        self.order = order

    def __lt__(self, other: "_Reversed") -> bool:
        return self.order > other.order

    def __gt__(self, other: "_Reversed") -> bool:
        return self.order < other.order

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.order == other.order
