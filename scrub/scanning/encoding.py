"""Issues encoded in the worker as manifest lines, counts and the few issues reports name (see
`Encoding`), instead of one object each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from scrub import checks as _catalogue  # noqa: F401 - registers the built-in checks
from scrub.checks.base import (
    Check,
    Finding,
    sorted_unique,
)
from scrub.manifest import LINE_OPTIONS, encode_key, encode_line, json_default
from scrub.records import SEVERITY_NAMES, Batch, Issue, Severity, manifest_fields
from scrub.reports.findings import Collector
from scrub.scanning.results import PartitionResult, row_digest


@dataclass(frozen=True)
class Encoding:
    """Issues leave the worker as manifest lines, counts and the few issues reports name, not
    as one object each: a partition of a broken shard flags every row, and an object per finding
    cost the driver memory and time for each (see docs/benchmarks.md, "Design measurements").
    Used when nothing in the driver needs each issue (no baseline to class them against, no
    replay, no cache)."""

    #: check id -> the severity the user set for it
    severities: dict[str, Severity]
    #: the dataset every issue names (a scan of several datasets), or None
    dataset: str | None
    #: what the reports name (see `scrub.reports.findings.Collector`)
    show: int
    per_check: int
    images: int

    def start(self, partition: int = -1) -> "Encoder":
        """An encoder of the issues of partition number ``partition`` (the reports' order)."""
        return Encoder(self, partition)

    def apply(self, result: "PartitionResult") -> None:
        """Encode all of a result's issues at once (a result made whole, like a failure's)."""
        self.start(result.partition).finish(result)


#: Issues a worker holds as objects before it encodes them (`Encoder.flush`): a block of a
#: broken shard flags every row, and an issue object is several times the size of its line.
FLUSH_ISSUES = 4096


class Encoder:
    """One partition's issues encoded as they come (see `Encoding`), in pieces."""

    def __init__(self, encoding: Encoding, partition: int = -1) -> None:
        self.encoding = encoding
        self.collector = Collector(encoding.show, encoding.per_check, encoding.images, partition)
        self.lines: list[bytes] = []
        self.count = 0
        self.flagged: dict[str, list[np.ndarray]] = {}

    def flush(self, result: "PartitionResult") -> None:
        """Encode the issues ``result`` holds, and drop them."""
        encoding, collector = self.encoding, self.collector
        pieces = []
        flagged: dict[str, list[int]] = {}
        for issue, offset in zip(result.issues, result.offsets):
            issue.stamp(encoding.severities, encoding.dataset)
            pieces.append(encode_line(issue))
            collector.add(issue)
            flagged.setdefault(issue.severity.value, []).append(offset)
        if pieces:
            self.lines.append(b"".join(pieces))
            self.count += len(pieces)
        for severity, offsets in flagged.items():
            self.flagged.setdefault(severity, []).append(np.asarray(offsets, np.int64))
        result.issues, result.offsets = [], []

    def add_rows(self, batch: Batch, check: Check, found: list[tuple[int, Finding]]) -> None:
        """Encode a batch check's findings straight into lines, without an issue object per
        finding (only for the few the reports keep): the dense path of a broken shard, where
        every row of every block is flagged. The lines are the ones `flush` writes."""
        encoding, collector = self.encoding, self.collector
        forced = encoding.severities.get(check.id)  # as `Issue.stamp` sets it
        source = encode_key(batch.source)
        by_position = batch.keys is None  # rows keyed by position: their content is their identity
        pieces = []
        flagged: dict[Severity, list[int]] = {}
        #: severity -> the index after which nothing more is kept (rows come in order)
        unwanted: dict[Severity, int] = {}
        for row, finding in found:
            severity = forced or finding.severity or check.severity
            index = batch.start + row
            key = batch.key(row)
            line = manifest_fields(
                source,
                key if key.isascii() else encode_key(key),
                index,
                check.id,
                SEVERITY_NAMES[severity],
                finding.message,
                finding.details,
                row_digest(batch, row) if by_position else None,
                dataset=encoding.dataset,
            )
            try:
                pieces.append(orjson.dumps(line, default=json_default, option=LINE_OPTIONS))
            except (orjson.JSONEncodeError, TypeError):  # what encode_line falls back on
                pieces.append(encode_line(_issue_of(line, batch.source, key, severity)))
            if severity not in unwanted or index <= unwanted[severity]:
                if collector.wants(check.id, severity, encoding.dataset, index):
                    collector.keep(_issue_of(line, batch.source, key, severity))
                else:
                    unwanted[severity] = index
            flagged.setdefault(severity, []).append(batch.offset + row)
        for severity, offsets in flagged.items():
            collector.count(check.id, severity, len(offsets))
            self.flagged.setdefault(SEVERITY_NAMES[severity], []).append(np.asarray(offsets, np.int64))
        if pieces:
            self.lines.append(b"".join(pieces))
            self.count += len(pieces)

    def finish(self, result: "PartitionResult") -> None:
        self.flush(result)
        result.lines, result.line_count = self.lines, self.count
        result.flagged = {
            severity: sorted_unique(np.concatenate(found)) for severity, found in self.flagged.items()
        }
        result.findings = self.collector


def _issue_of(line: dict[str, Any], source: str, key: str, severity: Severity) -> Issue:
    """The issue an encoded line stands for (its source and key as the reader gave them)."""
    return Issue(
        source,
        key,
        line["index"],
        line["check"],
        severity,
        line["message"],
        line["details"],
        content=line.get("content"),
        dataset=line.get("dataset"),
    )
