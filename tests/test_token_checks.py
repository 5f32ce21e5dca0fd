"""The language-model checks on token and text records, judged against what PyTorch does with
the same sequence: a record flagged `no-supervised-tokens` makes a causal LM's mean loss NaN, one
not flagged does not; `token-out-of-range` flags exactly the records an embedding lookup raises
on. The records are built here as readers build them (`scrub.readers.tokenfields`)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from scrub.checks import REGISTRY
from scrub.checks.base import CheckOptions
from scrub.checks.properties import annotate, tally
from scrub.checks.tokens import dtype_overflows, token_notes
from scrub.errors import UsageError
from scrub.options.model import ScanOptions
from scrub.readers.tokenfields import fill_record
from scrub.records import Record
from scrub.vocabulary import load_vocabulary

TOKEN_CHECKS = (
    "empty-sequence",
    "no-supervised-tokens",
    "empty-attention",
    "token-out-of-range",
    "sequence-too-long",
)


def record_of(fields: dict, key: str = "1") -> Record:
    record = Record("train.jsonl", key, 0, None)
    fill_record(record, fields)
    return record


def findings(record: Record, options: CheckOptions | None = None) -> dict[str, str]:
    options = options or CheckOptions()
    annotate(record, options)
    found = {}
    for check_id in TOKEN_CHECKS:
        finding = REGISTRY[check_id].func(record, options)
        if finding is not None:
            found[check_id] = finding.message
    return found


def test_each_planted_fault_is_found_by_its_id():
    options = CheckOptions(vocab_size=100, max_length=8, max_positions=16)
    cases = {
        "empty-sequence": {"input_ids": []},
        "no-supervised-tokens": {"input_ids": [1, 2, 3], "labels": [-100, -100, -100]},
        "empty-attention": {"input_ids": [1, 2, 3], "attention_mask": [0, 0, 0]},
        "token-out-of-range": {"input_ids": [1, 100, 3]},
        "sequence-too-long": {"input_ids": list(range(10))},
    }
    for check_id, fields in cases.items():
        assert set(findings(record_of(fields), options)) == {check_id}, check_id
    assert findings(record_of({"input_ids": [1, 2, 3], "labels": [-100, 5, 6]}), options) == {}


def test_the_only_label_at_position_zero_is_shifted_away():
    """A causal LM predicts label i from position i - 1: label 0 is never counted."""
    only_first = record_of({"input_ids": [5, 6, 7], "labels": [5, -100, -100]})
    assert "no-supervised-tokens" in findings(only_first)
    assert findings(record_of({"input_ids": [5, 6, 7], "labels": [-100, -100, 7]})) == {}
    assert "no-supervised-tokens" in findings(record_of({"input_ids": [5]}))  # one token: nothing to predict


def test_truncation_cuts_the_answer_away():
    fields = {"input_ids": list(range(1, 11)), "labels": [-100] * 8 + [9, 10]}
    assert "no-supervised-tokens" not in findings(record_of(fields), CheckOptions())
    cut = findings(record_of(fields), CheckOptions(max_length=8))
    assert "no-supervised-tokens" in cut and "--max-length" in cut["no-supervised-tokens"]
    assert "sequence-too-long" in cut


def test_the_ignore_index_is_minus_100_for_tokens_and_can_be_set():
    fields = {"input_ids": [1, 2, 3], "labels": [-1, -1, -1]}
    assert "no-supervised-tokens" not in findings(record_of(fields))
    assert "token-out-of-range" in findings(record_of(fields))  # -1 is not ignored: cross_entropy raises
    assert findings(record_of(fields), CheckOptions(ignore_index=-1)).keys() == {"no-supervised-tokens"}
    assert CheckOptions().mask_ignore_index == 255 and CheckOptions().token_ignore_index == -100


def test_texts_without_a_tokenizer_find_empty_texts_and_answers():
    assert set(findings(record_of({"text": ""}))) == {"empty-sequence"}
    empty_answer = findings(record_of({"prompt": "Summarize:", "completion": ""}))
    assert set(empty_answer) == {"empty-sequence"} and "completion" in empty_answer["empty-sequence"]
    no_assistant = {"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "x"}]}
    assert set(findings(record_of(no_assistant))) == {"no-supervised-tokens"}
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    assert findings(record_of(chat)) == {}


def test_malformed_fields_are_reader_problems():
    for fields in ({"input_ids": "1 2 3"}, {"input_ids": [1.5]}, {"foo": 1}, {"messages": "hi"}):
        record = record_of(fields)
        assert record.payload is None and [p.check for p in record.problems] == ["malformed-record"]


def test_a_narrow_store_overflows_a_large_vocabulary():
    issues = dtype_overflows({"tokens.bin": "uint16", "wide.bin": "int32"}, CheckOptions(vocab_size=100_277))
    assert [(i.source, i.key, i.check) for i in issues] == [("tokens.bin", "*", "token-dtype-overflow")]
    assert dtype_overflows({"tokens.bin": "uint16"}, CheckOptions(vocab_size=65_536)) == []
    assert dtype_overflows({"tokens.bin": "uint16"}, CheckOptions()) == []


def test_notes_give_the_share_without_supervision_and_what_was_not_checked():
    stats: dict[str, Counter] = {"tokens": Counter()}
    options = CheckOptions()
    for fields in [{"input_ids": [1, 2], "labels": [-100, -100]}] + [{"input_ids": [1, 2]}] * 3:
        record = record_of(fields)
        annotate(record, options)
        tally(record, stats, options)
    notes = token_notes(stats["tokens"], options, lambda name: f"--{name}", 4)
    assert notes[0] == "token labels: ignore index -100 (by default for token labels)"
    assert any("only negative ids were checked" in note for note in notes)
    share = next(note for note in notes if "no token the loss counts" in note)
    assert (
        "1 of 4 token records (25.0%) has no token" in share and "batch of 4" in share and "0.0039" in share
    )


def write_tokenizer(folder, words: list[str], config: dict | None = None):
    """A word-level tokenizer.json built here (nothing downloaded), and a config.json."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {word: number for number, word in enumerate(["[UNK]", *words])}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    folder.mkdir(exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_tokenizer_judges_texts_as_the_trainer_sees_them(tmp_path):
    config = {"vocab_size": 5, "n_positions": 6}
    model = write_tokenizer(tmp_path / "model", ["a", "b", "c", "answer"], config)
    options = ScanOptions.build(tokenizer=str(model), max_length=4).checks
    assert (options.vocab_size, options.max_positions) == (5, 6)
    long_prompt = record_of({"prompt": "a b c a", "completion": "answer"})
    found = findings(long_prompt, options)
    assert set(found) == {"no-supervised-tokens", "sequence-too-long"}
    assert findings(record_of({"prompt": "a b", "completion": "answer"}), options) == {}
    assert set(findings(record_of({"text": "a b c a b c a"}), options)) == {"sequence-too-long"}
    too_long = findings(record_of({"text": "a b c a b c a"}), ScanOptions.build(tokenizer=str(model)).checks)
    assert "positions" in too_long["sequence-too-long"]


def test_a_tokenizer_larger_than_the_model_is_said(tmp_path):
    model = write_tokenizer(tmp_path / "model", ["a", "b", "c"], {"vocab_size": 3})
    load_vocabulary.cache_clear()
    assert "tokens added without resizing" in load_vocabulary(str(model)).notes[0]
    assert load_vocabulary(str(model / "tokenizer.json")).size == 4


@pytest.mark.parametrize(
    "path, message",
    [
        ("missing", "no such file or folder"),
        ("empty", "neither tokenizer.json nor config.json"),
        ("bad.json", "cannot read the file"),
        ("other.json", "neither a tokenizer.json"),
    ],
)
def test_a_bad_tokenizer_path_is_one_line(tmp_path, path, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "other.json").write_text('{"x": 1}')
    with pytest.raises(UsageError, match=message):
        ScanOptions.build(tokenizer=str(tmp_path / path))


@pytest.mark.torch
def test_the_verdicts_agree_with_pytorch_on_random_records():
    """The judge: a causal LM's cross-entropy is NaN exactly where `no-supervised-tokens` says so,
    and the embedding raises exactly where `token-out-of-range` does."""
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    vocab, generator = 20, np.random.default_rng(0)
    embedding = torch.nn.Embedding(vocab, 4)
    options = CheckOptions(vocab_size=vocab, max_length=6)
    for _ in range(300):
        length = int(generator.integers(1, 9))
        ids = generator.integers(0, vocab + 1 if generator.random() < 0.2 else vocab, size=length)
        labels = np.where(generator.random(length) < 0.7, -100, ids)
        found = findings(record_of({"input_ids": ids.tolist(), "labels": labels.tolist()}), options)
        cut_ids, cut_labels = torch.tensor(ids[:6]), torch.tensor(labels[:6])
        try:
            hidden = embedding(cut_ids)
        except IndexError:
            assert "token-out-of-range" in found
            continue
        assert "token-out-of-range" not in found or int(labels[labels != -100].max(initial=0)) >= vocab
        logits = hidden @ torch.randn(4, vocab)
        loss = functional.cross_entropy(logits[:-1], cut_labels[1:], ignore_index=-100)
        assert bool(torch.isnan(loss)) == ("no-supervised-tokens" in found), (ids, labels, found)
