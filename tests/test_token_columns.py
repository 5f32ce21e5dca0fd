"""Hugging Face datasets of language-model records, written by `datasets` itself: a
``save_to_disk`` folder (Arrow) and the Hub's ``data/*.parquet``, with token columns
(``input_ids``, ``labels``, ``attention_mask``) or texts (``text``, ``messages``,
``prompt``/``completion``). Planted faults are found by check id, the cleaned copy is what
``datasets`` loads back with exactly the kept rows, and a restore gives back the source."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import one_line_error

import scrub
from scrub.fixing.restoring import restore

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
datasets.disable_progress_bars()

#: rows with one planted fault each (vocabulary of 50), by row: the check that finds it
PLANTED = {
    1: "token-out-of-range",  # id 77 >= 50
    3: "no-supervised-tokens",  # labels all -100
    4: "empty-attention",  # a mask of zeros
    6: "empty-sequence",  # no token at all
}


def token_rows() -> dict[str, list[list[int]]]:
    ids = [[i + 1, i + 2, i + 3, i + 4] for i in range(8)]
    labels = [list(row) for row in ids]
    mask = [[1] * 4 for _ in range(8)]
    ids[1][2] = labels[1][2] = 77
    labels[3] = [-100] * 4
    mask[4] = [0] * 4
    ids[6], labels[6], mask[6] = [], [], []
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def kept_rows(rows: dict[str, list], drop) -> dict[str, list]:
    return {name: [v for i, v in enumerate(values) if i not in drop] for name, values in rows.items()}


def found(result) -> set[tuple[str, str]]:
    return {(issue.key, issue.check) for issue in result.issues()}


def test_a_save_to_disk_folder_of_token_columns(tmp_path):
    rows = token_rows()
    source = tmp_path / "sft"
    datasets.Dataset.from_dict(rows).save_to_disk(str(source))
    result = scrub.scan(source, vocab_size=50, scheduler="sync")
    assert result.summary.dataset.format == "arrow"
    assert found(result) == {(str(row), check) for row, check in PLANTED.items()}
    assert any("token ids from 'input_ids', labels from 'labels'" in note for note in result.summary.notes)

    fixed = scrub.fix(source, quarantine=True, vocab_size=50, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 4 and fixed.report["quarantined"] == 4
    clean = datasets.load_from_disk(str(fixed.clean))
    assert clean.to_dict() == kept_rows(rows, PLANTED)
    held = datasets.load_from_disk(str(fixed.quarantine / "sft"))  # the quarantine loads too
    assert held["input_ids"] == [rows["input_ids"][row] for row in sorted(PLANTED)]
    fingerprints = {
        json.loads((folder / "state.json").read_text())["_fingerprint"]
        for folder in (source, fixed.clean, fixed.quarantine / "sft")
    }
    assert len(fingerprints) == 3  # datasets' caches are keyed by it: each holds other rows

    whole = restore(fixed.quarantine, scheduler="sync")
    assert whole.verified and whole.report["kept"] == 8
    assert datasets.load_from_disk(str(whole.dataset)).to_dict() == rows


def test_a_dataset_loaded_from_the_hub_layout_keeps_its_split_sizes(tmp_path):
    """``load_dataset`` verifies the split sizes a save_to_disk ``dataset_info.json`` and a Hub
    card's YAML header record: the cleaned copy's say what it holds."""
    rows = token_rows()
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    datasets.Dataset.from_dict(rows).to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"))
    test = kept_rows(rows, PLANTED)  # the clean rows, other sequences (the same would be duplicates)
    for name in ("input_ids", "labels"):
        test[name] = [[token + 20 if token >= 0 else token for token in row] for row in test[name]]
    datasets.Dataset.from_dict(test).to_parquet(str(hub / "data" / "test-00000-of-00001.parquet"))
    (hub / "README.md").write_text(
        "---\ndataset_info:\n  splits:\n  - name: train\n    num_bytes: 500\n    num_examples: 8\n"
        "  - name: test\n    num_bytes: 300\n    num_examples: 4\n  dataset_size: 800\n"
        "configs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n"
        "  - split: test\n    path: data/test-*\n---\n# A card\n"
    )
    result = scrub.scan(hub, vocab_size=50, scheduler="sync")
    assert result.summary.dataset.format == "parquet"
    assert found(result) == {(str(row), check) for row, check in PLANTED.items()}
    fixed = scrub.fix(hub, vocab_size=50, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 8
    cache = str(tmp_path / "cache")
    loaded = datasets.load_dataset(
        "parquet", data_files=str(fixed.clean / "data" / "train-*.parquet"), cache_dir=cache
    )
    assert loaded["train"].to_dict() == kept_rows(rows, PLANTED)
    card = datasets.load_dataset(str(fixed.clean), cache_dir=cache)  # verifies the card's sizes
    assert card.num_rows == {"train": 4, "test": 4}
    assert (fixed.clean / "README.md").read_text().endswith("---\n# A card\n")

    # a split saved from it: its dataset_info.json records the split's size
    saved = tmp_path / "saved"
    datasets.load_dataset("parquet", data_files=str(hub / "data" / "train-*"), cache_dir=cache)[
        "train"
    ].save_to_disk(str(saved))
    fixed = scrub.fix(saved, vocab_size=50, scheduler="sync")
    info = json.loads((fixed.clean / "dataset_info.json").read_text())
    assert info["splits"]["train"]["num_examples"] == 4
    assert datasets.load_from_disk(str(fixed.clean)).num_rows == 4


def test_a_uint16_store_for_a_larger_vocabulary_overflows(tmp_path):
    features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("uint16"))})
    source = tmp_path / "u16"
    datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 65535]]}, features=features).save_to_disk(
        str(source)
    )
    opened = scrub.api.open_dataset(source, scrub.options.model.ScanOptions.build())
    assert opened.info.token_dtypes == {"data-00000-of-00001.arrow": "uint16"}
    record = next(iter(opened.reader.read(opened.partitions[0])))
    assert record.payload.dtype == np.uint16  # the store's own dtype, a view of its values
    result = scrub.scan(source, vocab_size=70000, scheduler="sync")
    assert found(result) == {("*", "token-dtype-overflow")}
    assert found(scrub.scan(source, vocab_size=60000, scheduler="sync")) == {
        ("1", "token-out-of-range")  # 65535 >= 60000
    }


def test_text_chat_and_prompt_completion_columns(tmp_path):
    texts = tmp_path / "texts"
    texts.mkdir()
    datasets.Dataset.from_dict({"text": ["hello", "", "world"], "source": ["a", "b", "c"]}).to_parquet(
        str(texts / "train.parquet")
    )
    result = scrub.scan(texts, scheduler="sync")
    assert found(result) == {("1", "empty-sequence")}
    assert any("columns not checked: source" in note for note in result.summary.notes)

    chat = [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        [{"role": "user", "content": "hi"}],  # nothing the loss counts
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}],  # empty answer
    ]
    source = tmp_path / "chat"
    datasets.Dataset.from_dict({"messages": chat}).save_to_disk(str(source))
    assert found(scrub.scan(source, scheduler="sync")) == {
        ("1", "no-supervised-tokens"),
        ("2", "empty-sequence"),
    }
    fixed = scrub.fix(source, scheduler="sync")
    assert datasets.load_from_disk(str(fixed.clean))["messages"] == chat[:1]

    pairs = tmp_path / "pairs.parquet"
    datasets.Dataset.from_dict({"prompt": ["a", "b"], "completion": ["c", ""]}).to_parquet(str(pairs))
    assert found(scrub.scan(pairs, scheduler="sync")) == {("1", "empty-sequence")}


def test_columns_named_by_the_options(tmp_path):
    rows = {
        "tokens": [[1, 2], [3, 99]],
        "targets": [[1, 2], [-100, -100]],
        "body": ["x", ""],
        "embedding": [[0.5, 0.5], [1.0, 2.0]],
    }
    path = tmp_path / "named.parquet"
    datasets.Dataset.from_dict(rows).to_parquet(str(path))
    result = scrub.scan(path, data_key="tokens", label_key="targets", vocab_size=50, scheduler="sync")
    assert found(result) == {("1", "token-out-of-range"), ("1", "no-supervised-tokens")}
    assert found(scrub.scan(path, data_key="body", scheduler="sync")) == {("1", "empty-sequence")}
    # a numeric list column named alone is numbers, as before; so is the table by default
    assert (
        scrub.scan(path, data_key="embedding", scheduler="sync").summary.dataset.files["named.parquet"][
            "kind"
        ]
        == "list"
    )
    assert scrub.scan(path, scheduler="sync").summary.dataset.files["named.parquet"]["kind"] == "list"
    said = one_line_error("scan", path, "--data-key", "tokens", "--label-key", "embedding")
    assert "--label-key embedding: the column holds list<" in said and "not token labels" in said
    said = one_line_error("scan", path, "--data-key", "body", "--label-key", "targets")
    assert "the texts of 'body' have no token labels" in said


def test_null_and_damaged_rows_are_findings(tmp_path):
    ids = pa.array([[1, 2], None, [3, None], [4, 5]], pa.list_(pa.int32()))
    labels = pa.array([[1, 2], [1], None, [4, 5]], pa.list_(pa.int64()))
    path = tmp_path / "nulls.arrow"
    table = pa.table({"input_ids": ids, "labels": labels})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table, max_chunksize=3)
    result = scrub.scan(path, scheduler="sync")
    assert found(result) == {("1", "malformed-record"), ("2", "malformed-record")}
    fixed = scrub.fix(path, scheduler="sync")
    assert fixed.verified
    assert pa.ipc.open_stream(str(fixed.clean)).read_all().column("input_ids").to_pylist() == [[1, 2], [4, 5]]
