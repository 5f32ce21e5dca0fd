"""Dense findings: a shard whose every row is bad. Issues leave the workers as manifest lines
and counts (`scrub.scanning.encoding.Encoding`); the result must be the one the issue-by-issue path gives."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import scrub
from scrub.checks.drift import NOT_RECORDS as DRIFTS
from scrub.scanning.encoding import FLUSH_ISSUES

#: scans datasets of a million findings: `-m "not slow"` (the quick subset) leaves it out
pytestmark = pytest.mark.slow


def dense(path: Path, rows: int) -> Path:
    data = np.full((rows, 3), np.nan, np.float32)
    data[::7, 0] = 1e5  # fp16-overflow warnings on some of the same rows: a record with two issues
    data[::7, 1:] = 1.0
    data[5::11] = 0.0  # zero-norm warnings on rows with no error
    with h5py.File(path, "w") as f:
        f["data"] = data
        f["label"] = np.arange(rows) % 4
    return path


def lines(manifest: Path) -> list[dict]:
    return [json.loads(line) for line in manifest.read_text().splitlines()]


def test_encoded_findings_equal_the_issue_by_issue_ones(tmp_path):
    # three partitions, each of several flushes of encoded issues (two findings a row or so)
    size = 2 * FLUSH_ISSUES
    rows = 2 * size + 1000
    source = dense(tmp_path / "dense.h5", rows)
    compact = scrub.scan(
        source, manifest=tmp_path / "compact.jsonl", workers=2, scheduler="processes", partition_size=size
    )
    (tmp_path / "empty.jsonl").write_text("")
    # a baseline needs every issue in the driver: the issue-by-issue path, on the same data
    one_by_one = scrub.scan(
        source,
        manifest=tmp_path / "objects.jsonl",
        baseline=tmp_path / "empty.jsonl",
        scheduler="sync",
        partition_size=size,
    )
    ours, theirs = lines(tmp_path / "compact.jsonl"), lines(tmp_path / "objects.jsonl")
    for line in theirs:
        del line["status"]
    key = lambda line: (line["index"], line["check"])  # noqa: E731
    assert sorted(ours, key=key) == sorted(theirs, key=key)
    a, b = compact.summary, one_by_one.summary
    # with a baseline, its drift checks are listed too (at 0: this baseline has no scan record)
    drift = {check: count for check, count in b.issues_by_check.items() if check in DRIFTS}
    assert drift and not any(drift.values())
    judged = {check: count for check, count in b.issues_by_check.items() if check not in DRIFTS}
    assert a.issues_by_check == judged and a.issues_by_severity == b.issues_by_severity
    errors = len(range(0, rows)) - len(set(range(0, rows, 7)) | set(range(5, rows, 11)))
    assert a.records_with_errors == b.records_with_errors == errors
    assert a.records_with_warnings == b.records_with_warnings == rows  # every row, each once
    assert [issue.key for issue in compact.findings.errors] == [
        "1",
        "2",
        "3",
        "4",
        "6",
        "8",
        "9",
        "10",
        "11",
        "12",
    ]
    assert compact.findings.error_count == a.issues_by_severity["error"]


def test_several_datasets_and_severity_overrides_are_applied_in_the_workers(tmp_path):
    first, second = dense(tmp_path / "a.h5", 3000), dense(tmp_path / "b.h5", 2000)
    result = scrub.scan(
        [first, second],
        manifest=tmp_path / "m.jsonl",
        partition_size=500,
        check_severity=[("fp16-overflow", "error")],
        scheduler="processes",
        workers=2,
    )
    found = lines(tmp_path / "m.jsonl")
    assert {line["dataset"] for line in found} == {str(first), str(second)}
    assert {line["severity"] for line in found if line["check"] == "fp16-overflow"} == {"error"}
    assert result.summary.records_with_errors == sum(p.records_with_errors for p in result.summary.parts)
    # fp16-overflow made an error: every row but the all-zero ones (zero-norm: a warning)
    assert result.summary.parts[0].records_with_errors == 3000 - len(range(5, 3000, 11))
