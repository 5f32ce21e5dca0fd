"""Leaks between splits come first in every report: the HTML report shows each leaked evaluation
record beside the training record it copies (and each copy within a dataset beside its first),
as thumbnails where both are image files and by name where they are not; the Markdown summary
and JUnit name the leaks, with both records, before any other finding."""

from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from conftest import image_bytes, write
from test_reports import CHROMIUM, run

from scrub.records import Issue, Severity
from scrub.reports.findings import Collector

#: evaluation key -> the training key it copies (an odd name: the report escapes it)
LEAKED = {"cat/zz-copy.png": "cat/01.png", "dog/it's <b>&.jpg": "dog/02.jpg"}


@pytest.fixture
def splits(tmp_path: Path) -> Path:
    """train/ and val/ of real PNGs and JPEGs: two training images copied into val under other
    names, a truncated val image whose key sorts before theirs, and a copy within train."""
    for number in range(4):
        kind = "cat" if number % 2 else "dog"
        fmt, suffix = ("PNG", "png") if kind == "cat" else ("JPEG", "jpg")
        write(tmp_path / "train" / kind / f"{number:02d}.{suffix}", image_bytes(number, fmt=fmt))
        write(tmp_path / "val" / kind / f"v{number:02d}.jpg", image_bytes(50 + number))
    for copy, original in LEAKED.items():
        write(tmp_path / "val" / copy, (tmp_path / "train" / original).read_bytes())
    write(tmp_path / "val" / "cat" / "aa-bad.jpg", image_bytes(99)[:300])
    write(tmp_path / "train" / "cat" / "twice.png", (tmp_path / "train" / "cat" / "03.png").read_bytes())
    return tmp_path


def scan_with_reports(*datasets: Path, out: Path):
    result = run(
        "scan",
        *datasets,
        "--manifest",
        out / "m.jsonl",
        "--html",
        out / "r.html",
        "--summary-md",
        out / "r.md",
        "--junit",
        out / "r.xml",
    )
    assert result.exit_code == 1, result.output
    return result


def section(text: str, anchor: str) -> list[str]:
    """The rows (after the head) of the HTML table ``id=anchor``."""
    table = re.search(rf"<table id={anchor}>(.*?)</table>", text, re.S)
    assert table, f"no table {anchor}"
    return re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)[1:]


def escaped(key: str) -> str:
    return key.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;")


def test_html_shows_each_leak_and_each_copy_beside_its_original(splits, tmp_path):
    scan_with_reports(splits / "train", splits / "val", out=tmp_path)
    text = (tmp_path / "r.html").read_text()
    assert text.index("<h2>Leaks between splits</h2>") < text.index("<h2>First records with errors")
    rows = section(text, "leaks")
    assert len(rows) == len(LEAKED)
    for row, (copy, original) in zip(rows, sorted(LEAKED.items())):
        assert row.count("src='data:image/jpeg;base64,") == 2, row[:400]
        assert f"val:{escaped(copy)}</code>" in row and f"train:{original}</code>" in row
        assert "<td>exact</td>" in row
    assert "<b>&" not in text  # the odd key, escaped everywhere
    (group,) = section(text, "duplicates")
    assert group.count("<img ") == 2 and "train:cat/03.png" in group and "train:cat/twice.png" in group


def markdown_rows(path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """The Markdown summary's checks with issues, in its order, and its records: (record, check)."""
    checks, records = [], []
    for line in path.read_text().splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 3 and cells[1] in ("error", "warning"):
            checks.append(cells[0].strip("`"))
        elif len(cells) == 3 and cells[0].startswith("`"):
            records.append((cells[0], cells[1].strip("`")))
    return checks, records


def test_markdown_and_junit_name_the_leaks_first_with_both_records(splits, tmp_path):
    scan_with_reports(splits / "train", splits / "val", out=tmp_path)
    checks, records = markdown_rows(tmp_path / "r.md")
    assert checks[0] == "split-leak"
    assert [check for _, check in records] == ["split-leak", "split-leak", "corrupt-image"]
    for (record, _), (copy, original) in zip(records, sorted(LEAKED.items())):
        assert f"val:{copy}` (training record: `" in record and f"train:{original}`)" in record
    cases = ElementTree.parse(tmp_path / "r.xml").getroot().findall("testsuite/testcase")
    failing = [case for case in cases if case.find("failure") is not None]
    assert cases[0].get("name") == failing[0].get("name") == "split-leak"
    failure = failing[0].find("failure")
    assert failure is not None and failure.text is not None
    assert "val:cat/zz-copy.png (training record: " in failure.get("message", "")
    assert "val:dog/it's <b>&.jpg (training record: " in failure.text and "train:dog/02.jpg)" in failure.text


def test_a_leak_of_records_that_are_no_images_is_a_row_of_names(tmp_path):
    for split, texts in (("train", ["kept apart", "shared line"]), ("val", ["new one", "Shared  line"])):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    scan_with_reports(tmp_path / "train.jsonl", tmp_path / "val.jsonl", out=tmp_path)
    text = (tmp_path / "r.html").read_text()
    (row,) = section(text, "leaks")
    assert "val.jsonl:2</code>" in row and "train.jsonl:2</code>" in row and "<img" not in row
    _, records = markdown_rows(tmp_path / "r.md")
    assert records[0][1] == "split-leak" and "val.jsonl:2` (training record: `" in records[0][0]


def test_the_leak_sections_stay_within_the_size_cap(splits, tmp_path, monkeypatch):
    from scrub.api import scan
    from scrub.options.model import ScanOptions
    from scrub.reports import html, write_reports

    result = scan([splits / "train", splits / "val"], manifest=tmp_path / "m.jsonl")
    write_reports(result, ScanOptions.build(html=tmp_path / "full.html"), 1)
    full = (tmp_path / "full.html").read_text()
    sized = [  # the sections drawn in the room left (each one line of the report)
        line for line in full.split("\n") if line.startswith(("<h2>Leaks", "<h2>Quarantined"))
    ]
    fixed = len(full.encode()) - sum(len(line.encode()) for line in sized)
    first_row = len(f"<tr>{section(full, 'leaks')[0]}</tr>".encode())
    # room for the first leak only: what the report keeps for its footer, headings and "more"
    monkeypatch.setattr(html, "MAX_BYTES", fixed + 4096 + 1024 + first_row)
    write_reports(result, ScanOptions.build(html=tmp_path / "small.html"), 1)
    small = (tmp_path / "small.html").read_text()
    assert len(small.encode()) <= html.MAX_BYTES
    assert len(section(small, "leaks")) == 1 and "and 1 more finding not shown" in small
    assert (
        "<table id=duplicates>" not in small and "<h2>Duplicate groups</h2><p class=muted>and 1 more" in small
    )


def leak(index: int, check: str = "split-leak") -> Issue:
    details = {"train": {"dataset": "train", "source": "t", "key": f"t{index}", "index": index}}
    return Issue("s", f"k{index}", index, check, Severity.ERROR, "m", details=details)


def test_the_collector_keeps_leaks_first_whatever_their_place():
    collector = Collector(show=2, per_check=1)
    for index in range(4):
        collector.add(leak(index, "corrupt-image"))
    collector.add(leak(50))
    # a leak after every kept one in dataset order is wanted (it goes first), another error not
    assert collector.wants("split-leak", Severity.ERROR, None, 90)
    assert not collector.wants("corrupt-image", Severity.ERROR, None, 90)
    collector.add(leak(90))
    found = collector.finish()
    assert [(i.check, i.index) for i in found.errors] == [("split-leak", 50), ("split-leak", 90)]
    assert found.keys["split-leak"] == ["s:k50"] and found.pairs["split-leak"] == [leak(50)]


def test_the_collector_keeps_as_many_pairs_as_thumbnails():
    collector = Collector(show=1, per_check=2, images=3)
    for index in range(5):
        collector.add(leak(index))
    found = collector.finish()
    assert found.keys["split-leak"] == ["s:k0", "s:k1"]
    assert [issue.index for issue in found.pairs["split-leak"]] == [0, 1, 2]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
@pytest.mark.slow
def test_the_leaks_render_in_headless_chromium(splits, tmp_path):
    scan_with_reports(splits / "train", splits / "val", out=tmp_path)
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            (tmp_path / "r.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    table = re.search(r"<table id=\"leaks\">(.*?)</table>", dom, re.S)
    assert table and len(re.findall(r"<img [^>]*src=\"data:image/jpeg;base64,", table.group(1))) == 4
