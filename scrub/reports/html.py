"""`--html`: one self-contained report that works offline and stays small.

No script, no CDN, no web font: inline CSS and inline SVG only, so the file opens from a CI
artifact, an e-mail or a laptop without network. Its size is capped (`MAX_BYTES`): thumbnails
are added until the cap, then counted as "N more not shown". Thumbnails are decoded in a child
process (`scrub.reports.thumbnails`), never in this one.

Findings that pair two records come before the other records: each leak between splits (an
evaluation record beside the training record it copies) and each group of copies within a
dataset (its first record beside the later ones), as thumbnails where the records are image
files, else as their names.
"""

from __future__ import annotations

import html
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from scrub.paths import is_within
from scrub.pipeline import DEFAULT_TIMEOUT
from scrub.records import Issue, Severity
from scrub.reports.findings import (
    CONTRACT_PREFIX,
    LEAK_CHECK,
    THUMBNAILS,
    Findings,
    describe_finding,
    is_dataset_finding,
    mark,
    partner,
    record_name,
)
from scrub.reports.profileplots import MAX_PROFILE_BYTES, baseline_record, profile_section
from scrub.reports.profileplots import STYLE as PROFILE_STYLE
from scrub.scanning.summary import Summary
from scrub.wording import counted

if TYPE_CHECKING:
    from scrub.reports.thumbnails import Thumbnail

MAX_BYTES = 5 * 2**20
MAX_BARS = 100  # label histogram: bars drawn at most
NO_PREVIEW = frozenset({"unsafe-path", "decompression-bomb"})  # never opened for a thumbnail
#: a copy within a dataset, paired with its first
COPY_CHECKS = ("duplicate", "near-duplicate", "near-duplicate-text")
ERROR, WARNING, GOOD = "#c0392b", "#d68910", "#1e8449"

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; \
color: #1c1c1c; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.verdict { display: inline-block; padding: 2px 10px; border-radius: 10px; color: #fff; font-weight: 600; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; text-align: left; \
border-bottom: 1px solid #ddd; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; }
.muted { color: #777; } .grid { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; width: 150px; } figure img, figure .none { width: 96px; height: 96px; object-fit: contain;
  background: #f3f3f3; display: block; } figure .none { line-height: 96px; text-align: center; color: #999; }
figcaption { font-size: 11px; word-break: break-all; }
.badge { display: inline-block; padding: 0 6px; margin-right: 4px; border-radius: 8px; color: #fff; \
background: #c0392b; font: 600 11px/16px system-ui, sans-serif; } .badge.reappeared { background: #8e44ad; }
.badge.partial { background: #d68910; margin-top: 2px; }
#errors td:first-child, #dataset-findings td:first-child { white-space: nowrap; }
figure.side { margin: 0; width: 150px; } figure.side img { width: 96px; height: 96px; object-fit: contain;
  background: #f3f3f3; display: block; }
#leaks td, #duplicates td { vertical-align: top; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def render(
    summary: Summary,
    findings: Findings,
    fail_on: str,
    exit_code: int,
    manifest: Path,
    timeout: float = DEFAULT_TIMEOUT,
) -> str:
    """The report; ``timeout``: seconds a thumbnail may take to decode (the scan's ``--timeout``)."""
    from scrub.checks import REGISTRY

    overrides = summary.options.get("check_severity") or {}
    colour = GOOD if exit_code == 0 else ERROR
    verdict = "passes" if exit_code == 0 else "fails"
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>scrub: {_e(summary.path)}</title><style>{STYLE}{PROFILE_STYLE}</style></head><body>",
        f"<h1>scrub: <code>{_e(summary.path)}</code></h1>",
        f"<p><span class=verdict style='background:{colour}'>{verdict}</span> "
        f"exit {exit_code} with <code>--fail-on {_e(fail_on)}</code> &middot; "
        f"{counted(summary.records, 'record')} ({_e(summary.dataset.format)}, {_e(summary.dataset.layout)}) "
        f"&middot; {counted(summary.issues, 'issue')} &middot; <b>{summary.records_with_errors:,}</b> "
        f"record{'' if summary.records_with_errors == 1 else 's'} to quarantine &middot; "
        f"{summary.seconds:.2f} s</p>",
    ]
    if summary.baseline is not None:
        counts = summary.baseline
        parts.append(
            f"<h2>Against the baseline</h2><p id=baseline><b>{counts['new']:,} new</b>, "
            f"{counts['persisting']:,} "
            f"persisting, {counts['reappeared']:,} reappeared, {counts['resolved']:,} resolved "
            f"<span class=muted>({_e(counts['path'])})</span></p>"
        )
    parts.append(_checks(summary, findings, REGISTRY, overrides))
    profiles, anchors = _profiles(summary, findings)
    if findings.dataset_findings:
        parts.append(_dataset_findings(summary, findings, anchors))
    pairs_at = len(parts)  # the leaks and copies go here; made once the rest is, in the room it leaves
    labels = summary.stats.get("labels") or {}
    if labels and not any(part.profile and "labels" in part.profile for part in summary.parts or [summary]):
        parts.append(_histogram(labels))  # without a profile (--no-profile): its class shares are drawn
    if summary.datasets:
        parts.append(_ranges(summary.datasets))
    parts += [profiles, _errors(summary, findings)]
    budget = (
        MAX_BYTES - sum(len(part.encode()) for part in parts) - 4096
    )  # the footer and "more" fit in 4 KiB
    pairs = _pairs(summary, findings, budget, timeout)
    parts.insert(pairs_at, pairs)
    budget -= len(pairs.encode())
    parts.append(_thumbnails(summary, findings, budget, timeout))
    parts.append(
        f"<p class=muted>Manifest: <code>{_e(manifest)}</code> &middot; scrub "
        f"{_e(_version())}</p></body></html>"
    )
    return "\n".join(parts)


def _errors(summary: Summary, findings: Findings) -> str:
    """The "First records with errors" table ("" when there are none)."""
    errors = [i for i in findings.errors if not is_dataset_finding(i)]  # those have their own table
    if not errors:
        return ""
    rows = "".join(
        f"<tr><td>{_badge(i.status)}<code>{_e(record_name(i))}</code></td><td><code>{_e(i.check)}</code></td>"
        f"<td>{_e(i.message)}</td></tr>"
        for i in errors
    )
    more = (
        f"<p class=muted>and {counted(findings.more_errors, 'more error')} in the manifest</p>"
        if findings.more_errors
        else ""
    )
    first = " <span class=muted>(new and reappeared first)</span>" if summary.baseline is not None else ""
    return (
        f"<h2>First records with errors{first}</h2><table id=errors><tr><th>record</th><th>check</th>"
        f"<th>message</th></tr>{rows}</table>{more}"
    )


def _profiles(summary: Summary, findings: Findings) -> tuple[str, dict[int, str]]:
    """The "Profile" section: each dataset's profile drawn (`scrub.reports.profileplots`), the
    baseline's beside it when the scan had one, its drift and contract findings marked; and
    where each finding is drawn (finding's id -> the plot's anchor). Within `MAX_PROFILE_BYTES`:
    the datasets past it are named, not drawn."""
    parts = summary.parts or [summary]
    profiled = [(part, part.profile) for part in parts if part.profile]
    if not profiled:
        return "", {}
    record, why = baseline_record(summary)
    several = bool(summary.parts)
    # a contract's rules broken by records, counted on their plots: the counts are the run's,
    # so only a run of one dataset draws them (the issues per check say them for several)
    records = {} if several else _contract_records(findings)
    sections, anchors, used, left_out = [], {}, 0, []
    for number, (part, profile) in enumerate(profiled):
        previous = None if record is None else _baseline_profile(record, part)
        mine = [
            issue
            for issue in findings.dataset_findings
            if not several or issue.dataset in (part.path, part.absolute_path)
        ]
        drawn, plots = profile_section(
            profile, previous, mine, prefix=f"d{number}-" if several else "", records=records
        )
        heading = f"<h2>Profile of <code>{_e(part.path)}</code></h2>" if several else "<h2>Profile</h2>"
        missing = (
            "<p class=muted>the baseline's scan record holds no profile of this dataset: drawn alone</p>"
            if record is not None and previous is None
            else ""
        )
        section = f"<section class=profile>{heading}{missing}{drawn}</section>"
        if used + len(section.encode()) > MAX_PROFILE_BYTES:
            left_out.append(part.path)
            continue
        used += len(section.encode())
        sections.append(section)
        anchors.update(plots.anchors)
    if why:
        sections.insert(0, f"<p class=muted id=profile-baseline>{_e(why)}</p>")
    if left_out:
        sections.append(
            f"<p class=muted>{counted(len(left_out), 'more profile')} not drawn (the report stays under "
            f"{MAX_BYTES // 2**20} MB): {_e(', '.join(left_out[:20]))}"
            f"{' …' if len(left_out) > 20 else ''}</p>"
        )
    return "\n".join(sections), anchors


def _contract_records(findings: Findings) -> dict[str, tuple[int, Severity]]:
    """A contract's checks that flagged records: check -> how many (its findings on the dataset
    as a whole left out: they are drawn one by one), and whether any is an error."""
    on_dataset = Counter(issue.check for issue in findings.dataset_findings)
    found = {}
    for check, counts in findings.severities.items():
        if not check.startswith(CONTRACT_PREFIX):
            continue
        flagged = sum(counts.values()) - on_dataset[check]
        if flagged > 0:
            error = any(severity == "error" for _, severity in counts)
            found[check] = (flagged, Severity.ERROR if error else Severity.WARNING)
    return found


def _baseline_profile(record: dict, part: Summary) -> dict | None:
    """The baseline's profile of the dataset ``part`` scanned, out of the baseline's scan record
    (a run of one dataset's own, whatever its path: a nightly job's folder may be named by date)."""
    from scrub.profile import load_profile

    return load_profile(record, part.absolute_path) or load_profile(record, part.path)


def _dataset_findings(summary: Summary, findings: Findings, anchors: dict[int, str]) -> str:
    """Each drift and contract finding on the dataset as a whole: its check, feature, what was
    found against what was expected, and a link to the plot it is marked on."""
    several = bool(summary.parts)
    rows = []
    for issue in findings.dataset_findings:
        feature, found, limit = describe_finding(issue)
        anchor = anchors.get(id(issue))
        place = f"<a href='#{anchor}'>{_e(feature) or 'plot'}</a>" if anchor else f"{_e(feature)}"
        colour = ERROR if issue.severity.value == "error" else WARNING
        rows.append(
            "<tr>"
            + (f"<td><code>{_e(issue.dataset)}</code></td>" if several else "")
            + f"<td>{_badge(issue.status)}<code>{_e(issue.check)}</code></td>"
            f"<td style='color:{colour}'>{_e(issue.severity.value)}</td><td>{place}</td>"
            f"<td>{_e(found)}</td><td>{_e(limit)}</td><td>{_e(issue.message)}</td></tr>"
        )
    more = findings.dataset_finding_count - len(findings.dataset_findings)
    return (
        "<h2>Dataset findings</h2><p class=muted>drift from the baseline and a contract's rules: the dataset "
        "as a whole, no record to set aside</p><table id=dataset-findings><tr>"
        + ("<th>dataset</th>" if several else "")
        + "<th>check</th><th>severity</th><th>feature</th><th>found</th><th>expected</th>"
        "<th>message</th></tr>"
        + "".join(rows)
        + "</table>"
        + (f"<p class=muted>and {counted(more, 'more finding')} in the manifest</p>" if more > 0 else "")
    )


def _badge(status: str | None) -> str:
    """A visible mark for an issue that is new or reappeared against the baseline (listed first)."""
    label = mark(status)
    return f"<span class='badge {label}'>{label}</span>" if label else ""


def _version() -> str:
    from scrub import __version__

    return __version__


def _checks(summary: Summary, findings: Findings, registry, overrides) -> str:
    counts = sorted(summary.issues_by_check.items(), key=lambda item: (-item[1], item[0]))
    top = max([n for _, n in counts] + [1])
    rows = []
    for check, count in counts:
        severity = overrides.get(check, registry[check].severity.value)
        width = 0 if count == 0 else max(2, round(200 * count / top))
        fill = ERROR if severity == "error" else WARNING
        bar = f"<svg width=200 height=12 role=img><rect width={width} height=12 fill='{fill}'/></svg>"
        statuses: Mapping[str, int] = findings.statuses.get(check, {})
        new = (
            f" <span class=muted>({statuses.get('new', 0)} new)</span>"
            if summary.baseline is not None and count
            else ""
        )
        rows.append(
            f"<tr><td><code>{_e(check)}</code></td><td>{_e(severity)}</td><td class=n>{count:,}{new}</td>"
            f"<td>{bar}</td></tr>"
        )
    return (
        "<h2>Issues per check</h2><table id=checks><tr><th>check</th><th>severity</th><th class=n>issues</th>"
        f"<th></th></tr>{''.join(rows)}</table>"
    )


def _histogram(labels: dict) -> str:
    """The label histogram as SVG bars (the most frequent `MAX_BARS` labels, in label order)."""
    items = sorted(labels.items(), key=lambda item: -item[1])
    shown = sorted(items[:MAX_BARS], key=lambda item: (isinstance(item[0], str), item[0]))
    top = max(n for _, n in shown)
    width, height = 640, 160
    step = width / len(shown)
    bars = []
    for i, (label, count) in enumerate(shown):
        h = max(1.0, (height - 20) * count / top)
        bars.append(
            f"<rect x='{i * step + 1:.1f}' y='{height - 20 - h:.1f}' width='{max(1.0, step - 2):.1f}' "
            f"height='{h:.1f}' fill='#2e86c1'><title>label {_e(label)}: {count:,}</title></rect>"
        )
        if len(shown) <= 30:
            bars.append(
                f"<text x='{i * step + step / 2:.1f}' y='{height - 5}' font-size='10' "
                f"text-anchor='middle'>{_e(label)}</text>"
            )
    more = (
        f"<p class=muted>{counted(len(items) - len(shown), 'more label')} not shown</p>"
        if len(items) > len(shown)
        else ""
    )
    return (
        f"<h2>Labels</h2><svg id=labels width={width} height={height} role=img>{''.join(bars)}</svg>{more}"
        f"<p class=muted>{counted(len(items), 'distinct label')}, "
        f"{counted(sum(labels.values()), 'labelled record')}</p>"
    )


def _ranges(datasets: dict) -> str:
    """Per dataset: min, mean, max of the finite values, and the magnitude of the largest on a
    log scale (1 to 1e38), where a value far above the rest stands out."""
    rows = []
    for source, facts in datasets.items():
        low, high, mean = facts.get("min"), facts.get("max"), facts.get("mean")
        largest = max(abs(low or 0.0), abs(high or 0.0))
        position = 0 if largest <= 1 else min(1.0, math.log10(largest) / 38)
        fill = ERROR if largest >= 65504 else GOOD
        bar = (
            f"<svg width=200 height=12 role=img><rect width=200 height=12 fill='#eee'/>"
            f"<rect width={max(2, round(200 * position))} height=12 fill='{fill}'/></svg>"
        )
        nonfinite = facts.get("nonfinite_values", 0)
        rows.append(
            f"<tr><td><code>{_e(source)}</code></td><td class=n>{_num(low)}</td><td class=n>{_num(mean)}</td>"
            f"<td class=n>{_num(high)}</td><td class=n>{nonfinite:,}</td><td>{bar}</td></tr>"
        )
    return (
        "<h2>Value ranges</h2><table id=ranges><tr><th>dataset</th><th class=n>min</th><th class=n>mean</th>"
        "<th class=n>max</th><th class=n>non-finite</th><th>largest |value|, log scale to 1e38</th></tr>"
        f"{''.join(rows)}</table>"
    )


def _num(value) -> str:
    return "&ndash;" if value is None else f"{value:.4g}"


def _thumbnails(summary: Summary, findings: Findings, budget: int, timeout: float) -> str:
    """Thumbnails of the first quarantined images with their keys and reasons, within ``budget``
    bytes; records that are not image files get a caption only. The images are decoded in a
    child process (`scrub.reports.thumbnails`), never here; what decodes of a truncated one is
    shown, marked partial."""
    shown: list[Issue] = []  # each record once
    seen: set[tuple[str | None, str, str]] = set()
    for issue in findings.quarantined:
        place = (issue.dataset, issue.source, issue.key)
        if place not in seen and not is_dataset_finding(issue):  # no record to show
            seen.add(place)
            shown.append(issue)
    if not shown:
        return ""
    roots = _image_roots(summary)
    files = [None if issue.check in NO_PREVIEW else _record_file(roots, issue) for issue in shown]
    made, unmade = _previews(files, summary, timeout)
    figures = []
    for issue, path in zip(shown, files):
        picture, partial = _picture(made.get(path or ""), issue.key)
        figures.append(
            f"<figure>{picture or '<div class=none>no preview</div>'}<figcaption>{_badge(issue.status)}"
            f"<code>{_e(record_name(issue))}</code><br>{_e(issue.check)}: "
            f"{_e(issue.message[:160])}{partial}</figcaption></figure>"
        )
    fit = _within(figures, budget)
    left_out = len(figures) - len(fit)
    more = (
        f"<p class=muted>{left_out:,} more not shown (the report stays under {MAX_BYTES // 2**20} MB)</p>"
        if left_out
        else ""
    )
    grid = "".join(figures[number] for number in fit)
    return f"<h2>Quarantined records</h2>{unmade}<div id=thumbnails class=grid>{grid}</div>{more}"


def _pairs(summary: Summary, findings: Findings, budget: int, timeout: float) -> str:
    """The "Leaks between splits" and "Duplicate groups" sections, within ``budget`` bytes, the
    leaks first: each record beside the one its finding pairs it with (`findings.partner`), as
    thumbnails where both are image files (made in one child process), else by name."""
    leaks = [(issue, partner(issue)) for issue in findings.pairs.get(LEAK_CHECK, [])[:THUMBNAILS]]
    copies = [(issue, partner(issue)) for check in COPY_CHECKS for issue in findings.pairs.get(check, [])]
    copies = copies[:THUMBNAILS]
    if not leaks and not copies:
        return ""
    roots = _image_roots(summary)
    made, unmade = _previews(
        (_record_file(roots, record) for pair in leaks + copies for record in pair if record is not None),
        summary,
        timeout,
    )

    def side(issue: Issue | None, caption: str = "") -> str:
        return _side(issue, made.get(_record_file(roots, issue) or "") if issue else None, caption)

    leak_rows = [
        (
            f"<tr><td>{side(leak)}</td><td>{side(train)}</td><td>{_e(leak.details.get('match', ''))}</td>"
            f"<td class=n>{_e(_nearness(leak.details))}</td></tr>",
            1,
        )
        for leak, train in leaks
    ]
    leak_table = _pair_table(
        "Leaks between splits",
        "leaks",
        "<th>evaluation record</th><th>training record</th><th>match</th><th class=n>how near</th>",
        leak_rows,
        _total(findings, [LEAK_CHECK]) - len(leaks),
        budget,
    )
    groups: dict[tuple[str | None, str, str], tuple[Issue | None, list[str]]] = {}
    for copy, first in copies:
        place = (copy.dataset, first.source, first.key) if first else (copy.dataset, copy.source, copy.key)
        how = _nearness(copy.details) + (" apart" if "distance" in copy.details else "")
        caption = copy.check + ("" if how == "–" else f", {how}")
        groups.setdefault(place, (first, []))[1].append(side(copy, caption))
    group_rows = [
        (f"<tr><td>{side(first)}</td><td><div class=grid>{''.join(later)}</div></td></tr>", len(later))
        for first, later in groups.values()
    ]
    copy_table = _pair_table(
        "Duplicate groups",
        "duplicates",
        "<th>first record</th><th>its copies</th>",
        group_rows,
        _total(findings, COPY_CHECKS) - len(copies),
        budget - len(leak_table.encode()),
    )
    return unmade + leak_table + copy_table


def _nearness(details: Mapping) -> str:
    """How near a leaked record is to its training copy: its hash's distance in bits, its text's
    estimated similarity, or "–" for an exact copy."""
    if "distance" in details:
        return f"{details['distance']} bits"
    if "similarity" in details:
        return f"Jaccard {details['similarity']}"
    return "–"


def _pair_table(
    title: str, anchor: str, head: str, rows: list[tuple[str, int]], unlisted: int, budget: int
) -> str:
    """A section of paired records: its table of ``rows`` (each with how many findings it
    shows) within ``budget`` bytes, and how many findings it leaves to the manifest (``unlisted``
    past the cap, and those of the rows left out)."""
    if not rows:
        return ""
    fit = _within([row for row, _ in rows], budget - 1024)  # the heading and "more" fit in 1 KiB
    kept = [rows[number][0] for number in fit]
    more = unlisted + sum(findings for _, findings in rows) - sum(rows[number][1] for number in fit)
    said = (
        f"<p class=muted>and {counted(more, 'more finding')} not shown (the manifest lists each one)</p>"
        if more > 0
        else ""
    )
    table = f"<table id={anchor}><tr>{head}</tr>{''.join(kept)}</table>" if kept else ""
    return f"<h2>{_e(title)}</h2>{table}{said}"


def _side(issue: Issue | None, image: Thumbnail | None, caption: str = "") -> str:
    """One record of a pair: its thumbnail (if any) over its name and ``caption``; a record a
    finding names without details to find it by is "unknown"."""
    if issue is None:
        return "<span class=muted>unknown</span>"
    picture, partial = _picture(image, issue.key)
    below = f"<br><span class=muted>{_e(caption)}</span>" if caption else ""
    return (
        f"<figure class=side>{picture}<figcaption>{_badge(issue.status)}<code>{_e(record_name(issue))}</code>"
        f"{below}{partial}</figcaption></figure>"
    )


def _total(findings: Findings, checks: Iterable[str]) -> int:
    """How many issues of ``checks`` the scan found (resolved baseline lines are not)."""
    return sum(sum(findings.statuses.get(check, {}).values()) for check in checks)


def _picture(image: Thumbnail | None, key: str) -> tuple[str, str]:
    """A thumbnail as an inline ``<img>`` ("" where there is none), and a caption's note when
    it shows only what decodes of a truncated image (then marked partial)."""
    if image is None:
        return "", ""
    if image.partial is None:
        return f"<img alt='{_e(key)}' src='data:image/jpeg;base64,{image.jpeg}'>", ""
    why = image.partial
    return (
        f"<img class=partial alt='{_e(key)}' title='partial: {_e(why)}' "
        f"src='data:image/jpeg;base64,{image.jpeg}'><span class='badge partial'>partial</span>",
        f"<br><span class=muted>partial: {_e(why[:120])}</span>",
    )


def _previews(
    files: Iterable[str | None], summary: Summary, timeout: float
) -> tuple[dict[str, Thumbnail], str]:
    """The thumbnail of each image file that decodes (each file decoded once, in a child
    process under the scan's limits), and a note when no child process could start."""
    from scrub.errors import ScrubError
    from scrub.reports.thumbnails import make_thumbnails

    paths = list(dict.fromkeys(path for path in files if path is not None))
    try:
        made = make_thumbnails(paths, summary.options.get("max_pixels"), timeout)
    except ScrubError as error:
        return {}, f"<p class=muted>no previews: {_e(error)}</p>"
    return {path: image for path, image in zip(paths, made) if image is not None}, ""


def _within(pieces: list[str], budget: int) -> list[int]:
    """The numbers of the pieces of HTML that fit in ``budget`` bytes, in order (a large one
    left out lets a smaller one after it in)."""
    fit, used = [], 0
    for number, piece in enumerate(pieces):
        size = len(piece.encode())
        if used + size <= budget:
            fit.append(number)
            used += size
    return fit


def _image_roots(summary: Summary) -> dict[str | None, str]:
    """Where the keys of each scanned dataset whose records are image files name them: the
    dataset's path as issues name it (None in a run of one dataset) -> its real image folder."""
    roots: dict[str | None, str] = {}
    for part in summary.parts or [summary]:
        if part.dataset.image_root is not None:
            names = [part.path, part.absolute_path] + ([] if summary.parts else [None])
            roots.update(dict.fromkeys(names, os.path.realpath(part.dataset.image_root)))
    return roots


def _record_file(roots: Mapping[str | None, str], issue: Issue) -> str | None:
    """The image file of ``issue``'s record, where its dataset's records are image files (a run
    of one dataset has one root, whatever its issues name)."""
    root = roots.get(issue.dataset) or roots.get(None)
    return None if root is None else _inside(root, issue.key)


def _inside(root: str, key: str) -> str | None:
    """The image file of ``key`` when it lies inside the dataset root (a key leading out of it
    is never opened), else None."""
    path = os.path.realpath(os.path.join(root, key))
    return path if is_within(path, root, itself=False) else None
