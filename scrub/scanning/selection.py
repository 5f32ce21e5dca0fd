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
from scrub.options.model import Selection
from scrub.records import LABEL_NEEDS, Carries


def select_checks(
    selection: Selection,
    options: CheckOptions,
    provides: Iterable[Carries] = (Carries.IMAGE, Carries.BYTES, Carries.ARRAY),
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
    applicable = {Carries.ANY, Carries.LABEL, *provides}

    def runs(check: Check) -> bool:
        return check.needs in applicable and (check.needs not in LABEL_NEEDS or options.labelled)

    dropped = set(selection.ignored)
    if selection.select is not None:
        cannot = [c for c in selection.select if not runs(REGISTRY[c])]
        if cannot:
            can = ", ".join(sorted(c.id for c in REGISTRY.values() if runs(c)))
            lacks = " or ".join(sorted({REGISTRY[c].needs.described for c in cannot}))
            raise UsageError(
                f"{origin('select')}: {', '.join(cannot)} cannot run on {dataset} (it has no {lacks}); "
                f"the checks that apply: {can}"
            )
    wanted = selection.select if selection.select is not None else sorted(REGISTRY)
    return [REGISTRY[c] for c in wanted if c not in dropped and runs(REGISTRY[c])]
