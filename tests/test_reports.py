"""Reports on real output: the console names records, the Markdown summary, JUnit XML, and the
HTML report rendered in a real headless Chromium."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest
from conftest import SAMPLES, image_bytes, write
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFile
from typer.testing import CliRunner

import scrub
from scrub.cli import app
from scrub.records import Issue, Severity
from scrub.reports.findings import Collector, collect, record_name

runner = CliRunner()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def run(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env)


@pytest.fixture
def broken(tmp_path):
    """A class folder with 14 truncated images among good ones (more errors than --show shows)."""
    root = tmp_path / "data"
    for i in range(20):
        write(root / ("cat" if i % 2 else "dog") / f"{i:02d}.jpg", image_bytes(i))
    for i in range(14):
        write(root / "dog" / f"bad{i:02d}.jpg", image_bytes(100 + i)[: 300 + 17 * i])
    return root


def test_the_console_names_the_first_records_with_errors(broken, tmp_path):
    result = run("scan", broken, "--manifest", tmp_path / "m.jsonl", "--show", "3")
    assert result.exit_code == 1
    text = result.output
    assert "records with errors:" in text and "and 11 more errors in the manifest" in text
    named = re.findall(r"dog/bad\d\d\.jpg", text.split("records with errors:")[1])
    assert named == ["dog/bad00.jpg", "dog/bad01.jpg", "dog/bad02.jpg"]  # the first, in dataset order
    quiet = run("scan", broken, "--manifest", tmp_path / "m.jsonl", "--show", "0")
    assert "records with errors" not in quiet.output


def test_markdown_summary_and_github_step_summary(broken, tmp_path):
    path = tmp_path / "summary.md"
    assert run("scan", broken, "--manifest", tmp_path / "m.jsonl", "--summary-md", path).exit_code == 1
    text = path.read_text()
    assert text.startswith(f"### scrub: {broken}: issues fail this run (exit 1, `--fail-on error`)")
    assert "| `corrupt-image` | error | 14 |" in text and "| `dog/bad00.jpg` | `corrupt-image` |" in text
    assert "and 4 more errors in the manifest" in text
    github = tmp_path / "step-summary.md"
    github.write_text("earlier step\n")
    run("scan", broken, "--manifest", tmp_path / "m.jsonl", env={"GITHUB_STEP_SUMMARY": str(github)})
    assert github.read_text().startswith("earlier step\n### scrub: ")  # appended, as GitHub expects


def test_junit_has_one_testcase_per_check_and_fails_what_fails_the_run(broken, tmp_path):
    report = tmp_path / "junit.xml"
    assert run("scan", broken, "--manifest", tmp_path / "old.jsonl", "--junit", report).exit_code == 1
    suites = ElementTree.parse(report).getroot()
    cases = suites.findall("testsuite/testcase")
    summary = json.loads((tmp_path / "old.scan.json").read_text())
    assert [c.get("name") for c in cases] == summary["checks"]  # one per check that ran, unique
    assert {c.get("classname") for c in cases} == {"scrub.data"}
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failed) == {"corrupt-image"} and suites.get("failures") == "1"
    assert "14 errors" in failed["corrupt-image"].get("message")
    assert (
        "dog/bad00.jpg" in failed["corrupt-image"].text
        and "... and 4 more in the manifest" in failed["corrupt-image"].text
    )
    # against a baseline with --fail-on new: only new errors fail
    write(broken / "cat" / "newbad.jpg", image_bytes(999)[:333])
    result = run(
        "scan",
        broken,
        "--manifest",
        tmp_path / "new.jsonl",
        "--baseline",
        tmp_path / "old.jsonl",
        "--fail-on",
        "new",
        "--junit",
        report,
    )
    assert result.exit_code == 1
    failure = ElementTree.parse(report).getroot().find("testsuite/testcase[@name='corrupt-image']/failure")
    assert "(1 new, 0 reappeared, 14 persisting)" in failure.get("message")


def test_html_is_self_contained_and_capped(broken, tmp_path, monkeypatch):
    report = tmp_path / "report.html"
    assert run("scan", broken, "--manifest", tmp_path / "m.jsonl", "--html", report).exit_code == 1
    text = report.read_text()
    assert "<script" not in text and "<link" not in text and not re.search(r"(src|href)=['\"]?https?:", text)
    assert "@import" not in text and "url(" not in text
    assert text.count("<figure>") == 14
    from scrub.reports import html

    figures = sum(len(f) for f in re.findall(r"<figure>.*?</figure>", text))
    monkeypatch.setattr(html, "MAX_BYTES", len(text.encode()) - figures // 2)  # room for about half of them
    from scrub.api import scan
    from scrub.options.model import ScanOptions
    from scrub.reports import write_reports

    result = scan(broken, manifest=tmp_path / "m2.jsonl")
    write_reports(result, ScanOptions.build(html=tmp_path / "small.html"), 1)
    small = (tmp_path / "small.html").read_text()
    assert len(small.encode()) <= html.MAX_BYTES
    assert re.search(r"\d+ more not shown \(the report stays under", small)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
@pytest.mark.slow
def test_html_renders_in_headless_chromium(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(SAMPLES / "images", data, symlinks=True)
    baseline = tmp_path / "old.jsonl"
    run("scan", data, "--manifest", baseline, "--num-classes", "3")
    (data / "cat" / "truncated.jpg").unlink()  # one resolved
    report = tmp_path / "report.html"
    result = run(
        "scan",
        data,
        "--manifest",
        tmp_path / "new.jsonl",
        "--num-classes",
        "3",
        "--baseline",
        baseline,
        "--html",
        report,
    )
    assert result.exit_code == 1, result.output
    browser = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1000,1600",
    ]
    dom = subprocess.run(
        browser + ["--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=60
    ).stdout
    assert "Issues per check" in dom and "<code>corrupt-image</code>" in dom
    assert re.search(r"<p id=\"baseline\"><b>0 new</b>, 10 persisting, 0 reappeared, 1 resolved", dom), dom[
        :2000
    ]
    assert len(re.findall(r"<figure>", dom)) == 6  # the quarantined records, once each
    assert len(re.findall(r"src=\"data:image/jpeg;base64,", dom)) >= 1  # one of them decodes: a preview
    screenshot = tmp_path / "report.png"
    subprocess.run(
        browser + [f"--screenshot={screenshot}", report.as_uri()], capture_output=True, timeout=60, check=True
    )
    with Image.open(screenshot) as image:
        pixels = image.convert("RGB")
        colours = pixels.getcolors(1 << 20)
    counts = {colour: n for n, colour in colours}
    assert counts.get((0xC0, 0x39, 0x2B), 0) > 500  # the red error bars and the "fails" badge rendered
    assert counts.get((0x2E, 0x86, 0xC1), 0) > 5000  # the label histogram's bars
    assert len(colours) > 50  # text and a thumbnail, not a blank page


@pytest.fixture
def nightly(tmp_path):
    """The nightly run of issue 27: 32 known truncated JPEGs whose names sort first; one that
    was fixed comes back broken (reappeared) and one new broken file sorts last. Returns the
    folder and tonight's baseline."""
    root = tmp_path / "data"
    for i in range(6):
        write(root / f"good{i}.jpg", image_bytes(i))
    for i in range(32):
        write(root / f"bad{i:02d}.jpg", image_bytes(100 + i)[: 300 + 11 * i])
    back = write(root / "m_back.jpg", image_bytes(50)[:400])
    first, second = tmp_path / "night1.jsonl", tmp_path / "night2.jsonl"
    assert run("scan", root, "--manifest", first).exit_code == 1
    back.write_bytes(image_bytes(50))  # fixed: resolved on the second night
    assert run("scan", root, "--manifest", second, "--baseline", first).exit_code == 1
    back.write_bytes(image_bytes(50)[:400])  # broken again
    write(root / "zz_new.jpg", image_bytes(60)[:500])  # and one new, last in dataset order
    return root, second


def test_with_a_baseline_every_report_names_new_and_reappeared_first(nightly, tmp_path):
    root, baseline = nightly
    junit, markdown, report = tmp_path / "junit.xml", tmp_path / "summary.md", tmp_path / "report.html"
    result = run(
        "scan", root, "--manifest", tmp_path / "night3.jsonl", "--baseline", baseline, "--show", "10",
        "--junit", junit, "--summary-md", markdown, "--html", report,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "1 new, 32 persisting, 1 reappeared, 0 resolved" in result.output
    listed = result.output.split("records with errors:\n")[1].splitlines()
    assert re.match(r" reappeared  m_back\.jpg +corrupt-image  image does not decode", listed[0]), listed
    assert re.match(r" new         zz_new\.jpg +corrupt-image  ", listed[1]), listed
    assert [line[:14] for line in listed[2:10]] == [" " * 13 + "b"] * 8  # no mark: persisting
    assert re.findall(r"bad\d\d\.jpg", "\n".join(listed[2:10])) == [f"bad{i:02d}.jpg" for i in range(8)]
    assert listed[10] == "and 24 more errors in the manifest"

    failure = ElementTree.parse(junit).getroot().find("testsuite/testcase[@name='corrupt-image']/failure")
    assert failure.get("message") == (
        "corrupt-image: 34 errors (1 new, 1 reappeared, 32 persisting); "
        "new: zz_new.jpg; reappeared: m_back.jpg"
    )
    records = failure.text.split("first records:\n")[1].splitlines()
    assert records[:3] == ["m_back.jpg (reappeared)", "zz_new.jpg (new)", "bad00.jpg"]

    rows = [line for line in markdown.read_text().splitlines() if line.startswith("| `") and ".jpg" in line]
    assert rows[0].startswith("| `m_back.jpg` | **reappeared** | `corrupt-image` |")
    assert rows[1].startswith("| `zz_new.jpg` | **new** | `corrupt-image` |")
    assert rows[2].startswith("| `bad00.jpg` | persisting | `corrupt-image` |")

    text = report.read_text()
    errors = re.findall(r"<tr><td>(.*?)</td>", text.split("<table id=errors>")[1].split("</table>")[0])
    assert errors[:3] == [
        "<span class='badge reappeared'>reappeared</span><code>m_back.jpg</code>",
        "<span class='badge new'>new</span><code>zz_new.jpg</code>",
        "<code>bad00.jpg</code>",
    ]
    captions = re.findall(r"<figcaption>(.*?)<br>", text)
    assert captions[:2] == errors[:2] and captions[2] == "<code>bad00.jpg</code>"
    assert len(captions) == 34 and text.count("badge new'>") == 2  # in the table and on its thumbnail


def test_without_a_baseline_reports_keep_dataset_order_and_mark_nothing(nightly, tmp_path):
    root, _ = nightly
    junit, markdown, report = tmp_path / "junit.xml", tmp_path / "summary.md", tmp_path / "report.html"
    result = run(
        "scan", root, "--manifest", tmp_path / "m.jsonl", "--show", "10",
        "--junit", junit, "--summary-md", markdown, "--html", report,
    )  # fmt: skip
    assert result.exit_code == 1
    listed = result.output.split("records with errors:\n")[1].splitlines()
    assert [line.split()[0] for line in listed[:10]] == [f"bad{i:02d}.jpg" for i in range(10)]
    assert all(line.startswith(" bad") for line in listed[:10])  # no mark column
    failure = ElementTree.parse(junit).getroot().find("testsuite/testcase[@name='corrupt-image']/failure")
    assert failure.get("message") == "corrupt-image: 34 errors"
    assert failure.text.split("first records:\n")[1].splitlines()[:2] == ["bad00.jpg", "bad01.jpg"]
    text = markdown.read_text()
    assert "| record | check | message |" in text and "status" not in text
    assert "| `bad00.jpg` | `corrupt-image` |" in text and "zz_new" not in text
    html_text = report.read_text()
    assert not re.search(r"badge (new|reappeared)", html_text) and "new and reappeared first" not in html_text
    assert re.findall(r"<figcaption><code>(.*?)</code>", html_text)[-2:] == ["m_back.jpg", "zz_new.jpg"]


def test_a_junit_message_names_at_most_a_bounded_length_of_records(tmp_path):
    """Many new records with long names: the message stays one readable line."""
    root = tmp_path / "data"
    for i in range(12):
        write(root / (f"{i:02d}_" + "x" * 80 + ".jpg"), image_bytes(i)[:300])
    baseline = tmp_path / "empty.jsonl"
    baseline.write_text("")
    junit = tmp_path / "junit.xml"
    result = run("scan", root, "--manifest", tmp_path / "m.jsonl", "--baseline", baseline, "--junit", junit)
    assert result.exit_code == 1, result.output
    message = ElementTree.parse(junit).getroot().find(".//failure").get("message")
    from scrub.reports.junit import MESSAGE_NAMES

    assert message.startswith("corrupt-image: 12 errors (12 new, 0 reappeared, 0 persisting); new: 00_xxx")
    assert message.endswith(" and 9 more") and len(message) < 80 + MESSAGE_NAMES


def red_noise(fmt: str) -> bytes:
    """A 256x256 image of red noise (texture, so that half its bytes are about half its rows)."""
    rng = np.random.default_rng(7)
    pixels = np.zeros((256, 256, 3), np.uint8)
    pixels[..., 0] = rng.integers(180, 256, (256, 256))
    pixels[..., 1:] = rng.integers(0, 40, (256, 256, 2))
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()


@pytest.mark.slow  # over half a second: out of the quick subset
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_html_shows_what_decodes_of_a_truncated_image_marked_partial(tmp_path):
    root = tmp_path / "data"
    for i in range(3):
        write(root / f"good{i}.jpg", image_bytes(i))
    jpeg, png = red_noise("JPEG"), red_noise("PNG")
    write(root / "half.jpg", jpeg[: len(jpeg) // 2])
    write(root / "half.png", png[: len(png) // 2])
    write(root / "stub.jpg", jpeg[:200])  # its header only: nothing to show
    report = tmp_path / "report.html"
    result = run("scan", root, "--manifest", tmp_path / "m.jsonl", "--html", report)
    assert result.exit_code == 1, result.output
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False  # never switched on in this process
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    figures = dict(
        (re.search(r"<figcaption><code>(.*?)</code>", figure).group(1), figure)
        for figure in re.findall(r"<figure>.*?</figure>", dom)
    )
    assert set(figures) == {"half.jpg", "half.png", "stub.jpg"}
    assert "no preview" in figures["stub.jpg"] and "<img" not in figures["stub.jpg"]
    for name in ("half.jpg", "half.png"):
        figure = figures[name]
        image = re.search(
            r'<img class="partial" alt="[^"]+" title="partial: ([^"]+)" src="data:image/jpeg;base64,([^"]+)"',
            figure,
        )
        assert image, figure[:300]
        assert "image file is truncated" in image.group(1)
        assert '<span class="badge partial">partial</span>' in figure
        assert "partial: image file is truncated" in figure
        with Image.open(io.BytesIO(base64.b64decode(image.group(2)))) as thumbnail:
            pixels = np.asarray(thumbnail.convert("RGB"), dtype=float)
        top, bottom = pixels[:20].mean(axis=(0, 1)), pixels[-20:].mean(axis=(0, 1))
        assert top[0] > 170 and top[1] < 60 and top[2] < 60, (name, top)  # the red half that was there
        assert abs(bottom[0] - bottom[1]) < 20, (name, bottom)  # filled grey or black: the part cut off


@pytest.mark.slow
def test_a_thumbnail_that_hangs_costs_its_preview_not_the_report(tmp_path):
    """Thumbnails decode in a child process under the scan's --timeout: here a named pipe that
    no one writes to (its open() blocks for good) stands for a decoder that hangs."""
    import os
    import threading

    from scrub.api import scan
    from scrub.reports import html

    root = tmp_path / "data"
    jpeg = red_noise("JPEG")
    write(root / "half.jpg", jpeg[: len(jpeg) // 2])
    write(root / "good.jpg", image_bytes(1))
    result = scan(root, manifest=tmp_path / "m.jsonl")
    found = collect(result.manifest, images=10)
    os.mkfifo(root / "stuck.jpg")
    found.quarantined.insert(0, Issue("stuck.jpg", "stuck.jpg", 0, "corrupt-image", Severity.ERROR, "hangs"))
    rendered: list[str] = []
    worker = threading.Thread(
        target=lambda: rendered.append(html.render(result.summary, found, "error", 1, result.manifest, 1.0)),
        daemon=True,
    )
    worker.start()
    worker.join(60)
    assert rendered, "the report hung on the image"
    figures = re.findall(r"<figure>.*?</figure>", rendered[0])
    assert "stuck.jpg" in figures[0] and "no preview" in figures[0]
    assert "half.jpg" in figures[1] and "class=partial" in figures[1]  # the next image, in a new child


def schema():
    from importlib.resources import files

    return json.loads(files("scrub").joinpath("schemas/summary.schema.json").read_text())


def test_json_summaries_follow_the_shipped_schema(broken, tmp_path):
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    documents = []
    out = tmp_path / "s.json"
    run("scan", broken, "--manifest", tmp_path / "old.jsonl", "--json", out, "--num-classes", "2")
    documents.append(json.loads(out.read_text()))
    run(
        "scan",
        broken,
        "--manifest",
        tmp_path / "new.jsonl",
        "--json",
        out,
        "--baseline",
        tmp_path / "old.jsonl",
        "--cache",
        tmp_path / "cache",
        "--check-severity",
        "duplicate=ignore",
        "--fail-on",
        "new",
    )
    documents.append(json.loads(out.read_text()))
    run(
        "scan",
        SAMPLES / "hdf5" / "train.h5",
        "--manifest",
        tmp_path / "h.jsonl",
        "--json",
        out,
        "--dummy-loss",
    )
    documents.append(json.loads(out.read_text()))
    run("fix", broken, "--out", tmp_path / "clean", "--json", out)
    documents.append(json.loads(out.read_text()))
    documents.append(json.loads((tmp_path / "old.scan.json").read_text()))  # the scan record too
    for document in documents:
        validator.validate(document)
    assert {"baseline", "cache"} <= set(documents[1]) and "replay" in documents[2] and "fix" in documents[3]
    broken_document = dict(documents[0], records=-1)
    assert not validator.is_valid(broken_document)  # the schema is not vacuous


def test_a_scan_that_stops_halfway_exits_3_never_clean(tmp_path):
    """A dataset that breaks under a running scan: exit 3 (not 2, not 0), no manifest."""
    import h5py
    import numpy as np

    import scrub
    from scrub.errors import ExitCode, IncompleteScan

    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=np.ones((4000, 8), np.float32), chunks=(100, 8))

    def break_it(progress):
        if progress.records:
            with open(path, "r+b") as file:
                file.truncate(4096)

    manifest = tmp_path / "m.jsonl"
    with pytest.raises(IncompleteScan, match=r"the scan stopped after [\d,]+ of 4,000 records"):
        scrub.scan(path, manifest=manifest, scheduler="sync", partition_size=500, progress=break_it)
    assert not manifest.exists() and not list(tmp_path.glob(".m.jsonl*"))
    from scrub.cli import guarded

    with pytest.raises(BaseException) as stopped:
        guarded(lambda: (_ for _ in ()).throw(IncompleteScan("x")))
    assert getattr(stopped.value, "exit_code", None) == ExitCode.INCOMPLETE == 3


def test_records_removed_from_an_lmdb_after_its_listing_are_said_not_taken_for_a_lost_scan(tmp_path):
    """LMDB reads each key range in a snapshot: a writer that removed records since the keys
    were listed changed the database, it did not make the scan lose records (before: exit 3)."""
    import sys

    from test_lmdb import write_db

    import scrub.api

    path = write_db(tmp_path / "db", [(f"{i:03d}".encode(), image_bytes(i)) for i in range(30)])
    options = scrub.api.ScanOptions.build(scheduler="sync")
    dataset = scrub.api.open_dataset(path, options)
    deleter = (
        f"import lmdb\nenvironment = lmdb.open({str(path)!r}, map_size=64 << 20)\n"
        "with environment.begin(write=True) as transaction:\n"
        "    for i in range(20, 30):\n"
        "        transaction.delete(f'{i:03d}'.encode())\n"
    )
    subprocess.run([sys.executable, "-c", deleter], check=True)  # another process deletes records meanwhile
    result = scrub.api.scan_dataset(dataset, options)
    dataset.reader.close()
    assert result.summary.records == 20 and result.summary.complete
    assert result.exit_code("error") == 0
    assert any(
        "the database changed during the scan: 30 records when it was listed, 20 read" in note
        for note in result.summary.notes
    )


def test_junit_judges_each_issue_by_its_own_severity(tmp_path):
    """fp16-overflow is a warning check, but an error under --precision float16: it must fail."""
    import h5py
    import numpy as np

    data = np.ones((10, 3), np.float32)
    data[4, 0] = 7e4
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data)
    report = tmp_path / "junit.xml"
    result = run(
        "scan", path, "--manifest", tmp_path / "m.jsonl", "--precision", "float16", "--junit", report
    )
    assert result.exit_code == 1
    failed = [
        c.get("name")
        for c in ElementTree.parse(report).getroot().iter("testcase")
        if c.find("failure") is not None
    ]
    assert "fp16-overflow" in failed
    run("scan", path, "--manifest", tmp_path / "m.jsonl", "--junit", report)  # float32: a warning, passes
    case = ElementTree.parse(report).getroot().find("testsuite/testcase[@name='fp16-overflow']")
    assert case.find("failure") is None and "1 warning" in case.find("system-out").text


MARKED = ("new", "reappeared")
random_issues = st.lists(
    st.tuples(
        st.sampled_from([None, "a.h5", "b.h5"]),  # dataset
        st.one_of(st.none(), st.integers(0, 40)),  # index (None: an issue of the dataset as a whole)
        st.sampled_from(["corrupt-image", "nan-values"]),
        st.sampled_from([Severity.ERROR, Severity.WARNING]),
        st.sampled_from([None, "new", "persisting", "reappeared", "resolved"]),
    ),
    max_size=80,
)


def report_order(issue: Issue) -> tuple:
    """What reports name first: new and reappeared, then the rest; each in dataset order."""
    index = -1 if issue.index is None else issue.index
    return (issue.status not in MARKED, issue.dataset or "", index, issue.source, issue.key, issue.check)


@settings(max_examples=300, deadline=None)
@given(
    random_issues,
    st.integers(0, 6),
    st.integers(1, 4),
    st.integers(0, 5),
    st.sampled_from(["add", "merge", "wants"]),
)
def test_the_collector_keeps_the_first_issues_in_report_order(rows, show, per_check, images, path):
    """For any issues, statuses and arrival order, the kept errors and keys are the first of a
    full sort: bounded heaps, their fast paths (`wants`, `_after`) and `merge` lose nothing."""
    issues = [  # keys told apart by a serial: no two issues tie in the order
        Issue("s", f"k{index}-{n}", index, check, severity, "m", status=status, dataset=d)
        for n, (d, index, check, severity, status) in enumerate(rows)
    ]
    tonight = sorted((i for i in issues if i.status != "resolved"), key=report_order)
    collector = Collector(show, per_check, images)
    if path == "add":
        for issue in issues:
            collector.add(issue)
    elif path == "merge":  # the driver merges what workers collected
        other = Collector(show, per_check, images)
        for number, issue in enumerate(issues):
            (collector if number % 2 else other).add(issue)
        collector.merge(other)
    else:  # a worker's dense path: asks before it builds an issue
        for issue in tonight:
            wanted = issue.index is None or collector.wants(
                issue.check, issue.severity, issue.dataset, issue.index, issue.status
            )
            if wanted:
                collector.keep(issue)
    found = collector.finish()
    errors = [i for i in tonight if i.severity is Severity.ERROR]
    assert [report_order(i) for i in found.errors] == [report_order(i) for i in errors[:show]]
    assert [report_order(i) for i in found.quarantined] == [report_order(i) for i in errors[:images]]
    for check in {i.check for i in tonight}:
        first = [i for i in tonight if i.check == check][:per_check]
        assert found.keys[check] == [record_name(i) for i in first]
        assert found.key_marks[check] == [i.status if i.status in MARKED else "" for i in first]


@pytest.mark.parametrize(
    ("dataset", "key"),
    [
        ("yolo", "train/0001.jpg"),
        ("segmentation", "0002.jpg"),
        ("coco/annotations/instances_val2017.json", "000000000701.jpg"),
    ],
)
def test_html_thumbnails_show_the_images_of_pair_and_box_datasets(tmp_path, dataset, key):
    """Their records are image files too (under images/, or a COCO file's image folder): the
    report shows them, as it shows an image folder's (it showed only those)."""
    import re

    report = tmp_path / "r.html"
    options = ["--num-classes", "5"] if dataset == "segmentation" else []
    result = CliRunner().invoke(
        app,
        [
            "scan",
            str(SAMPLES / dataset),
            *options,
            "--html",
            str(report),
            "--manifest",
            str(tmp_path / "m.jsonl"),
        ],
    )
    assert result.exit_code == 1, result.output
    figures = re.findall(r"<figure>(.*?)</figure>", report.read_text(), re.S)
    shown = [figure for figure in figures if f"<code>{key}</code>" in figure]
    assert shown and "data:image/jpeg;base64," in shown[0], shown


def test_the_api_writes_the_reports_its_options_name(tmp_path):
    """`scrub.scan(..., html=...)` writes what `scrub scan --html` writes: an option given is
    acted on, never passed over."""
    wanted = {name: tmp_path / f"report.{suffix}" for name, suffix in REPORT_SUFFIXES.items()}
    result = scrub.scan(SAMPLES / "images", manifest=tmp_path / "m.jsonl", **wanted)
    assert all(path.stat().st_size > 0 for path in wanted.values())
    assert json.loads(wanted["json"].read_text())["exit_code"] == int(result.exit_code())
    assert "<testsuite" in wanted["junit"].read_text() and "<html" in wanted["html"].read_text()


#: each report option of the API and the file it names
REPORT_SUFFIXES = {"json": "json", "junit": "xml", "html": "html", "summary_md": "md"}
