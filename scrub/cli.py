"""The command line: each command builds options, calls one API function, and prints.

Every error becomes one line on stderr and exit code 2 (an uncaught exception under typer would
exit with 1, which would read as "issues found").
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from scrub import __version__
from scrub.errors import ExitCode, IncompleteScan, OutputError, ScrubError
from scrub.interrupt import EXIT_CODE, interrupted
from scrub.wording import counted

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find and remove the training data that makes a model's loss go NaN.",
)


class _Console:
    """rich's ``Console``, imported when something is first printed: a run with ``-q`` that
    prints nothing does not pay rich's import (~20 ms, measured with ``-X importtime``)."""

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


def _fail(message: str, code: ExitCode = ExitCode.ERROR) -> None:
    err.print(f"scrub: error: {message}", markup=False, soft_wrap=True)
    raise typer.Exit(code)


def guarded(command: Callable[[], int]) -> None:
    """Run a command body, turning every failure into one line and exit code 2."""
    try:
        code = command()
    except IncompleteScan as error:
        _fail(str(error), ExitCode.INCOMPLETE)
    except OutputError as error:
        if error.exit_at_once:  # a library cannot shut down cleanly (see OutputError): say it, then go
            err.print(f"scrub: error: {error}", markup=False, soft_wrap=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(ExitCode.ERROR)
        _fail(str(error))
    except ScrubError as error:
        _fail(str(error))
    except KeyboardInterrupt:  # see scrub.interrupt: the temporary outputs are gone, the pool stopped
        interrupted()
        raise typer.Exit(EXIT_CODE) from None
    except typer.Exit:
        raise
    except Exception as error:
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


def _help(text: str) -> str:
    """A help text as typer's rich markup shows it: the format table's names in place of
    ``{formats}``, brackets escaped (``[tool.scrub]`` is text, not a style)."""
    from scrub.formats import format_names

    return text.replace("{formats}", ", ".join(format_names(plugins=False))).replace("[", "\\[")


def _datasets_help() -> str:
    from scrub.formats import FORMATS, format_names

    held = [FORMATS[name].holds or name for name in format_names(plugins=False)]
    return _help(
        f"Datasets: {', '.join(held[:-1])} or {held[-1]}; several, glob patterns ('shards/*.h5') and folders "
        "of datasets (a folder of LMDB environments) are scanned together."
    )


# The arguments and options `scan` and `fix` take beside the `KEYS` they are built from.
PathsArg = Annotated[list[Path], typer.Argument(help=_datasets_help(), show_default=False)]
ConfigOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--config",
        help=(
            "Read options from this TOML file (default: the closest scrub.toml, or pyproject.toml with "
            "\\[tool.scrub], in the dataset's folder or above it, else here)."
        ),
    ),
]
IsolatedOpt = Annotated[
    bool,
    typer.Option(
        "--isolated",
        help="Read no config file (neither --config nor a scrub.toml or pyproject.toml found): flags only.",
    ),
]
#: the help's panels, by `Key.group`
PANELS = {
    "read": "Reading",
    "checks": "Checking",
    "selection": "Which checks",
    "run": "Running",
    "replay": "Dummy-loss replay",
    "scan": "Outputs",
    "fix": "The cleaned copy",
}


def _key_option(name: str, command: str, panel: bool = True) -> object:
    """Option ``name`` of `KEYS` as ``command`` takes it: its type, flag, help, choices (as an
    Enum, which typer shows and checks) and, with ``panel``, its group's panel in the help."""
    from scrub.options import KEYS

    key = KEYS[name]
    kind = key.fix_kind if command == "fix" and key.fix_kind else key.kind
    base: Any = {"int": int, "float": float, "bool": bool, "path": Path}.get(key.kind, str)
    if key.choices:
        choices = Enum(key.attribute.title().replace("_", ""), [(c, c) for c in key.choices], type=str)  # type: ignore[misc]
        base = choices
    annotation: object
    if kind == "bool":
        annotation = bool
    elif kind in ("paths", "severities"):
        annotation = Optional[list[base]]  # repeatable
    else:
        annotation = base if key.default is not None else Optional[base]
    text = key.fix_help if command == "fix" and key.fix_help else key.help
    option = typer.Option(
        key.switch or key.flag,
        *([key.short] if key.short else []),
        help=_help(text),
        rich_help_panel=PANELS[key.group] if panel else None,
    )
    return Annotated[annotation, option]


def _option_parameters(command: str) -> list[inspect.Parameter]:
    """The options of ``command`` (scan or fix), one per `Key` it takes: the flag, the help,
    the choices and the default all come from the key and its field."""
    from scrub.options import KEYS

    return [
        inspect.Parameter(
            key.attribute,
            inspect.Parameter.KEYWORD_ONLY,
            default=key.default,
            annotation=_key_option(key.name, command),
        )
        for key in KEYS.values()
        if command in key.commands
    ]


def _built_from_keys(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command taking ``**options`` the options of `KEYS` as its parameters (typer reads
    a function's signature; the body receives every option by its key's attribute name)."""

    def build(function: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(function, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        function.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own, *_option_parameters(command)]
        )
        return function

    return build


#: parameters that are not options of the model (the dataset, the config file itself)
NOT_OPTIONS = frozenset({"path", "config", "isolated"})


def given_options(ctx: typer.Context) -> dict[str, object]:
    """The options typed on the command line, by key name (defaults are not "given": a config
    file's value must win over a flag's default)."""
    return {
        name.replace("_", "-"): value.value if isinstance(value, Enum) else value
        for name, value in ctx.params.items()
        if name not in NOT_OPTIONS and getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"
    }


@app.command()
@_built_from_keys("scan")
def scan(
    ctx: typer.Context, path: PathsArg, config: ConfigOpt = None, isolated: IsolatedOpt = False, **_: object
) -> None:
    """Scan a dataset: run every check on every record; write the manifest and a summary."""

    def body() -> int:
        options, datasets, notes = _resolve_many("scan", path, ctx, _config_choice(config, isolated))
        _messages_to_stderr(options.quiet)
        if options.manifest is None:
            from scrub.manifest import default_manifest

            named = path[0] if len(path) == 1 and path[0].exists() else Path("datasets")
            options = replace(options, manifest=default_manifest(named))
        from scrub.api import scan_many, scan_one

        with _progress(options.quiet) as progress:
            if datasets is None:
                result = scan_one(path[0], options, progress=progress)
            else:
                result = scan_many(datasets, options, progress=progress, notes=notes)
        code = result.exit_code(options.fail_on)
        _write_json(
            options.json, result.summary.to_dict() | {"fail_on": options.fail_on, "exit_code": int(code)}
        )
        from scrub.reports import write_reports

        findings = write_reports(result, options, int(code))
        if not options.quiet:
            _print_summary(result.summary, findings)
        return int(code)

    guarded(body)


@app.command()
@_built_from_keys("fix")
def fix(
    ctx: typer.Context, path: PathsArg, config: ConfigOpt = None, isolated: IsolatedOpt = False, **_: object
) -> None:
    """Write a cleaned copy without the bad records (and, with --quarantine, the bad records
    apart), in the dataset's own format; verify that every record landed in exactly one."""

    def body() -> int:
        options, datasets, notes = _resolve_many("fix", path, ctx, _config_choice(config, isolated))
        _messages_to_stderr(options.scan.quiet)
        from scrub.cleaning import fix as run_fix
        from scrub.cleaning import fix_many

        if datasets is None:
            with _progress(options.scan.quiet) as progress:
                result = run_fix(path[0], options, progress=progress)
            code: int = result.exit_code()
            _write_json(
                options.scan.json, result.scan_summary | {"fix": result.report, "exit_code": int(code)}
            )
            if not options.scan.quiet:
                _print_fixed(result, options.scan.show)
            return int(code)
        for note in notes:
            if not options.scan.quiet:
                out.print(f"note: {note}", markup=False, soft_wrap=True)
        results = []

        def done(result) -> None:  # each dataset's outcome as soon as it is committed
            results.append(result)
            if not options.scan.quiet:
                _print_fixed(result, options.scan.show)

        with _progress(options.scan.quiet) as progress:
            fix_many(datasets, options, progress=progress, on_fixed=done)
        code = max((int(result.exit_code()) for result in results), default=0)
        _write_json(
            options.scan.json,
            {"fixes": [r.scan_summary | {"fix": r.report} for r in results], "exit_code": code},
        )
        return code

    guarded(body)


def _print_fixed(result, show: int) -> None:
    if result.scan is not None:
        from scrub.reports.findings import collect

        summary = result.scan.summary
        found = result.scan.findings or (collect(result.manifest, show) if summary.issues else None)
        _print_summary(summary, found if summary.issues else None)
    else:
        reused = " and ".join(
            f"the scan in {one['manifest']}"
            if one["kind"] == "scan"
            else f"the NaN guard's findings in {one['manifest']}"
            for one in result.report["reused"]
        )
        out.print(f"reused {reused}", markup=False, soft_wrap=True)
    _print_fix(result.report)


def _config_choice(config: Path | None, isolated: bool) -> Path | bool | None:
    """Which config file to read: ``--config FILE``, False for none (``--isolated``), None to find one."""
    if isolated and config is not None:
        raise ScrubError("--isolated reads no config file and --config names one: drop one of them")
    return False if isolated else config


def _resolve_many(command: str, paths: list[Path], ctx: typer.Context, config: Path | bool | None):
    """The run's options and, when the paths name more than one dataset (several paths, a glob
    pattern, a folder of datasets), each dataset's own options (a config file's sections may
    differ per dataset) and the notes of what was passed over; else None and []."""
    from scrub.readers.base import expand_datasets

    options = _resolve(command, paths[0], ctx, config).options
    read = options.read if command == "scan" else options.scan.read
    found = expand_datasets(paths, read)
    if len(paths) == 1 and found.paths == paths and not found.skipped:
        return options, None, []
    datasets = [(dataset, _resolve(command, dataset, ctx, config).options) for dataset in found.paths]
    return options, datasets, [found.note()] if found.note() else []


def _resolve(command: str, path: Path, ctx: typer.Context, config: Path | bool | None):
    """The options of this run: the config file's, overridden by the flags typed."""
    from scrub.config import resolve

    return resolve(command, path, given_options(ctx), config)


JsonOpt = _key_option("json", "scan", panel=False)
QuietOpt = _key_option("quiet", "scan", panel=False)


@app.command()
def restore(
    quarantine: Annotated[Path, typer.Argument(help="A quarantine folder `scrub fix --quarantine` wrote.")],
    key: Annotated[
        Optional[list[str]],
        typer.Option(
            "--key",
            help="Restore only this record (its key, or SOURCE:KEY; repeatable; default: every record).",
        ),
    ] = None,
    into: Annotated[
        Optional[Path],
        typer.Option(help="Write the cleaned copy here (default: the one fix wrote, replaced)."),
    ] = None,
    json_path: JsonOpt = None,  # type: ignore[valid-type]  # built from KEYS
    quiet: QuietOpt = False,  # type: ignore[valid-type]
) -> None:
    """Put quarantined records back into the cleaned copy, in its format, verified and atomic as
    fix is (rewritten from the source fix read, which must not have changed since)."""

    def body() -> int:
        from scrub.restoring import restore as run_restore

        with _progress(quiet) as progress:
            result = run_restore(quarantine, key, into, progress=progress)
        _write_json(json_path, result.scan_summary | {"fix": result.report, "exit_code": 0})
        if not quiet:
            _print_fix(result.report)
        return 0

    guarded(body)


@app.command("config")
def show_config(
    ctx: typer.Context,
    path: Annotated[
        Path, typer.Argument(help="The dataset the configuration is for (default: the working directory).")
    ] = Path("."),
    config: ConfigOpt = None,
    isolated: IsolatedOpt = False,
    command: Annotated[
        str, typer.Option("--command", help="Show the options of this command: scan or fix.")
    ] = "scan",
) -> None:
    """Print the effective configuration for PATH, and where each value came from."""

    def body() -> int:
        from scrub.config import resolve
        from scrub.options import KEYS, SCAN_ONLY, describe, flatten

        if command not in ("scan", "fix"):
            raise ScrubError(f"--command {command!r}: choose scan or fix")
        resolved = resolve(command, path, {}, _config_choice(config, isolated))
        source = resolved.config.path if resolved.config else None
        out.print(f"# scrub {command} {path}", markup=False)
        nothing = (
            "none read (--isolated)"
            if isolated
            else "none found (scrub.toml, or [tool.scrub] in pyproject.toml, in the dataset's folder, above "
            "it, or here)"
        )
        out.print(f"# config file: {source or nothing}", markup=False, soft_wrap=True)
        flat = flatten(resolved.options)
        for name, key in KEYS.items():
            if (
                (command == "scan" and key.group == "fix")
                or (command == "fix" and name in SCAN_ONLY)
                or name not in flat
            ):
                continue
            origin = resolved.origins.get(name, "default")
            text = _toml(describe(flat[name]))
            line = f"# {name} = (not set)" if text is None else f"{name} = {text}"
            out.print(f"{line}  # {origin}", markup=False, soft_wrap=True)
        return 0

    guarded(body)


def _toml(value) -> str | None:
    """A value as a TOML literal (JSON's strings, numbers, booleans and arrays are TOML's);
    None for "not set"."""
    if value is None:
        return None
    if isinstance(value, dict):
        return "{ " + ", ".join(f'"{k}" = {json.dumps(v)}' for k, v in value.items()) + " }"
    return json.dumps(value)


baseline_app = typer.Typer(help="Work with baselines (manifests of earlier scans).", no_args_is_help=True)
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("prune")
def baseline_prune(
    manifest: Annotated[Path, typer.Argument(help="A manifest written with --baseline.")],
    out_path: Annotated[
        Optional[Path], typer.Option("--out", help="Write the pruned manifest here instead of in place.")
    ] = None,
) -> None:
    """Drop the resolved lines of a manifest (issues a baseline held that are gone), so that it
    forgets them: one that comes back is then new, not reappeared."""

    def body() -> int:
        from scrub.baseline import prune

        kept, dropped = prune(manifest, out_path)
        out.print(
            f"{out_path or manifest}: kept {counted(kept, 'issue')}, dropped {dropped:,} resolved",
            markup=False,
            soft_wrap=True,
        )
        return 0

    guarded(body)


@app.command()
def checks(
    check_id: Annotated[Optional[str], typer.Argument(help="Explain this check in full.")] = None,
    plugin: Annotated[
        Optional[list[str]],
        typer.Option(help="Import this module first, to list its checks too (repeatable)."),
    ] = None,
) -> None:
    """List the checks (id, severity, what it finds), or explain one."""

    def body() -> int:
        from rich.table import Table

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


class _Stderr(logging.Handler):
    """``scrub: MESSAGE`` on stderr. Written to ``sys.stderr``, not through ``err``: while a
    progress bar shows, rich redirects ``sys.stderr`` to print above the bar, and its consoles
    bypass that redirection (the line landed on the bar's own)."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(f"scrub: {record.getMessage()}\n")
        sys.stderr.flush()


def _messages_to_stderr(quiet: bool) -> None:
    """What the library says while it runs (``logging.getLogger("scrub")``: a cluster's wait for a
    worker) goes to stderr; with --quiet only its warnings. Set per command: tests run several
    in one process."""
    logger = logging.getLogger("scrub")
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False
    if not any(isinstance(handler, _Stderr) for handler in logger.handlers):
        logger.addHandler(_Stderr())


def _write_json(path: Path | None, document: dict) -> None:
    if path is None:
        return
    from scrub.reports import write_report

    write_report(path, json.dumps(document, indent=2) + "\n", "JSON summary")


class _progress:
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


def _print_summary(summary, findings=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    info = summary.dataset
    layout = info.layout + (f", {len(info.classes)} classes" if info.classes else "")
    out.print(f"[bold]{escape(summary.path)}[/bold]: {info.format} ({escape(layout)})", soft_wrap=True)
    if info.skipped:
        skipped = ", ".join(counted(n, what) for what, n in sorted(info.skipped.items()))
        out.print(f"skipped: {skipped}", markup=False)
    if summary.parts:
        parts = Table("dataset", "format", "records", "errors", "warnings", box=None)
        for part in summary.parts:
            parts.add_row(
                escape(part.path),
                part.dataset.format,
                f"{part.records:,}",
                f"{part.records_with_errors:,}",
                f"{part.records_with_warnings:,}",
            )
        out.print(parts)
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
    if summary.replay is not None:
        replay = summary.replay
        skipped = sum(replay["skipped"].values())
        standardization = replay["standardization"]
        inputs = "standardized (" + standardization["source"] + ")" if standardization else "raw values"
        out.print(
            f"dummy-loss replay: {counted(replay['records_replayed'], 'record')} in "
            f"{counted(replay['batches'], 'batch')} ({counted(replay['records_applied'], 'record')} trained "
            f"on), {replay['options']['model']} model, "
            f"{replay['classes']} classes, {replay['features']} features, {replay['options']['precision']}, "
            f"{inputs}; {counted(skipped, 'record')} not replayable (see the checks above)",
            markup=False,
        )
    if findings is not None and findings.errors:
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
            f"({compared['new_errors']:,} new or reappeared errors)",
            markup=False,
            soft_wrap=True,
        )
    for note in summary.notes:
        out.print(f"note: {note}", markup=False, soft_wrap=True)
    out.print(f"manifest: {summary.manifest}", markup=False, soft_wrap=True)


def _print_fix(report: dict) -> None:
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
