"""The options of the commands, built from `scrub.options.keys.KEYS`: each option's flag, help,
choices and default are declared once, there (typer reads a function's signature; the
commands' signatures are made from the keys)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer


def help_text(text: str) -> str:
    """A help text as typer's rich markup shows it: the format table's names in place of
    ``{formats}``, brackets escaped (``[tool.scrub]`` is text, not a style)."""
    from scrub.formats import format_names

    return text.replace("{formats}", ", ".join(format_names(plugins=False))).replace("[", "\\[")


def _datasetshelp_text() -> str:
    from scrub.formats import FORMATS, format_names

    held = [FORMATS[name].holds or name for name in format_names(plugins=False)]
    return help_text(
        f"Datasets: {', '.join(held[:-1])} or {held[-1]}; several, glob patterns ('shards/*.h5') and folders "
        "of datasets (a folder of LMDB environments) are scanned together."
    )


# The arguments and options `scan` and `fix` take beside the `KEYS` they are built from.
PathsArg = Annotated[list[str], typer.Argument(help=_datasetshelp_text(), show_default=False)]
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
    "format": "Reading",
    "checks": "Checking",
    "selection": "Which checks",
    "run": "Running",
    "replay": "Dummy-loss replay",
    "scan": "Outputs",
    "fix": "The cleaned copy",
}


def key_option(name: str, command: str, panel: bool = True) -> object:
    """Option ``name`` of `KEYS` as ``command`` takes it: its type, flag, help, choices (as an
    Enum, which typer shows and checks) and, with ``panel``, its group's panel in the help."""
    from scrub.options.keys import KEYS
    from scrub.options.model import default_of

    key = KEYS[name]
    kind = key.fix_kind if command == "fix" and key.fix_kind else key.kind
    base: Any = {"int": int, "float": float, "bool": bool}.get(key.kind, str)  # paths as text: URLs too
    if key.choices:
        choices = Enum(key.attribute.title().replace("_", ""), [(c, c) for c in key.choices], type=str)  # type: ignore[misc]
        base = choices
    annotation: object
    if kind == "bool":
        annotation = bool
    elif kind in ("paths", "severities", "thresholds"):
        annotation = Optional[list[base]]  # repeatable
    else:
        annotation = base if default_of(key) is not None else Optional[base]
    text = key.fix_help if command == "fix" and key.fix_help else key.help
    option = typer.Option(
        key.switch or key.flag,
        *([key.short] if key.short else []),
        help=help_text(text),
        metavar="PATH" if key.kind == "path" else None,
        rich_help_panel=PANELS[key.group] if panel else None,
    )
    return Annotated[annotation, option]


def option_parameters(command: str) -> list[inspect.Parameter]:
    """The options of ``command`` (scan or fix), one per `Key` it takes: the flag, the help,
    the choices and the default all come from the key and its field."""
    from scrub.options.keys import KEYS
    from scrub.options.model import default_of

    return [
        inspect.Parameter(
            key.attribute,
            inspect.Parameter.KEYWORD_ONLY,
            default=default_of(key),
            annotation=key_option(key.name, command),
        )
        for key in KEYS.values()
        if command in key.commands
    ]


def built_from_keys(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command taking ``**options`` the options of `KEYS` as its parameters (typer reads
    a function's signature; the body receives every option by its key's attribute name)."""

    def build(function: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(function, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        function.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own, *option_parameters(command)]
        )
        return function

    return build


#: parameters that are not options of the model (the dataset, the config file itself)
NOT_OPTIONS = frozenset({"path", "config", "isolated"})
