"""The profile as people read it: what `scrub profile SCANRECORD` prints.

Plain text, one section per kind of data the profile holds, numbers as aligned columns of
quantiles (the 1st, 25th, 50th, 75th and 99th percentiles between the extremes)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scrub.errors import ScrubError

#: classes, modes, ids a section lists before "and N more"
SHOWN = 20
#: the percentiles a Numeric's line shows, between its min and max
PERCENTILES = (1, 25, 50, 75, 99)
COLUMNS = ("count", "min", *(f"p{p}" for p in PERCENTILES), "max", "mean", "nan", "inf", "zero")


def profiles_in(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(the dataset's path, its profile) of each dataset a scan record holds (a manifest's
    path stands for the scan record beside it). A file that is not a scan record, or a record
    without a profile (``--no-profile``, or a scan before profiles), is a `ScrubError`."""
    from scrub.manifest import scan_record_path
    from scrub.profile import load_profile

    path = Path(path)
    if path.suffix == ".jsonl":
        path = scan_record_path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScrubError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ScrubError(f"{path}: a folder, not a scan record (NAME.scan.json)") from None
    except OSError as error:
        raise ScrubError(f"{path}: cannot be read ({error.strerror or error})") from None
    except ValueError:  # not UTF-8, not JSON
        raise ScrubError(f"{path}: not a scan record (NAME.scan.json): not JSON") from None
    if not isinstance(record, dict) or "fingerprint" not in record or "records" not in record:
        raise ScrubError(f"{path}: not a scan record (NAME.scan.json, written beside a scan's manifest)")
    parts = record.get("parts") or []
    if parts:
        found = [(_title(part), load_profile(record, part.get("path"))) for part in parts]
    else:
        found = [(_title(record), load_profile(record))]
    held = [(name, profile) for name, profile in found if profile is not None]
    if not held:
        raise ScrubError(
            f"{path}: the scan record holds no profile (scanned with --no-profile, or by an older scrub)"
        )
    return held


def _title(record: Mapping[str, Any]) -> str:
    """A dataset's path and what it is: ``data/train (images, class-folders)``."""
    dataset = record.get("dataset") or {}
    kind = ", ".join(str(dataset[name]) for name in ("format", "layout") if dataset.get(name))
    return f"{record.get('path')}" + (f" ({kind})" if kind else "")


def render_profile(profile: Mapping[str, Any], name: str) -> str:
    """A profile as text, headed by the dataset's ``name``."""
    lines = [f"{name}: {profile.get('records', 0):,} records" + _reused(profile)]
    labels = profile.get("labels")
    if labels:
        lines += _labels(labels)
    for group, facts in (profile.get("arrays") or {}).items():
        lines += _arrays(group, facts)
    images = profile.get("images")
    if images:
        lines += _images(images)
    tokens = profile.get("tokens")
    if tokens:
        lines += _tokens(tokens)
    masks = profile.get("masks")
    if masks:
        lines += ["", "masks: pixels per class", *_shares(masks.get("pixels") or {}, "pixels")]
    boxes = profile.get("boxes")
    if boxes:
        lines += [
            "",
            "boxes: images by their number of boxes",
            *_shares(boxes.get("per_image") or {}, "images"),
        ]
        lines += ["boxes per class", *_shares(boxes.get("classes") or {}, "boxes")]
    return "\n".join(lines)


def _reused(profile: Mapping[str, Any]) -> str:
    reused = profile.get("reused") or 0
    return f" ({reused:,} reused from the cache: in the counts, not in the quantiles)" if reused else ""


def _labels(labels: Mapping[str, Any]) -> list[str]:
    labelled, missing = labels.get("labelled", 0), labels.get("missing", 0)
    lines = ["", f"labels ({labels.get('kind')}): {labelled:,} labelled, {missing:,} missing"]
    if labels.get("kind") == "class":
        lines += _shares(labels.get("classes") or {}, "records", heading="class")
    elif labels.get("values"):
        lines += _numerics({"value": labels["values"]})
    return lines


def _arrays(group: str, facts: Mapping[str, Any]) -> list[str]:
    dtypes = ", ".join(f"{dtype} {count:,}" for dtype, count in (facts.get("dtypes") or {}).items())
    features = facts.get("features") or {}
    positions = facts.get("positions", len(features))
    shown = (
        f"positions 0-{len(features) - 1} of {positions}" if len(features) < positions else "every position"
    )
    lines = ["", f"arrays {group}: {facts.get('records', 0):,} rows ({dtypes}); {shown}"]
    names = facts.get("names") or {}
    named = {f"[{i}] {names.get(i, '')}".rstrip(): numeric for i, numeric in features.items()}
    return lines + _numerics({"row": facts.get("row") or {}, **named})


def _images(images: Mapping[str, Any]) -> list[str]:
    lines = ["", f"images: {images.get('records', 0):,} decode"]
    for name in ("modes", "formats"):
        counts = images.get(name) or {}
        if counts:
            lines.append(f"  {name}: " + ", ".join(f"{key} {n:,}" for key, n in _largest(counts)))
    lines += _numerics(
        {name: images[name] for name in ("width", "height", "brightness", "contrast") if name in images}
    )
    channels = images.get("channels") or {}
    if channels:
        ranges = [f"{8 * first}-{8 * first + 31}" for first in range(0, 32, 4)]
        lines.append("  channels: share of the band's pixels (%) per range of levels")
        lines.append("  " + " " * 4 + "".join(f"{name:>8}" for name in ranges))
        for band, counts in channels.items():
            total = sum(counts) or 1
            grouped = [sum(counts[first : first + 4]) for first in range(0, len(counts), 4)]
            lines.append(f"  {band:<4}" + "".join(f"{100 * n / total:8.1f}" for n in grouped))
    return lines


def _tokens(tokens: Mapping[str, Any]) -> list[str]:
    lines = ["", f"tokens: {tokens.get('records', 0):,} sequences, largest id {tokens.get('max_id')}"]
    lines += _numerics({name: tokens[name] for name in ("length", "supervised") if name in tokens})
    top = tokens.get("top_ids") or []
    if top:
        lines.append(
            "  most frequent ids: " + ", ".join(f"{token} ({count:,})" for token, count in top[:SHOWN])
        )
    return lines


def _largest(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: -item[1])


def _shares(counts: Mapping[str, int], what: str, heading: str = "") -> list[str]:
    """Counts in their order (class ids, numbers), with each one's share; long lists cut."""
    total = sum(counts.values()) or 1
    items = list(counts.items())
    width = max([len(heading), *(len(key) for key, _ in items[:SHOWN])])
    lines = [f"  {heading:<{width}}  {what:>12}  share"] if heading else []
    lines += [f"  {key:<{width}}  {n:>12,}  {100 * n / total:5.1f}%" for key, n in items[:SHOWN]]
    if len(items) > SHOWN:
        lines.append(f"  and {len(items) - SHOWN:,} more")
    return lines


def _numerics(numerics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Aligned rows of Numerics: count, the quantiles, mean, the non-finite and zero counts."""
    rows = [[name, *_numeric_cells(numeric)] for name, numeric in numerics.items()]
    header = ["", *COLUMNS]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    aligned = [
        "  "
        + "  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row))
        for row in [header, *rows]
    ]
    return [line.rstrip() for line in aligned]


def _numeric_cells(numeric: Mapping[str, Any]) -> list[str]:
    quantiles = numeric.get("quantiles") or []
    picked = [quantiles[p] if len(quantiles) == 101 else None for p in PERCENTILES]
    return [
        f"{numeric.get('count', 0):,}",
        _number(numeric.get("min")),
        *(_number(value) for value in picked),
        _number(numeric.get("max")),
        _number(numeric.get("mean")),
        f"{numeric.get('nan', 0):,}",
        f"{numeric.get('inf', 0):,}",
        f"{numeric.get('zero', 0):,}",
    ]


def _number(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    if value == int(value) and abs(value) < 1e9:
        return f"{int(value):,}"
    return f"{value:.4g}"
