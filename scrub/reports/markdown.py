"""`--summary-md`: a short Markdown summary for CI pages (GitHub's job summary, GitLab, PRs).

Leaks between splits come first, in the counts and among the records (`findings` keeps them
first), each naming the evaluation record and the training record it copies."""

from __future__ import annotations

from scrub.records import Issue
from scrub.reports.findings import (
    LEAK_CHECK,
    Findings,
    describe_finding,
    is_dataset_finding,
    leaks_first,
    mark,
    partner_name,
    record_name,
)
from scrub.scanning.summary import Summary
from scrub.wording import counted


def _cell(text: str | None) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _status(status: str | None) -> str:
    """An issue's baseline status, in bold where it is what a report marks (new, reappeared)."""
    return f"**{status}**" if mark(status) else _cell(status or "")


def render(summary: Summary, findings: Findings, fail_on: str, exit_code: int) -> str:
    """The verdict, the counts per check with issues, the baseline's counts, the first errors."""
    verdict = "no issue fails this run" if exit_code == 0 else "issues fail this run"
    lines = [
        f"### scrub: {_cell(summary.path)}: {verdict} (exit {exit_code}, `--fail-on {fail_on}`)",
        "",
        f"{counted(summary.records, 'record')} ({summary.dataset.format}, {summary.dataset.layout}); "
        f"{counted(summary.issues, 'issue')}; {counted(summary.records_with_errors, 'record')} to quarantine "
        "(errors).",
        "",
    ]
    if summary.baseline is not None:
        counts = summary.baseline
        lines += [
            f"Against the baseline: **{counts['new']:,} new**, {counts['persisting']:,} persisting, "
            f"{counts['reappeared']:,} reappeared, {counts['resolved']:,} resolved.",
            "",
        ]
    by_check = summary.issues_by_check
    found = {check: by_check[check] for check in leaks_first(sorted(by_check)) if by_check[check]}
    if found:
        overrides = summary.options.get("check_severity") or {}
        from scrub.checks import REGISTRY

        lines += ["| check | severity | issues |", "|---|---|---:|"]
        lines += [
            f"| `{check}` | {overrides.get(check, REGISTRY[check].severity.value)} | {n:,} |"
            for check, n in found.items()
        ]
        lines.append("")
    if findings.dataset_findings:
        lines += _dataset_findings(summary, findings)
    errors = [issue for issue in findings.errors if not is_dataset_finding(issue)]  # listed above
    if errors:
        with_status = summary.baseline is not None  # new and reappeared come first, in bold
        if with_status:
            lines += ["| record | status | check | message |", "|---|---|---|---|"]
        else:
            lines += ["| record | check | message |", "|---|---|---|"]
        for issue in errors:
            status = f" {_status(issue.status)} |" if with_status else ""
            lines.append(f"| {_record(issue)} |{status} `{issue.check}` | {_cell(issue.message)} |")
        if findings.more_errors:
            lines.append(f"\nand {counted(findings.more_errors, 'more error')} in the manifest")
        lines.append("")
    lines.append(f"Manifest: `{_cell(summary.manifest)}`")
    return "\n".join(lines) + "\n"


def _record(issue: Issue) -> str:
    """A record's cell: its name; a leak's also names the training record it copies."""
    name = f"`{_cell(record_name(issue))}`"
    other = partner_name(issue) if issue.check == LEAK_CHECK else None
    return name if other is None else f"{name} (training record: `{_cell(other)}`)"


def _dataset_findings(summary: Summary, findings: Findings) -> list[str]:
    """Each drift and contract finding on the dataset as a whole, one row each: its check, the
    feature, what was found against what was expected (a distance and its threshold, a
    contract's value), and its message."""
    several = bool(summary.parts)
    with_status = summary.baseline is not None
    head = ["dataset"] if several else []
    head += (
        ["check", "severity"]
        + (["status"] if with_status else [])
        + ["feature", "found", "expected", "message"]
    )
    lines = [
        "Dataset findings (drift from the baseline, a contract's rules; no record to set aside):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for issue in findings.dataset_findings:
        feature, found, limit = describe_finding(issue)
        cells = [f"`{_cell(issue.dataset)}`"] if several else []
        cells += [f"`{issue.check}`", issue.severity.value]
        cells += [_status(issue.status)] if with_status else []
        cells += [f"`{_cell(feature)}`" if feature else "", _cell(found), _cell(limit), _cell(issue.message)]
        lines.append("| " + " | ".join(cells) + " |")
    more = findings.dataset_finding_count - len(findings.dataset_findings)
    if more > 0:
        lines.append(f"\nand {counted(more, 'more dataset finding')} in the manifest")
    lines.append("")
    return lines
