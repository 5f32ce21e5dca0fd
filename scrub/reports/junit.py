"""`--junit`: JUnit XML, which GitLab, Jenkins and most CI pages display as a test report.

One testcase per check that ran (unique names: the check id; classname ``scrub.<dataset>``).
A check fails when it has issues that fail the run under ``--fail-on`` (judged per issue, by
its own severity and baseline status): its failure lists the counts and the first keys, new
and reappeared ones first and marked, and its message names those (the line CI pages show).
Checks with issues that do not fail the run pass, with the counts in their ``system-out``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from pathlib import PurePath

from scrub.reports.findings import MARKED, Findings
from scrub.summary import Summary


def failing(counts, fail_on: str) -> int:
    """How many of a check's issues fail the run, from its (status, severity) counts (a
    finding's severity may differ from its check's: `fp16-overflow` under `--precision float16`)."""
    if fail_on == "never":
        return 0
    if fail_on == "warning":
        return sum(counts.values())
    statuses = ("new", "reappeared") if fail_on == "new" else None
    return sum(
        n
        for (status, severity), n in counts.items()
        if severity == "error" and (statuses is None or status in statuses)
    )


#: characters of record names a failure's message holds at most (CI pages show it on one line)
MESSAGE_NAMES = 300


def _named(keys: list[str], marks: list[str], statuses: Mapping[str, int]) -> str:
    """The new and reappeared records among ``keys``, for a failure's message (the one line a
    CI page shows): ``; new: dog/a.jpg, dog/b.jpg and 3 more``; "" when there are none. At
    most `MESSAGE_NAMES` characters of names (the failure's text lists them all, marked)."""
    parts, room = [], MESSAGE_NAMES
    for status in MARKED:
        listed = []
        for key, label in zip(keys, marks):
            if label != status:
                continue
            if len(key) > room:
                break
            listed.append(key)
            room -= len(key) + 2
        if listed:
            left = statuses.get(status, 0) - len(listed)
            parts.append(f"{status}: {', '.join(listed)}" + (f" and {left:,} more" if left > 0 else ""))
    return "".join(f"; {part}" for part in parts)


def render(summary: Summary, findings: Findings, fail_on: str) -> str:
    from scrub.checks import REGISTRY

    overrides = summary.options.get("check_severity") or {}
    name = PurePath(summary.path).name or summary.path
    suite = ElementTree.Element(
        "testsuite",
        name=f"scrub {summary.path}",
        tests=str(len(summary.checks)),
        time=f"{summary.seconds:.3f}",
    )
    failures = 0
    for check in summary.checks:
        severity = overrides.get(check, REGISTRY[check].severity.value)
        case = ElementTree.SubElement(suite, "testcase", classname=f"scrub.{name}", name=check, time="0")
        count = summary.issues_by_check.get(check, 0)
        statuses: Mapping[str, int] = findings.statuses.get(check, {})
        keys = findings.keys.get(check, [])  # "source:key" where the source is another name
        by_severity = {
            level: sum(n for (_, s), n in findings.severities.get(check, {}).items() if s == level)
            for level in ("error", "warning")
        }
        described = (
            ", ".join(f"{n:,} {level}{'s' if n != 1 else ''}" for level, n in by_severity.items() if n)
            or f"0 {severity}s"
        )
        if summary.baseline is not None:
            described += (
                " ("
                + ", ".join(f"{statuses.get(s, 0)} {s}" for s in ("new", "reappeared", "persisting"))
                + ")"
            )
        marks = findings.key_marks.get(check, [""] * len(keys))  # new and reappeared come first
        shown = "\n".join(f"{key} ({label})" if label else key for key, label in zip(keys, marks)) + (
            f"\n... and {count - len(keys):,} more in the manifest" if count > len(keys) else ""
        )
        if failing(findings.severities.get(check, {}), fail_on):
            failures += 1
            message = f"{check}: {described}{_named(keys, marks, statuses)}"
            failure = ElementTree.SubElement(case, "failure", message=message, type=severity)
            failure.text = (
                f"{REGISTRY[check].summary}\n{described}; first records:\n{shown}\nmanifest: "
                f"{summary.manifest}"
            )
        elif count:
            ElementTree.SubElement(
                case, "system-out"
            ).text = f"{described} (not failing with --fail-on {fail_on}):\n{shown}"
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suites = ElementTree.Element(
        "testsuites", name="scrub", tests=str(len(summary.checks)), failures=str(failures)
    )
    suites.append(suite)
    ElementTree.indent(suites)
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
