"""What the commands print: the summary table, what fix wrote, the progress bar, and the
library's messages on stderr. rich is imported when something is first printed."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from scrub.wording import counted

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


class _Console:
    """rich's ``Console``, imported when something is first printed: a run with ``-q`` that
    prints nothing does not pay rich's import time (see docs/benchmarks.md, "Design
    measurements")."""

    def __init__(self, **options) -> None:
        self._options = options
        self._console: Console | None = None

    def _live(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str):
        return getattr(self._live(), name)


out = _Console(highlight=False)
err = _Console(stderr=True, highlight=False)


def print_fixed(result, show: int) -> None:
    if result.scan is not None:
        from scrub.reports.findings import collect

        summary = result.scan.summary
        found = result.scan.findings or (collect(result.manifest, show) if summary.issues else None)
        print_summary(summary, found if summary.issues else None)
    else:
        reused = " and ".join(
            f"the scan in {one['manifest']}"
            if one["kind"] == "scan"
            else f"the NaN guard's findings in {one['manifest']}"
            for one in result.report["reused"]
        )
        out.print(f"reused {reused}", markup=False, soft_wrap=True)
    print_fix(result.report)


class _Stderr(logging.Handler):
    """``scrub: MESSAGE`` on stderr. Written to ``sys.stderr``, not through ``err``: while a
    progress bar shows, rich redirects ``sys.stderr`` to print above the bar, and its consoles
    bypass that redirection (the line landed on the bar's own)."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(f"scrub: {record.getMessage()}\n")
        sys.stderr.flush()


def messages_to_stderr(quiet: bool) -> None:
    """What the library says while it runs (``logging.getLogger("scrub")``: a cluster's wait for a
    worker) goes to stderr; with --quiet only its warnings. Set per command: tests run several
    in one process."""
    logger = logging.getLogger("scrub")
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False
    if not any(isinstance(handler, _Stderr) for handler in logger.handlers):
        logger.addHandler(_Stderr())


def write_json(path: Path | None, document: dict) -> None:
    if path is None:
        return
    from scrub.reports import write_report

    write_report(path, json.dumps(document, indent=2) + "\n", "JSON summary")


class ProgressBar:
    """A rich progress bar on a terminal (records, records/s, issues so far); else nothing."""

    def __init__(self, quiet: bool) -> None:
        self.enabled = not quiet and sys.stdout.isatty()
        self.bar: Progress | None = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = self.bar = Progress(
            TextColumn("scanning"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>8.0f} rec/s"),
            TextColumn("{task.fields[issues]} issues"),
            TimeElapsedColumn(),
            console=out._live(),
            transient=True,
        )
        bar.__enter__()
        task = bar.add_task("scan", total=None, rate=0.0, issues=0)

        def update(snapshot) -> None:
            rate = snapshot.records / snapshot.seconds if snapshot.seconds > 0 else 0.0
            bar.update(
                task,
                completed=snapshot.records,
                total=snapshot.total or None,
                rate=rate,
                issues=snapshot.issues,
            )

        return update

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def _under(path: str, parent: str) -> str:
    """``path`` relative to ``parent`` (printed just above the table) when it lies inside it,
    so that long absolute paths keep the part that tells the datasets apart."""
    prefix = parent.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) and len(path) > len(prefix) else path


def print_summary(summary, findings=None) -> None:
    """The scan's summary as people read it: what was scanned, the checks' counts, drift, what
    is bad as a whole, the replay, the records with errors, the cache and the baseline, notes."""
    _print_header(summary)
    _print_checks(summary)
    _print_drift(summary)
    _print_sole_causes(summary)
    if summary.replay is not None:
        _print_replay(summary.replay)
    if findings is not None and findings.errors:
        _print_errors(summary, findings)
    if summary.cache is not None:
        out.print(
            f"cache: {counted(summary.cache['reused'], 'record')} reused, {summary.cache['scanned']:,} "
            "scanned "
            f"({summary.cache['file']})",
            markup=False,
            soft_wrap=True,
        )
    if summary.baseline is not None:
        compared = summary.baseline
        out.print(
            f"against the baseline {compared['path']}: {compared['new']:,} new, {compared['persisting']:,} "
            "persisting, "
            f"{compared['reappeared']:,} reappeared, {compared['resolved']:,} resolved "
            f"({counted(compared['new_errors'], 'new or reappeared error')})",
            markup=False,
            soft_wrap=True,
        )
    for note in summary.notes:
        out.print(f"note: {note}", markup=False, soft_wrap=True)
    out.print(f"manifest: {summary.manifest}", markup=False, soft_wrap=True)


def _print_header(summary) -> None:
    """The dataset's path, format and layout, what was skipped, and a run's datasets."""
    from rich.markup import escape
    from rich.table import Table

    info = summary.dataset
    layout = info.layout + (f", {counted(len(info.classes), 'class')}" if info.classes else "")
    out.print(f"[bold]{escape(summary.path)}[/bold]: {info.format} ({escape(layout)})", soft_wrap=True)
    if info.skipped:
        skipped = ", ".join(counted(n, what) for what, n in sorted(info.skipped.items()))
        out.print(f"skipped: {skipped}", markup=False)
    if summary.parts:
        parts = Table("dataset", "format", "records", "errors", "warnings", box=None)
        parts.columns[0].overflow = "fold"  # a path cut short could name the wrong dataset
        for part in summary.parts:
            parts.add_row(
                escape(_under(part.path, summary.path)),
                part.dataset.format,
                f"{part.records:,}",
                f"{part.records_with_errors:,}",
                f"{part.records_warned:,}",
            )
        out.print(parts)


def _print_checks(summary) -> None:
    """Each check's severity and count, the time taken, the records to quarantine."""
    from rich.table import Table

    table = Table("check", "severity", "issues", box=None)
    from scrub.checks import REGISTRY

    overrides = summary.options.get("check_severity") or {}
    for check_id, count in sorted(summary.issues_by_check.items()):
        style = "" if count else "dim"
        table.add_row(
            check_id, overrides.get(check_id, REGISTRY[check_id].severity.value), str(count), style=style
        )
    out.print(table)
    out.print(
        f"{counted(summary.records, 'record')} scanned in {summary.seconds:.2f} s "
        f"({summary.records_per_second:,.0f} records/s, {summary.scheduler}, "
        f"{summary.workers} worker{'s' if summary.workers != 1 else ''})"
    )
    out.print(
        f"{counted(summary.issues, 'issue')}; {counted(summary.records_with_errors, 'record')} to quarantine "
        "(errors), "
        f"{summary.records_with_warnings:,} with any issue"
    )


def _print_drift(summary) -> None:
    drifted = summary.drift or []
    if summary.drift is not None and not drifted:
        out.print("drift from the baseline: none past the thresholds", markup=False)
    if drifted:
        out.print(f"drift from the baseline ({counted(len(drifted), 'finding')}):", markup=False)
        checks = max(len(found["check"]) for found in drifted)
        for found in drifted:  # one line each: logs and greps read them
            place = f"{_under(found['dataset'], summary.path)}: " if "dataset" in found else ""
            out.print(f" {found['check']:<{checks}}  {place}{found['message']}", markup=False, soft_wrap=True)


def _print_sole_causes(summary) -> None:
    for part in summary.parts or [summary]:
        causes = part.sole_causes()
        if causes:
            name = f"{part.path}: " if summary.parts else ""
            out.print(
                f"{name}every record is flagged by {' and '.join(causes)}: the dataset is bad as a whole, "
                "not record by record (fix refuses to empty it; see the first error below)",
                markup=False,
                soft_wrap=True,
            )


def _print_replay(replay: dict) -> None:
    # records the token replay skipped as the scan's errors are not unreplayable (a note says them)
    skipped = sum(n for why, n in replay["skipped"].items() if why != "condemned")
    standardization = replay["standardization"]
    inputs = "standardized (" + standardization["source"] + ")" if standardization else "raw values"
    tokens = replay.get("tokens")
    model = replay["options"]["model"]
    if tokens is not None:  # token data: a language model over a vocabulary
        model = "embedding language" if ":" not in model else model
        shape = f"vocabulary {tokens['vocab_size']:,} (from {tokens['vocab_from']})"
        hashed = tokens.get("model_vocabulary")
        if hashed is not None and hashed < tokens["vocab_size"]:
            shape += f" hashed into {hashed:,}"
    else:
        shape = f"{counted(replay['classes'], 'class')}, {counted(replay['features'], 'feature')}"
    out.print(
        f"dummy-loss replay: {counted(replay['records_replayed'], 'record')} in "
        f"{counted(replay['batches'], 'batch')} ({counted(replay['records_applied'], 'record')} trained "
        f"on), {model} model, {shape}, {replay['options']['precision']}"
        + ("" if tokens is not None else f", {inputs}")
        + f"; {counted(skipped, 'record')} not replayable (see the checks above)",
        markup=False,
    )


def _print_errors(summary, findings) -> None:
    """The records with errors, one line each, never wrapped: logs and greps read them."""
    out.print("records with errors:", markup=False)
    from scrub.reports.findings import mark, record_name

    names = [record_name(issue) for issue in findings.errors]
    width = min(40, max(map(len, names)))
    checks = max(len(issue.check) for issue in findings.errors)
    # against a baseline, a first column marks the new and reappeared (listed first)
    marks = [mark(issue.status) for issue in findings.errors]
    marked = max(map(len, marks)) if summary.baseline is not None else 0
    for name, issue, label in zip(
        names, findings.errors, marks
    ):  # one line each, never wrapped: logs and greps read them
        column = f"{label:<{marked}}  " if marked else ""
        out.print(
            f" {column}{name:<{width}}  {issue.check:<{checks}}  {issue.message}",
            markup=False,
            soft_wrap=True,
        )
    if findings.more_errors:
        out.print(f"and {counted(findings.more_errors, 'more error')} in the manifest", markup=False)


def print_fix(report: dict) -> None:
    out.print(
        f"kept        {counted(report['kept'], 'record')} -> {report['dataset']}",
        markup=False,
        soft_wrap=True,
    )
    where = report["quarantined_dataset"] or "not written (use --quarantine)"
    out.print(
        f"quarantined {counted(report['quarantined'], 'record')} -> {where}", markup=False, soft_wrap=True
    )
    for reason in report["forced"]:
        out.print(f"  set aside, cannot be copied record by record: {reason}", markup=False, soft_wrap=True)
    for note in report["notes"]:
        out.print(f"note: {note}", markup=False, soft_wrap=True)
    check = report["verification"]
    sides = "cleaned copy and quarantine" if report["quarantine"] else "cleaned copy"
    out.print(
        f"verified: {report['kept']:,} + {report['quarantined']:,} = {counted(check['records'], 'record')}; "
        f"per-record checksums of the {sides} match the source",
        markup=False,
        soft_wrap=True,
    )
