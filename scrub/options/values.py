"""Option values as the types their keys hold: one validation, with the same message
whether a value came from a flag, a config file or an API keyword."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from scrub.errors import UsageError
from scrub.options.key import Key
from scrub.options.keys import SEVERITY_LEVELS
from scrub.storage import on_this_machine

#: the path options that also take a URL of object storage (kept as text: a `Path` would fold
#: ``s3://`` into ``s3:/``): fix's outputs (`scrub.storage.buckets`)
URL_KEYS = frozenset({"out", "quarantine-dir"})


def _frozen(mapping: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A mapping as sorted pairs, nested mappings likewise: hashable, as frozen options are."""
    return tuple(sorted((str(k), _frozen(v) if isinstance(v, Mapping) else v) for k, v in mapping.items()))


def _is_frozen(value: Any) -> bool:
    """Whether ``value`` is a mapping as `_frozen` holds it (sorted pairs, nested ones likewise)."""
    return isinstance(value, tuple) and all(
        isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) for pair in value
    )


def coerce(key: Key, value: Any, where: str) -> Any:
    """``value`` as the type ``key`` holds, or a `UsageError` naming ``where`` it came from
    (``--num-classes`` or ``scrub.toml:3: num-classes``)."""

    def fail(expected: str) -> UsageError:
        return UsageError(f"{where}: expected {expected}, got {value!r}")

    if key.kind == "mapping":
        if _is_frozen(value):  # the model's own form: a config file's value, built into options again
            return value
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise fail("a JSON object") from None
        if not isinstance(value, Mapping):
            raise fail("a JSON object (a table in a config file)")
        return _frozen(value)
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
        if key.kind == "path":  # a URL where the option takes one (`scrub.storage`), else a path
            return value if key.name in URL_KEYS and not on_this_machine(value) else Path(value)
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
    elif key.kind == "thresholds":
        return _thresholds(value, where)
    elif key.kind == "palette":
        return _palette(value, where)
    elif key.kind == "index":
        if isinstance(value, str) and value.strip().lower() in ("none", "auto"):
            return None if value.strip().lower() == "none" else "auto"
        try:
            value = int(value) if isinstance(value, str) else value
        except ValueError:
            raise fail("an integer, auto or none") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("an integer, auto or none")
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
    if key.maximum is not None and value > key.maximum:
        raise UsageError(f"{where}: must be at most {key.maximum:g}, got {value!r}")
    return value


def _table(
    value: Any, where: str, pair: str, table: str, parse: Callable[[str, str, str], Any] = lambda _w, _n, v: v
) -> Mapping[str, Any]:
    """A table of name = value: a config file's table as it is, or flags' ``NAME=VALUE`` items
    (a string, a list of them, or the model's own (name, value) pairs), each value through
    ``parse(where, name, text)``; ``pair`` and ``table`` say the expected forms."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        pairs = {}
        for item in value:
            if isinstance(item, tuple) and len(item) == 2:  # the model's own form
                item = f"{item[0]}={item[1]}"
            name, sep, text = str(item).partition("=")
            if not sep:
                raise UsageError(f"{where}: expected {pair}, got {item!r}")
            pairs[name.strip()] = parse(where, name.strip(), text.strip())
        value = pairs
    if not isinstance(value, Mapping):
        raise UsageError(f"{where}: expected a table of {table}")
    return value


def _number(where: str, name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{where}: {name}: expected a number, got {text!r}") from None


def _severities(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``{"fp16-overflow": "error"}`` (a config table) or ``["fp16-overflow=error"]`` (flags)."""
    value = _table(value, where, "CHECK=LEVEL", "check = level")
    for check, level in value.items():
        if level not in SEVERITY_LEVELS:
            raise UsageError(f"{where}: {check} = {level!r}: choose one of {', '.join(SEVERITY_LEVELS)}")
    return tuple(sorted(value.items()))


def _thresholds(value: Any, where: str) -> tuple[tuple[str, float], ...]:
    """``{"label": 0.1}`` (a config table) or ``["label=0.1"]`` (flags): drift thresholds by
    family (`scrub.profile.drift.FAMILIES`), each a number from 0 to 1."""
    from scrub.profile.drift import FAMILIES

    value = _table(value, where, "FAMILY=VALUE", "family = threshold", _number)
    found = {}
    for family, number in value.items():
        if family not in FAMILIES:
            raise UsageError(f"{where}: {family!r} is not a drift family: choose from {', '.join(FAMILIES)}")
        most = None if family == "records" else 1  # a relative change may exceed 1; a distance not
        if (
            isinstance(number, bool)
            or not isinstance(number, (int, float))
            or number < 0
            or (most and number > most)
        ):
            expected = "a number of at least 0" if most is None else "a number from 0 to 1"
            raise UsageError(f"{where}: {family} = {number!r}: expected {expected}")
        found[family] = float(number)
    return tuple(sorted(found.items()))


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
