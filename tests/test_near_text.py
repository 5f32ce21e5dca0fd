"""``--near-text``: a lightly edited copy of a training text in an evaluation split is a
`split-leak` by MinHash (estimated Jaccard similarity of 5-word shingles), in a run of splits
and against a store of kept splits; other texts are not; off by default, and said when it
cannot apply."""

from __future__ import annotations

import json
import pydoc_data.topics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line_error

import scrub

WORDS = " ".join(pydoc_data.topics.topics.values()).split()


def document(number: int, size: int = 200) -> str:
    return " ".join(WORDS[number * size : (number + 1) * size])


def edited(text: str, *positions: int) -> str:
    words = text.split()
    for position in positions:
        words[position] = "edited"
    return " ".join(words)


@pytest.fixture
def texts(tmp_path: Path) -> Path:
    """train.jsonl: 30 documents; test.jsonl: an exact copy, a copy with a word changed, one
    with two changed, and three documents of their own."""
    train = [document(number) for number in range(30)]
    test = [train[4], edited(train[9], 50), edited(train[12], 30, 120), *(document(n) for n in (90, 91, 92))]
    for name, lines in (("train", train), ("test", test)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
    return tmp_path


def leaks(result) -> dict[str, dict]:
    return {issue.key: issue.details for issue in result.issues() if issue.check == "split-leak"}


def test_edited_copies_of_training_texts_leak_by_minhash(texts):
    found = leaks(scrub.scan([texts / "train.jsonl", texts / "test.jsonl"], near_text=0.8))
    assert {key: details["train"]["key"] for key, details in found.items()} == {
        "1": "5",
        "2": "10",
        "3": "13",
    }
    assert found["1"]["match"] == "exact"
    assert all(found[key]["match"] == "minhash" and 0.8 <= found[key]["similarity"] < 1 for key in ("2", "3"))


def test_without_near_text_texts_are_compared_exactly(texts):
    assert list(leaks(scrub.scan([texts / "train.jsonl", texts / "test.jsonl"]))) == ["1"]


def test_near_text_against_kept_training_splits(texts):
    store = texts / "store"
    scrub.scan(texts / "train.jsonl", against=store, near_text=0.8)
    assert set(leaks(scrub.scan(texts / "test.jsonl", against=store, near_text=0.8))) == {"1", "2", "3"}


def test_a_split_kept_without_signatures_is_still_compared_exactly(texts):
    store = texts / "store"
    scrub.scan(texts / "train.jsonl", against=store)
    assert list(leaks(scrub.scan(texts / "test.jsonl", against=store, near_text=0.8))) == ["1"]


def test_fix_sets_the_edited_copies_aside_and_the_copy_rescans_clean(texts):
    out = texts / "clean"
    command = ["fix", texts / "train.jsonl", texts / "test.jsonl", "--out", out, "--near-text", "0.8"]
    done = subprocess.run([sys.executable, "-m", "scrub", *map(str, command)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = [json.loads(line)["text"] for line in (out / "test.clean.jsonl").read_text().splitlines()]
    assert kept == [document(n) for n in (90, 91, 92)]
    assert len((out / "train.clean.jsonl").read_text().splitlines()) == 30  # train keeps its data
    rescanned = scrub.scan([out / "train.clean.jsonl", out / "test.clean.jsonl"], near_text=0.8)
    assert not leaks(rescanned)


def test_near_text_where_no_text_is_read_is_said_and_out_of_range_is_exit_2(texts, tmp_path):
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text("".join(json.dumps({"input_ids": [n, n + 1, 3]}) + "\n" for n in range(5)))
    ids_only = scrub.scan(tokens, near_text=0.8, vocab_size=100)
    assert "near-duplicate-text: no record is a text (JSON Lines text, chat, prompt and completion): " in (
        " ".join(ids_only.summary.notes)
    )
    images = scrub.scan(Path(__file__).parent.parent / "sample_data" / "images", near_text=0.8)
    assert any(note.startswith("--near-text 0.8: not used") for note in images.summary.notes)
    assert "at most 1" in one_line_error("scan", texts / "test.jsonl", "--near-text", "1.5")


def near_copies(result) -> dict[str, tuple[str, float, dict]]:
    return {
        issue.key: (issue.details["first"]["key"], issue.details["similarity"], issue.details["group"])
        for issue in result.issues()
        if issue.check == "near-duplicate-text"
    }


@pytest.fixture
def edited_corpus(tmp_path: Path) -> Path:
    """30 documents, then an edited copy of document 3, one of that copy, an edited copy of
    document 7 and an exact copy of document 5."""
    lines = [document(number) for number in range(30)]
    lines += [edited(lines[3], 40), edited(lines[3], 40, 150), edited(lines[7], 10, 90), lines[5]]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
    return path


def test_edited_copies_inside_one_dataset_are_near_duplicate_text_in_groups(edited_corpus):
    result = scrub.scan(edited_corpus, near_text=0.8)
    found = near_copies(result)
    assert set(found) == {"31", "32", "33"}  # keys are line numbers
    assert found["31"][0] == "4" and found["33"][0] == "8"
    assert found["32"][0] in ("4", "31") and found["32"][2] == {
        "first": {"source": "corpus.jsonl", "key": "4", "index": 3},
        "size": 3,
    }
    assert all(0.8 <= similarity < 1 for _, similarity, _ in found.values())
    exact = [issue.key for issue in result.issues() if issue.check == "duplicate"]
    assert exact == ["34"]  # the same text is duplicate's, never also a near copy
    off = scrub.scan(edited_corpus)
    assert "near-duplicate-text" not in off.summary.checks and not near_copies(off)


def test_fix_sets_the_near_copies_aside_and_the_copy_rescans_clean(edited_corpus, tmp_path):
    fixed = scrub.fix(
        edited_corpus,
        out=tmp_path / "clean.jsonl",
        near_text=0.8,
        check_severity=["near-duplicate-text=error"],
    )
    assert fixed.verified and fixed.report["kept"] == 31
    lines = [json.loads(line)["text"] for line in (tmp_path / "clean.jsonl").read_text().splitlines()]
    assert lines == [document(number) for number in range(30)] + [document(5)]
    assert not near_copies(scrub.scan(tmp_path / "clean.jsonl", near_text=0.8))


def test_token_rows_of_a_store_are_compared_exactly_with_near_text_on(tmp_path):
    """A store's sequences carry no signature (their column values are zero-padded to the texts'
    width): two different sequences are never near by MinHash."""
    from scrub.checks.splits import IDENTITY_BYTES, SIGNATURE_BYTES, identity_parts

    values = np.array(
        [b"a" * 16 + b"\0" * 8, b"b" * 16 + b"\0" * 8], dtype=f"S{IDENTITY_BYTES + SIGNATURE_BYTES}"
    )
    _, _, _, signed = identity_parts(values)
    assert signed is not None and (signed == 0xFFFFFFFF).all()
    from test_megatron import write_pair

    rng = np.random.default_rng(5)
    for role in ("train", "val"):
        (tmp_path / role).mkdir()
        documents = [[rng.integers(0, 1000, 30)] for _ in range(4)]
        write_pair(tmp_path / role / f"{role}_text_document", documents)
    found = scrub.scan(
        [tmp_path / "train" / "train_text_document", tmp_path / "val" / "val_text_document"],
        near_text=0.8,
        vocab_size=1000,
        max_length=64,
    )
    assert found.summary.records == 8 and not leaks(found)


def test_the_html_report_says_how_near_each_leaked_text_is(texts):
    report = texts / "report.html"
    command = ["scan", texts / "train.jsonl", texts / "test.jsonl", "--near-text", "0.8", "--html", report]
    subprocess.run([sys.executable, "-m", "scrub", *map(str, command)], capture_output=True, cwd=texts)
    page = report.read_text()
    assert "Leaks between splits" in page and page.count("<td class=n>Jaccard 0.") == 2
    assert page.count("<td class=n>–</td>") == 1  # the exact copy


def test_the_html_report_groups_near_copies_of_texts_with_their_first(edited_corpus):
    report = edited_corpus.parent / "report.html"
    command = ["scan", edited_corpus, "--near-text", "0.8", "--html", report]
    subprocess.run(
        [sys.executable, "-m", "scrub", *map(str, command)], capture_output=True, cwd=edited_corpus.parent
    )
    page = report.read_text()
    assert "Duplicate groups" in page
    assert page.count("near-duplicate-text, Jaccard 0.") == 3
    assert page.count("<span class=muted>duplicate</span>") == 1  # the exact copy: duplicate's
