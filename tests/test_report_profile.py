"""The reports' view of the dataset as a whole (issue 39, point 5): the HTML report draws the
profile as inline SVG (the baseline's beside tonight's, each drift and contract finding marked
on its feature's plot), checked in a real headless Chromium driven over the DevTools protocol
(no console error, no request leaving the file, the plots laid out); Markdown and JUnit name
each drift and contract finding."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import image_bytes, write
from typer.testing import CliRunner

from scrub.api import scan
from scrub.cli import app
from scrub.records import Issue, Severity
from scrub.reports import html, junit, markdown
from scrub.reports.findings import Collector, describe_finding, is_dataset_finding
from scrub.reports.profileplots import MAX_CATEGORIES, MAX_GROUPS, profile_section

runner = CliRunner()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


# -- a headless Chromium, driven over the DevTools protocol on a pipe (no library needed)


@dataclass
class Rendered:
    """What Chromium saw of a page: its console errors (a bad SVG attribute is one: "Error:
    <rect> attribute height: A negative value is not valid"), every request it made, and the
    values of the expressions asked for."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)


def render(page: Path, expressions: Mapping[str, str]) -> Rendered:
    """Open ``page`` in headless Chromium, wait for its load, evaluate ``expressions``
    (JavaScript, returning JSON-able values) and close it."""
    assert CHROMIUM is not None
    to_chrome, from_chrome = os.pipe(), os.pipe()

    def at_fds_3_and_4() -> None:  # --remote-debugging-pipe reads fd 3 and writes fd 4
        reading, writing = os.dup(to_chrome[0]), os.dup(from_chrome[1])
        os.dup2(reading, 3)
        os.dup2(writing, 4)

    profile = tempfile.mkdtemp(prefix="scrub-chromium-")
    browser = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
         f"--user-data-dir={profile}", "--window-size=1000,1600", "about:blank"],
        preexec_fn=at_fds_3_and_4,
        pass_fds=(3, 4),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(to_chrome[0])
    os.close(from_chrome[1])
    sending, receiving = os.fdopen(to_chrome[1], "wb", buffering=0), os.fdopen(from_chrome[0], "rb")
    seen = Rendered()
    pending = b""
    counter = 0

    def next_message() -> dict:
        nonlocal pending
        while b"\0" not in pending:
            chunk = receiving.read1(1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            pending += chunk
        line, pending = pending.split(b"\0", 1)
        message = json.loads(line)
        method, params = message.get("method"), message.get("params", {})
        if method == "Log.entryAdded" and params["entry"]["level"] == "error":
            seen.errors.append(params["entry"]["text"])
        elif method == "Runtime.exceptionThrown":
            seen.errors.append(params["exceptionDetails"]["text"])
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            seen.errors.append(str(params["args"]))
        elif method == "Network.requestWillBeSent":
            seen.requests.append(params["request"]["url"])
        return message

    def call(method: str, session: str | None = None, **params: Any) -> dict:
        nonlocal counter
        counter += 1
        sending.write(
            json.dumps(
                {
                    "id": counter,
                    "method": method,
                    "params": params,
                    **({"sessionId": session} if session else {}),
                }
            ).encode()
            + b"\0"
        )
        while (message := next_message()).get("id") != counter:
            pass
        assert "error" not in message, message
        return message.get("result", {})

    try:
        target = call("Target.createTarget", url="about:blank")["targetId"]
        session = call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            call(f"{domain}.enable", session)
        call("Page.navigate", session, url=page.as_uri())
        while next_message().get("method") != "Page.loadEventFired":
            pass
        for name, expression in expressions.items():
            result = call("Runtime.evaluate", session, expression=expression, returnByValue=True)
            assert "exceptionDetails" not in result, result
            seen.values[name] = result["result"].get("value")
        call("Browser.close")
        browser.wait(timeout=30)
    finally:
        if browser.poll() is None:
            browser.kill()
            browser.wait()
        sending.close()
        receiving.close()
        shutil.rmtree(profile, ignore_errors=True)
    return seen


#: what the tests ask Chromium of a report: its plots, each with its laid-out size, and the
#: marked ones
LAYOUT = {
    "plots": "Array.from(document.querySelectorAll('.profile .plot')).map(p => p.dataset.feature)",
    "sized": "Array.from(document.querySelectorAll('.profile svg')).map(s => "
    "{const r = s.getBoundingClientRect(); return [r.width, r.height]})",
    "marked": "Array.from(document.querySelectorAll('.plot.marked')).map(p => p.dataset.feature)",
    "rows": "Array.from(document.querySelectorAll('g.marked[data-feature]')).map(g => g.dataset.feature)",
    "drawn": "document.querySelectorAll('.profile svg :is(rect, line, polyline)').length",
    "links": "Array.from(document.querySelectorAll('#dataset-findings a')).map(a => "
    "[a.textContent, document.getElementById(a.hash.slice(1)).dataset.feature])",
}


@needs_chromium
@pytest.mark.slow
def test_chromium_reports_a_bad_svg_attribute_and_an_outside_request(tmp_path):
    """The checks below can fail: the helper sees what they look for."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!doctype html><html><body><svg width=10 height=10><rect width='NaN' height=5/></svg>"
        "<img src='http://203.0.113.1/x.png'></body></html>"
    )
    seen = render(page, {"svgs": "document.querySelectorAll('svg').length"})
    assert any("attribute width" in error for error in seen.errors), seen.errors
    assert "http://203.0.113.1/x.png" in seen.requests and seen.values["svgs"] == 1


# -- hand-made profiles of the shared form (docs/profile.md), for what needs no scan


def numeric(values) -> dict:
    """A profile's Numeric of ``values`` (exact quantiles: what the sketch approximates)."""
    values = np.asarray(values, dtype=np.float64).ravel()
    finite = values[np.isfinite(values)]
    return {
        "count": int(finite.size),
        "nan": int(np.isnan(values).sum()),
        "inf": int(np.isinf(values).sum()),
        "zero": int((finite == 0).sum()),
        "min": float(finite.min()) if finite.size else None,
        "max": float(finite.max()) if finite.size else None,
        "mean": float(finite.mean()) if finite.size else None,
        "quantiles": [float(q) for q in np.quantile(finite, np.linspace(0, 1, 101))] if finite.size else [],
    }


def rows_profile(rows: np.ndarray, classes: dict[str, int]) -> dict:
    width = rows.shape[1]
    return {
        "version": 1,
        "records": len(rows),
        "reused": 0,
        "labels": {"kind": "class", "labelled": sum(classes.values()), "missing": 0, "classes": classes},
        "arrays": {
            str(width): {
                "records": len(rows),
                "dtypes": {"float32": len(rows)},
                "row": numeric(rows),
                "features": {str(i): numeric(rows[:, i]) for i in range(min(width, 32))},
                "positions": width,
            }
        },
    }


def dataset_issue(check: str, severity: Severity = Severity.WARNING, **details: Any) -> Issue:
    """A dataset-level finding as drift and contract make them: key ``*``, no index."""
    return Issue("data.h5", "*", None, check, severity, f"{details.get('feature', check)}: moved", details)


def test_each_finding_is_marked_on_the_plot_of_its_feature():
    rng = np.random.default_rng(0)
    before = rng.normal(size=(500, 40))
    after = before.copy()
    after[:, 3] += 2.0
    baseline = rows_profile(before, {"0": 250, "1": 250})
    tonight = rows_profile(after, {"0": 150, "1": 350})
    moved = dataset_issue("value-drift", feature="arrays.40.features.3", distance=0.71, threshold=0.1)
    shares = dataset_issue("label-drift", feature="labels.classes", category="1", distance=0.2, threshold=0.1)
    contract = dataset_issue(
        "contract-record-count", Severity.ERROR, rule="records", expected=">= 1000", found=500
    )
    elsewhere = dataset_issue("token-drift", feature="tokens.top_ids", distance=0.3, threshold=0.05)
    drawn, plots = profile_section(tonight, baseline, [moved, shares, contract, elsewhere])
    # the row of position 3 is outlined, and no other row
    marked_rows = re.findall(r"<g data-feature='([^']+)' class=marked>", drawn)
    assert marked_rows == ["arrays.40.features.3"]
    # class 1's bars are outlined; the plot framed with the finding's caption
    assert re.search(r"<g data-category='1' class=marked>", drawn)
    assert not re.search(r"<g data-category='0' class=marked>", drawn)
    framed = set(
        re.findall(
            r"<div class='plot marked' style='border-color:([^']+)' id='[^']+' data-feature='([^']+)'", drawn
        )
    )
    assert framed == {(html.WARNING, "labels.classes"), (html.WARNING, "arrays.40"), (html.ERROR, "records")}
    # a contract finding without a profile path is drawn where its check says (the record count)
    assert plots.marks.is_drawn(contract) and plots.marks.is_drawn(moved) and plots.marks.is_drawn(shares)
    assert not plots.marks.is_drawn(elsewhere)  # this dataset has no tokens: no plot shows it
    assert id(elsewhere) not in plots.anchors
    # the baseline is drawn beside tonight: a grey box per strip, a grey bar per class
    assert drawn.count("fill='#a6acaf'/>") == 33 and "positions 32 to 39 are in the whole row only" in drawn


def test_without_a_baseline_only_tonight_is_drawn():
    rows = np.random.default_rng(1).normal(size=(200, 4))
    drawn, _ = profile_section(rows_profile(rows, {"0": 200}), None, [])
    assert "#a6acaf" not in drawn and "marked" not in drawn
    assert drawn.count("data-feature='arrays.4.features.") == 4


def test_the_section_stays_small_whatever_the_dataset_holds():
    """No per-record data: 20,000 classes and 100 row shapes draw capped plots."""
    rng = np.random.default_rng(2)
    classes = {str(i): int(n) for i, n in enumerate(rng.integers(1, 50, 20_000))}
    profile = rows_profile(rng.normal(size=(100, 64)), classes)
    group = profile["arrays"]["64"]
    profile["arrays"] = {f"{n}x64": group for n in range(1, 101)}
    rare = min(classes, key=classes.get)  # a class a finding names is drawn, however small
    finding = dataset_issue(
        "label-drift", feature="labels.classes", category=rare, distance=0.2, threshold=0.1
    )
    drawn, _ = profile_section(profile, profile, [finding])
    assert drawn.count("<g data-category=") == 2 * MAX_CATEGORIES  # the classes, the row shapes
    assert re.search(rf"<g data-category='{rare}' class=marked>", drawn)
    assert f"{20_000 - MAX_CATEGORIES:,} more classes with smaller shares not drawn" in drawn
    assert drawn.count("Rows of shape") == MAX_GROUPS and "92 more row shapes not drawn" in drawn
    assert len(drawn.encode()) < 400_000


def test_describe_finding_reads_drift_and_contract_details():
    drift = dataset_issue("value-drift", feature="arrays.16.features.3", distance=0.712345, threshold=0.1)
    assert describe_finding(drift) == ("arrays.16.features.3", "distance 0.7123", "threshold 0.1")
    contract = dataset_issue(
        "contract-classes", Severity.ERROR, feature="labels.classes", line=7, expected=[0, 1, 2], found=[0, 1]
    )
    assert describe_finding(contract) == (
        "labels.classes (contract line 7)",
        "found [0, 1]",
        "expected [0, 1, 2]",
    )
    assert is_dataset_finding(drift) and is_dataset_finding(contract)
    per_record = Issue("a.jpg", "a.jpg", 0, "contract-image-size", Severity.ERROR, "too small", {})
    assert not is_dataset_finding(per_record)  # names a record: counted among records
    assert not is_dataset_finding(Issue("x", "*", None, "token-dtype-overflow", Severity.ERROR, "m", {}))


@pytest.fixture
def scanned(tmp_path):
    """A real scan of a class folder of real JPEGs (one truncated), and its manifest."""
    root = tmp_path / "data"
    for i in range(12):
        write(root / ("cat" if i % 3 else "dog") / f"{i:02d}.jpg", image_bytes(i))
    write(root / "dog" / "bad.jpg", image_bytes(99)[:300])
    manifest = tmp_path / "m.jsonl"
    return scan(root, manifest=manifest), manifest


def findings_with(manifest: Path, extra: list[Issue], show: int = 10):
    """What the reports receive: the manifest's issues and ``extra`` through one `Collector`."""
    from scrub.manifest import read_manifest

    collector = Collector(show)
    for issue in [*read_manifest(manifest), *extra]:
        collector.add(issue)
    return collector.finish()


DRIFTED = [
    dataset_issue("label-drift", feature="labels.classes", category="0", distance=0.15, threshold=0.1),
    dataset_issue("value-drift", feature="images.brightness", distance=0.4321, threshold=0.1),
    dataset_issue(
        "contract-record-count", Severity.ERROR, feature="records", line=3, expected=">= 100", found=13
    ),
]


def test_markdown_names_each_drift_and_contract_finding(scanned):
    result, manifest = scanned
    found = findings_with(manifest, DRIFTED)
    text = markdown.render(result.summary, found, "error", 1)
    section = text.split("Dataset findings")[1].split("\n\n")[1]
    assert section.splitlines()[2:] == [  # errors first, then as found
        "| `contract-record-count` | error | `records (contract line 3)` | found 13 | expected >= 100 "
        "| records: moved |",
        "| `label-drift` | warning | `labels.classes` | distance 0.15 | threshold 0.1 "
        "| labels.classes: moved |",
        "| `value-drift` | warning | `images.brightness` | distance 0.4321 | threshold 0.1 "
        "| images.brightness: moved |",
    ]
    errors = text.split("| record | check | message |")[1]
    assert "`dog/bad.jpg`" in errors and "contract-record-count" not in errors  # not a record


def test_junit_gives_each_drift_and_contract_finding_its_own_testcase(scanned):
    result, manifest = scanned
    found = findings_with(manifest, DRIFTED)
    suites = ElementTree.fromstring(junit.render(result.summary, found, "error"))
    cases = {case.get("name"): case for case in suites.iter("testcase")}
    mine = {name: case for name, case in cases.items() if case.get("classname") == "scrub.data.dataset"}
    assert set(mine) == {
        "label-drift labels.classes",
        "value-drift images.brightness",
        "contract-record-count records (contract line 3)",
    }
    failed = mine["contract-record-count records (contract line 3)"].find("failure")
    assert failed is not None and failed.get("type") == "error"
    assert (
        failed.get("message") == "contract-record-count: records (contract line 3): found 13; expected >= 100"
    )
    warned = mine["value-drift images.brightness"]
    assert warned.find("failure") is None  # a warning does not fail --fail-on error
    assert "distance 0.4321; threshold 0.1" in warned.find("system-out").text
    suite = suites.find("testsuite")
    assert suite.get("tests") == str(len(result.summary.checks) + 3) == suites.get("tests")
    assert suite.get("failures") == "2"  # corrupt-image, and the contract's record count
    # --fail-on warning fails each of them
    strict = ElementTree.fromstring(junit.render(result.summary, found, "warning"))
    assert (
        sum(
            case.find("failure") is not None
            for case in strict.iter("testcase")
            if "dataset" in case.get("classname")
        )
        == 3
    )


# -- end to end: real scans of real files, the report opened in Chromium


def write_images(root: Path, classes: tuple[str, ...], per_class: int, size: int = 48) -> None:
    for c, name in enumerate(classes):
        for i in range(per_class):
            write(root / name / f"{i:03d}.jpg", image_bytes(100 * c + i, size=size))


def checked_in_chromium(report: Path) -> Rendered:
    """The report opened in Chromium: it must log no error (an SVG attribute it cannot draw is
    one), request nothing but the file itself and its inline data, and lay out every plot with
    a size."""
    seen = render(report, LAYOUT)
    assert seen.errors == [], seen.errors
    outside = [url for url in seen.requests if url != report.as_uri() and not url.startswith("data:")]
    assert outside == [] and seen.requests[0] == report.as_uri(), seen.requests  # thumbnails are data: URLs
    assert seen.values["sized"] and all(width > 0 and height > 0 for width, height in seen.values["sized"])
    return seen


@needs_chromium
@pytest.mark.slow
def test_html_draws_an_image_folders_profile_beside_the_baselines(tmp_path):
    data = tmp_path / "data"
    write_images(data, ("bird", "cat", "dog"), 10)
    baseline = tmp_path / "old.jsonl"
    alone = tmp_path / "alone.html"
    assert run("scan", data, "--manifest", baseline, "--html", alone).exit_code == 0
    seen = checked_in_chromium(alone)
    assert seen.values["plots"] == [
        "records",
        "labels.classes",
        "labels.labelled",
        "images.size",
        "images.modes",
        "images.levels",
        "images.channels",
    ]
    text = alone.read_text()
    assert "#a6acaf" not in text.split("<h2>Profile</h2>")[1]  # no baseline: tonight's only
    # tonight: a class gone (the last folder: class ids follow the folders' order), the other
    # images at half the size
    shutil.rmtree(data / "dog")
    write_images(data, ("bird", "cat"), 10, size=24)
    report = tmp_path / "report.html"
    result = run("scan", data, "--manifest", tmp_path / "new.jsonl", "--baseline", baseline, "--html", report)
    assert result.exit_code == 0, result.output
    seen = checked_in_chromium(report)
    section = report.read_text().split("<h2>Profile</h2>")[1]
    assert "the baseline's profile" in section and "id=profile-baseline" not in report.read_text()
    # the class that is gone is a grey bar beside an empty blue one
    gone = re.search(r"<g data-category='2'>(.*?)</g>", section).group(1)
    assert "fill='#a6acaf'" in gone and "class 2: 0.0% tonight (0), 33.3% in the baseline (10)" in gone
    # the widths: tonight's median 24, the baseline's 48; drift marks both sizes and the count
    assert "median 24;" in section and "median 48;" in section
    assert set(seen.values["marked"]) == {"records", "images.size"}, seen.values["marked"]
    assert sorted(seen.values["rows"]) == ["images.height", "images.width"]
    assert sorted(seen.values["links"]) == [
        ["images.height", "images.size"],
        ["images.width", "images.size"],
        ["records", "records"],
    ]
    assert len(report.read_bytes()) < html.MAX_BYTES


@needs_chromium
@pytest.mark.slow
def test_html_draws_an_hdf5_files_rows_and_one_section_per_dataset(tmp_path):
    import h5py

    rng = np.random.default_rng(3)
    paths = []
    for name, shift in (("train", 0.0), ("val", 3.0)):
        rows = rng.normal(size=(300, 40)).astype(np.float32)
        rows[:, 5] += shift
        rows[7, 2] = np.nan  # one bad record: a finding, and a NaN share in the profile
        path = tmp_path / f"{name}.h5"
        with h5py.File(path, "w") as file:
            file.create_dataset("data", data=rows)
            file.create_dataset("label", data=rng.integers(0, 4, 300))
        paths.append(path)
    one = tmp_path / "one.html"
    assert run("scan", paths[0], "--manifest", tmp_path / "one.jsonl", "--html", one).exit_code == 1
    seen = checked_in_chromium(one)
    assert seen.values["plots"] == ["records", "labels.classes", "labels.labelled", "arrays", "arrays.40"]
    text = one.read_text()
    # a row of 40 elements has every position profiled (a wider one, its first 32: see above)
    assert text.count("data-feature='arrays.40.features.") == 40 and "data-feature='arrays.40.row'" in text
    assert "in the whole row only" not in text
    assert re.search(r"position 2</text>.*?· 0\.3% · 0 · 0</text>", text)  # 1 NaN in 300
    several = tmp_path / "several.html"
    assert run("scan", *paths, "--manifest", tmp_path / "two.jsonl", "--html", several).exit_code == 1
    seen = checked_in_chromium(several)
    text = several.read_text()
    assert re.findall(r"<h2>Profile of <code>(.*?)</code></h2>", text) == [str(path) for path in paths]
    assert seen.values["plots"].count("arrays.40") == 2
    ids = re.findall(r"<div class='plot[^>]* id='([^']+)'", text)
    assert len(ids) == len(set(ids))  # anchors unique across the datasets


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize(
    ("sample", "plots"),
    [
        ("megatron", ["records", "tokens.lengths", "tokens.top_ids"]),
        ("yolo", ["labels.classes", "images.size", "boxes.classes", "boxes.per_image"]),
        ("segmentation", ["labels.classes", "images.channels", "masks.pixels"]),
    ],
)
def test_html_draws_tokens_boxes_and_masks(tmp_path, sample, plots):
    from conftest import SAMPLES

    report = tmp_path / "report.html"
    result = run("scan", SAMPLES / sample, "--manifest", tmp_path / "m.jsonl", "--html", report)
    assert result.exit_code in (0, 1), result.output
    seen = checked_in_chromium(report)
    assert set(plots) <= set(seen.values["plots"]), seen.values["plots"]


@pytest.mark.slow
def test_a_baseline_without_its_scan_record_is_said(tmp_path):
    data = tmp_path / "data"
    write_images(data, ("cat", "dog"), 3)
    baseline = tmp_path / "old.jsonl"
    assert run("scan", data, "--manifest", baseline).exit_code == 0
    (tmp_path / "old.scan.json").unlink()
    report = tmp_path / "report.html"
    result = run("scan", data, "--manifest", tmp_path / "new.jsonl", "--baseline", baseline, "--html", report)
    assert result.exit_code == 0, result.output
    text = report.read_text()
    assert re.search(
        r"<p class=muted id=profile-baseline>the baseline&#x27;s scan record .*old\.scan\.json is missing",
        text,
    )
    assert "<h2>Profile</h2>" in text and "#a6acaf" not in text.split("<h2>Profile</h2>")[1]


def write_rows(path: Path, rows: np.ndarray, labels: np.ndarray) -> Path:
    import h5py

    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=rows)
        file.create_dataset("label", data=labels)
    return path


@needs_chromium
@pytest.mark.slow
def test_drift_is_marked_on_its_plots_and_named_in_every_report(tmp_path):
    """Two nights of HDF5 rows through the real scan: tonight feature 3 moved by two standard
    deviations and class 2 is gone. Each report names both findings with their features."""
    rng = np.random.default_rng(7)
    monday = write_rows(
        tmp_path / "monday.h5", rng.normal(size=(2000, 8)).astype(np.float32), rng.integers(0, 4, 2000)
    )
    rows, labels = rng.normal(size=(2000, 8)).astype(np.float32), rng.integers(0, 4, 2000)
    rows[:, 3] += 2.0
    kept = labels != 2
    tuesday = write_rows(tmp_path / "tuesday.h5", rows[kept], labels[kept])
    assert run("scan", monday, "--manifest", tmp_path / "monday.jsonl").exit_code == 0
    reports = {name: tmp_path / f"report.{name}" for name in ("html", "md", "xml")}
    result = run(
        "scan", tuesday, "--manifest", tmp_path / "tuesday.jsonl", "--baseline", tmp_path / "monday.jsonl",
        "--html", reports["html"], "--summary-md", reports["md"], "--junit", reports["xml"],
        "--fail-on", "warning",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    expected = {("label-drift", "labels.classes"), ("value-drift", "arrays.8.features.3")}
    # HTML: each finding's plot framed, its row or class outlined, its table link leading there
    seen = checked_in_chromium(reports["html"])
    assert {"labels.classes", "arrays.8"} <= set(seen.values["marked"]), seen.values["marked"]
    assert "arrays.8.features.3" in seen.values["rows"]
    assert not {f"arrays.8.features.{i}" for i in (0, 1, 2, 4, 5, 6, 7)} & set(seen.values["rows"])
    links = dict(seen.values["links"])
    assert links["labels.classes"] == "labels.classes" and links["arrays.8.features.3"] == "arrays.8"
    assert re.search(r"<g data-category='2' class=marked>", reports["html"].read_text())
    # Markdown: a row per finding, with its feature, distance and threshold
    rows_md = [line for line in reports["md"].read_text().splitlines() if "| **new** |" in line]
    named = {
        (re.search(r"`([a-z-]+)`", line).group(1), re.findall(r"`([^`]+)`", line)[1]) for line in rows_md
    }
    assert expected <= named
    assert all(re.search(r"\| distance [\d.]+ \| threshold [\d.]+ \|", line) for line in rows_md)
    # JUnit: a failing testcase per finding (--fail-on warning), named by check and feature
    suites = ElementTree.parse(reports["xml"]).getroot()
    cases = {
        c.get("name"): c for c in suites.iter("testcase") if c.get("classname") == "scrub.tuesday.h5.dataset"
    }
    for check, feature in expected:
        failure = cases[f"{check} {feature}"].find("failure")
        assert failure is not None and failure.get("message").startswith(f"{check}: {feature}: distance ")
        assert failure.get("message").endswith("(new)")


@pytest.mark.slow
def test_a_run_of_many_datasets_draws_profiles_up_to_the_cap(tmp_path, monkeypatch):
    """Past `MAX_PROFILE_BYTES` the further datasets are named, not drawn (the cap set low here
    so that three small files pass it)."""
    rng = np.random.default_rng(4)
    paths = [
        write_rows(
            tmp_path / f"part{i}.h5", rng.normal(size=(50, 6)).astype(np.float32), rng.integers(0, 3, 50)
        )
        for i in range(3)
    ]
    whole = tmp_path / "whole.html"
    assert run("scan", *paths, "--manifest", tmp_path / "m.jsonl", "--html", whole).exit_code == 0
    sections = re.findall(r"<section class=profile>.*?</section>", whole.read_text())
    assert len(sections) == 3
    monkeypatch.setattr(html, "MAX_PROFILE_BYTES", len(sections[0].encode()) + len(sections[1].encode()) + 1)
    capped = tmp_path / "capped.html"
    assert run("scan", *paths, "--manifest", tmp_path / "m.jsonl", "--html", capped).exit_code == 0
    text = capped.read_text()
    assert len(re.findall(r"<section class=profile>", text)) == 2
    assert f"1 more profile not drawn (the report stays under 5 MB): {paths[2]}" in text


def test_a_contract_rule_broken_by_records_is_counted_on_its_plot():
    rng = np.random.default_rng(5)
    widths = rng.integers(20, 200, 300)
    profile = {
        "version": 1,
        "records": 300,
        "reused": 0,
        "images": {
            "records": 300,
            "width": numeric(widths),
            "height": numeric(widths),
            "modes": {"RGB": 300},
            "formats": {"PNG": 300},
            "brightness": numeric(rng.normal(120, 20, 300)),
            "contrast": numeric(rng.normal(40, 5, 300)),
            "channels": {},
        },
    }
    drawn, _ = profile_section(profile, None, [], records={"contract-image-size": (12, Severity.ERROR)})
    framed = re.findall(
        r"<div class='plot marked' style='border-color:([^']+)' id='[^']+' data-feature='([^']+)'", drawn
    )
    assert framed == [(html.ERROR, "images.size")]
    assert "<code>contract-image-size</code> 12 records (named in the manifest)" in drawn


@needs_chromium
@pytest.mark.slow
def test_degenerate_profiles_draw_without_errors(tmp_path):
    """No finite value, one value only, nothing counted, a baseline that holds nothing: every
    plot still draws without a coordinate Chromium refuses (NaN, a negative size)."""
    nothing = numeric([np.nan] * 5)
    constant = numeric([0.0] * 10)
    profile = {
        "version": 1,
        "records": 0,
        "reused": 0,
        "labels": {"kind": "value", "labelled": 0, "missing": 0, "values": nothing},
        "arrays": {
            "3": {
                "records": 0,
                "dtypes": {},
                "row": nothing,
                "features": {"0": constant, "1": nothing},
                "positions": 3,
            }
        },
        "images": {
            "records": 0,
            "width": nothing,
            "height": constant,
            "modes": {},
            "formats": {},
            "brightness": nothing,
            "contrast": nothing,
            "channels": {"L": [0] * 32},
        },
        "tokens": {"records": 0, "length": nothing, "top_ids": [], "max_id": None},
        "masks": {"pixels": {"0": 0}},
    }
    from scrub.reports.profileplots import STYLE

    sections = [profile_section(profile, baseline, [])[0] for baseline in (None, profile, {"records": 5})]
    page = tmp_path / "page.html"
    page.write_text(
        f"<!doctype html><html><head><meta charset=utf-8><style>{STYLE}</style></head><body>"
        + "".join(f"<section class=profile>{section}</section>" for section in sections)
        + "</body></html>"
    )
    seen = checked_in_chromium(page)
    assert seen.values["drawn"] >= 40 and "no finite values" in sections[0]


@needs_chromium
@pytest.mark.slow
def test_a_run_of_several_datasets_marks_each_drift_in_its_own_section(tmp_path):
    rng = np.random.default_rng(8)
    paths = [tmp_path / "a.h5", tmp_path / "b.h5"]
    for path in paths:
        write_rows(path, rng.normal(size=(1500, 6)).astype(np.float32), rng.integers(0, 3, 1500))
    assert run("scan", *paths, "--manifest", tmp_path / "monday.jsonl").exit_code == 0
    rows = rng.normal(size=(1500, 6)).astype(np.float32)
    rows[:, 1] += 2.0
    write_rows(paths[1], rows, rng.integers(0, 3, 1500))  # b moved, a as it was
    report, summary, xml = tmp_path / "r.html", tmp_path / "r.md", tmp_path / "r.xml"
    result = run(
        "scan", *paths, "--manifest", tmp_path / "tuesday.jsonl", "--baseline", tmp_path / "monday.jsonl",
        "--html", report, "--summary-md", summary, "--junit", xml,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    seen = checked_in_chromium(report)
    sections = re.findall(r"<section class=profile>(.*?)</section>", report.read_text())
    assert len(sections) == 2 and "marked" not in sections[0]  # a did not move
    marked = re.findall(r"<g data-feature='([^']+)' class=marked>", sections[1])
    assert "arrays.6.features.1" in marked and set(marked) <= {"arrays.6.features.1", "arrays.6.row"}
    assert ["arrays.6.features.1", "arrays.6"] in seen.values["links"]
    lines = [line for line in summary.read_text().splitlines() if "`value-drift`" in line]
    assert any(
        line.startswith(
            f"| `{paths[1]}` | `value-drift` | warning | **new** | `arrays.6.features.1` | distance "
        )
        for line in lines
    ), lines
    names = [
        c.get("name")
        for c in ElementTree.parse(xml).getroot().iter("testcase")
        if "dataset" in c.get("classname")
    ]
    assert f"value-drift {paths[1]}: arrays.6.features.1" in names


def test_a_tables_features_are_labelled_by_their_column_names():
    rng = np.random.default_rng(7)
    profile = rows_profile(rng.normal(size=(200, 3)), {"0": 200})
    profile["arrays"]["3"]["names"] = {"0": "price", "1": "qty", "2": "<b>tax</b>"}
    drawn, _ = profile_section(profile, None, [])
    assert ">price</text>" in drawn and ">qty</text>" in drawn
    assert "&lt;b&gt;tax&lt;/b&gt;</text>" in drawn and "<b>tax" not in drawn  # escaped
    assert "position 0</text>" not in drawn
