"""One options model for every command, every config file and the Python API.

An option is declared once, as a field of one of the option groups below (`ReadOptions` and
`CheckOptions` are the readers' and the checks' own; `Selection`, `RunOptions`,
`ReplayOptions`, and the output fields of `ScanOptions` and `FixOptions`), and once in `KEYS`,
which gives it its user-facing name (``num-classes``: the flag is ``--num-classes``, the config
key ``num-classes``, the API keyword ``num_classes``), its type and its limits. Values from the
command line, a config file or API keywords all go through `coerce`, so an option is
validated in one place, with the same message wherever it came from.

The `scan` and `fix` commands are built from `KEYS` (`scrub.cli`): flag, help, choices and
default come from the key and its field. Adding a reader option is one field in `ReadOptions`,
one `Key` here, and the reader's own code (which also lists it in its ``options_used``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from scrub.checks.base import CheckOptions
from scrub.checks.numeric import PRECISIONS
from scrub.errors import UsageError
from scrub.pipeline import DEFAULT_CLUSTER_WAIT, DEFAULT_TIMEOUT
from scrub.readers.base import ReadOptions

SEVERITY_LEVELS = ("error", "warning", "ignore")  # what --check-severity may set a check to
FAIL_ON = ("error", "warning", "new", "never")
FIX_SEVERITIES = ("error", "warning")


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
        from scrub.replay.replayer import ReplayConfig
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
    cache: Path | None = None
    quiet: bool = False
    show: int = 10  # records with errors the console names
    junit: Path | None = None
    html: Path | None = None
    summary_md: Path | None = None
    #: key name -> where its value came from ("--num-classes", "scrub.toml:3: num-classes")
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def origin(self, name: str) -> str:
        """Where option ``name`` was set, for messages: its flag unless a config file set it."""
        return self.origins.get(name, f"--{name}")

    @classmethod
    def build(cls, **keywords: Any) -> "ScanOptions":
        """Options from API keywords (``num_classes=10``), each validated as a flag would be;
        ``dummy_loss`` may be a `ReplayOptions`."""
        return build(cls, _keyword_values(keywords), {})

    def verdict_options(self) -> dict[str, Any]:
        """What changes a record's verdict (recorded with the scan; part of the cache key)."""
        checks = self.checks
        return {
            "num_classes": checks.num_classes,
            "label_range": list(checks.label_range) if checks.label_range else None,
            "max_pixels": checks.max_pixels,
            "ignore_index": checks.ignore_index,
            "mask_palette": [[index, list(colour)] for index, colour in checks.mask_palette or ()] or None,
            "precision": checks.precision,
            "select": list(self.selection.select) if self.selection.select is not None else None,
            "ignore": list(self.selection.ignored),
            "check_severity": {c: level for c, level in self.selection.check_severity if level != "ignore"},
            "plugins": list(self.selection.plugins),
        }


@dataclass(frozen=True)
class FixOptions:
    """Everything `scrub fix` is told: the scan's options plus where the outputs go."""

    scan: ScanOptions = field(default_factory=ScanOptions)
    out: Path | None = None
    quarantine: bool = False
    quarantine_dir: Path | None = None
    #: reuse these instead of scanning: a scan's manifest, a NaN guard's, or both (their verdicts merged)
    manifest: tuple[Path, ...] = ()
    severity: str = "error"  # quarantine records with an issue at or above this
    force: bool = False
    link: bool = False

    @classmethod
    def build(cls, **keywords: Any) -> "FixOptions":
        """Options from API keywords (``out=..., num_classes=10``), validated as flags are."""
        return build(cls, _keyword_values(keywords), {})


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


@dataclass(frozen=True)
class Key:
    """One user-facing option: its name, where it lands, its type and its limits."""

    name: str  # kebab-case: the flag without "--", the config key
    group: str  # read, checks, selection, run, replay, scan, fix
    kind: str  # int, float, str, bool, path, ids, severities, range, index (an int or "none")
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
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

    @property
    def commands(self) -> tuple[str, ...]:
        """The commands that take it."""
        return ("fix",) if self.group == "fix" else ("scan",) if self.scan_only else ("scan", "fix")

    @property
    def default(self) -> Any:
        """Its value when not given: its field's default (None for the kinds given as text or
        lists on the command line, whose fields hold the parsed form)."""
        if self.kind in ("ids", "paths", "severities", "range", "palette", "index"):
            return None
        if self.group == "replay" and self.name == "dummy-loss":
            return False  # the replay's own switch: ReplayOptions is there or not
        group = {
            "read": ReadOptions,
            "checks": CheckOptions,
            "selection": Selection,
            "run": RunOptions,
            "replay": ReplayOptions,
            "scan": ScanOptions,
            "fix": FixOptions,
        }[self.group]
        default = next(f.default for f in dataclasses.fields(group) if f.name == self.attribute)
        return None if default is dataclasses.MISSING else default

    @property
    def attribute(self) -> str:
        return self.name.replace("-", "_")

    @property
    def flag(self) -> str:
        return f"--{self.name}"


KEYS: dict[str, Key] = {
    key.name: key
    for key in [
        Key(
            "format",
            "read",
            "str",
            per_path=True,
            help="Force the reader: {formats} (default: the first that takes the path).",
        ),
        Key(
            "root",
            "read",
            "path",
            per_path=True,
            help=(
                "Folder that list-file paths are relative to (default: the list's folder), or that holds "
                "a COCO JSON's images."
            ),
        ),
        Key(
            "data-key",
            "read",
            "str",
            per_path=True,
            help=(
                "HDF5 or .npz: the dataset or array whose rows are records (default: data, x, ...); "
                "WebDataset: the data member's extension (default: the first image, else npy); Parquet: "
                "the data column; LMDB/LevelDB: the field of pickled dicts (with --allow-pickle)."
            ),
        ),
        Key(
            "label-key",
            "read",
            "str",
            per_path=True,
            help=(
                "HDF5 or .npz: the labels dataset or array (default: label, y, ...); WebDataset: the "
                "label member's extension (default: cls, ...); Parquet: the label column; LMDB/LevelDB: "
                "the label field of pickled dicts."
            ),
        ),
        Key(
            "lmdb-codec",
            "read",
            "str",
            choices=("datum", "image", "npy", "pickle"),
            per_path=True,
            help="LMDB: force the value codec: datum, image, npy, pickle (default: detect per record).",
        ),
        Key(
            "allow-pickle",
            "read",
            "bool",
            per_path=True,
            help="LMDB: unpickle pickled values. Unpickling runs arbitrary code: only for data you trust.",
        ),
        Key(
            "labels",
            "read",
            "path",
            per_path=True,
            help=(
                "NumPy: a .npy of labels aligned with the data file's rows (X.npy --labels y.npy): read, "
                "checked and split by fix together with the rows."
            ),
        ),
        Key(
            "num-classes",
            "checks",
            "int",
            minimum=1,
            per_path=True,
            help="Number of classes: labels must lie in [0, N).",
        ),
        Key(
            "label-range",
            "checks",
            "range",
            per_path=True,
            help="Valid labels LO:HI (HI exclusive), instead of --num-classes.",
        ),
        Key(
            "max-pixels",
            "checks",
            "int",
            minimum=1,
            per_path=True,
            help="Decompression-bomb limit in pixels (default: Pillow's, ~89.5 M).",
        ),
        Key(
            "mask-palette",
            "checks",
            "palette",
            per_path=True,
            help=(
                "Segmentation: read RGB masks through these colours by class id: voc (Pascal VOC's), or a"
                " JSON file (a list of [r, g, b], or an object of id -> [r, g, b])."
            ),
        ),
        Key(
            "ignore-index",
            "checks",
            "index",
            per_path=True,
            help=(
                "Segmentation: the mask value the loss ignores, as cross_entropy(ignore_index=...) "
                "(default 255; 'none': every value is a class)."
            ),
        ),
        Key(
            "precision",
            "checks",
            "str",
            choices=PRECISIONS,
            per_path=True,
            help=(
                "The training precision: float32; float16 (mixed precision / AMP: values that overflow "
                "float16 are errors, and the replay runs its matmuls in float16); bfloat16 (float32's "
                "range)."
            ),
        ),
        Key(
            "select",
            "selection",
            "ids",
            per_path=True,
            help="Run only these checks (comma-separated ids).",
        ),
        Key(
            "ignore",
            "selection",
            "ids",
            per_path=True,
            help="Skip these checks (comma-separated ids).",
        ),
        Key(
            "check-severity",
            "selection",
            "severities",
            per_path=True,
            help="Set a check's severity: ID=error, ID=warning or ID=ignore (repeatable).",
        ),
        Key(
            "plugin",
            "selection",
            "paths",
            help="Import this module first, to run the checks it registers (repeatable).",
        ),
        Key(
            "scheduler",
            "run",
            "str",
            help=(
                "threads, processes, sync, or a dask.distributed address tcp://host:port (default: "
                "measured best for the format; sync for tiny jobs)."
            ),
        ),
        Key(
            "workers",
            "run",
            "int",
            minimum=1,
            help="Local workers (default: all cores).",
        ),
        Key(
            "timeout",
            "run",
            "float",
            minimum=0.001,
            help="Seconds one record may take before its decoder is deemed hung.",
        ),
        Key(
            "partition-size",
            "run",
            "int",
            minimum=1,
            help=(
                "Most records per task (default: per format, ~0.2 s of work); a small dataset is split "
                "finer, into up to 4 tasks per core of at least 25 records."
            ),
        ),
        Key(
            "cluster-wait",
            "run",
            "float",
            minimum=0.001,
            help=(
                "With --scheduler tcp://host:port: seconds the cluster may have no worker (none joined "
                "yet, or every one left) before the scan ends, incomplete (exit 3); raise it for clusters"
                " that scale up from zero."
            ),
        ),
        Key(
            "dummy-loss",
            "replay",
            "bool",
            help=(
                "Train a seeded dummy model (--model) on the data in record order after the checks, with "
                "plain SGD; report records whose loss or gradient goes non-finite or whose step is "
                "absurd."
            ),
        ),
        Key(
            "batch-size",
            "replay",
            "int",
            minimum=1,
            help="Replay: records per SGD step.",
        ),
        Key(
            "lr",
            "replay",
            "float",
            help="Replay: the SGD learning rate.",
        ),
        Key(
            "seed",
            "replay",
            "int",
            help="Replay: seed of the initial weights.",
        ),
        Key(
            "scale",
            "replay",
            "float",
            help="Replay: multiply every input value by this (nothing else is done to the data).",
        ),
        Key(
            "model",
            "replay",
            "str",
            help=(
                "Replay: linear (default), l2 (L2-normalized input), batchnorm, or module:function: your "
                "loss f(X, y), or a factory of a torch.nn.Module (needs scrub[torch])."
            ),
        ),
        Key(
            "normalize",
            "replay",
            "bool",
            switch="--normalize/--no-normalize",
            help=(
                "Replay: standardize the inputs as a data pipeline does (ImageNet statistics for 8-bit "
                "images, the scan's per-feature statistics for arrays), or replay the raw values."
            ),
        ),
        Key(
            "manifest",
            "scan",
            "path",
            help=(
                "Where to write the JSON Lines manifest (default: NAME.scrub.jsonl here, NAME the "
                "dataset's; its scan record goes beside it)."
            ),
            fix_kind="paths",
            fix_help=(
                "Reuse this manifest from an earlier `scrub scan` instead of scanning (refused if the "
                "dataset changed since, or if a checking option given differs from the scan's), or a NaN "
                "guard's (its records found by their names); repeat it to merge a scan's and a guard's."
            ),
        ),
        Key(
            "json",
            "scan",
            "path",
            help="Also write the summary as JSON to this path.",
        ),
        Key(
            "fail-on",
            "scan",
            "str",
            choices=FAIL_ON,
            scan_only=True,
            help=(
                "Exit 1 when an issue at or above this severity is found; new: only errors the baseline "
                "does not hold (new and reappeared)."
            ),
        ),
        Key(
            "baseline",
            "scan",
            "path",
            scan_only=True,
            help=(
                "An earlier manifest: class every issue new, persisting or reappeared, and count the "
                "baseline's issues no longer found as resolved."
            ),
        ),
        Key(
            "cache",
            "scan",
            "path",
            help=(
                "Keep per-record results in this folder and reuse them for records that did not change "
                "(incremental rescans)."
            ),
        ),
        Key(
            "quiet",
            "scan",
            "bool",
            short="-q",
            help="No progress bar and no table.",
        ),
        Key(
            "show",
            "scan",
            "int",
            minimum=0,
            help="After the table, name this many records with errors (0: none).",
        ),
        Key(
            "junit",
            "scan",
            "path",
            scan_only=True,
            help=(
                "Also write a JUnit XML report (one testcase per check) for GitLab, Jenkins and other CI "
                "pages."
            ),
        ),
        Key(
            "html",
            "scan",
            "path",
            scan_only=True,
            help="Also write a self-contained HTML report (offline, under 5 MB).",
        ),
        Key(
            "summary-md",
            "scan",
            "path",
            scan_only=True,
            help=(
                "Also write a short Markdown summary (default: appended to $GITHUB_STEP_SUMMARY when it "
                "is set)."
            ),
        ),
        Key(
            "out",
            "fix",
            "path",
            help=(
                "Where to write the cleaned copy (default: NAME.clean beside the source; STEM.clean.EXT "
                "for a single file)."
            ),
        ),
        Key(
            "quarantine",
            "fix",
            "bool",
            help=(
                "Also write the quarantined records, in the same format, with the manifest, to the "
                "quarantine folder."
            ),
        ),
        Key(
            "quarantine-dir",
            "fix",
            "path",
            help=(
                "The quarantine folder (default: NAME.quarantine beside the cleaned copy); implies "
                "--quarantine."
            ),
        ),
        Key(
            "severity",
            "fix",
            "str",
            choices=FIX_SEVERITIES,
            help="Quarantine records with an issue at or above this severity.",
        ),
        Key(
            "force",
            "fix",
            "bool",
            help="Replace existing outputs.",
        ),
        Key(
            "link",
            "fix",
            "bool",
            help="Images: hard-link kept files instead of copying them, where the file system allows.",
        ),
    ]
}

#: Keys only one command uses; a config file may hold both (it serves both commands).
SCAN_ONLY = frozenset(k.name for k in KEYS.values() if k.commands == ("scan",))
FIX_ONLY = frozenset(k.name for k in KEYS.values() if k.commands == ("fix",))
#: Keys that cannot come from a config file (they act on the outputs of one run).
COMMAND_LINE_ONLY = frozenset({"force"})


def coerce(key: Key, value: Any, where: str) -> Any:
    """``value`` as the type ``key`` holds, or a `UsageError` naming ``where`` it came from
    (``--num-classes`` or ``scrub.toml:3: num-classes``)."""

    def fail(expected: str) -> UsageError:
        return UsageError(f"{where}: expected {expected}, got {value!r}")

    if key.kind == "bool":
        if not isinstance(value, bool):
            raise fail("true or false")
        return value
    if key.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("an integer")
    elif key.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail("a number")
        value = float(value)
    elif key.kind in ("str", "path"):
        if isinstance(value, Path):
            value = str(value)
        if not isinstance(value, str) or not value:
            raise fail("a non-empty string")
        if key.kind == "path":
            return Path(value)
    elif key.kind in ("ids", "paths"):
        if isinstance(value, str):
            value = (
                [part.strip() for part in value.split(",") if part.strip()] if key.kind == "ids" else [value]
            )
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise fail("a list of names")
        return tuple(value)
    elif key.kind == "severities":
        return _severities(value, where)
    elif key.kind == "palette":
        return _palette(value, where)
    elif key.kind == "index":
        if isinstance(value, str) and value.strip().lower() == "none":
            return None
        try:
            value = int(value) if isinstance(value, str) else value
        except ValueError:
            raise fail("an integer or none") from None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise fail("an integer >= 0 or none")
        return value
    elif key.kind == "range":
        if isinstance(value, (list, tuple)) and len(value) == 2:
            value = f"{value[0]}:{value[1]}"
        if not isinstance(value, str):
            raise fail("LO:HI")
        return parse_label_range(value, where)
    if key.choices is not None and value not in key.choices:
        raise UsageError(f"{where}: {value!r} is not one of {', '.join(key.choices)}")
    if key.minimum is not None and value < key.minimum:
        raise UsageError(f"{where}: must be at least {key.minimum:g}, got {value!r}")
    return value


def _severities(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``{"fp16-overflow": "error"}`` (a config table) or ``["fp16-overflow=error"]`` (flags)."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        pairs = {}
        for item in value:
            if isinstance(item, tuple) and len(item) == 2:  # the model's own form
                item = f"{item[0]}={item[1]}"
            check, sep, level = str(item).partition("=")
            if not sep:
                raise UsageError(f"{where}: expected CHECK=LEVEL, got {item!r}")
            pairs[check.strip()] = level.strip()
        value = pairs
    if not isinstance(value, Mapping):
        raise UsageError(f"{where}: expected a table of check = level")
    for check, level in value.items():
        if level not in SEVERITY_LEVELS:
            raise UsageError(f"{where}: {check} = {level!r}: choose one of {', '.join(SEVERITY_LEVELS)}")
    return tuple(sorted(value.items()))


def voc_palette() -> tuple[tuple[int, tuple[int, int, int]], ...]:
    """Pascal VOC's colour map (and so its PNG masks' palette): class id i's colour from the
    bits of i, 255 (void) the boundary's (224, 224, 192)."""
    palette = []
    for index in range(256):
        red = green = blue = 0
        code = index
        for shift in range(8):
            red |= ((code >> 0) & 1) << (7 - shift)
            green |= ((code >> 1) & 1) << (7 - shift)
            blue |= ((code >> 2) & 1) << (7 - shift)
            code >>= 3
        palette.append((index, (red, green, blue)))
    return tuple(palette)


def _palette(value: Any, where: str) -> tuple[tuple[int, tuple[int, int, int]], ...]:
    """``voc``, a JSON file (a list of [r, g, b] by class id, or an object of id -> [r, g, b]),
    or the model's own form, as (class id, colour) pairs."""
    import json

    if isinstance(value, Mapping):  # a config table: id = [r, g, b]
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)):  # the model's (id, colour) pairs, or colours by id
        pairs = (
            [(item[0], item[1]) for item in value]
            if all(isinstance(item, (list, tuple)) and len(item) == 2 for item in value)
            else list(enumerate(value))
        )
    elif str(value).lower() == "voc":
        return voc_palette()
    else:
        try:
            document = json.loads(Path(str(value)).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise UsageError(f"{where}: expected voc or a JSON file of colours ({error})") from None
        pairs = list(document.items()) if isinstance(document, dict) else list(enumerate(document))
    palette: list[tuple[int, tuple[int, int, int]]] = []
    for index, colour in pairs:
        try:
            channels = [int(c) for c in colour]
            number = int(index)
        except (TypeError, ValueError):
            raise UsageError(f"{where}: class {index}: expected [r, g, b], got {colour!r}") from None
        if len(channels) != 3 or not all(0 <= c <= 255 for c in channels):
            raise UsageError(f"{where}: class {index}: expected [r, g, b] of 0..255, got {colour!r}")
        palette.append((number, (channels[0], channels[1], channels[2])))
    if not palette:
        raise UsageError(f"{where}: the palette is empty")
    return tuple(palette)


def parse_label_range(text: str, where: str = "--label-range") -> tuple[int, int]:
    """``LO:HI`` (HI exclusive) as a pair of ints."""
    low, sep, high = text.partition(":")
    try:
        bounds = (int(low), int(high))
    except ValueError:
        bounds = None
    if not sep or bounds is None or bounds[0] >= bounds[1]:
        raise UsageError(f"{where}: {text!r}: expected LO:HI with integers LO < HI")
    return bounds


def build(cls: type, values: Mapping[str, Any], where: Mapping[str, str]) -> Any:
    """A `ScanOptions` or `FixOptions` from ``values`` (key name -> value, unvalidated);
    ``where`` names where each value came from, for the messages (default: its flag)."""
    unknown = [name for name in values if name not in KEYS]
    if unknown:
        known = ", ".join(sorted(KEYS))
        raise UsageError(f"unknown option {unknown[0]!r} (options: {known})")
    if cls is ScanOptions:
        allowed = set(KEYS) - FIX_ONLY
        stray = [n for n in values if n not in allowed and n != "manifest"]
        if stray:
            raise UsageError(f"{where.get(stray[0], KEYS[stray[0]].flag)}: only `scrub fix` takes it")
    groups: dict[str, dict[str, Any]] = {
        g: {} for g in ("read", "checks", "selection", "run", "replay", "scan", "fix")
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
    checks = groups["checks"]
    selection = groups["selection"]
    if "plugin" in selection:
        selection["plugins"] = selection.pop("plugin")
    replay = groups["replay"]
    dummy_loss = replay.pop("dummy_loss", False)
    if replay and not dummy_loss:
        flags = ", ".join(where.get(n.replace("_", "-"), "--" + n.replace("_", "-")) for n in replay)
        raise UsageError(f"{flags}: need --dummy-loss (they configure the replay)")
    read = groups["read"]
    scan = ScanOptions(
        read=ReadOptions(**read),
        checks=CheckOptions(**checks),
        selection=Selection(**selection),
        run=RunOptions(**groups["run"]),
        replay=ReplayOptions(**replay) if dummy_loss else None,
        origins=dict(where),
        **{k: v for k, v in groups["scan"].items() if not (cls is FixOptions and k == "manifest")},
    )
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
    if cls is ScanOptions:
        return scan
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
        return {k: v for k, v in value}
    if isinstance(value, tuple):
        return (
            [describe(v) for v in value]
            if not (len(value) == 2 and all(isinstance(v, int) for v in value))
            else f"{value[0]}:{value[1]}"
        )
    return value
