"""One user-facing option's declaration (see `scrub.options.keys.KEYS`, and a format's own in its row
of `scrub.formats`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Key:
    """One user-facing option: its name, where it lands, its type and its limits."""

    name: str  # kebab-case: the flag without "--", the config key
    group: str  # read, format (a format's own), checks, selection, run, replay, scan, fix
    #: int, float, str, bool, path, ids, severities, thresholds (FAMILY=VALUE), range, index (an
    #: int or "none")
    kind: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    #: may be set per dataset under [paths."GLOB"] (it concerns what a record is or how it is judged)
    per_path: bool = False
    #: the flag's help (the commands are built from `KEYS`: `scrub.cli`); ``{formats}`` stands
    #: for the format table's names
    help: str = ""
    short: str | None = None  # a one-letter flag beside the long one (``-q``)
    switch: str | None = None  # a boolean's on/off pair (``--normalize/--no-normalize``)
    fix_help: str | None = None  # where `scrub fix` reads the option otherwise (``--manifest``)
    #: its kind under `scrub fix` when it differs ("paths": fix takes several manifests)
    fix_kind: str | None = None
    scan_only: bool = False  # only `scrub scan` takes it (its reports); the "fix" group is fix's own
    #: a format's own option's value when not given (the others take their field's default)
    default: Any = None
    #: an output option each dataset of a run may set for itself (a config file's ``cache``):
    #: not one of the run's (`run_wide`)
    each_dataset: bool = False
    #: a format's own option naming a file read beside the data file, and what that file is
    #: ("the labels": NumPy's ``--labels``): a folder or a pattern that names the file too does
    #: not scan it as a dataset, and it belongs to one data file (`expand_datasets`)
    companion: str | None = None

    @property
    def commands(self) -> tuple[str, ...]:
        """The commands that take it."""
        return ("fix",) if self.group == "fix" else ("scan",) if self.scan_only else ("scan", "fix")

    @property
    def run_wide(self) -> bool:
        """An output option of the run as a whole (the manifest, the reports, the exit rule):
        in a run of several datasets, each dataset's own value gives way to the run's. (The
        "run" group, where and how the run runs, is run-wide as a whole.)"""
        return self.group == "scan" and not self.each_dataset

    @property
    def attribute(self) -> str:
        return self.name.replace("-", "_")

    @property
    def flag(self) -> str:
        return f"--{self.name}"
