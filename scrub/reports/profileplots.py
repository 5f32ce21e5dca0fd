"""The HTML report's "Profile" section: a dataset's profile (`scrub.profile`, docs/profile.md)
drawn as inline SVG, the baseline's beside tonight's, each drift and contract finding marked on
the plot of its feature.

Plain SVG and CSS, no script: the report stays one file that opens offline. What is drawn is
the profile itself (counts, shares, quantiles), whose size does not grow with the record count,
and each plot is capped (`MAX_CATEGORIES` bars, `MAX_GROUPS` array groups), so the section's
size is bounded too.

Where a finding is drawn: every plot and every row of a plot carries the profile path it shows
(``data-feature="arrays.16.features.3"``); a finding whose ``details.feature`` is that path, or
lies under it, is marked there (the plot framed in its severity's colour, its row or bar
outlined). A contract finding whose feature is not a profile path is drawn on the plot its
check stands for (`CONTRACT_PLOTS`). A finding no plot shows is in the table, unlinked.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scrub.records import Issue, Severity
from scrub.wording import counted

TONIGHT, BASELINE = "#2e86c1", "#a6acaf"
MARK_COLOURS = {Severity.ERROR: "#c0392b", Severity.WARNING: "#d68910"}
WIDTH = 640
#: bars a shares plot draws at most (the largest shares of either side)
MAX_CATEGORIES = 60
#: array groups (row shapes) drawn per dataset at most, the most frequent first
MAX_GROUPS = 8
#: pixels a category of a shares plot takes at most, and the narrowest such plot
MAX_STEP, MIN_WIDTH = 48, 120
#: the most frequent token ids drawn
MAX_TOKEN_IDS = 24
#: a profile's top-level sections: a feature under none of them is a contract's own name
PROFILE_SECTIONS = ("records", "labels", "arrays", "images", "tokens", "masks", "boxes")
#: the plot a contract finding is drawn on when its feature is not a profile path
CONTRACT_PLOTS = {
    "contract-record-count": "records",
    "contract-classes": "labels.classes",
    "contract-class-share": "labels.classes",
    "contract-label-share": "labels.labelled",
    "contract-dtype": "arrays",
    "contract-shape": "arrays",
    "contract-image-size": "images.width",
    "contract-image-mode": "images.modes",
    "contract-vocabulary": "tokens.top_ids",
    "contract-length": "tokens.length",
}

STYLE = """
.profile h3 { font-size: 14px; margin: 18px 0 4px; }
.profile svg { display: block; margin: 2px 0 4px; }
.plot { margin: 6px 0 14px; }
.plot.marked { border-left: 4px solid; padding-left: 8px; }
.plot .marks { margin: 0; font-size: 12px; }
.legend { font-size: 12px; color: #555; }
.legend i { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 10px; vertical-align: -1px; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _num(value: float | int | None) -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


@dataclass
class Marks:
    """The drift and contract findings of one dataset, and which of them a plot has drawn."""

    findings: list[Issue]
    #: a contract's rules broken by records (a class outside the set, an image outside the size
    #: bounds): check -> how many records, and the severest severity; drawn on the plot of
    #: their rule (`CONTRACT_PLOTS`) as a count, the records themselves being in the manifest
    records: Mapping[str, tuple[int, Severity]] = field(default_factory=dict)
    drawn: set[int] = field(default_factory=set)  # ids of the findings some plot marks

    def records_on(self, keys: Sequence[str]) -> list[tuple[str, int, Severity]]:
        """The contract rules broken by records whose plot is one of ``keys``."""
        return [
            (check, n, level)
            for check, (n, level) in self.records.items()
            if CONTRACT_PLOTS.get(check) in keys
        ]

    def on(self, key: str, exact: bool = False) -> list[Issue]:
        """The findings drawn on the plot (or row, or bar) of profile path ``key``: those whose
        feature is ``key`` or (unless ``exact``: a plot of what other plots detail) lies under
        it; for a contract feature that is no profile path, those whose check stands for
        ``key`` (`CONTRACT_PLOTS`)."""
        found = []
        for issue in self.findings:
            feature = str((issue.details or {}).get("feature") or "")
            if (
                feature == key
                or not exact
                and feature.startswith(key + ".")
                or feature.split(".", 1)[0] not in PROFILE_SECTIONS
                and CONTRACT_PLOTS.get(issue.check) == key
            ):
                found.append(issue)
        self.drawn.update(id(issue) for issue in found)
        return found

    def is_drawn(self, issue: Issue) -> bool:
        return id(issue) in self.drawn


def _colour(findings: Sequence[Issue]) -> str:
    return MARK_COLOURS[
        Severity.ERROR if any(i.severity is Severity.ERROR for i in findings) else Severity.WARNING
    ]


class Plots:
    """One dataset's profile section, built plot by plot; each plot gets an anchor
    (``plot-N``) that the findings table links to."""

    def __init__(self, prefix: str, marks: Marks, with_baseline: bool) -> None:
        self.prefix = prefix  # anchors unique across the datasets of a run
        self.marks = marks
        self.with_baseline = with_baseline
        self.parts: list[str] = []
        self.count = 0
        #: finding (by id) -> the anchor of the first plot that marks it
        self.anchors: dict[int, str] = {}

    def add(
        self, key: str, title: str, svg: str, note: str = "", covers: Sequence[str] = (), exact: bool = False
    ) -> None:
        """A plot of profile path ``key`` (and of the paths it ``covers``: its rows), framed and
        captioned with the findings on it; ``exact``: only those on ``key`` itself, not under it."""
        self.count += 1
        anchor = f"{self.prefix}plot-{self.count}"
        found = self.marks.on(key, exact)
        for covered in covers:
            found += [issue for issue in self.marks.on(covered) if issue not in found]
        for issue in found:
            self.anchors.setdefault(id(issue), anchor)
        broken = self.marks.records_on([key, *covers])
        marked = ""
        captions = "".join(
            f"<p class=marks style='color:{_colour([issue])}'>&#9873; <code>{_e(issue.check)}</code> "
            f"{_e(issue.message)}</p>"
            for issue in found
        ) + "".join(
            f"<p class=marks style='color:{MARK_COLOURS[level]}'>&#9873; <code>{_e(check)}</code> "
            f"{counted(n, 'record')} (named in the manifest)</p>"
            for check, n, level in broken
        )
        if found or broken:
            levels = [issue.severity for issue in found] + [level for _, _, level in broken]
            colour = MARK_COLOURS[Severity.ERROR if Severity.ERROR in levels else Severity.WARNING]
            marked = f" marked' style='border-color:{colour}"
        self.parts.append(
            f"<div class='plot{marked}' id='{anchor}' data-feature='{_e(key)}'>"
            f"<h3>{_e(title)}</h3>{captions}{svg}{note}</div>"
        )


# -- the building blocks


def shares_plot(
    key: str,
    tonight: Mapping[str, int],
    baseline: Mapping[str, int] | None,
    marks: Marks,
    name: str = "class",
    whole: tuple[float, float] | None = None,
    exact: bool = False,
    by_share: bool = False,
) -> tuple[str, str]:
    """Bars of each category's share, the baseline's (grey) left of tonight's (blue); a bar a
    finding names (``details.category``) outlined, in category order (``by_share``: the largest
    first). ``whole``: what the shares are of (tonight, baseline), when not the sum of the
    counts. Returns the SVG and a note of what is left out."""
    total = whole[0] if whole else float(sum(tonight.values()))
    before = whole[1] if whole else float(sum((baseline or {}).values()))
    categories = sorted(set(tonight) | set(baseline or {}), key=_category_order)
    if not categories:
        return "<p class=muted>nothing counted</p>", ""
    named = {_category(issue): issue for issue in marks.on(key, exact)}
    shown, top = _shown(categories, named, (tonight, total), (baseline or {}, before), by_share)
    height, axis = 150, 18
    step = min(WIDTH / len(shown), MAX_STEP)
    width = max(MIN_WIDTH, round(step * len(shown)))
    pair = baseline is not None
    bar = max(1.0, (step - 2) / (2 if pair else 1))
    drawn = []
    for i, category in enumerate(shown):
        now, then = tonight.get(category, 0), (baseline or {}).get(category, 0)
        tip = f"{name} {category}: {_share(now, total):.1%} tonight ({now:,})" + (
            f", {_share(then, before):.1%} in the baseline ({then:,})" if pair else ""
        )
        x = i * step + 1
        issue = named.get(category)
        outline = f" stroke='{_colour([issue])}' stroke-width='2'" if issue is not None else ""
        group = f"<g data-category='{_e(category)}'{' class=marked' if issue is not None else ''}>"
        if pair:
            h = (height - axis) * _share(then, before) / top
            drawn.append(
                f"{group}<rect x='{x:.1f}' y='{height - axis - h:.1f}' width='{bar:.1f}' height='{h:.1f}' "
                f"fill='{BASELINE}'{outline}><title>{_e(tip)}</title></rect>"
            )
            x += bar
        else:
            drawn.append(group)
        h = (height - axis) * _share(now, total) / top
        drawn.append(
            f"<rect x='{x:.1f}' y='{height - axis - h:.1f}' width='{bar:.1f}' height='{h:.1f}' "
            f"fill='{TONIGHT}'{outline}><title>{_e(tip)}</title></rect>"
        )
        if issue is not None:
            drawn.append(
                f"<text x='{i * step + step / 2:.1f}' y='10' font-size='11' text-anchor='middle' "
                f"fill='{_colour([issue])}'>&#9660;</text>"
            )
        if len(shown) <= 30:
            drawn.append(
                f"<text x='{i * step + step / 2:.1f}' y='{height - 5}' font-size='10' "
                f"text-anchor='middle'>{_e(_short(category))}</text>"
            )
        drawn.append("</g>")
    svg = (
        f"<svg width={width + 110} height={height} role=img data-plot=shares>"
        f"<line x1=0 x2={width} y1={height - axis} y2={height - axis} stroke='#999'/>"
        f"<text x='{width + 4}' y='12' font-size='10' fill='#777'>"
        f"largest share {top:.1%}</text>{''.join(drawn)}</svg>"
    )
    left = len(categories) - len(shown)
    note = f"<p class=muted>{counted(left, f'more {name}')} with smaller shares not drawn</p>" if left else ""
    return svg, note


def _shown(
    categories: list[str],
    named: Mapping[str, Issue],
    tonight: tuple[Mapping[str, int], float],
    baseline: tuple[Mapping[str, int], float],
    by_share: bool,
) -> tuple[list[str], float]:
    """The categories drawn (those a finding names whatever their share, then the largest; at
    most `MAX_CATEGORIES`, in category order unless ``by_share``) and the largest share among
    them, tonight's or the baseline's (each given as (counts, what the shares are of))."""

    def largest_share(category: str) -> float:
        return max(_share(counts.get(category, 0), whole) for counts, whole in (tonight, baseline))

    largest = sorted(categories, key=lambda c: (c not in named, -largest_share(c)))
    shown = largest[:MAX_CATEGORIES] if by_share else sorted(largest[:MAX_CATEGORIES], key=_category_order)
    return shown, max([largest_share(c) for c in shown] + [1e-12])


def _category(issue: Issue) -> str:
    """The category (class id, mode, token id) a finding names, if any."""
    details = issue.details or {}
    return str(details.get("category", details.get("class")))


def _category_order(category: str) -> tuple:
    text = str(category).rstrip("+")
    return (0, int(text), str(category)) if text.isdigit() else (1, 0, str(category))


def _short(text: str, length: int = 8) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"


#: the quantiles a strip draws: whiskers from the 1st to the 99th percentile, the box from the
#: 25th to the 75th, a tick at the median (the 101 quantiles of the profile, by index)
WHISKERS, BOX, MEDIAN = (1, 99), (25, 75), 50


@dataclass
class Strip:
    """One row of a quantile plot: a profile path, its label, tonight's and the baseline's Numeric."""

    key: str
    label: str
    tonight: Mapping[str, Any] | None
    baseline: Mapping[str, Any] | None


def strips_plot(strips: Sequence[Strip], marks: Marks, with_baseline: bool) -> str:
    """Box strips of quantiles, one row per feature, each on its own scale (features of one
    row differ by orders of magnitude): whiskers from the 1st to the 99th percentile, a box
    from the 25th to the 75th, the median as a tick; the baseline's (grey) above tonight's
    (blue). A row a finding names is outlined in the finding's colour. Right of each row: the
    median, and the share of NaN, Inf and zero among tonight's values."""
    label_width, plot_width, numbers = 130, 330, 180
    row = 26 if with_baseline else 18
    rows = []
    for n, strip in enumerate(strips):
        y = 16 + n * row
        found = marks.on(strip.key)
        sides = [(strip.baseline, BASELINE)] if with_baseline else []
        sides.append((strip.tonight, TONIGHT))
        low, high = _range([side for side, _ in sides])
        body = []
        for k, (numeric, colour) in enumerate(sides):
            top = y + 2 + k * 10
            body.append(_box(numeric, colour, low, high, label_width, plot_width, top))
        frame = ""
        if found:
            frame = (
                f"<rect x='0.5' y='{y - 0.5:.1f}' width='{label_width + plot_width + numbers - 1}' "
                f"height='{row - 2}' fill='none' stroke='{_colour(found)}' stroke-width='2'/>"
            )
        scale = (
            f"<text x='{label_width - 4}' y='{y + row / 2 + 2:.1f}' font-size='9' text-anchor='end' "
            f"fill='#777'>{_e(_plain(low))}</text>"
            if low is not None
            else ""
        )
        rows.append(
            f"<g data-feature='{_e(strip.key)}'{' class=marked' if found else ''}>"
            f"<text x='2' y='{y + row / 2 + 1:.1f}' font-size='11'>{_e(_short(strip.label, 18))}</text>"
            f"{scale}{''.join(body)}"
            f"<text x='{label_width + plot_width + 4}' y='{y + row / 2 + 1:.1f}' font-size='10' fill='#555'>"
            f"{_e(_plain(high)) if high is not None else ''}</text>"
            f"<text x='{label_width + plot_width + 60}' y='{y + row / 2 + 1:.1f}' font-size='10'>"
            f"{_e(_facts(strip.tonight))}</text>{frame}</g>"
        )
    height = 16 + len(strips) * row + 4
    header = (
        f"<text x='{label_width}' y='11' font-size='10' fill='#777'>1st&#8211;99th percentile, box "
        f"25th&#8211;75th, tick: median</text>"
        f"<text x='{label_width + plot_width + 60}' y='11' font-size='10' fill='#777'>median &#183; "
        "NaN &#183; Inf &#183; zero</text>"
    )
    return (
        f"<svg width={label_width + plot_width + numbers} height={height} role=img data-plot=quantiles>"
        f"{header}{''.join(rows)}</svg>"
    )


def _quantiles(numeric: Mapping[str, Any] | None) -> list[float]:
    if not numeric:
        return []
    values = numeric.get("quantiles") or []
    if len(values) != 101 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        return []
    return [float(v) for v in values]


def _range(sides: Iterable[Mapping[str, Any] | None]) -> tuple[float | None, float | None]:
    """The scale of a strip: from the lowest 1st percentile to the highest 99th of its sides."""
    lows, highs = [], []
    for numeric in sides:
        values = _quantiles(numeric)
        if values:
            lows.append(values[WHISKERS[0]])
            highs.append(values[WHISKERS[1]])
    if not lows:
        return None, None
    low, high = min(lows), max(highs)
    if high <= low:  # one value: a visible span around it
        spread = abs(low) * 0.05 or 1.0
        low, high = low - spread, high + spread
    return low, high


def _box(
    numeric: Mapping[str, Any] | None,
    colour: str,
    low: float | None,
    high: float | None,
    left: int,
    width: int,
    top: float,
) -> str:
    values = _quantiles(numeric)
    if not values or low is None or high is None:
        return (
            f"<text x='{left + 4}' y='{top + 8:.1f}' font-size='9' fill='#999'>no finite values</text>"
            if numeric is not None
            else ""
        )

    def x(value: float) -> float:
        return left + width * min(1.0, max(0.0, (value - low) / (high - low)))

    q = values
    title = (
        f"median {_plain(q[MEDIAN])}; 25th–75th {_plain(q[BOX[0]])} to {_plain(q[BOX[1]])}; "
        f"1st–99th {_plain(q[WHISKERS[0]])} to {_plain(q[WHISKERS[1]])}; "
        f"min {_plain(q[0])}, max {_plain(q[100])}"
    )
    box_left, box_right = x(q[BOX[0]]), x(q[BOX[1]])
    return (
        f"<g><title>{_e(title)}</title>"
        f"<line x1='{x(q[WHISKERS[0]]):.1f}' x2='{x(q[WHISKERS[1]]):.1f}' y1='{top + 4:.1f}' "
        f"y2='{top + 4:.1f}' stroke='{colour}'/>"
        f"<rect x='{box_left:.1f}' y='{top:.1f}' width='{max(1.0, box_right - box_left):.1f}' height='8' "
        f"fill='{colour}'/>"
        f"<line x1='{x(q[MEDIAN]):.1f}' x2='{x(q[MEDIAN]):.1f}' y1='{top - 1:.1f}' y2='{top + 9:.1f}' "
        "stroke='#1c1c1c' stroke-width='2'/></g>"
    )


def _plain(value: float | None) -> str:
    if value is None:
        return "–"
    if float(value).is_integer() and abs(value) < 1e9:
        return f"{int(value)}"
    return f"{value:.3g}"


def _facts(numeric: Mapping[str, Any] | None) -> str:
    """A Numeric's median, and its shares of NaN, Inf and zero values."""
    if not numeric:
        return ""
    values = _quantiles(numeric)
    seen = (numeric.get("count") or 0) + (numeric.get("nan") or 0) + (numeric.get("inf") or 0)
    median = _plain(values[MEDIAN]) if values else "–"
    if not seen:
        return median
    shares = [_share(numeric.get(name) or 0, seen) for name in ("nan", "inf", "zero")]
    return f"{median} · " + " · ".join(
        "0" if s == 0 else f"{s:.1%}" if s >= 0.001 else "<0.1%" for s in shares
    )


DASHED = " stroke-dasharray='4 3'"


def lines_plot(tonight: Mapping[str, Sequence[int]], baseline: Mapping[str, Sequence[int]] | None) -> str:
    """Channel histograms (32 bins of 8 levels) as the share of pixels per bin, a line per band;
    the baseline's dashed."""
    colours = {"R": "#c0392b", "G": "#1e8449", "B": "#2e86c1", "L": "#555555", "A": "#8e44ad"}
    height, axis = 120, 14
    series = [(band, counts, False) for band, counts in tonight.items()]
    series += [(band, counts, True) for band, counts in (baseline or {}).items()]
    shares = [(band, [_share(n, sum(counts)) for n in counts], dashed) for band, counts, dashed in series]
    top = max([max(values, default=0.0) for _, values, _ in shares] + [1e-12])
    drawn = []
    for band, values, dashed in shares:
        if len(values) < 2:
            continue
        step = WIDTH / (len(values) - 1)
        points = " ".join(
            f"{i * step:.1f},{height - axis - (height - axis - 4) * v / top:.1f}"
            for i, v in enumerate(values)
        )
        drawn.append(
            f"<polyline points='{points}' fill='none' stroke='{colours.get(band, '#777')}' stroke-width='1.5'"
            f"{DASHED if dashed else ''}><title>{_e(band)}"
            f"{' (baseline)' if dashed else ''}</title></polyline>"
        )
    return (
        f"<svg width={WIDTH} height={height} role=img data-plot=lines>"
        f"<line x1=0 x2={WIDTH} y1={height - axis} y2={height - axis} stroke='#999'/>"
        f"<text x=0 y='{height - 2}' font-size='10'>0</text>"
        f"<text x='{WIDTH}' y='{height - 2}' font-size='10' text-anchor='end'>255</text>"
        f"{''.join(drawn)}</svg>"
    )


def counts_plot(tonight: int, baseline: int | None) -> str:
    """Two horizontal bars: the baseline's record count and tonight's."""
    rows = [("tonight", tonight, TONIGHT)]
    if baseline is not None:
        rows.insert(0, ("baseline", baseline, BASELINE))
    top = max(n for _, n, _ in rows) or 1
    drawn = []
    for i, (name, n, colour) in enumerate(rows):
        y = 4 + i * 18
        drawn.append(
            f"<text x=0 y='{y + 11}' font-size='11'>{name}</text>"
            f"<rect x=70 y='{y}' width='{max(1.0, 400 * n / top):.1f}' height=14 fill='{colour}'>"
            f"<title>{name}: {n:,} records</title></rect>"
            f"<text x='{76 + 400 * n / top:.1f}' y='{y + 11}' font-size='11'>{n:,}</text>"
        )
    return f"<svg width={WIDTH} height={8 + 18 * len(rows)} role=img data-plot=counts>{''.join(drawn)}</svg>"


# -- a profile, section by section


def profile_section(
    profile: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    findings: Sequence[Issue],
    prefix: str = "",
    records: Mapping[str, tuple[int, Severity]] | None = None,
) -> tuple[str, Plots]:
    """A dataset's profile drawn plot by plot, with ``baseline`` (the baseline scan's profile
    of the same dataset, when there is one) beside it and ``findings`` (its drift and contract
    findings on the dataset as a whole) marked, and ``records`` (a contract's rules broken by
    records: check -> records, severity) counted on their rule's plot. Returns the HTML and the
    plots (which say where each finding is drawn)."""
    marks = Marks(list(findings), dict(records or {}))
    plots = Plots(prefix, marks, baseline is not None)
    before = baseline or {}
    plots.add(
        "records",
        "Records",
        counts_plot(int(profile.get("records") or 0), _get(baseline, "records")),
        exact=True,
    )
    _labels(plots, profile.get("labels"), _get(baseline, "labels"))
    _arrays(plots, profile.get("arrays"), _get(baseline, "arrays"))
    _images(plots, profile.get("images"), _get(baseline, "images"))
    _tokens(plots, profile.get("tokens"), _get(baseline, "tokens"))
    for section, part, title, name in (
        ("masks", "pixels", "Mask pixels per class", "class"),
        ("boxes", "classes", "Boxes per class", "class"),
        ("boxes", "per_image", "Boxes per image", "boxes"),
    ):
        counts = (profile.get(section) or {}).get(part)
        if counts:
            previous = (before.get(section) or {}).get(part) if baseline is not None else None
            svg, note = shares_plot(f"{section}.{part}", counts, previous, marks, name)
            plots.add(f"{section}.{part}", title, svg, note)
    legend = (
        "<p class=legend><i style='background:" + BASELINE + "'></i>the baseline's profile"
        "<i style='background:" + TONIGHT + "'></i>tonight's</p>"
        if baseline is not None
        else ""
    )
    return legend + "".join(plots.parts), plots


def _labels(plots: Plots, labels: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> None:
    if not labels:
        return
    labelled, missing = int(labels.get("labelled") or 0), int(labels.get("missing") or 0)
    said = (
        f"{_share(labelled, labelled + missing):.1%} of records labelled "
        f"({labelled:,} of {labelled + missing:,})"
    )
    if before:
        then = int(before.get("labelled") or 0) + int(before.get("missing") or 0)
        said += f"; {_share(int(before.get('labelled') or 0), then):.1%} in the baseline"
    if labels.get("kind") == "class":
        svg, note = shares_plot(
            "labels.classes",
            labels.get("classes") or {},
            (before or {}).get("classes") if before else None,
            plots.marks,
        )
        plots.add("labels.classes", "Class shares", svg, note)
    else:
        svg = strips_plot(
            [Strip("labels.values", "label values", labels.get("values"), (before or {}).get("values"))],
            plots.marks,
            plots.with_baseline,
        )
        plots.add("labels.values", "Label values", svg)
    plots.add("labels.labelled", "Labelled records", f"<p>{_e(said)}</p>")


def _arrays(plots: Plots, arrays: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> None:
    if not arrays and not before:
        return
    arrays, previous = arrays or {}, before or {}
    svg, note = shares_plot(
        "arrays",
        {group: int(facts.get("records") or 0) for group, facts in arrays.items()},
        {group: int(facts.get("records") or 0) for group, facts in previous.items()}
        if before is not None
        else None,
        plots.marks,
        "row shape",
        exact=True,
    )
    plots.add("arrays", "Row shapes", svg, note, exact=True)
    groups = sorted(arrays, key=lambda group: -int(arrays[group].get("records") or 0))
    for group in groups[:MAX_GROUPS]:
        facts, then = arrays[group], _get(before, group)
        dtypes = ", ".join(f"{dtype} ({n:,})" for dtype, n in (facts.get("dtypes") or {}).items())
        if then is not None:
            dtypes += "; baseline: " + ", ".join(
                f"{dtype} ({n:,})" for dtype, n in (then.get("dtypes") or {}).items()
            )
        features = facts.get("features") or {}
        names = facts.get("names") or {}  # a table's column names, where the reader knows them
        strips = [Strip(f"arrays.{group}.row", "whole row", facts.get("row"), (then or {}).get("row"))]
        strips += [
            Strip(
                f"arrays.{group}.features.{position}",
                names.get(position) or f"position {position}",
                numeric,
                ((then or {}).get("features") or {}).get(position),
            )
            for position, numeric in sorted(features.items(), key=lambda item: _category_order(item[0]))
        ]
        positions = int(facts.get("positions") or len(features))
        left = (
            f"<p class=muted>positions {len(features)} to {positions - 1} are in the whole row only "
            "(the profile keeps the first ones one by one)</p>"
            if positions > len(features)
            else ""
        )
        plots.add(
            f"arrays.{group}",
            f"Rows of shape {group.replace('x', '×')}: {int(facts.get('records') or 0):,} records",
            f"<p class=muted>dtypes: {_e(dtypes)}</p>"
            + strips_plot(strips, plots.marks, plots.with_baseline),
            left,
        )
    if len(groups) > MAX_GROUPS:
        plots.parts.append(
            f"<p class=muted>{counted(len(groups) - MAX_GROUPS, 'more row shape')} not drawn</p>"
        )


def _images(plots: Plots, images: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> None:
    if not images:
        return
    size = [
        Strip(f"images.{name}", name, images.get(name), _get(before, name)) for name in ("width", "height")
    ]
    plots.add(
        "images.size",
        f"Image sizes ({int(images.get('records') or 0):,} images)",
        strips_plot(size, plots.marks, plots.with_baseline),
        covers=[strip.key for strip in size],
    )
    svg, note = shares_plot(
        "images.modes",
        images.get("modes") or {},
        _get(before, "modes"),
        plots.marks,
        "mode",
    )
    formats = ", ".join(f"{name} ({n:,})" for name, n in (images.get("formats") or {}).items())
    plots.add(
        "images.modes",
        "Image modes",
        svg,
        note + (f"<p class=muted>formats: {_e(formats)}</p>" if formats else ""),
    )
    levels = [
        Strip(f"images.{name}", name, images.get(name), _get(before, name))
        for name in ("brightness", "contrast")
    ]
    plots.add(
        "images.levels",
        "Brightness and contrast (grayscale mean and deviation, 0–255)",
        strips_plot(levels, plots.marks, plots.with_baseline),
        covers=[strip.key for strip in levels],
    )
    if images.get("channels"):
        plots.add(
            "images.channels",
            "Pixel values per channel" + (" (the baseline's dashed)" if before is not None else ""),
            lines_plot(images["channels"], _get(before, "channels")),
        )


def _tokens(plots: Plots, tokens: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> None:
    if not tokens:
        return
    previous = before or {}
    strips = [
        Strip(
            "tokens.length",
            "length",
            tokens.get("length"),
            _get(before, "length"),
        )
    ]
    if tokens.get("supervised") or previous.get("supervised"):
        strips.append(
            Strip(
                "tokens.supervised",
                "supervised share",
                tokens.get("supervised"),
                _get(before, "supervised"),
            )
        )
    plots.add(
        "tokens.lengths",
        f"Token sequences ({int(tokens.get('records') or 0):,})",
        strips_plot(strips, plots.marks, plots.with_baseline),
        covers=[strip.key for strip in strips],
    )
    now = {str(i): int(n) for i, n in (tokens.get("top_ids") or [])[:MAX_TOKEN_IDS]}
    then = (
        {str(i): int(n) for i, n in (previous.get("top_ids") or [])[:MAX_TOKEN_IDS]}
        if before is not None
        else None
    )
    svg, note = shares_plot(
        "tokens.top_ids",
        now,
        then,
        plots.marks,
        "token id",
        whole=(_tokens_seen(tokens), _tokens_seen(previous)),
        by_share=True,
    )
    maximum = (
        f"<p class=muted>largest id: {_num(tokens.get('max_id'))}"
        + (f" (baseline: {_num(previous.get('max_id'))})" if before is not None else "")
        + "</p>"
    )
    plots.add("tokens.top_ids", "The most frequent token ids (share of all tokens)", svg, note + maximum)


def _get(section: Mapping[str, Any] | None, name: str) -> Any:
    """A part of the baseline's section, None where the baseline has none."""
    return None if section is None else section.get(name)


def _tokens_seen(tokens: Mapping[str, Any]) -> float:
    """All tokens of the sequences profiled (their count times their mean length), the whole the
    most frequent ids are shares of; their own sum where the lengths are unknown."""
    length = tokens.get("length") or {}
    total = float(length.get("count") or 0) * float(length.get("mean") or 0)
    return total or float(sum(n for _, n in tokens.get("top_ids") or []))


# -- the section of a whole report

#: bytes the profile sections of a report take at most (a run of many datasets: the later ones
#: are named, not drawn); the thumbnails take what is left of the report's cap
MAX_PROFILE_BYTES = 2 * 2**20


def baseline_record(summary: Any) -> tuple[dict[str, Any] | None, str]:
    """The scan record beside the baseline manifest (``summary.baseline["path"]``), where the
    baseline's profile is; None and why not (no baseline: no reason)."""
    import json
    from pathlib import Path

    from scrub.manifest import scan_record_path

    if summary.baseline is None:
        return None, ""
    path = scan_record_path(Path(summary.baseline["path"]))
    if path.resolve() == scan_record_path(Path(summary.manifest)).resolve():
        return None, (
            f"the baseline's scan record {path} is this scan's own (the baseline manifest was "
            "overwritten): its profile is not drawn"
        )
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"the baseline's scan record {path} is missing: its profile is not drawn"
    except (OSError, ValueError) as error:
        return None, f"the baseline's scan record {path} cannot be read ({error}): its profile is not drawn"
    if not isinstance(record, dict):
        return None, f"{path} is not a scan record: the baseline's profile is not drawn"
    return record, ""
