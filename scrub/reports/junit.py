"""`--junit`: JUnit XML, which GitLab, Jenkins and most CI pages display as a test report.

One testcase per check that ran (unique names: the check id; classname ``scrub.<dataset>``).
A check fails when it has issues that fail the run under ``--fail-on``: its failure lists the
counts and the first keys. Checks with issues that do not fail the run pass, with the counts
in their ``system-out``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import PurePath

from scrub.reports.findings import Findings
from scrub.summary import Summary


def failing(summary: Summary, check: str, severity: str, statuses, fail_on: str) -> int:
    """How many of ``check``'s issues fail the run."""
    total = summary.issues_by_check.get(check, 0)
    if fail_on == "never" or total == 0:
        return 0
    if fail_on == "new":
        return (statuses.get("new", 0) + statuses.get("reappeared", 0)) if severity == "error" else 0
    if fail_on == "warning":
        return total
    return total if severity == "error" else 0


def render(summary: Summary, findings: Findings, fail_on: str) -> str:
    from scrub.checks import REGISTRY

    overrides = summary.options.get("check_severity") or {}
    name = PurePath(summary.path).name or summary.path
    suite = ElementTree.Element("testsuite", name=f"scrub {summary.path}", tests=str(len(summary.checks)),
                                time=f"{summary.seconds:.3f}")
    failures = 0
    for check in summary.checks:
        severity = overrides.get(check, REGISTRY[check].severity.value)
        case = ElementTree.SubElement(suite, "testcase", classname=f"scrub.{name}", name=check, time="0")
        count = summary.issues_by_check.get(check, 0)
        statuses = findings.statuses.get(check, {})
        keys = findings.keys.get(check, [])  # "source:key" where the source is another name
        described = f"{count:,} {severity}{'s' if count != 1 else ''}"
        if summary.baseline is not None:
            described += " (" + ", ".join(f"{statuses.get(s, 0)} {s}" for s in ("new", "reappeared", "persisting")) + ")"
        shown = "\n".join(keys) + (f"\n... and {count - len(keys):,} more in the manifest" if count > len(keys) else "")
        if failing(summary, check, severity, statuses, fail_on):
            failures += 1
            failure = ElementTree.SubElement(case, "failure", message=f"{check}: {described}", type=severity)
            failure.text = f"{REGISTRY[check].summary}\n{described}; first records:\n{shown}\nmanifest: {summary.manifest}"
        elif count:
            ElementTree.SubElement(case, "system-out").text = f"{described} (not failing with --fail-on {fail_on}):\n{shown}"
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suites = ElementTree.Element("testsuites", name="scrub", tests=str(len(summary.checks)), failures=str(failures))
    suites.append(suite)
    ElementTree.indent(suites)
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
