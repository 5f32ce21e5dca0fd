"""CSV/TSV image lists (`path,label`, with or without a header), read and written back by the
list-file reader and writer; the outputs are read with the standard library's `csv`, as a
PyTorch Dataset over a CSV does."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from conftest import image_bytes, write

import scrub


def make_images(root, count=6):
    for i in range(count):
        write(root / "img" / f"{i}, copy.jpg", image_bytes(i))  # a comma in the name: quoted in CSV
    data = (root / "img" / "2, copy.jpg").read_bytes()
    (root / "img" / "2, copy.jpg").write_bytes(data[: len(data) // 2])  # truncated


def test_a_csv_with_a_header_is_scanned_and_fixed_row_for_row(tmp_path):
    root = tmp_path / "data"
    make_images(root)
    rows = [["label", "filename", "split"]] + [[str(i % 3), f"img/{i}, copy.jpg", "train"] for i in range(6)]
    rows[4][0] = "7"  # out of range for 3 classes
    rows.append(["1", "img/missing.jpg", "train"])
    with open(root / "train.csv", "w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows(rows)
    result = scrub.scan(root / "train.csv", num_classes=3, scheduler="sync")
    found = {(issue.key, issue.check) for issue in result.issues()}
    assert ("img/2, copy.jpg", "corrupt-image") in found
    assert ("img/3, copy.jpg", "label-out-of-range") in found
    assert ("img/missing.jpg", "missing-file") in found
    assert result.summary.records == 7
    facts = result.summary.dataset.files["train.csv"]
    assert facts == {"list_format": "csv", "path_column": 1, "label_column": 0, "header": True}

    fixed = scrub.fix(root / "train.csv", quarantine=True, num_classes=3, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 4 and fixed.report["quarantined"] == 3
    with open(fixed.dataset, newline="", encoding="utf-8") as file:
        kept = list(csv.DictReader(file))
    assert [row["filename"] for row in kept] == [
        "img/0, copy.jpg",
        "img/1, copy.jpg",
        "img/4, copy.jpg",
        "img/5, copy.jpg",
    ]
    assert all(row["split"] == "train" for row in kept)
    for row in kept:  # a loader opens each listed file
        assert (fixed.clean / row["filename"]).read_bytes() == (root / row["filename"]).read_bytes()
    with open(fixed.quarantine / "train" / "train.csv", newline="", encoding="utf-8") as file:
        held = list(csv.DictReader(file))
    assert sorted(row["filename"] for row in held) == [
        "img/2, copy.jpg",
        "img/3, copy.jpg",
        "img/missing.jpg",
    ]
    assert scrub.scan(fixed.dataset, num_classes=3, scheduler="sync").summary.records_with_errors == 0


@pytest.mark.parametrize(("name", "delimiter"), [("list.tsv", "\t"), ("list.txt", ";"), ("list.csv", ",")])
def test_lists_without_a_header_take_path_then_label(tmp_path, name, delimiter):
    root = tmp_path / "data"
    for i in range(4):
        write(root / f"{i}.png", image_bytes(i, fmt="PNG"))
    (root / name).write_text("".join(f"{i}.png{delimiter}{i}{delimiter}extra\n" for i in range(4)))
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", str(root / name), "--num-classes", "3", "--json", "s.json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr  # 3.png has label 3 of 3 classes
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["records"] == 4 and summary["issues"]["by_check"]["label-out-of-range"] == 1
    assert summary["dataset"]["files"][name]["label_column"] == 1


def test_a_caffe_list_is_still_read_by_caffe_rule(tmp_path):
    root = tmp_path / "data"
    write(root / "a b.jpg", image_bytes(1))
    (root / "train.txt").write_text("a b.jpg 1\n")
    result = scrub.scan(root / "train.txt", scheduler="sync")
    assert result.summary.records == 1 and result.summary.records_with_errors == 0
    assert result.summary.dataset.files["train.txt"] == {"list_format": "caffe"}
