"""The command line: each command builds options, calls one API function, and prints.

Every error becomes one line on stderr and exit code 2 (an uncaught exception under typer would
exit with 1, which would read as "issues found").
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from scrub import __version__
from scrub.console import (
    ProgressBar,
    err,
    messages_to_stderr,
    out,
    print_fix,
    print_fixed,
    print_summary,
    write_json,
)
from scrub.errors import ExitCode, IncompleteScan, OutputError, ScrubError
from scrub.execution.interrupt import EXIT_CODE, interrupted
from scrub.options.flags import NOT_OPTIONS, ConfigOpt, IsolatedOpt, PathsArg, built_from_keys, key_option
from scrub.wording import counted

if TYPE_CHECKING:
    from scrub.options.model import FixOptions, ScanOptions
    from scrub.readers.base import Datasets

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find and remove the training data that makes a model's loss go NaN.",
)


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
    except KeyboardInterrupt:  # see scrub.execution.interrupt: temporary outputs gone, the pool stopped
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


def given_options(ctx: typer.Context) -> dict[str, object]:
    """The options typed on the command line, by key name (defaults are not "given": a config
    file's value must win over a flag's default)."""
    return {
        name.replace("_", "-"): value.value if isinstance(value, Enum) else value
        for name, value in ctx.params.items()
        if name not in NOT_OPTIONS and getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"
    }


@app.command()
@built_from_keys("scan")
def scan(
    ctx: typer.Context, path: PathsArg, config: ConfigOpt = None, isolated: IsolatedOpt = False, **_: object
) -> None:
    """Scan a dataset: run every check on every record; write the manifest and a summary."""

    def body() -> int:
        options, datasets, notes = _resolve_many("scan", path, ctx, _config_choice(config, isolated))
        messages_to_stderr(options.quiet)
        manifest_note = None
        if options.manifest is None:
            from scrub.manifest import default_manifest
            from scrub.readers.base import names_dataset
            from scrub.storage import location

            several = [str(dataset) for dataset, _ in datasets] if datasets is not None else []
            one = location(path[0], options.read.storage)
            after = one if len(path) == 1 and names_dataset(one) else None  # None: "datasets"
            named, manifest_note = default_manifest(after, several)
            options = replace(options, manifest=named)
        from scrub.api import scan_many, scan_one

        with ProgressBar(options.quiet) as progress:
            if datasets is None:
                result = scan_one(path[0], options, progress=progress)
            else:
                result = scan_many(datasets, options, progress=progress, notes=notes)
        if manifest_note is not None:  # after the scan: the record beside the manifest is the scan's own
            result.summary.notes.append(manifest_note)
        code = result.exit_code(options.fail_on)
        write_json(
            options.json, result.summary.to_dict() | {"fail_on": options.fail_on, "exit_code": int(code)}
        )
        from scrub.reports import write_reports

        findings = write_reports(result, options, int(code))
        if not options.quiet:
            print_summary(result.summary, findings)
        return int(code)

    guarded(_one_listing(body))


def _one_listing(body: Callable[[], int]) -> Callable[[], int]:
    """``body`` as one run whose datasets share what it lists (a brace pattern's shards, their
    prefix's listing: `scrub.storage.listings_of_this_run`)."""

    def run() -> int:
        from scrub.storage import listings_of_this_run

        with listings_of_this_run():
            return body()

    return run


@app.command()
@built_from_keys("fix")
def fix(
    ctx: typer.Context, path: PathsArg, config: ConfigOpt = None, isolated: IsolatedOpt = False, **_: object
) -> None:
    """Write a cleaned copy without the bad records (and, with --quarantine, the bad records
    apart), in the dataset's own format; verify that every record landed in exactly one."""

    def body() -> int:
        options, datasets, notes = _resolve_many("fix", path, ctx, _config_choice(config, isolated))
        messages_to_stderr(options.scan.quiet)
        from scrub.fixing.cleaning import fix as run_fix
        from scrub.fixing.cleaning import fix_many

        if datasets is None:
            with ProgressBar(options.scan.quiet) as progress:
                result = run_fix(path[0], options, progress=progress)
            code: int = result.exit_code()
            write_json(
                options.scan.json, result.scan_summary | {"fix": result.report, "exit_code": int(code)}
            )
            if not options.scan.quiet:
                print_fixed(result, options.scan.show)
            return int(code)
        for note in notes:
            if not options.scan.quiet:
                out.print(f"note: {note}", markup=False, soft_wrap=True)
        results = []

        def done(result) -> None:  # each dataset's outcome as soon as it is committed
            results.append(result)
            if not options.scan.quiet:
                print_fixed(result, options.scan.show)

        with ProgressBar(options.scan.quiet) as progress:
            fix_many(datasets, options, progress=progress, on_fixed=done)
        code = max((int(result.exit_code()) for result in results), default=0)
        write_json(
            options.scan.json,
            {"fixes": [r.scan_summary | {"fix": r.report} for r in results], "exit_code": code},
        )
        return code

    guarded(body)


def _config_choice(config: Path | None, isolated: bool) -> Path | bool | None:
    """Which config file to read: ``--config FILE``, False for none (``--isolated``), None to find one."""
    if isolated and config is not None:
        raise ScrubError("--isolated reads no config file and --config names one: drop one of them")
    return False if isolated else config


def _resolve_many(command: str, arguments: list[str], ctx: typer.Context, config: Path | bool | None):
    """The run's options and, when the paths name more than one dataset (several paths, a glob
    pattern, a folder of datasets), each dataset's own options (a config file's sections may
    differ per dataset) and the notes of what was passed over; else None and []."""
    from scrub.readers.base import expand_datasets
    from scrub.storage import location

    options = _resolve(command, location(arguments[0]), ctx, config).options
    read = options.read if command == "scan" else options.scan.read
    found = expand_datasets(arguments, read)  # (a URL's listing is the run's first: fresh)
    paths = [location(argument, read.storage) for argument in arguments]
    if len(paths) == 1 and [str(p) for p in found.paths] == [str(p) for p in paths] and not found.skipped:
        return options, None, []
    datasets = [
        (dataset, _sniffed(found, dataset, _resolve(command, dataset, ctx, config).options))
        for dataset in found.paths
    ]
    return options, datasets, [found.note()] if found.note() else []


def _sniffed(found: Datasets, dataset: Path, options: ScanOptions | FixOptions) -> ScanOptions | FixOptions:
    """A dataset's options with the format its listing found (`Datasets.sniffed_reading`)."""
    from dataclasses import replace

    from scrub.options.model import FixOptions

    if isinstance(options, FixOptions):  # fix's reading is its scan's
        reading = found.sniffed_reading(dataset, options.scan.read)
        return replace(options, scan=replace(options.scan, read=reading))
    return replace(options, read=found.sniffed_reading(dataset, options.read))


def _resolve(command: str, path: Path, ctx: typer.Context, config: Path | bool | None):
    """The options of this run: the config file's, overridden by the flags typed."""
    from scrub.options.config import resolve

    return resolve(command, path, given_options(ctx), config)


JsonOpt = key_option("json", "scan", panel=False)
QuietOpt = key_option("quiet", "scan", panel=False)
StorageOpt = key_option("storage-options", "scan", panel=False)


@app.command()
def restore(
    quarantine: Annotated[
        str,
        typer.Argument(
            help="A quarantine folder `scrub fix --quarantine` wrote: a path or a URL (s3://...)."
        ),
    ],
    key: Annotated[
        Optional[list[str]],
        typer.Option(
            "--key",
            help="Restore only this record (its key, or SOURCE:KEY; repeatable; default: every record).",
        ),
    ] = None,
    into: Annotated[
        Optional[str],
        typer.Option(help="Write the cleaned copy here (default: the one fix wrote, replaced)."),
    ] = None,
    storage_options: StorageOpt = None,  # type: ignore[valid-type]
    json_path: JsonOpt = None,  # type: ignore[valid-type]  # built from KEYS
    quiet: QuietOpt = False,  # type: ignore[valid-type]
) -> None:
    """Put quarantined records back into the cleaned copy, in its format, verified and atomic as
    fix is (rewritten from the source fix read, which must not have changed since)."""

    def body() -> int:
        from scrub.fixing.restoring import restore as run_restore

        with ProgressBar(quiet) as progress:
            result = run_restore(quarantine, key, into, progress=progress, storage_options=storage_options)
        write_json(json_path, result.scan_summary | {"fix": result.report, "exit_code": 0})
        if not quiet:
            print_fix(result.report)
        return 0

    guarded(body)


@app.command("config")
def show_config(
    ctx: typer.Context,
    path: Annotated[
        str,
        typer.Argument(
            help="The dataset the configuration is for, a path or a URL (default: the working directory)."
        ),
    ] = ".",
    config: ConfigOpt = None,
    isolated: IsolatedOpt = False,
    command: Annotated[
        str, typer.Option("--command", help="Show the options of this command: scan or fix.")
    ] = "scan",
) -> None:
    """Print the effective configuration for PATH, and where each value came from."""

    def body() -> int:
        from scrub.options.config import resolve
        from scrub.options.keys import KEYS, SCAN_ONLY
        from scrub.options.model import describe, flatten

        if command not in ("scan", "fix"):
            raise ScrubError(f"--command {command!r}: choose scan or fix")
        from scrub.storage import location

        resolved = resolve(command, location(path), {}, _config_choice(config, isolated))
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
            empty_table = key.kind == "mapping" and not flat[name]  # a table not set, not `[]`
            text = None if empty_table else _toml(describe(flat[name]))
            line = f"# {name} = (not set)" if text is None else f"{name} = {text}"
            out.print(f"{line}  # {origin}", markup=False, soft_wrap=True)
        return 0

    guarded(body)


def _toml(value) -> str | None:
    """A value as a TOML literal (JSON's strings, numbers, booleans and arrays are TOML's);
    None for "not set"."""
    if value is None:
        return None
    if isinstance(value, dict):  # an inline table, nested ones likewise ([storage-options.s3])
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(str(_toml(item)) for item in value) + "]"
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
        from scrub.scanning.baseline import prune

        kept, dropped = prune(manifest, out_path)
        out.print(
            f"{out_path or manifest}: kept {counted(kept, 'issue')}, dropped {dropped:,} resolved",
            markup=False,
            soft_wrap=True,
        )
        return 0

    guarded(body)


@app.command()
def profile(
    scan_record: Annotated[
        Path,
        typer.Argument(
            help="A scan record (NAME.scan.json, beside a scan's manifest; or the manifest NAME.jsonl).",
            show_default=False,
        ),
    ],
) -> None:
    """Print the dataset's profile a scan made (counts, classes, quantiles of values, image sizes,
    token lengths): docs/profile.md."""

    def body() -> int:
        from scrub.profile.render import profiles_in, render_profile

        held = profiles_in(scan_record)
        out.print(
            "\n\n".join(render_profile(found, name) for name, found in held), markup=False, soft_wrap=True
        )
        return 0

    guarded(body)


@app.command()
@built_from_keys("scan")
def contract(
    ctx: typer.Context,
    source: Annotated[
        Path,
        typer.Argument(
            help=(
                "A scan record (NAME.scan.json, or the manifest NAME.jsonl beside it), or a dataset, "
                "scanned here with the scan options given (those that decide what a record is)."
            ),
            show_default=False,
        ),
    ],
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Where to write it (default: scrub.contract.toml)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing contract file.")] = False,
    config: ConfigOpt = None,
    isolated: IsolatedOpt = False,
    **_: object,
) -> None:
    """Write the contract of a dataset as its profile shows it (record count, classes, dtypes,
    shapes, image sizes and modes, vocabulary, lengths): a TOML file to edit, then to check with
    `scrub scan DATA --contract FILE` (docs/contract.md)."""

    def body() -> int:
        from scrub.api import is_scan_record, write_contract
        from scrub.options.config import resolve
        from scrub.options.model import ScanOptions
        from scrub.storage import location

        options: ScanOptions | None = None
        given = {
            name: value
            for name, value in given_options(ctx).items()
            if name not in ("source", "output", "force")
        }
        if is_scan_record(source):
            if given:
                raise ScrubError(
                    f"{source}: a scan record's profile is used as it was scanned: the scan options "
                    f"given (--{', --'.join(sorted(given))}) apply only to a dataset"
                )
        else:
            chosen = _config_choice(config, isolated)
            resolved = resolve("scan", location(str(source)), given, chosen).options
            assert isinstance(resolved, ScanOptions)  # what resolve builds for "scan"
            options = resolved
            messages_to_stderr(options.quiet)
        target, text = write_contract(source, output, force, options)
        out.print(text.rstrip("\n"), markup=False, soft_wrap=True)
        err.print(f"wrote {target}", markup=False)
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
        from scrub.formats import load_format_checks

        load_plugins(plugin or ())
        load_format_checks()  # installed formats' own reader checks too

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
