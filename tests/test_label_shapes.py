"""Labels of every common shape in HDF5: class ids, (N, K) vectors (one-hot, multi-label, soft
targets), the usual label names, and label options that cannot apply."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import REPO, findings

import scrub
from scrub.errors import UsageError


def write_h5(path, **datasets):
    with h5py.File(path, "w") as file:
        for name, value in datasets.items():
            file[name] = value
    return path


def onehot(labels, classes):
    return np.eye(classes, dtype=np.float32)[labels]


def rows(n=60, width=4, seed=0):
    return np.random.default_rng(seed).normal(size=(n, width)).astype(np.float32)


def test_one_hot_vectors_and_their_faults(tmp_path):
    labels = onehot(np.arange(60) % 5, 5)
    labels[3, 1] = np.nan
    labels[7] = 0
    labels[9, [0, 2]] = 1  # row 9 was class 4: now three ones
    labels[11, 0] = -1
    path = write_h5(tmp_path / "d.h5", data=rows(), label=labels)
    result = scrub.scan(path, num_classes=5)
    assert findings(result) == {
        ("3", "nonfinite-label"),
        ("7", "invalid-label-vector"),
        ("9", "invalid-label-vector"),
        ("11", "invalid-label-vector"),
    }
    reasons = {i.key: i.details["reason"] for i in result.issues() if i.check == "invalid-label-vector"}
    assert reasons == {"7": "zero", "9": "multihot", "11": "outside"}
    assert all(i.severity.value == "error" for i in result.issues())
    assert result.summary.dataset.label_width == 5
    assert any(
        note.startswith("invalid-label-vector: label vectors read as one-hot")
        for note in result.summary.notes
    )
    positives = (np.nan_to_num(labels) >= 0.5).sum(axis=0)  # rows whose column k is >= 0.5
    assert (
        result.summary.stats["labels"]
        == dict(enumerate(positives.tolist()))
        == {0: 13, 1: 12, 2: 12, 3: 12, 4: 12}
    )

    fixed = scrub.fix(path, out=tmp_path / "clean.h5", num_classes=5)
    with h5py.File(fixed.clean) as clean:
        assert clean["label"].shape == (56, 5) and np.isfinite(clean["label"][:]).all()
    assert findings(scrub.scan(fixed.clean, num_classes=5)) == set()


def test_multi_label_vectors_allow_empty_and_several_positives(tmp_path):
    rng = np.random.default_rng(1)
    labels = (rng.random((200, 6)) < 0.3).astype(np.float32)
    labels[5] = 0  # a legitimate negative
    labels[8, 2] = 1.5
    result = scrub.scan(write_h5(tmp_path / "d.h5", data=rows(200), labels=labels))
    assert findings(result) == {("8", "invalid-label-vector")}
    assert "label vectors read as multi-label" in " ".join(result.summary.notes)


def test_soft_targets_that_do_not_sum_to_one_are_warnings(tmp_path):
    labels = np.random.default_rng(2).dirichlet(np.ones(3), 100).astype(np.float32)
    labels[4] *= 0.5
    result = scrub.scan(write_h5(tmp_path / "d.h5", data=rows(100), y=labels))
    (issue,) = list(result.issues())
    assert (issue.key, issue.check, issue.severity.value, issue.details["reason"]) == (
        "4",
        "invalid-label-vector",
        "warning",
        "unit",
    )


def test_the_usual_label_names_are_found_and_named(tmp_path):
    labels = np.arange(30) % 3
    labels[6] = 9
    path = write_h5(tmp_path / "d.h5", images=rows(30), labels=labels)
    result = scrub.scan(path, data_key="images", num_classes=3)
    assert findings(result) == {("6", "label-out-of-range")}
    assert result.summary.notes == ["labels: read from 'labels' (d.h5); --label-key chooses another dataset"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrub",
            "scan",
            str(path),
            "--data-key",
            "images",
            "--manifest",
            str(tmp_path / "m.jsonl"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert "note: labels: read from 'labels'" in done.stdout
    caffe = scrub.scan(write_h5(tmp_path / "c.h5", data=rows(30), label=np.arange(30) % 3))
    assert caffe.summary.notes == [] and caffe.summary.dataset.labelled


def test_label_options_that_cannot_apply_are_errors(tmp_path):
    unlabelled = write_h5(tmp_path / "u.h5", data=rows())
    with pytest.raises(UsageError, match="--num-classes: .* has no labels to check"):
        scrub.scan(unlabelled, num_classes=10)
    with pytest.raises(UsageError, match="--label-range: .* has no labels to check"):
        scrub.scan(unlabelled, label_range="0:3")
    assert (
        scrub.scan(unlabelled, num_classes=10, dummy_loss=True).summary.replay["classes"] == 10
    )  # C of the replay
    vectors = write_h5(tmp_path / "v.h5", data=rows(), label=onehot(np.arange(60) % 4, 4))
    with pytest.raises(UsageError, match="--num-classes 10: the labels of .* are vectors of 4 classes"):
        scrub.scan(vectors, num_classes=10)
    with pytest.raises(UsageError, match="are vectors of 4, not class ids"):
        scrub.scan(vectors, label_range="0:4")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrub",
            "scan",
            str(unlabelled),
            "--num-classes",
            "10",
            "--manifest",
            str(tmp_path / "m.jsonl"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    folder = tmp_path / "flat"
    folder.mkdir()
    from conftest import image_bytes

    (folder / "a.jpg").write_bytes(image_bytes())
    with pytest.raises(UsageError, match="has no labels to check \\(images, flat\\)"):
        scrub.scan(folder, num_classes=3)


def test_labels_of_other_shapes_are_said_to_be_unchecked(tmp_path):
    volumes = np.zeros((20, 4, 4, 2), np.float32)
    result = scrub.scan(write_h5(tmp_path / "d.h5", data=rows(20), label=volumes))
    assert not result.summary.dataset.labelled
    assert result.summary.notes == [
        "labels: d.h5: 'label' has shape 20x4x4x2, neither class ids (N,) nor label vectors (N, K): "
        "not checked"
    ]
    # (N, H, W) integers are class maps: segmentation masks, checked as such (test_segmentation)
    masks = np.zeros((20, 4, 4), np.uint8)
    result = scrub.scan(write_h5(tmp_path / "m.h5", data=rows(20), label=masks), num_classes=2)
    assert result.summary.dataset.labelled and result.summary.stats["mask_pixels"] == {0: 320}


def test_the_replay_trains_on_label_vectors(tmp_path):
    labels = onehot(np.arange(64) % 3, 3)
    labels[10, 0] = np.nan
    result = scrub.scan(write_h5(tmp_path / "d.h5", data=rows(64), label=labels), dummy_loss=True)
    assert result.summary.replay["classes"] == 3
    assert result.summary.replay["skipped"] == {"label": 1}
