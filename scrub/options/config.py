"""Configuration files: ``scrub.toml`` or ``[tool.scrub]``, found as ruff finds its own.

Which file: ``--config FILE`` when given; else the closest to the dataset, as ruff finds its
own: in the dataset's root (the dataset folder, or the folder of a dataset file), then in each
folder above it, ``scrub.toml``, or ``pyproject.toml`` when it has a ``[tool.scrub]`` table; then
the working directory's. One file is used, never a merge, and the command line overrides it.

What it holds: every option a flag sets, by the flag's name (``num-classes = 10``); a
``[check-severity]`` table (``fp16-overflow = "error"``, ``duplicate = "ignore"``); and
``[paths."GLOB"]`` tables whose dataset options apply when the dataset's path, relative to the
config file's folder, matches GLOB (later tables win). Relative paths in the file are relative
to its folder. An unknown key or a bad value is an error naming the key, the file and the line.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrub.errors import UsageError
from scrub.storage import on_this_machine

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib
from scrub.options.keys import COMMAND_LINE_ONLY, FIX_ONLY, KEYS, SCAN_ONLY, key_named
from scrub.options.model import FixOptions, ScanOptions, build
from scrub.options.values import coerce

CONFIG_NAME = "scrub.toml"
PATHS_TABLE = "paths"


@dataclass
class ConfigFile:
    """A config file's scrub table, with what is needed to point at its lines."""

    path: Path
    table: dict[str, Any]
    lines: list[str]
    prefix: str  # "tool.scrub." in a pyproject.toml, else ""

    @classmethod
    def read(cls, path: Path, required: bool = True) -> "ConfigFile | None":
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise UsageError(f"--config {path}: cannot read it: {error.strerror}") from None
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise UsageError(f"{path}: not valid TOML: {error}") from None
        prefix = ""
        if path.name == "pyproject.toml":
            document = document.get("tool", {}).get("scrub")
            prefix = "tool.scrub."
            if document is None:
                if required:
                    raise UsageError(f"--config {path}: has no [tool.scrub] table")
                return None
        return cls(path, document, text.splitlines(), prefix)

    def line_of(self, key: str, table: str = "") -> int:
        """The line that sets ``key`` in ``table``, for messages; 0 when it cannot be told."""
        wanted = _normal(self.prefix + table if table else self.prefix.rstrip("."))
        assignment = re.compile(rf"""^\s*(?:"{re.escape(key)}"|'{re.escape(key)}'|{re.escape(key)})\s*=""")
        table_header = _normal(f"{wanted}.{key}" if wanted else key)  # a key whose value is a table
        current = ""
        for number, line in enumerate(self.lines, start=1):
            stripped = line.strip()
            if stripped.startswith("["):
                current = _normal(stripped.split("#", 1)[0].strip().strip("[]"))
                if current == table_header or current.startswith(table_header + "."):  # [key.sub] too
                    return number
            elif current == wanted and assignment.match(line):
                return number
        return 0

    def where(self, key: str, table: str = "") -> str:
        line = self.line_of(key, table)
        return f"{self.path}:{line}: {key}" if line else f"{self.path}: {key}"


def _normal(table: str) -> str:
    """A table name without quotes or spaces, to compare headers."""
    return table.replace('"', "").replace("'", "").replace(" ", "")


def find(dataset: Path, explicit: Path | bool | None = None, cwd: Path | None = None) -> ConfigFile | None:
    """The config file that applies to ``dataset`` (see the module's docstring), or None;
    ``explicit`` is the file ``--config`` names, or False for none (``--isolated``)."""
    if explicit is False:
        return None
    if isinstance(explicit, Path):
        if not explicit.exists() or explicit.is_dir():  # /dev/null (no file) reads as an empty one
            raise UsageError(f"--config {explicit}: no such file")
        return ConfigFile.read(explicit)
    cwd = (cwd or Path.cwd()).resolve()
    if not on_this_machine(dataset):  # an object store's: the config of the folder the run starts in
        root = cwd
    else:
        root = dataset if dataset.is_dir() else dataset.parent
    folders = [root.resolve(), *root.resolve().parents]
    if cwd not in folders:
        folders.append(cwd)
    for folder in folders:  # the closest first, as ruff looks for its own
        if (folder / CONFIG_NAME).is_file():
            return ConfigFile.read(folder / CONFIG_NAME)
        if (folder / "pyproject.toml").is_file():
            found = ConfigFile.read(folder / "pyproject.toml", required=False)
            if found is not None:
                return found
    return None


def values(config: ConfigFile, dataset: Path, command: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The options ``config`` sets for ``command`` on ``dataset``: (key -> value, key -> where).

    Every key is validated here, whether this command uses it or not, so that a typo in a key
    only `fix` reads fails the nightly `scan` too.
    """
    found: dict[str, Any] = {}
    where: dict[str, str] = {}
    base = config.path.parent

    def take(table: dict[str, Any], table_name: str, per_path: bool, apply: bool = True) -> None:
        for name, value in table.items():
            if table_name == "" and name == PATHS_TABLE:
                continue
            label = config.where(name, table_name)
            key = key_named(name)
            if key is None or name in COMMAND_LINE_ONLY or (per_path and not key.per_path):
                allowed = sorted(
                    k for k, v in KEYS.items() if (v.per_path or not per_path) and k not in COMMAND_LINE_ONLY
                )
                what = (
                    "a dataset option a [paths] table may set"
                    if per_path and key is not None
                    else "a scrub option"
                )
                raise UsageError(f"{label}: not {what} (known: {', '.join(allowed)})")
            if isinstance(value, dict):  # [check-severity]: point at the entry, not the table
                inner = f"{table_name}.{name}" if table_name else name
                for check, level in value.items():
                    coerce(key, {check: level}, config.where(check, inner).rsplit(": ", 1)[0] + f": {name}")
            value = coerce(key, value, label)
            if key.kind == "path" and not value.is_absolute():
                value = base / value
            if not apply:
                continue
            if name == "manifest" and command == "fix":
                continue  # a config's manifest is where scans write; fix reuses one only when told
            if (command == "scan" and name in FIX_ONLY) or (command == "fix" and name in SCAN_ONLY):
                continue  # the other command's keys (one file serves both)
            found[name], where[name] = value, label

    take(config.table, "", False)
    paths = config.table.get(PATHS_TABLE, {})
    if not isinstance(paths, dict):
        raise UsageError(f'{config.where(PATHS_TABLE)}: expected tables [paths."GLOB"]')
    relative = _relative(dataset, base)
    for pattern, table in paths.items():
        if not isinstance(table, dict):
            raise UsageError(f"{config.where(pattern, PATHS_TABLE)}: expected a table of dataset options")
        matches = fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(relative, pattern.rstrip("/") + "/*")
        take(table, f'{PATHS_TABLE}."{pattern}"', True, apply=matches)
    return found, where


def _relative(dataset: Path, base: Path) -> str:
    """The dataset's path relative to the config file's folder, with "/" separators (a URL as
    it is: ``[paths."s3://bucket/*"]``)."""
    if not on_this_machine(dataset):
        return str(dataset)
    try:
        return Path(os.path.relpath(dataset.resolve(), base.resolve())).as_posix()
    except ValueError:  # another drive
        return dataset.resolve().as_posix()


@dataclass
class Resolved:
    """The effective options of one command on one dataset, and where each came from."""

    options: ScanOptions | FixOptions
    config: ConfigFile | None
    values: dict[str, Any]  # key -> value, for every key set by a file or the command line
    origins: dict[str, str]  # key -> "--flag" or "file:line: key"


def resolve(
    command: str, dataset: Path, given: dict[str, Any], explicit: Path | bool | None = None
) -> Resolved:
    """Options for ``command`` on ``dataset``: the config file's, overridden by ``given`` (the
    flags typed on the command line, by key name); ``explicit``: see `find`."""
    config = find(dataset, explicit)
    found, where = values(config, dataset, command) if config is not None else ({}, {})
    for name, value in given.items():
        found[name], where[name] = value, KEYS[name].flag
    cls = ScanOptions if command == "scan" else FixOptions
    options = build(cls, found, where)
    return Resolved(options, config, found, where)
