"""One options model for every command, every config file and the Python API.

An option is declared once, as a field of one of the option groups below (`ReadOptions` and
`CheckOptions` are the readers' and the checks' own; `Selection`, `RunOptions`,
`ReplayOptions`, and the output fields of `ScanOptions` and `FixOptions`), and once in
`scrub.options.keys.KEYS`, which gives it its user-facing name (``num-classes``: the flag is
``--num-classes``, the config key ``num-classes``, the API keyword ``num_classes``), its type and
its limits. Values from the command line, a config file or API keywords all go through
`scrub.options.values.coerce`, so an option is validated in one place, with the same message
wherever it came from.

The `scan` and `fix` commands are built from `KEYS` (`scrub.options.flags`): flag, help, choices
and default come from the key and its field (`default_of`). An option every format may take
is one field in `ReadOptions` and one `Key`; a format's own option is one `Key` in its row of
the format table (`scrub.formats`). Either way the reader's own code lists it in its
``options_used``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from scrub.checks.base import CheckOptions
from scrub.errors import UsageError
from scrub.options.key import Key
from scrub.options.keys import FIX_ONLY, KEYS, SCAN_ONLY, key_named
from scrub.options.values import coerce
from scrub.pipeline import DEFAULT_CLUSTER_WAIT, DEFAULT_TIMEOUT
from scrub.readers.base import ReadOptions


@dataclass(frozen=True)
class Selection:
    """Which checks run, and at which severity."""

    select: tuple[str, ...] | None = None  # None: every check that applies
    ignore: tuple[str, ...] = ()
    #: (check id, "error" | "warning" | "ignore"): a check's severity as the user wants it
    check_severity: tuple[tuple[str, str], ...] = ()
    plugins: tuple[str, ...] = ()  # modules to import first (their checks run too)

    @property
    def overrides(self) -> dict[str, str]:
        return dict(self.check_severity)

    @property
    def ignored(self) -> tuple[str, ...]:
        """``--ignore`` plus the checks whose severity was set to ``ignore``."""
        return tuple(
            dict.fromkeys([*self.ignore, *(c for c, level in self.check_severity if level == "ignore")])
        )


@dataclass(frozen=True)
class RunOptions:
    """Where and how the work runs (never changes a verdict)."""

    scheduler: str | None = None  # threads, processes, sync, or tcp://host:port
    workers: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    partition_size: int | None = None
    cluster_wait: float = DEFAULT_CLUSTER_WAIT  # seconds a dask cluster may have no worker


@dataclass(frozen=True)
class ReplayOptions:
    """The dummy-loss replay's options (``--dummy-loss`` and the flags beside it)."""

    batch_size: int = 64
    lr: float = 0.01
    seed: int = 0
    scale: float | None = None
    model: str = "linear"  # linear, l2, batchnorm, or module:function (a loss or a PyTorch model factory)
    normalize: bool = True

    def config(self, precision: str = "float32"):
        """The replayer's configuration, at the scan's training ``precision`` (a ``--model``
        module is imported now, so that a typo fails before the scan, not after it)."""
        from scrub.replay.config import ReplayConfig
        from scrub.replay.usermodel import load_loss

        try:
            config = ReplayConfig(self.batch_size, self.lr, self.seed, precision, self.model, self.normalize)
        except ValueError as error:
            raise UsageError(f"--dummy-loss: {error}") from None
        if ":" in config.model:
            load_loss(config.model)
        return config


@dataclass(frozen=True)
class ScanOptions:
    """Everything `scrub scan` (and the scan inside `scrub fix`) is told."""

    read: ReadOptions = field(default_factory=ReadOptions)
    checks: CheckOptions = field(default_factory=CheckOptions)
    selection: Selection = field(default_factory=Selection)
    run: RunOptions = field(default_factory=RunOptions)
    replay: ReplayOptions | None = None  # None: no dummy-loss replay
    manifest: Path | None = None  # None: a temporary manifest (the CLI's default is NAME.scrub.jsonl)
    json: Path | None = None
    fail_on: str = "error"
    baseline: Path | None = None
    #: (family, threshold) pairs laid over the drift defaults (`drift_thresholds`)
    drift_threshold: tuple[tuple[str, float], ...] = ()
    cache: Path | None = None
    #: a store of the training splits earlier runs kept (`scrub.scanning.history`)
    against: Path | None = None
    quiet: bool = False
    show: int = 10  # records with errors the console names
    junit: Path | None = None
    html: Path | None = None
    summary_md: Path | None = None
    #: profile the dataset in the same pass (`scrub.profile`): the scan record's ``profile``
    profile: bool = True
    #: key name -> where its value came from ("--num-classes", "scrub.toml:3: num-classes")
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def drift_thresholds(self):
        """The thresholds of drift from ``--baseline`` (`scrub.profile.drift.DriftThresholds`)."""
        from scrub.profile.drift import DriftThresholds

        return DriftThresholds.from_pairs(self.drift_threshold)

    def origin(self, name: str) -> str:
        """Where option ``name`` was set, for messages: its flag unless a config file set it."""
        return self.origins.get(name, f"--{name}")

    @classmethod
    def build(cls, **keywords: Any) -> "ScanOptions":
        """Options from API keywords (``num_classes=10``), each validated as a flag would be;
        ``dummy_loss`` may be a `ReplayOptions`."""
        return build(cls, _keyword_values(keywords), {})

    def verdict_options(self) -> dict[str, Any]:
        """What changes a record's verdict (recorded with the scan; part of the cache key): every
        option of the checks' and the selection's groups, as JSON holds it. The checks ignored
        include those whose severity was set to ``ignore``; the severities, only the others."""
        holders = {"checks": self.checks, "selection": self.selection}
        values = {}
        for key in KEYS.values():
            if key.group in holders:
                name = "plugins" if key.name == "plugin" else key.attribute  # the field's name
                values[name] = _as_json(getattr(holders[key.group], name))
        values["ignore"] = list(self.selection.ignored)
        values["check_severity"] = {
            c: level for c, level in self.selection.check_severity if level != "ignore"
        }
        return values


def _as_json(value: Any) -> Any:
    """Tuples as lists, all the way down (a palette's (index, (r, g, b)) pairs too); an object
    that says how (a contract: its path and digest) as it says."""
    if hasattr(value, "to_json"):
        return value.to_json()
    return [_as_json(item) for item in value] if isinstance(value, tuple) else value


@dataclass(frozen=True)
class FixOptions:
    """Everything `scrub fix` is told: the scan's options plus where the outputs go."""

    scan: ScanOptions = field(default_factory=ScanOptions)
    out: Path | str | None = None  # text: a URL (`scrub.options.values.URL_KEYS`)
    quarantine: bool = False
    quarantine_dir: Path | str | None = None
    #: reuse these instead of scanning: a scan's manifest, a NaN guard's, or both (their verdicts merged)
    manifest: tuple[Path, ...] = ()
    severity: str = "error"  # quarantine records with an issue at or above this
    #: write the cleaned copy although one check sets more than half of the records aside
    allow_majority: bool = False
    #: which split of a run's splits a `split-leak` sets its record aside from: "evaluation"
    #: (the split whose metric the leak falsifies) or "train"
    leak_side: str = "evaluation"
    force: bool = False
    link: bool = False

    @classmethod
    def build(cls, **keywords: Any) -> "FixOptions":
        """Options from API keywords (``out=..., num_classes=10``), validated as flags are."""
        return build(cls, _keyword_values(keywords), {})


def default_of(key: Key) -> Any:
    """Option ``key``'s value when not given: its field's default (None for the kinds given as
    text or lists on the command line, whose fields hold the parsed form)."""
    if key.kind in ("ids", "paths", "severities", "thresholds", "range", "palette", "index", "mapping"):
        return None
    if key.group == "replay" and key.name == "dummy-loss":
        return False  # the replay's own switch: ReplayOptions is there or not
    if key.group == "format":
        return key.default  # a format's own option: no field holds it
    group = {
        "read": ReadOptions,
        "checks": CheckOptions,
        "selection": Selection,
        "run": RunOptions,
        "replay": ReplayOptions,
        "scan": ScanOptions,
        "fix": FixOptions,
    }[key.group]
    default = next(f.default for f in dataclasses.fields(group) if f.name == key.attribute)
    return None if default is dataclasses.MISSING else default


def _keyword_values(keywords: Mapping[str, Any]) -> dict[str, Any]:
    """API keywords as key names; a `ReplayOptions` given as ``dummy_loss`` spreads into its keys."""
    values = {
        ("plugin" if name == "plugins" else name.replace("_", "-")): value for name, value in keywords.items()
    }
    replay = values.get("dummy-loss")
    if isinstance(replay, ReplayOptions):
        values["dummy-loss"] = True
        for item in dataclasses.fields(replay):
            if getattr(replay, item.name) != item.default:
                values.setdefault(item.name.replace("_", "-"), getattr(replay, item.name))
    return values


def build(cls: type, values: Mapping[str, Any], where: Mapping[str, str]) -> Any:
    """A `ScanOptions` or `FixOptions` from ``values`` (key name -> value, unvalidated);
    ``where`` names where each value came from, for the messages (default: its flag)."""
    groups = _grouped(cls, values, where)
    checks = groups["checks"]
    selection = groups["selection"]
    if "plugin" in selection:
        selection["plugins"] = selection.pop("plugin")
    replay = groups["replay"]
    dummy_loss = replay.pop("dummy_loss", False)
    if replay and not dummy_loss:
        flags = ", ".join(where.get(n.replace("_", "-"), "--" + n.replace("_", "-")) for n in replay)
        raise UsageError(f"{flags}: need --dummy-loss (they configure the replay)")
    if "tokenizer" in checks:
        where = {**where, **_model_limits(checks, where)}
    if checks.get("contract") is not None:  # read once, here: its rules travel to the workers
        from scrub.profile.contract import load

        checks["contract"] = load(checks["contract"])
    scan = ScanOptions(
        read=ReadOptions(**groups["read"], own=tuple(sorted(groups["format"].items()))),
        checks=CheckOptions(**checks),
        selection=Selection(**selection),
        run=RunOptions(**groups["run"]),
        replay=ReplayOptions(**replay) if dummy_loss else None,
        origins=dict(where),
        **{k: v for k, v in groups["scan"].items() if not (cls is FixOptions and k == "manifest")},
    )
    _refuse_what_needs_another(values, scan, where)
    return scan if cls is ScanOptions else _fix_options(scan, groups, where)


def _grouped(cls: type, values: Mapping[str, Any], where: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``values`` validated and coerced, by option group (then attribute); an unknown option, or
    one of fix's given to a scan, is an error."""
    unknown = [name for name in values if key_named(name) is None]
    if unknown:
        known = ", ".join(sorted(KEYS))
        raise UsageError(f"unknown option {unknown[0]!r} (options: {known})")
    if cls is ScanOptions:
        allowed = set(KEYS) - FIX_ONLY
        stray = [n for n in values if n not in allowed and n != "manifest"]
        if stray:
            raise UsageError(f"{where.get(stray[0], KEYS[stray[0]].flag)}: only `scrub fix` takes it")
    groups: dict[str, dict[str, Any]] = {
        g: {} for g in ("read", "format", "checks", "selection", "run", "replay", "scan", "fix")
    }
    for name, value in values.items():
        key = KEYS[name]
        if value is None:  # the API's "not given"
            continue
        label = where.get(name, key.flag)
        if name == "manifest" and cls is FixOptions:  # fix reuses one or several (a scan's, a guard's)
            several = value if isinstance(value, (list, tuple)) else [value]
            groups["scan"]["manifest"] = tuple(coerce(key, one, label) for one in several) or None
            continue
        groups[key.group][key.attribute] = coerce(key, value, label)
    return groups


def _refuse_what_needs_another(
    values: Mapping[str, Any], scan: ScanOptions, where: Mapping[str, str]
) -> None:
    """An option that means nothing without another (a cluster, a baseline) is an error, unless
    a config file set it (a config shared by runs that differ)."""
    if (
        values.get("cluster-wait") is not None
        and "cluster-wait" not in origins_from_files(where)
        and "://" not in (scan.run.scheduler or "")
    ):
        local = f"--scheduler {scan.run.scheduler}" if scan.run.scheduler else "without --scheduler, the scan"
        raise UsageError(
            f"{where.get('cluster-wait', '--cluster-wait')}: only a scan on a dask cluster (--scheduler "
            f"tcp://host:port) waits for workers; {local} runs on this machine"
        )
    if scan.fail_on == "new" and scan.baseline is None:
        raise UsageError(
            f"{where.get('fail-on', '--fail-on')} new: needs a baseline (--baseline OLD_MANIFEST)"
        )
    if scan.drift_threshold and scan.baseline is None and "drift-threshold" not in origins_from_files(where):
        raise UsageError(
            f"{where.get('drift-threshold', '--drift-threshold')}: drift is measured from a baseline: give "
            "--baseline OLD_MANIFEST too"
        )


def _fix_options(
    scan: ScanOptions, groups: dict[str, dict[str, Any]], where: Mapping[str, str]
) -> FixOptions:
    """`FixOptions` around ``scan``: a scan-only option given, or one at odds with reusing a
    manifest, is an error."""
    fix = groups["fix"]
    if "manifest" in groups["scan"]:
        fix["manifest"] = groups["scan"]["manifest"]
    for name in sorted(SCAN_ONLY):
        if getattr(scan, name.replace("-", "_")) != getattr(ScanOptions(), name.replace("-", "_")):
            raise UsageError(
                f"{where.get(name, KEYS[name].flag)}: only `scrub scan` takes it (fix quarantines by "
                "--severity and reports what it wrote; scan first for the reports)"
            )
    if fix.get("manifest") and scan.cache is not None and "cache" not in origins_from_files(where):
        raise UsageError(
            "--cache speeds up the scan, and --manifest reuses one instead of scanning: drop one of them"
        )
    if fix.get("manifest") and scan.replay is not None:
        raise UsageError(
            "--dummy-loss replays the data during the scan: drop --manifest, or scan with --dummy-loss"
        )
    if fix.get("quarantine_dir") is not None:
        fix["quarantine"] = True
    return FixOptions(scan=scan, **fix)


def _model_limits(checks: dict[str, Any], where: Mapping[str, str]) -> dict[str, str]:
    """Read ``--tokenizer`` now (a bad path is one line before the scan) and take from it the
    vocabulary size and the positions not given otherwise; returns where they came from."""
    from scrub.vocabulary import load_vocabulary

    path = str(checks["tokenizer"])
    checks["tokenizer"] = path
    vocabulary = load_vocabulary(path)
    origin = where.get("tokenizer", "--tokenizer")
    origins = {}
    for name, value in (("vocab_size", vocabulary.size), ("max_positions", vocabulary.max_positions)):
        if checks.get(name) is None and value is not None:
            checks[name] = value
            origins[name.replace("_", "-")] = f"{origin} {path}"
    return origins


def origins_from_files(where: Mapping[str, str]) -> set[str]:
    """The keys a config file set (a file's default may not fit every run: only flags conflict)."""
    return {name for name, origin in where.items() if not origin.startswith("--")}


#: either kind of options, the same one in and out
OptionsT = TypeVar("OptionsT", ScanOptions, FixOptions)


def merged(options: OptionsT, keywords: Mapping[str, Any]) -> OptionsT:
    """``options`` with API ``keywords`` laid over them, validated as one (of their own kind)."""
    values = given_values(options) | _keyword_values(keywords)
    origins = (options.scan if isinstance(options, FixOptions) else options).origins
    laid_over = set(_keyword_values(keywords))
    return build(type(options), values, {k: v for k, v in origins.items() if k not in laid_over})


def given_values(options: ScanOptions | FixOptions) -> dict[str, Any]:
    """The options that differ from the defaults, by key name (for display and comparison)."""
    default = type(options)()
    flat, flat_default = flatten(options), flatten(default)
    return {name: value for name, value in flat.items() if flat_default.get(name) != value}


def flatten(options: ScanOptions | FixOptions) -> dict[str, Any]:
    """Every option by key name, as held in the model."""
    scan = options.scan if isinstance(options, FixOptions) else options
    values: dict[str, Any] = {}
    for group, holder in (
        ("read", scan.read),
        ("checks", scan.checks),
        ("selection", scan.selection),
        ("run", scan.run),
        ("replay", scan.replay or ReplayOptions()),
        ("scan", scan),
    ):
        for item in dataclasses.fields(holder):
            name = "plugin" if item.name == "plugins" else item.name.replace("_", "-")
            if name in KEYS and KEYS[name].group == group:
                values[name] = getattr(holder, item.name)
    values["dummy-loss"] = scan.replay is not None
    for key in KEYS.values():
        if key.group == "format":
            values[key.name] = getattr(scan.read, key.attribute)
    if isinstance(options, FixOptions):
        for item in dataclasses.fields(options):
            name = item.name.replace("_", "-")
            if name in KEYS and KEYS[name].group == "fix" or name == "manifest":
                values[name] = getattr(options, item.name)
    return values


def describe(value: Any) -> Any:
    """A value as a person (and TOML) writes it."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):
        return {k: describe(v) for k, v in value}  # a table (nested ones likewise): pairs, as frozen
    if isinstance(value, tuple):
        return (
            [describe(v) for v in value]
            if not (len(value) == 2 and all(isinstance(v, int) for v in value))
            else f"{value[0]}:{value[1]}"
        )
    return value
