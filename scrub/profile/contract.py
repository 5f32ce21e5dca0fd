"""A contract: what a dataset is, written once as a TOML file people edit, checked every night.

`infer` writes one from a profile (the scan record's ``profile``): the record count's bounds, the
class set and each class's smallest share, the share of records with a label, the array rows'
dtypes and shapes, the images' size bounds and modes, the token ids' vocabulary and the
sequences' length bounds. `load` reads one back, remembering the line of every rule, so that a
finding names ``scrub.contract.toml:12``. `judge` checks a profile against it: each rule broken
is a finding about the dataset (key ``*``); the rules records break one by one (a class outside
the set, an image outside the size bounds, a sequence outside the length bounds) are also
judged per record during the scan (`scrub.checks.contract`), so that the records are named and
`fix` can set them aside.

The rules, their keys and their default severities: docs/contract.md.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrub.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

#: the default name `scrub contract` writes
DEFAULT_NAME = "scrub.contract.toml"
#: the inferred record-count bounds: this share below and above the count seen
RECORD_SLACK = 0.2
#: the inferred smallest share of a class: this fraction of the share seen
CLASS_SHARE_FRACTION = 0.5
#: the inferred smallest share of labelled records: the share seen, less this
LABELLED_SLACK = 0.01

#: (table, key) -> the check id a broken rule raises, and its default severity
RULES: dict[tuple[str, str], tuple[str, str]] = {
    ("records", "min"): ("contract-record-count", "error"),
    ("records", "max"): ("contract-record-count", "error"),
    ("labels", "classes"): ("contract-classes", "error"),
    ("labels", "min-class-share"): ("contract-class-share", "warning"),
    ("labels", "min-labelled-share"): ("contract-label-share", "warning"),
    ("arrays", "dtypes"): ("contract-dtype", "error"),
    ("arrays", "shapes"): ("contract-shape", "error"),
    ("images", "width"): ("contract-image-size", "error"),
    ("images", "height"): ("contract-image-size", "error"),
    ("images", "modes"): ("contract-image-mode", "error"),
    ("tokens", "vocabulary"): ("contract-vocabulary", "error"),
    ("tokens", "length"): ("contract-length", "error"),
}
CONTRACT_CHECKS = frozenset(check for check, _ in RULES.values())
SEVERITIES = ("error", "warning")

Bounds = tuple[float | None, float | None]


@dataclass(frozen=True)
class Contract:
    """A contract file as read: its rules, each with the line it is on (picklable, hashable:
    it travels to the workers inside the checks' options)."""

    path: str
    digest: str  # of the file's text: a changed contract changes the verdicts a cache holds
    records: Bounds | None = None
    classes: tuple[int, ...] | None = None
    min_class_share: tuple[tuple[int, float], ...] = ()
    min_labelled_share: float | None = None
    dtypes: tuple[str, ...] | None = None
    shapes: tuple[str, ...] | None = None
    width: Bounds | None = None
    height: Bounds | None = None
    modes: tuple[str, ...] | None = None
    vocabulary: int | None = None
    length: Bounds | None = None
    #: "table.key" -> its line in the file
    lines: tuple[tuple[str, int], ...] = ()
    #: check id -> the severity the file's ``[severity]`` table gives it
    severities: tuple[tuple[str, str], ...] = ()
    _lines: dict[str, int] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lines", dict(self.lines))

    def where(self, rule: str) -> str:
        """``path:line`` of a rule (``"images.width"``), for a finding's message."""
        line = self._lines.get(rule)
        return f"{self.path}:{line}" if line else self.path

    def line(self, rule: str) -> int | None:
        """The line of a rule (``"images.width"``) in the file: a finding's ``details.line``, which
        the reports show beside the rule."""
        return self._lines.get(rule)

    def severity(self, check: str) -> str | None:
        return dict(self.severities).get(check)

    def checks(self) -> frozenset[str]:
        """The check ids this contract's rules can raise (its other checks have nothing to judge)."""
        held = {rule for rule, _ in self.lines}
        found = {check for (table, key), (check, _) in RULES.items() if f"{table}.{key}" in held}
        return frozenset(found)

    def to_json(self) -> dict[str, str]:
        """What the scan record's options say of it (and what the cache keys on)."""
        return {"path": self.path, "sha256": self.digest}


# -- inferring ----------------------------------------------------------------------------------


def infer(profile: Mapping[str, Any], dataset: str) -> str:
    """The contract of a dataset as its ``profile`` shows it, as TOML with a comment per rule."""
    lines = [
        f"# The contract of {dataset}: what it is, inferred by `scrub contract` from a profile of "
        f"{int(profile.get('records', 0)):,} records.",
        "# Check it with `scrub scan DATA --contract THIS_FILE`. Edit any bound; delete a rule to drop it.",
        "# Each broken rule is a finding (docs/contract.md); the [severity] table at the end sets theirs.",
        "",
    ]
    records = int(profile.get("records", 0))
    lines += [
        "[records]",
        f"# {records:,} records when inferred; bounds {RECORD_SLACK:.0%} either side (contract-record-count)",
        f"min = {math.floor(records * (1 - RECORD_SLACK))}",
        f"max = {math.ceil(records * (1 + RECORD_SLACK))}",
        "",
    ]
    lines += _infer_labels(profile.get("labels"))
    lines += _infer_arrays(profile.get("arrays"))
    lines += _infer_images(profile.get("images"))
    lines += _infer_tokens(profile.get("tokens"))
    lines += [
        "[severity]",
        "# a rule family's severity: error (the scan exits 1) or warning; the defaults are shown",
    ]
    used = sorted({check for (table, _), (check, _) in RULES.items() if f"[{table}]" in lines})
    defaults = {check: level for check, level in RULES.values()}
    lines += [f'{check} = "{defaults[check]}"' for check in used]
    return "\n".join(lines) + "\n"


def _infer_labels(labels: Mapping[str, Any] | None) -> list[str]:
    if not labels or labels.get("kind") != "class" or not labels.get("classes"):
        return []
    classes = {int(name): int(count) for name, count in labels["classes"].items()}
    total = sum(classes.values())
    labelled, missing = int(labels.get("labelled", total)), int(labels.get("missing", 0))
    shares = ", ".join(
        f'"{name}" = {math.floor(count / total * CLASS_SHARE_FRACTION * 1000) / 1000}'
        for name, count in sorted(classes.items())
    )
    share = labelled / (labelled + missing) if labelled + missing else 1.0
    return [
        "[labels]",
        "# the class ids the data holds: a record with another, or a class with no record, is",
        "# contract-classes",
        f"classes = [{', '.join(str(name) for name in sorted(classes))}]",
        f"# each class's share of the labelled records, at least ({CLASS_SHARE_FRACTION:.0%} of the share "
        "seen; contract-class-share)",
        f"min-class-share = {{ {shares} }}",
        f"# the share of records with a label, at least ({share:.1%} seen; contract-label-share)",
        f"min-labelled-share = {max(0.0, math.floor((share - LABELLED_SLACK) * 1000) / 1000)}",
        "",
    ]


def _infer_arrays(arrays: Mapping[str, Any] | None) -> list[str]:
    if not arrays:
        return []
    dtypes = sorted({dtype for group in arrays.values() for dtype in (group.get("dtypes") or {})})
    shapes = sorted(arrays)
    found = [
        "[arrays]",
        "# the row shapes (elements joined by x) the rows have (contract-shape)",
        f"shapes = [{', '.join(_quoted(shape) for shape in shapes)}]",
    ]
    if dtypes:
        found += [
            "# the dtypes the values are stored in (contract-dtype)",
            f"dtypes = [{', '.join(_quoted(dtype) for dtype in dtypes)}]",
        ]
    return [*found, ""]


def _infer_images(images: Mapping[str, Any] | None) -> list[str]:
    if not images or not images.get("records"):
        return []
    found = ["[images]", "# [smallest, largest] side in pixels; an image outside is contract-image-size"]
    for side in ("width", "height"):
        numeric = images.get(side) or {}
        if numeric.get("min") is not None:
            found.append(f"{side} = [{int(numeric['min'])}, {int(numeric['max'])}]")
    modes = sorted(images.get("modes") or {})
    if modes:
        found += [
            "# the modes the images decode to (contract-image-mode)",
            f"modes = [{', '.join(_quoted(mode) for mode in modes)}]",
        ]
    return [*found, ""]


def _infer_tokens(tokens: Mapping[str, Any] | None) -> list[str]:
    if not tokens or not tokens.get("records"):
        return []
    found = ["[tokens]"]
    if tokens.get("max_id") is not None:
        found += [
            "# token ids are below this: the largest id seen, plus one (set it to the tokenizer's",
            "# vocabulary size; contract-vocabulary)",
            f"vocabulary = {int(tokens['max_id']) + 1}",
        ]
    length = tokens.get("length") or {}
    if length.get("min") is not None:
        found += [
            "# [shortest, longest] sequence in tokens (contract-length)",
            f"length = [{int(length['min'])}, {int(length['max'])}]",
        ]
    return [*found, ""] if len(found) > 1 else []


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- reading ------------------------------------------------------------------------------------

_TABLE = re.compile(r"^\s*\[\s*([A-Za-z0-9_-]+)\s*\]\s*(#.*)?$")
_KEY = re.compile(r'^\s*("?)([A-Za-z0-9_-]+)\1\s*=')


def rule_lines(text: str) -> dict[str, int]:
    """``"table.key"`` -> the line (1-based) it is on, for the simple TOML a contract is (tables
    of keys; tomllib itself says no line)."""
    found: dict[str, int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = _TABLE.match(line)
        if header:
            table = header.group(1)
            continue
        key = _KEY.match(line)
        if key:
            found.setdefault(f"{table}.{key.group(2)}", number)
    return found


def load(path: str | Path) -> Contract:
    """Read a contract file; anything wrong with it is one line naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--contract {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--contract {path}: cannot be read ({error})") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{path}: not a TOML contract: {error}") from None
    lines = rule_lines(text)
    reader = _Reader(str(path), document, lines)
    return Contract(
        path=str(path),
        digest=hashlib.sha256(text.encode()).hexdigest(),
        records=reader.bounds("records", ("min", "max")),
        classes=reader.integers("labels", "classes"),
        min_class_share=reader.shares("labels", "min-class-share"),
        min_labelled_share=reader.share("labels", "min-labelled-share"),
        dtypes=reader.strings("arrays", "dtypes"),
        shapes=reader.strings("arrays", "shapes"),
        width=reader.pair("images", "width"),
        height=reader.pair("images", "height"),
        modes=reader.strings("images", "modes"),
        vocabulary=reader.positive("tokens", "vocabulary"),
        length=reader.pair("tokens", "length"),
        lines=tuple(sorted(lines.items())),
        severities=reader.severities(),
    )


class _Reader:
    """Typed access to a contract's tables, each mistake a `UsageError` naming ``path:line``."""

    def __init__(self, path: str, document: dict[str, Any], lines: dict[str, int]) -> None:
        self.path, self.document, self.lines = path, document, lines
        known = {table for table, _ in RULES} | {"severity"}
        for table, value in document.items():
            if table not in known or not isinstance(value, dict):
                raise self._error(table, "", f"unknown table [{table}] (tables: {', '.join(sorted(known))})")
            if table == "severity":
                continue
            keys = {key for name, key in RULES if name == table}
            for key in value:
                if key not in keys:
                    raise self._error(
                        table, key, f"unknown rule {key!r} in [{table}] ({', '.join(sorted(keys))})"
                    )

    def _error(self, table: str, key: str, message: str) -> UsageError:
        line = self.lines.get(f"{table}.{key}") if key else self._table_line(table)
        return UsageError(f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}")

    def _table_line(self, table: str) -> int | None:
        return min((line for rule, line in self.lines.items() if rule.startswith(f"{table}.")), default=None)

    def _get(self, table: str, key: str) -> Any:
        return (self.document.get(table) or {}).get(key)

    def bounds(self, table: str, keys: tuple[str, str]) -> Bounds | None:
        low, high = (self._number(table, key) for key in keys)
        if low is None and high is None:
            return None
        if low is not None and high is not None and low > high:
            raise self._error(table, keys[0], f"{keys[0]} {low} is above {keys[1]} {high}")
        return (low, high)

    def pair(self, table: str, key: str) -> Bounds | None:
        value = self._get(table, key)
        if value is None:
            return None
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            or value[0] > value[1]
        ):
            raise self._error(table, key, f"{key} must be [smallest, largest], got {value!r}")
        return (value[0], value[1])

    def _number(self, table: str, key: str) -> float | None:
        value = self._get(table, key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
        ):
            raise self._error(table, key, f"{key} must be a number of 0 or more, got {value!r}")
        return value

    def positive(self, table: str, key: str) -> int | None:
        value = self._get(table, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise self._error(table, key, f"{key} must be a whole number of 1 or more, got {value!r}")
        return value

    def share(self, table: str, key: str) -> float | None:
        value = self._get(table, key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1
        ):
            raise self._error(table, key, f"{key} must be a share between 0 and 1, got {value!r}")
        return value

    def integers(self, table: str, key: str) -> tuple[int, ...] | None:
        value = self._get(table, key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self._error(table, key, f"{key} must be a list of class ids (integers), got {value!r}")
        return tuple(sorted(set(value)))

    def strings(self, table: str, key: str) -> tuple[str, ...] | None:
        value = self._get(table, key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._error(table, key, f"{key} must be a list of strings, got {value!r}")
        return tuple(sorted(set(value)))

    def shares(self, table: str, key: str) -> tuple[tuple[int, float], ...]:
        value = self._get(table, key)
        if value is None:
            return ()
        if not isinstance(value, dict):
            raise self._error(table, key, f"{key} must be a table of class id = share, got {value!r}")
        found = []
        for name, share in value.items():
            if (
                not re.fullmatch(r"-?\d+", str(name))
                or isinstance(share, bool)
                or not isinstance(share, (int, float))
                or not 0 <= share <= 1
            ):
                raise self._error(
                    table, key, f"{key}: {name} = {share!r} is not a class id = share between 0 and 1"
                )
            found.append((int(name), float(share)))
        return tuple(sorted(found))

    def severities(self) -> tuple[tuple[str, str], ...]:
        table = self.document.get("severity") or {}
        for check, level in table.items():
            if check not in CONTRACT_CHECKS:
                raise self._error("severity", check, f"unknown contract check {check!r}")
            if level not in SEVERITIES:
                raise self._error(
                    "severity", check, f"{check}: severity must be error or warning, got {level!r}"
                )
        return tuple(sorted(table.items()))


# -- judging ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Broken:
    """A rule the dataset as a whole breaks."""

    check: str
    rule: str  # "table.key"
    message: str
    expected: Any
    found: Any


def judge(contract: Contract, profile: Mapping[str, Any]) -> list[Broken]:
    """Each rule of ``contract`` that ``profile`` breaks, as a whole (the per-record rules'
    records are named by the scan's own checks; here, their dataset-level side only where no
    record could be named)."""
    broken: list[Broken] = []
    records = int(profile.get("records", 0))
    if contract.records is not None:
        low, high = contract.records
        if (low is not None and records < low) or (high is not None and records > high):
            rule = "records.min" if low is not None and records < low else "records.max"
            broken.append(
                Broken(
                    "contract-record-count",
                    rule,
                    f"{records:,} records; the contract says {_bounds(contract.records)}",
                    list(contract.records),
                    records,
                )
            )
    broken += _judge_labels(contract, profile.get("labels") or {})
    broken += _judge_arrays(contract, profile.get("arrays") or {})
    broken += _judge_images(contract, profile.get("images") or {})
    broken += _judge_tokens(contract, profile.get("tokens") or {})
    return broken


def _judge_labels(contract: Contract, labels: Mapping[str, Any]) -> list[Broken]:
    broken = []
    classes = {int(name): int(count) for name, count in (labels.get("classes") or {}).items()}
    total = sum(classes.values())
    if contract.classes is not None and labels.get("kind") == "class":
        for missing in sorted(set(contract.classes) - {c for c, n in classes.items() if n}):
            broken.append(
                Broken(
                    "contract-classes",
                    "labels.classes",
                    f"class {missing} of the contract's set has no record",
                    list(contract.classes),
                    sorted(classes),
                )
            )
    for name, least in contract.min_class_share:
        share = classes.get(name, 0) / total if total else 0.0
        if share < least and (contract.classes is None or name in contract.classes) and classes.get(name):
            broken.append(
                Broken(
                    "contract-class-share",
                    "labels.min-class-share",
                    f"class {name}'s share is {share:.1%}; the contract says at least {least:.1%}",
                    least,
                    round(share, 6),
                )
            )
    if contract.min_labelled_share is not None and labels:
        labelled, missing = int(labels.get("labelled", 0)), int(labels.get("missing", 0))
        share = labelled / (labelled + missing) if labelled + missing else 1.0
        if share < contract.min_labelled_share:
            broken.append(
                Broken(
                    "contract-label-share",
                    "labels.min-labelled-share",
                    f"{share:.1%} of the records have a label; the contract says at least "
                    f"{contract.min_labelled_share:.1%}",
                    contract.min_labelled_share,
                    round(share, 6),
                )
            )
    return broken


def _judge_arrays(contract: Contract, arrays: Mapping[str, Any]) -> list[Broken]:
    broken = []
    if contract.shapes is not None:
        for shape in sorted(set(arrays) - set(contract.shapes)):
            rows = int(arrays[shape].get("records", 0))
            broken.append(
                Broken(
                    "contract-shape",
                    "arrays.shapes",
                    f"{rows:,} rows of shape {shape}; the contract's shapes are {', '.join(contract.shapes)}",
                    list(contract.shapes),
                    shape,
                )
            )
    if contract.dtypes is not None:
        dtypes: dict[str, int] = {}
        for group in arrays.values():
            for dtype, count in (group.get("dtypes") or {}).items():
                dtypes[dtype] = dtypes.get(dtype, 0) + int(count)
        for dtype in sorted(set(dtypes) - set(contract.dtypes)):
            broken.append(
                Broken(
                    "contract-dtype",
                    "arrays.dtypes",
                    f"{dtypes[dtype]:,} rows stored as {dtype}; the contract's dtypes are "
                    f"{', '.join(contract.dtypes)}",
                    list(contract.dtypes),
                    dtype,
                )
            )
    return broken


def _judge_images(contract: Contract, images: Mapping[str, Any]) -> list[Broken]:
    if contract.modes is None:
        return []
    modes = images.get("modes") or {}
    return [
        Broken(
            "contract-image-mode",
            "images.modes",
            f"{int(modes[mode]):,} images of mode {mode}; the contract's modes are "
            f"{', '.join(contract.modes)}",
            list(contract.modes),
            mode,
        )
        for mode in sorted(set(modes) - set(contract.modes))
    ]


def _judge_tokens(contract: Contract, tokens: Mapping[str, Any]) -> list[Broken]:
    broken = []
    largest = tokens.get("max_id")
    if contract.vocabulary is not None and largest is not None and int(largest) >= contract.vocabulary:
        broken.append(
            Broken(
                "contract-vocabulary",
                "tokens.vocabulary",
                f"token id {int(largest):,} is not below the contract's vocabulary of "
                f"{contract.vocabulary:,} (--vocab-size names the records)",
                contract.vocabulary,
                int(largest),
            )
        )
    length = tokens.get("length") or {}
    if contract.length is not None and length.get("min") is not None:
        low, high = contract.length
        shortest, longest = length["min"], length["max"]
        if (low is not None and shortest < low) or (high is not None and longest > high):
            broken.append(
                Broken(
                    "contract-length",
                    "tokens.length",
                    f"sequences of {int(shortest):,} to {int(longest):,} tokens; the contract says "
                    f"{_bounds(contract.length)}",
                    list(contract.length),
                    [shortest, longest],
                )
            )
    return broken


def _bounds(bounds: Bounds) -> str:
    low, high = bounds
    if low is None:
        return f"at most {high:,}"
    if high is None:
        return f"at least {low:,}"
    return f"{low:,} to {high:,}"
