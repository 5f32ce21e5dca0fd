"""``--contract``: the rules the dataset as a whole breaks (`scrub.profile.contract.judge`), each a
dataset-level issue (key ``*``) with the contract's line, the expected and the found value."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from scrub.checks.base import Finding, make_issue
from scrub.profile.contract import Contract, judge
from scrub.records import Issue, Severity


def contract_issues(
    contract: Contract, profile: Mapping[str, Any], dataset: str, selected: Collection[str]
) -> list[Issue]:
    """One issue per rule ``profile`` breaks whose check is ``selected``, at the severity the
    contract's ``[severity]`` table gives it (else the check's own; ``--check-severity`` wins
    over both, as it does for every check)."""
    issues = []
    for broken in judge(contract, profile):
        if broken.check not in selected:
            continue
        where = contract.where(broken.rule)
        level = contract.severity(broken.check)
        finding = Finding(
            f"{broken.message} ({where})",
            {
                "rule": broken.rule,
                "contract": where,
                "line": contract.line(broken.rule),
                "expected": broken.expected,
                "found": broken.found,
            },
            Severity(level) if level is not None else None,
        )
        issues.append(make_issue(broken.check, dataset, "*", None, finding))
    return issues
