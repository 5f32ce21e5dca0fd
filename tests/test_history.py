"""``--against STORE``: the training splits earlier runs kept. A night's evaluation split is
compared with them without reading them again; a rescan of a training split replaces what was
kept of it; `fix` sets the leaks aside; a bad store is one line and exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line_error
from PIL import ImageEnhance
from test_splits import encoded, scene

import scrub


@pytest.fixture
def nights(tmp_path: Path) -> Path:
    """train: six pictures; test: a copy of train's 02, a brighter 04 and four new pictures."""
    for number in range(6):
        path = tmp_path / "train" / "a" / f"{number:02d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encoded(scene(number)))
    test = tmp_path / "test" / "a"
    test.mkdir(parents=True)
    shutil.copy(tmp_path / "train" / "a" / "02.jpg", test / "copy.jpg")
    (test / "bright.jpg").write_bytes(encoded(ImageEnhance.Brightness(scene(4)).enhance(1.1)))
    for seed in range(60, 64):
        (test / f"new-{seed}.jpg").write_bytes(encoded(scene(seed)))
    return tmp_path


def leaks(result) -> dict[str, dict]:
    return {issue.key: issue.details for issue in result.issues() if issue.check == "split-leak"}


def test_an_evaluation_split_is_compared_with_the_training_split_an_earlier_run_kept(nights):
    store = nights / "store"
    first = scrub.scan(nights / "train", against=store)
    assert any("kept the training split train (6 records)" in note for note in first.summary.notes)
    assert len(list(store.glob("*.split.npz"))) == 1 and not [
        p for p in store.iterdir() if p.name.startswith(".")
    ]
    later = scrub.scan(nights / "test", against=store)
    found = leaks(later)
    assert {key: details["train"]["key"] for key, details in found.items()} == {
        "a/copy.jpg": "a/02.jpg",
        "a/bright.jpg": "a/04.jpg",
    }
    assert found["a/copy.jpg"]["match"] == "exact" and found["a/bright.jpg"]["match"] == "perceptual"
    assert all(
        d["train"]["dataset"] == str((nights / "train").resolve()) and d["train"]["kept"]
        for d in found.values()
    )
    assert any("compared with the training split (train (kept))" in note for note in later.summary.notes)


def test_a_rescanned_training_split_replaces_what_was_kept_of_it(nights):
    store = nights / "store"
    scrub.scan(nights / "train", against=store)
    (nights / "train" / "a" / "02.jpg").unlink()
    scrub.scan(nights / "train", against=store)
    assert len(list(store.glob("*.split.npz"))) == 1
    assert set(leaks(scrub.scan(nights / "test", against=store))) == {"a/bright.jpg"}


def test_a_training_split_of_the_run_stands_for_its_kept_copy(nights):
    """Scanned again in the same run, a training split is compared as read now, once."""
    store = nights / "store"
    scrub.scan(nights / "train", against=store)
    both = scrub.scan([nights / "train", nights / "test"], against=store)
    assert sorted(issue.key for issue in both.issues() if issue.check == "split-leak") == [
        "a/bright.jpg",
        "a/copy.jpg",
    ]


def test_records_of_other_kinds_are_kept_by_their_identity(tmp_path):
    lines = [json.dumps({"input_ids": [number, number + 1, 7]}) for number in range(10)]
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "test.jsonl").write_text("\n".join([lines[3], json.dumps({"input_ids": [99, 98]})]) + "\n")
    scrub.scan(tmp_path / "train.jsonl", against=tmp_path / "store", vocab_size=200)
    found = leaks(scrub.scan(tmp_path / "test.jsonl", against=tmp_path / "store", vocab_size=200))
    assert [details["train"]["index"] for details in found.values()] == [3]


def test_fix_against_the_store_sets_the_leaks_aside_and_the_copy_rescans_clean(nights):
    store = nights / "store"
    scrub.scan(nights / "train", against=store)
    fixed = scrub.fix(nights / "test", out=nights / "clean", against=store)
    assert fixed.report["kept"] == 4
    assert sorted(path.name for path in (nights / "clean" / "a").iterdir()) == [
        f"new-{n}.jpg" for n in range(60, 64)
    ]
    assert not leaks(scrub.scan(nights / "clean", against=store))


def test_fix_leak_side_train_says_the_kept_training_copies_are_not_its_own(nights):
    """The training copies of a leak into the store are in no dataset of the fix: the leak is set
    aside from the evaluation split, as without the option, and the report says why."""
    store = nights / "store"
    scrub.scan(nights / "train", against=store)
    alone = scrub.fix(nights / "test", out=nights / "alone", against=store, leak_side="train")
    assert alone.report["kept"] == 4
    assert any(
        note.startswith("--leak-side train: not used on ") and f"kept in {store}, which this fix" in note
        for note in alone.report["notes"]
    )
    tonight = nights / "tonight" / "train"  # fixed with a training split that holds no copy
    tonight.mkdir(parents=True)
    for seed in range(70, 73):
        (tonight / f"{seed}.jpg").write_bytes(encoded(scene(seed)))
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "fix", str(tonight), str(nights / "test")]
        + ["--out", str(nights / "fixed"), "--against", str(store), "--leak-side", "train"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "split-leak: 2 records of this evaluation split copy records of training splits kept" in (
        " ".join(done.stdout.split())
    )
    assert len(list((nights / "fixed" / "test.clean").rglob("*.jpg"))) == 4
    assert len(list((nights / "fixed" / "train.clean").rglob("*.jpg"))) == 3


def test_a_split_kept_by_another_versions_identities_is_said_and_skipped(nights):
    store = nights / "store"
    scrub.scan(nights / "train", against=store)
    (kept,) = store.glob("*.split.npz")
    with np.load(kept) as stored:
        arrays = dict(stored)
    meta = json.loads(str(arrays["meta"]))
    arrays["meta"] = np.array(json.dumps({**meta, "identity_version": 1}))
    with kept.open("wb") as file:
        np.savez(file, **arrays)
    later = scrub.scan(nights / "test", against=store)
    assert not leaks(later)
    assert any(
        f"{kept.name} keeps {meta['dataset']} by another version's content identities" in note
        for note in later.summary.notes
    )


def test_what_cannot_be_compared_is_said(nights):
    """An empty store, a dataset named as no split, a file in the store no run wrote: each a note."""
    store = nights / "store"
    empty = scrub.scan(nights / "test", against=store)
    assert not leaks(empty) and any("holds no training split yet" in note for note in empty.summary.notes)
    shutil.copytree(nights / "train", nights / "pictures")
    unnamed = scrub.scan(nights / "pictures", against=store)
    assert any("is named as no split" in note for note in unnamed.summary.notes)
    assert not list(store.glob("*.split.npz"))  # neither kept
    scrub.scan(nights / "train", against=store)
    (store / "foreign.split.npz").write_bytes(b"not a store file")
    again = scrub.scan(nights / "test", against=store)
    assert any("foreign.split.npz is no split kept by this scrub: skipped" in n for n in again.summary.notes)
    assert len(leaks(again)) == 2


def test_a_store_that_is_a_file_is_one_line_and_exit_2(nights):
    (nights / "store").write_text("a file")
    assert "not a folder" in one_line_error("scan", nights / "test", "--against", nights / "store")


def test_a_kept_split_names_its_records_from_the_store_alone(nights):
    """The kept names come from the store: the training split may be gone by the next night."""
    store = nights / "store"
    scrub.scan(nights / "train", against=store)
    shutil.rmtree(nights / "train")
    found = leaks(scrub.scan(nights / "test", against=store))
    assert found["a/copy.jpg"]["train"]["key"] == "a/02.jpg" and found["a/copy.jpg"]["train"]["index"] == 2
    with np.load(next(store.glob("*.split.npz"))) as kept:
        assert kept["values"].dtype.itemsize == 24 + 16 and len(kept["keys"]) == 6  # with its crops' hashes
