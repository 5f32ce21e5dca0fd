"""The command line: each command builds options, calls one API function, and prints.

Every error becomes one line on stderr and exit code 2 (an uncaught exception under typer would
exit with 1, which would read as "issues found").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scrub import __version__
from scrub.errors import ExitCode, ScrubError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find and remove the training data that makes a model's loss go NaN.",
)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class FailOn(str, Enum):
    error = "error"
    warning = "warning"
    never = "never"


def _fail(message: str) -> None:
    err.print(f"scrub: error: {message}", markup=False, soft_wrap=True)
    raise typer.Exit(ExitCode.ERROR)


def guarded(command: Callable[[], int]) -> None:
    """Run a command body, turning every failure into one line and exit code 2."""
    try:
        code = command()
    except ScrubError as error:
        _fail(str(error))
    except KeyboardInterrupt:
        err.print("scrub: interrupted")
        raise typer.Exit(130) from None
    except typer.Exit:
        raise
    except Exception as error:  # noqa: BLE001 - scrub's own bug: still one line, still exit 2
        _fail(f"internal error: {type(error).__name__}: {error} (please report this)")
    else:
        raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        out.print(f"scrub {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = None,
) -> None:
    """Find and remove the training data that makes a model's loss go NaN."""


@app.command()
def scan(
    path: Annotated[Path, typer.Argument(help="Dataset: an image folder or ImageData list, an HDF5 file, folder or HDF5Data list, or an LMDB environment.")],
    format: Annotated[str, typer.Option("--format", help="Force the format: images, hdf5 or lmdb (default: auto-detect).")] = "auto",
    root: Annotated[Optional[Path], typer.Option(help="Folder that list-file paths are relative to (default: the list's folder).")] = None,
    data_key: Annotated[Optional[str], typer.Option(help="HDF5: the dataset whose rows are records (default: data).")] = None,
    label_key: Annotated[Optional[str], typer.Option(help="HDF5: the labels dataset (default: label).")] = None,
    lmdb_codec: Annotated[Optional[str], typer.Option(help="LMDB: force the value codec: datum, image, npy, pickle (default: detect per record).")] = None,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="LMDB: unpickle pickled values. Unpickling runs arbitrary code: only for data you trust.")] = False,
    manifest: Annotated[Path, typer.Option(help="Where to write the JSON Lines manifest.")] = Path("scrub-manifest.jsonl"),
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the summary as JSON to this path.")] = None,
    num_classes: Annotated[Optional[int], typer.Option(help="Number of classes: labels must lie in [0, N).")] = None,
    label_range: Annotated[Optional[str], typer.Option(help="Valid labels LO:HI (HI exclusive), instead of --num-classes.")] = None,
    max_pixels: Annotated[Optional[int], typer.Option(help="Decompression-bomb limit in pixels (default: Pillow's, ~89.5 M).")] = None,
    select: Annotated[Optional[str], typer.Option(help="Run only these checks (comma-separated ids).")] = None,
    ignore: Annotated[Optional[str], typer.Option(help="Skip these checks (comma-separated ids).")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="threads, processes, sync, or a dask.distributed address tcp://host:port (default: measured best for the format; sync for tiny jobs).")] = None,
    workers: Annotated[Optional[int], typer.Option(help="Local workers (default: all cores).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds one record may take before its decoder is deemed hung.")] = 60.0,
    plugin: Annotated[Optional[list[str]], typer.Option(help="Import this module first, to run the checks it registers (repeatable).")] = None,
    partition_size: Annotated[Optional[int], typer.Option(help="Records per Dask task (default: per format, ~0.2 s of work).")] = None,
    fail_on: Annotated[FailOn, typer.Option(help="Exit 1 when an issue at or above this severity is found.")] = FailOn.error,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no table.")] = False,
) -> None:
    """Scan a dataset: run every check on every record; write the manifest and a summary."""

    def body() -> int:
        from scrub.pipeline import start_worker_server

        start_worker_server(scheduler, workers)
        from scrub.api import scan as run_scan

        with _progress(quiet) as progress:
            result = run_scan(
                path,
                format=None if format == "auto" else format,
                root=root,
                data_key=data_key,
                label_key=label_key,
                lmdb_codec=lmdb_codec,
                allow_pickle=allow_pickle,
                manifest=manifest,
                num_classes=num_classes,
                label_range=label_range,
                max_pixels=max_pixels,
                select=_ids(select),
                ignore=_ids(ignore),
                scheduler=scheduler,
                workers=workers,
                timeout=timeout,
                partition_size=partition_size,
                plugins=plugin or (),
                progress=progress,
            )
        code = result.exit_code(fail_on.value)
        document = result.summary.to_dict() | {"fail_on": fail_on.value, "exit_code": int(code)}
        if json_path is not None:
            try:
                json_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
            except OSError as error:
                raise ScrubError(f"{json_path}: cannot write the JSON summary: {error.strerror}") from None
        if not quiet:
            _print_summary(result.summary)
        return int(code)

    guarded(body)


@app.command()
def checks(
    check_id: Annotated[Optional[str], typer.Argument(help="Explain this check in full.")] = None,
    plugin: Annotated[Optional[list[str]], typer.Option(help="Import this module first, to list its checks too (repeatable).")] = None,
) -> None:
    """List the checks (id, severity, what it finds), or explain one."""

    def body() -> int:
        from scrub.api import load_plugins
        from scrub.checks import REGISTRY, catalogue
        from scrub.checks.base import DOC_SECTIONS

        load_plugins(plugin or ())

        if check_id is None:
            table = Table("id", "severity", "kind", "finds", box=None)
            for check in catalogue():
                table.add_row(check.id, check.severity.value, check.kind, check.summary)
            out.print(table)
            return 0
        if check_id not in REGISTRY:
            raise ScrubError(f"unknown check id {check_id!r} (see `scrub checks`)")
        check = REGISTRY[check_id]
        out.print(f"[bold]{check.id}[/bold] ({check.severity.value}, {check.kind} check)")
        out.print(check.summary, markup=False)
        for section in DOC_SECTIONS:
            out.print(f"\n[bold]{section}[/bold]")
            out.print(check.sections.get(section, ""), markup=False)
        return 0

    guarded(body)


def _ids(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None


class _progress:
    """A rich progress bar on a terminal (records, records/s, issues so far); else nothing."""

    def __init__(self, quiet: bool) -> None:
        self.enabled = not quiet and sys.stdout.isatty()
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("scanning"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>8.0f} rec/s"),
            TextColumn("{task.fields[issues]} issues"),
            TimeElapsedColumn(),
            console=out,
            transient=True,
        )
        self.bar.__enter__()
        task = self.bar.add_task("scan", total=None, rate=0.0, issues=0)

        def update(snapshot) -> None:
            rate = snapshot.records / snapshot.seconds if snapshot.seconds > 0 else 0.0
            self.bar.update(task, completed=snapshot.records, total=snapshot.total or None, rate=rate, issues=snapshot.issues)

        return update

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def _print_summary(summary) -> None:
    info = summary.dataset
    layout = info.layout + (f", {len(info.classes)} classes" if info.classes else "")
    out.print(f"[bold]{escape(summary.path)}[/bold]: {info.format} ({escape(layout)})", soft_wrap=True)
    if info.skipped:
        skipped = ", ".join(f"{n} {what}" for what, n in sorted(info.skipped.items()))
        out.print(f"skipped: {skipped}", markup=False)
    table = Table("check", "severity", "issues", box=None)
    from scrub.checks import REGISTRY

    for check_id, count in sorted(summary.issues_by_check.items()):
        style = "" if count else "dim"
        table.add_row(check_id, REGISTRY[check_id].severity.value, str(count), style=style)
    out.print(table)
    out.print(
        f"{summary.records:,} records scanned in {summary.seconds:.2f} s "
        f"({summary.records_per_second:,.0f} records/s, {summary.scheduler}, "
        f"{summary.workers} worker{'s' if summary.workers != 1 else ''})"
    )
    out.print(
        f"{summary.issues:,} issues; {summary.records_with_errors:,} records to quarantine (errors), "
        f"{summary.records_with_warnings:,} with any issue"
    )
    out.print(f"manifest: {summary.manifest}", markup=False, soft_wrap=True)
