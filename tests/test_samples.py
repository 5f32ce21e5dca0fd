"""The bundled samples: every planted problem is found, nothing else, on every scheduler."""

from __future__ import annotations

import pytest
from conftest import SAMPLES, findings

import scrub

IMAGES_EXPECTED = {
    ("cat/truncated.jpg", "corrupt-image"),
    ("dog/bitflip.jpg", "corrupt-image"),
    ("bird/broken.png", "corrupt-image"),
    ("bird/really_a_png.jpg", "format-mismatch"),
    ("bird/huge.png", "decompression-bomb"),
    ("cat/grayscale.jpg", "shape-mismatch"),
    ("dog/cmyk.jpg", "shape-mismatch"),
    ("dog/copy_of_cat_001.jpg", "duplicate"),
    ("dog/empty.jpg", "empty-record"),
    ("bird/outside.jpg", "unsafe-path"),
    ("stray.jpg", "missing-label"),
}

LIST_COMMON = {
    ("img/a_012.jpg", "missing-label"),
    ("img/a_013.jpg", "non-integer-label"),
    ("img/a_014.jpg", "non-integer-label"),
    ("img/gone.jpg", "missing-file"),
    ("../images/cat/cat_000.jpg", "unsafe-path"),
}


@pytest.mark.parametrize("scheduler", [None, "sync", "threads", "processes"])
def test_image_folder_sample_finds_every_planted_problem_and_nothing_else(scheduler, tmp_path):
    result = scrub.scan(
        SAMPLES / "images", scheduler=scheduler, partition_size=4, manifest=tmp_path / "m.jsonl"
    )
    assert findings(result) == IMAGES_EXPECTED
    assert result.summary.records == 35
    assert result.summary.dataset.classes == ["bird", "cat", "dog"]
    assert result.summary.dataset.skipped == {"non-image file": 2}


def test_schedulers_write_identical_manifests(tmp_path):
    lines = {}
    for scheduler in ["sync", "processes", "threads"]:
        path = tmp_path / f"{scheduler}.jsonl"
        scrub.scan(SAMPLES / "images", scheduler=scheduler, workers=2, partition_size=3, manifest=path)
        lines[scheduler] = sorted(path.read_text().splitlines())
    assert lines["sync"] == lines["processes"] == lines["threads"]
    assert len(lines["sync"]) == len(IMAGES_EXPECTED)


def test_list_file_sample_without_declared_range_flags_outliers():
    result = scrub.scan(SAMPLES / "imagelist" / "train.txt")
    assert findings(result) == LIST_COMMON | {
        ("img/a_015.jpg", "label-outlier"),
        ("img/a_016.jpg", "label-outlier"),
    }
    assert result.summary.records == 20


def test_list_file_sample_with_num_classes_flags_out_of_range():
    result = scrub.scan(SAMPLES / "imagelist" / "train.txt", num_classes=10)
    assert findings(result) == LIST_COMMON | {
        ("img/a_015.jpg", "label-out-of-range"),
        ("img/a_016.jpg", "label-out-of-range"),
    }


def test_webdataset_sample_finds_every_planted_problem_and_nothing_else():
    result = scrub.scan(SAMPLES / "webdataset", num_classes=10, scheduler="sync")
    assert findings(result) == {
        ("000002", "corrupt-image"),
        ("000003", "corrupt-image"),  # a bit flip Pillow accepts
        ("000005", "label-out-of-range"),
        ("000009", "missing-label"),
        ("000011", "malformed-sample"),  # no image
        ("000012", "malformed-sample"),  # .json that does not load
        ("000015", "malformed-sample"),  # the shard ends inside its image
        ("000015", "missing-label"),  # ... before its .cls
    }
    assert result.summary.records == 16


def test_parquet_samples_find_every_planted_problem_and_nothing_else():
    pytest.importorskip("pyarrow")
    result = scrub.scan(SAMPLES / "parquet" / "train.parquet", scheduler="sync")
    assert findings(result) == {
        ("0003.jpg", "corrupt-image"),  # named by the Image struct's path (row 3)
        ("0008.jpg", "corrupt-image"),  # a bit flip Pillow accepts
        ("0010.jpg", "label-out-of-range"),  # the ClassLabel has 3 names
        ("0012.jpg", "label-out-of-range"),  # -1
    }
    result = scrub.scan(SAMPLES / "parquet" / "embeddings.parquet", scheduler="sync")
    assert findings(result) == {
        ("9", "nonfinite-data"),
        ("21", "square-overflow"),
        ("21", "magnitude-outlier"),
        ("40", "zero-norm"),
        ("21", "fp16-overflow"),
    }


def test_segmentation_sample_finds_every_planted_problem_and_nothing_else():
    result = scrub.scan(SAMPLES / "segmentation", num_classes=5, scheduler="sync")
    assert findings(result) == {
        ("0002.jpg", "mask-out-of-range"),
        ("0004.jpg", "mask-all-void"),
        ("0005.jpg", "mask-size-mismatch"),
        ("0006.jpg", "mask-not-class-map"),
        ("0007.jpg", "missing-mask"),
    }


def test_detection_samples_find_every_planted_problem_and_nothing_else():
    result = scrub.scan(SAMPLES / "yolo", scheduler="sync")
    assert findings(result) == {
        ("train/0001.jpg", "box-class-invalid"),
        ("train/0002.jpg", "box-nonfinite"),
        ("train/0003.jpg", "box-degenerate"),
        ("train/0004.jpg", "box-out-of-bounds"),
        ("train/0005.jpg", "box-malformed"),
        ("train/0006.jpg", "duplicate-box"),
        ("train/0008.jpg", "missing-boxes"),
        ("labels/train/0099.txt", "label-without-image"),
    }
    result = scrub.scan(SAMPLES / "coco" / "annotations" / "instances_val2017.json", scheduler="sync")
    assert findings(result) == {
        ("000000000701.jpg", "box-degenerate"),
        ("000000000702.jpg", "box-out-of-bounds"),
        ("000000000703.jpg", "box-nonfinite"),
        ("000000000704.jpg", "box-class-invalid"),
        ("000000000705.jpg", "box-malformed"),
        ("000000000706.jpg", "duplicate-box"),
    }
