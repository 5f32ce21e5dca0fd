"""Drift from ``--baseline``: the baseline's profile out of its scan record, compared with tonight's
(`scrub.profile.drift.compare`), each drift a dataset-level issue (key ``*``)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from scrub.checks.base import Finding, make_issue
from scrub.manifest import scan_record_path
from scrub.profile.drift import DriftThresholds, compare
from scrub.records import Issue


def baseline_record(manifest: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The scan record beside the baseline ``manifest``, or None and a note saying why drift is
    not measured (no record there, one that is not JSON)."""
    path = scan_record_path(manifest)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"drift: the baseline's scan record {path} is missing: drift from it is not measured"
    except (OSError, ValueError) as error:
        return (
            None,
            f"drift: the baseline's scan record {path} cannot be read ({error}): drift is not measured",
        )
    if not isinstance(record, dict):
        return None, f"drift: the baseline's scan record {path} is not a scan record: drift is not measured"
    return record, None


def profile_of(
    record: Mapping[str, Any], dataset: str, absolute: str, several: bool
) -> dict[str, Any] | None:
    """The baseline's profile of ``dataset``: where both runs scanned one dataset, the baseline's
    (whatever its path: a nightly job's folder may be named by its date); else the baseline's
    dataset, or part of a run of several, whose path or absolute path is this dataset's."""
    parts = [part for part in record.get("parts") or [] if isinstance(part, dict)]
    if not parts:
        same = dataset in (record.get("path"), record.get("absolute_path")) or absolute == record.get(
            "absolute_path"
        )
        profile = record.get("profile") if same or not several else None
        return profile if isinstance(profile, dict) else None
    for part in parts:
        if dataset in (part.get("path"), part.get("absolute_path")) or absolute == part.get("absolute_path"):
            profile = part.get("profile")
            return profile if isinstance(profile, dict) else None
    return None


def _scanned(record: Mapping[str, Any], dataset: str, absolute: str, several: bool) -> bool:
    """Whether the baseline's run scanned ``dataset`` (see `profile_of`)."""
    parts: list[Mapping[str, Any]] = [part for part in record.get("parts") or [] if isinstance(part, dict)]
    if not parts:
        if not several:
            return True
        parts = [record]
    return any(
        dataset in (part.get("path"), part.get("absolute_path")) or absolute == part.get("absolute_path")
        for part in parts
    )


def drift_issues(
    record: Mapping[str, Any] | None,
    current: Mapping[str, Any] | None,
    dataset: str,
    absolute: str,
    thresholds: DriftThresholds,
    selected: Collection[str],
    several: bool = False,
) -> tuple[list[Issue] | None, list[str]]:
    """The drift of tonight's profile ``current`` of ``dataset`` from the baseline's scan
    ``record`` (``several``: tonight's run scans several datasets): one issue per finding whose
    check is ``selected`` (None: drift could not be measured), and the notes that say what
    could not be compared (never nothing: a baseline without a profile is said)."""
    if record is None:
        return None, []
    if current is None:
        return None, [
            "drift: this scan built no profile (--no-profile): drift from the baseline is not measured"
        ]
    previous = profile_of(record, dataset, absolute, several)
    if previous is None:
        if not _scanned(record, dataset, absolute, several):
            why = f"the baseline's run did not scan {dataset}"
        else:
            why = "the baseline's scan record holds no profile (an older scrub, or --no-profile)"
        return None, [f"drift: {why}: drift from it is not measured"]
    notes: list[str] = []
    issues = []
    for finding in compare(previous, current, thresholds, notes):
        if finding.check not in selected:
            continue
        details = {
            "feature": finding.feature,
            "distance": round(finding.distance, 6),
            "threshold": round(finding.threshold, 6),
            **finding.details,
        }
        issues.append(make_issue(finding.check, dataset, "*", None, Finding(finding.message, details)))
    return issues, notes
