"""`--junit`: JUnit XML, which GitLab, Jenkins and most CI pages display as a test report.

One testcase per check that ran (unique names: the check id; classname ``scrub.<dataset>``).
A check fails when it has issues that fail the run under ``--fail-on`` (judged per issue, by
its own severity and baseline status): its failure lists the counts and the first keys, new
and reappeared ones first and marked, and its message names those (the line CI pages show).
Checks with issues that do not fail the run pass, with the counts in their ``system-out``.

Drift and contract findings on the dataset as a whole (`findings.is_dataset_finding`) are each a
testcase of their own (classname ``scrub.<dataset>.dataset``, name ``<check> <feature>``), failing
by the same rule, so that a CI page names the feature that moved; their check's own testcase
counts only the records it flagged.

A leak between splits (`split-leak`) comes first: its testcase is the suite's first, and it names
each leaked evaluation record with the training record it copies.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Mapping
from pathlib import PurePath

from scrub.reports.findings import (
    LEAK_CHECK,
    MARKED,
    Findings,
    describe_finding,
    leaks_first,
    partner_name,
)
from scrub.scanning.summary import Summary


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
    name = PurePath(summary.path).name or summary.path
    suite = ElementTree.Element(
        "testsuite",
        name=f"scrub {summary.path}",
        tests=str(len(summary.checks)),
        time=f"{summary.seconds:.3f}",
    )
    #: each dataset finding's (status, severity), by check: its own testcase, out of its check's
    on_dataset: dict[str, Counter] = {}
    for issue in findings.dataset_findings:
        on_dataset.setdefault(issue.check, Counter())[(issue.status or "found", issue.severity.value)] += 1
    failures = sum(
        _check_case(suite, check, summary, findings, fail_on, on_dataset.get(check, Counter()))
        for check in leaks_first(summary.checks)
    )
    failures += _dataset_cases(suite, summary, findings, fail_on, name)
    tests = len(summary.checks) + len(findings.dataset_findings)
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suites = ElementTree.Element("testsuites", name="scrub", tests=str(tests), failures=str(failures))
    suites.append(suite)
    ElementTree.indent(suites)
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _check_case(
    suite: ElementTree.Element,
    check: str,
    summary: Summary,
    findings: Findings,
    fail_on: str,
    on_dataset: Counter,
) -> bool:
    """The testcase of ``check`` (``on_dataset``: its findings on the dataset as a whole, by
    (status, severity), each a testcase of its own); returns whether it fails."""
    from scrub.checks import REGISTRY

    name = PurePath(summary.path).name or summary.path
    severity = (summary.options.get("check_severity") or {}).get(check, REGISTRY[check].severity.value)
    case = ElementTree.SubElement(suite, "testcase", classname=f"scrub.{name}", name=check, time="0")
    counts = Counter(findings.severities.get(check, {}))
    counts.subtract(on_dataset)
    counts = +counts  # the records it flagged, without the dataset findings
    apart = sum(on_dataset.values())
    count = summary.issues_by_check.get(check, 0) - apart
    statuses: Mapping[str, int] = findings.statuses.get(check, {})
    if apart:  # the dataset's own finding is named in its testcase, not as a record
        statuses = +(Counter(statuses) - Counter(status for status, _ in on_dataset.elements()))
    keys, marks = _keys(check, findings)
    if apart:
        kept = [(key, label) for key, label in zip(keys, marks) if not key.endswith("*")]
        keys, marks = [key for key, _ in kept], [label for _, label in kept]
    by_severity = {
        level: sum(n for (_, s), n in counts.items() if s == level) for level in ("error", "warning")
    }
    described = (
        ", ".join(f"{n:,} {level}{'s' if n != 1 else ''}" for level, n in by_severity.items() if n)
        or f"0 {severity}s"
    )
    if summary.baseline is not None:
        described += (
            " (" + ", ".join(f"{statuses.get(s, 0)} {s}" for s in ("new", "reappeared", "persisting")) + ")"
        )
    marks = marks or [""] * len(keys)  # new and reappeared come first
    shown = "\n".join(f"{key} ({label})" if label else key for key, label in zip(keys, marks)) + (
        f"\n... and {count - len(keys):,} more in the manifest" if count > len(keys) else ""
    )
    if failing(counts, fail_on):
        named = _named(keys, marks, statuses) or _first(check, keys)
        failure = ElementTree.SubElement(
            case, "failure", message=f"{check}: {described}{named}", type=severity
        )
        failure.text = (
            f"{REGISTRY[check].summary}\n{described}; first records:\n{shown}\nmanifest: {summary.manifest}"
        )
        return True
    if count:
        ElementTree.SubElement(
            case, "system-out"
        ).text = f"{described} (not failing with --fail-on {fail_on}):\n{shown}"
    elif apart:
        ElementTree.SubElement(case, "system-out").text = (
            f"{apart} finding{'s' if apart != 1 else ''} on the dataset as a whole: each is a testcase "
            f"of scrub.{name}.dataset"
        )
    return False


def _keys(check: str, findings: Findings) -> tuple[list[str], list[str]]:
    """The first records ``check`` flagged and their marks; a leak's each with the training
    record it copies (``val:cat/1.jpg (training record: train:cat/9.jpg)``)."""
    keys, marks = findings.keys.get(check, []), findings.key_marks.get(check, [])
    leaks = findings.pairs.get(check, []) if check == LEAK_CHECK else []
    if len(leaks) < len(keys):  # findings made without their details
        return keys, marks
    named = [(key, partner_name(issue)) for key, issue in zip(keys, leaks)]
    return [key if other is None else f"{key} (training record: {other})" for key, other in named], marks


def _first(check: str, keys: list[str]) -> str:
    """A leak's failure message names its first record pair (the one line a CI page shows),
    within `MESSAGE_NAMES` characters; "" for other checks."""
    if check != LEAK_CHECK or not keys:
        return ""
    first = keys[0] if len(keys[0]) <= MESSAGE_NAMES else keys[0][: MESSAGE_NAMES - 1] + "…"
    return f"; first: {first}"


def _dataset_cases(
    suite: ElementTree.Element, summary: Summary, findings: Findings, fail_on: str, name: str
) -> int:
    """A testcase per drift or contract finding on the dataset as a whole, named by its check
    and feature (and dataset, in a run of several), failing when the finding fails the run;
    returns how many fail."""
    failures = 0
    used: Counter[str] = Counter()
    for issue in findings.dataset_findings:
        feature, found, limit = describe_finding(issue)
        case_name = issue.check + (f" {feature}" if feature else "")
        if summary.parts and issue.dataset:
            case_name = f"{issue.check} {issue.dataset}" + (f": {feature}" if feature else "")
        used[case_name] += 1
        if used[case_name] > 1:  # names stay unique
            case_name += f" ({used[case_name]})"
        case = ElementTree.SubElement(
            suite, "testcase", classname=f"scrub.{name}.dataset", name=case_name, time="0"
        )
        measured = "; ".join(part for part in (found, limit) if part)
        status = f", {issue.status}" if issue.status in MARKED else ""
        text = f"{issue.message}\n{measured}" if measured else issue.message
        if failing(Counter({(issue.status or "found", issue.severity.value): 1}), fail_on):
            failures += 1
            message = f"{issue.check}: {feature or issue.source}" + (f": {measured}" if measured else "")
            message += f" ({issue.status})" if issue.status in MARKED else ""
            ElementTree.SubElement(case, "failure", message=message, type=issue.severity.value).text = text
        else:
            ElementTree.SubElement(
                case, "system-out"
            ).text = f"{issue.severity.value}{status} (not failing with --fail-on {fail_on}): {text}"
    return failures
