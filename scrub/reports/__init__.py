"""Reports people and CI read, all made from a finished scan's summary and manifest.

`findings.collect` reads the manifest once (streaming, keeping only what the reports show);
the console table, `--summary-md`, `--junit` and `--html` are views of the summary and that.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from scrub.errors import ScrubError
from scrub.fixing.outputs import write_atomically
from scrub.reports.findings import THUMBNAILS, Findings, collect

if TYPE_CHECKING:
    from scrub.options.model import ScanOptions
    from scrub.scanning.summary import Summary


class Scanned(Protocol):
    """What the reports read of a finished scan (`scrub.api.ScanResult` is one): the reports sit
    below the API, which writes them."""

    @property
    def summary(self) -> Summary: ...

    @property
    def manifest(self) -> Path: ...

    @property
    def findings(self) -> Findings | None: ...


def write_reports(result: Scanned, options: ScanOptions, exit_code: int) -> Findings:
    """Write the reports ``options`` ask for (and the Markdown summary to
    ``$GITHUB_STEP_SUMMARY`` when it is set); return what they named, for the console."""
    summary = result.summary
    wanted_images = THUMBNAILS if options.html is not None else 0
    needed = (
        options.show
        or options.junit
        or options.html
        or options.summary_md
        or os.environ.get("GITHUB_STEP_SUMMARY")
    )
    if not (needed and summary.issues):
        found = Findings()
    elif (
        result.findings is not None
        and result.findings.show >= options.show
        and result.findings.images >= wanted_images
    ):
        # gathered during the scan: no second pass over the manifest
        found = result.findings
    else:
        found = collect(result.manifest, options.show, images=wanted_images)
    if options.junit is not None:
        from scrub.reports import junit

        write_report(options.junit, junit.render(summary, found, options.fail_on), "JUnit report")
    markdown_to = options.summary_md or os.environ.get("GITHUB_STEP_SUMMARY")
    if markdown_to:
        from scrub.reports import markdown

        text = markdown.render(summary, found, options.fail_on, exit_code)
        write_report(Path(markdown_to), text, "Markdown summary", append=options.summary_md is None)
    if options.html is not None:
        from scrub.reports import html

        write_report(
            options.html,
            html.render(summary, found, options.fail_on, exit_code, result.manifest, options.run.timeout),
            "HTML report",
        )
    return found


def write_report(path: Path, text: str, what: str, append: bool = False) -> None:
    """Write a report (atomically, unless appending to a CI's summary file)."""
    try:
        if append:
            with open(path, "a", encoding="utf-8") as file:
                file.write(text)
            return
        write_atomically(path, text.encode("utf-8"))
    except OSError as error:
        raise ScrubError(f"{path}: cannot write the {what}: {error.strerror}") from None
