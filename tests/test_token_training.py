"""Real training is the judge of the language-model checks: a tiny GPT-2 built from a config
(nothing downloaded) goes NaN or raises on exactly the records a scan flags as errors, and
trains finite on the cleaned copy `fix` writes, loaded by Hugging Face `datasets`.

Labels are as `DataCollatorForLanguageModeling` makes them for records without their own: the
input ids where the attention mask is 1, -100 elsewhere; GPT-2 shifts them by one itself."""

from __future__ import annotations

import json

import numpy as np
import pytest

import scrub

pytestmark = [pytest.mark.slow, pytest.mark.torch]

VOCAB, POSITIONS = 50, 32


def planted() -> dict[str, dict]:
    return {
        "all labels ignored": {"input_ids": [1, 2, 3, 4], "labels": [-100, -100, -100, -100]},
        "only label at position 0": {"input_ids": [1, 2, 3, 4], "labels": [1, -100, -100, -100]},
        "id beyond the vocabulary": {"input_ids": [1, 2, VOCAB, 4]},
        "label beyond the vocabulary": {"input_ids": [1, 2, 3, 4], "labels": [1, 2, VOCAB + 5, 4]},
        "longer than the positions": {"input_ids": [7] * (POSITIONS + 9)},
        "empty": {"input_ids": []},
        "one token": {"input_ids": [5]},
        "nothing attended": {"input_ids": [1, 2, 3, 4], "attention_mask": [0, 0, 0, 0]},
    }


def labels_of(record: dict) -> list[int]:
    if "labels" in record:
        return record["labels"]
    mask = record.get("attention_mask") or [1] * len(record["input_ids"])
    return [token if attended else -100 for token, attended in zip(record["input_ids"], mask)]


def outcome(model, record: dict) -> str:
    """What one training step on this record alone does: "finite", "nan" or the error raised."""
    import torch

    ids = torch.tensor([record["input_ids"]], dtype=torch.long)
    mask = torch.tensor([record.get("attention_mask") or [1] * ids.shape[1]])
    try:
        loss = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([labels_of(record)])).loss
    except (IndexError, RuntimeError) as error:
        return type(error).__name__
    return "finite" if bool(torch.isfinite(loss)) else "nan"


def tiny_gpt2():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1,
        n_head=2,
        n_embd=16,
        vocab_size=VOCAB,
        n_positions=POSITIONS,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config), config


def train(model, records: list[dict], steps: int = 30) -> list[float]:
    """AdamW over batches of 4, padded as a collator pads (id 0, mask 0, label -100)."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        batch = [records[(step * 4 + k) % len(records)] for k in range(4)]
        width = max(len(r["input_ids"]) for r in batch)
        ids = torch.zeros((4, width), dtype=torch.long)
        mask = torch.zeros((4, width), dtype=torch.long)
        labels = torch.full((4, width), -100)
        for row, record in enumerate(batch):
            n = len(record["input_ids"])
            ids[row, :n] = torch.tensor(record["input_ids"])
            mask[row, :n] = torch.tensor(record.get("attention_mask") or [1] * n)
            labels[row, :n] = torch.tensor(labels_of(record))
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    return losses


def test_gpt2_fails_on_exactly_the_flagged_records_and_trains_on_the_cleaned_copy(tmp_path):
    pytest.importorskip("scrub.readers.jsonl")
    datasets = pytest.importorskip("datasets")
    model, config = tiny_gpt2()
    generator = np.random.default_rng(1)
    sizes = generator.integers(3, 20, 40)
    good = [{"input_ids": generator.integers(1, VOCAB, size=int(n)).tolist()} for n in sizes]
    bad = planted()
    lines = good[:20] + list(bad.values()) + good[20:]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    model_folder = tmp_path / "model"
    model_folder.mkdir()
    (model_folder / "config.json").write_text(config.to_json_string())

    result = scrub.scan(path, tokenizer=str(model_folder), scheduler="sync")
    flagged = {int(issue.key) for issue in result.issues() if issue.severity.value == "error"}
    failing = {number for number, line in enumerate(lines, 1) if outcome(model, line) != "finite"}
    assert flagged == failing == set(range(21, 21 + len(bad)))

    scrub.fix(path, out=tmp_path / "clean.jsonl", tokenizer=str(model_folder), scheduler="sync")
    cleaned = datasets.load_dataset("json", data_files=str(tmp_path / "clean.jsonl"), split="train")
    kept = [{k: v for k, v in row.items() if v is not None} for row in cleaned]
    assert kept == good
    assert all(np.isfinite(train(model, kept)))
    try:  # the source does not train: a bad record raises, or a step goes NaN
        losses = train(tiny_gpt2()[0], lines, steps=len(lines))
    except (IndexError, RuntimeError):
        return
    assert not all(np.isfinite(losses)), "trained through every bad record"
