"""Counts in the tool's own words agree with their number, at the source of each message: "(1
dataset)", "with 1 other record", "the assistant message is empty", "read as 1 window", and
the helpers that say them (`scrub.wording`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import SAMPLES
from typer.testing import CliRunner

import scrub
from scrub.cli import app
from scrub.wording import agreeing, counted, plural

runner = CliRunner()


@pytest.mark.parametrize(
    ("count", "phrase", "said"),
    [
        (1, "dataset", "1 dataset"),
        (2, "dataset", "2 datasets"),
        (1, "other record", "1 other record"),
        (3, "other record", "3 other records"),
        (2, "document index", "2 document indices"),
        (1, "document index", "1 document index"),
        (2, "class", "2 classes"),
        (2, "loss", "2 losses"),
        (4, "more label", "4 more labels"),
    ],
)
def test_counted_phrases(count, phrase, said):
    assert counted(count, phrase) == said


def test_plural_and_agreement():
    assert plural("index in the file") == "indices in the file"
    assert agreeing(1, "holds", "hold") == "holds" and agreeing(0, "holds", "hold") == "hold"


def test_a_folder_of_one_megatron_pair_is_one_dataset():
    result = runner.invoke(app, ["scan", str(SAMPLES / "megatron"), "--scheduler", "sync"])
    assert result.exit_code in (0, 1), result.output
    assert "megatron (1 dataset)" in result.output and "1 datasets" not in result.output


def test_an_empty_answer_is_said_with_its_number(tmp_path):
    lines = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]},
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "and?"},
                {"role": "assistant", "content": ""},
            ]
        },
        {"prompt": "say it", "completion": ""},
    ]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = {
        issue.key: issue.message for issue in scrub.scan(tmp_path / "chat.jsonl", scheduler="sync").issues()
    }
    assert found == {
        "1": "empty answer: the assistant message is empty",
        "2": "empty answer: the assistant messages are empty",
        "3": "empty answer: the completion is empty",
    }


def test_a_token_file_of_one_window(tmp_path):
    np.arange(50, dtype=np.uint16).tofile(tmp_path / "train.bin")
    result = scrub.scan(tmp_path / "train.bin", max_length=64, scheduler="sync")
    assert "train.bin: 50 tokens read as 1 window of 64 (--max-length)" in " ".join(result.summary.notes)


@pytest.mark.torch
def test_a_joint_pair_names_one_other_record(tmp_path):
    """Two rows fine alone whose float16 sum overflows together (as tests/test_guard.py plants
    them): each is named "only together with 1 other record"."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from scrub.guard import NanGuard

    inputs = torch.rand(64, 1)
    inputs[[10, 11]] = 250.0
    model = nn.Linear(1, 1, bias=False)
    nn.init.ones_(model.weight)

    def squared_error(outputs, targets):
        return ((outputs - targets[:, None].to(outputs.dtype)) ** 2).sum() / len(targets)

    autocast = {"device_type": "cpu", "dtype": torch.float16}
    guard = NanGuard(model, squared_error, manifest=None, autocast=autocast)
    loader = guard.wrap(DataLoader(TensorDataset(inputs, torch.zeros(64)), batch_size=64))
    for inputs_batch, targets in loader:
        with torch.autocast(**autocast):
            loss = squared_error(model(inputs_batch), targets)
        loss.backward()
        assert not guard.ok(loss)  # the step is skipped, the pair named
    messages = [issue.message for issue in guard.issues]
    assert len(messages) == 2 and all("only together with 1 other record of its batch" in m for m in messages)


def test_one_new_error_against_a_baseline(clean_folder):
    first = runner.invoke(app, ["scan", str(clean_folder), "--scheduler", "sync", "--manifest", "base.jsonl"])
    assert first.exit_code == 0, first.output
    (clean_folder / "a" / "cut.jpg").write_bytes((clean_folder / "a" / "0.jpg").read_bytes()[:300])
    again = runner.invoke(app, ["scan", str(clean_folder), "--scheduler", "sync", "--baseline", "base.jsonl"])
    assert "(1 new or reappeared error)" in again.output, again.output
