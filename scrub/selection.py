"""Which checks a scan runs: those that apply to what the reader provides, narrowed by
``--select`` and ``--ignore``."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from scrub import checks as _catalogue  # noqa: F401 - registers the built-in checks
from scrub.checks.base import (
    REGISTRY,
    Check,
    CheckOptions,
)
from scrub.errors import UsageError
from scrub.options import Selection


def select_checks(
    selection: Selection,
    options: CheckOptions,
    provides: Iterable[str] = ("image", "bytes", "array"),
    origin: Callable[[str], str] = lambda name: f"--{name}",
    dataset: str = "this dataset",
) -> list[Check]:
    """The checks to run: those that apply to what the reader provides, narrowed by
    ``--select`` and ``--ignore``. A check named that does not exist, or selected where it
    cannot run (``--select nonfinite-data`` on JPEGs), is an error naming what does apply."""
    for name, ids in (
        ("select", selection.select or ()),
        ("ignore", selection.ignore),
        ("check-severity", [c for c, _ in selection.check_severity]),
    ):
        unknown = [c for c in ids if c not in REGISTRY]
        if unknown:
            raise UsageError(f"{origin(name)}: unknown check id: {', '.join(unknown)} (see `scrub checks`)")
    applicable = {"any", "label", *provides}

    def runs(check: Check) -> bool:
        return check.needs in applicable and (check.needs != "label" or options.labelled)

    dropped = set(selection.ignored)
    if selection.select is not None:
        cannot = [c for c in selection.select if not runs(REGISTRY[c])]
        if cannot:
            can = ", ".join(sorted(c.id for c in REGISTRY.values() if runs(c)))
            raise UsageError(
                f"{origin('select')}: {', '.join(cannot)} cannot run on {dataset} (it has no "
                f"{' or '.join(sorted({_need(REGISTRY[c].needs) for c in cannot}))}); the checks that apply: "
                f"{can}"
            )
    wanted = selection.select if selection.select is not None else sorted(REGISTRY)
    return [REGISTRY[c] for c in wanted if c not in dropped and runs(REGISTRY[c])]


def _need(needs: str) -> str:
    return {
        "label": "labels",
        "array": "numeric values",
        "image": "images",
        "bytes": "encoded files",
        "rows": "array rows",
        "values": "key-value records",
        "replay": "--dummy-loss replay",
        "label-vectors": "label vectors",
    }.get(needs, needs)
