"""Megatron-LM indexed datasets: pairs written by Megatron's own ``IndexedDatasetBuilder`` (where
megatron-core and torch install) and by the layout of indexed_dataset.py; planted faults found
by id; the cleaned pair loaded back by Megatron's ``IndexedDataset``; a damaged index is one line
and exit 2; restore puts everything back."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line_error

import scrub
from scrub.readers.megatron import HEADER

CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint16": 8}


def write_pair(
    prefix: Path, documents: list[list[np.ndarray]], dtype: str = "uint16", version: int = 1
) -> None:
    """A pair per Megatron's layout: each document a list of sequences (one, unless sentences
    were split)."""
    sequences = [np.asarray(s, dtype=dtype) for document in documents for s in document]
    lengths = np.array([len(s) for s in sequences], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)]).astype(np.int64)
    pointers *= np.dtype(dtype).itemsize
    bounds = np.concatenate([[0], np.cumsum([len(d) for d in documents])]).astype(np.int64)
    Path(f"{prefix}.bin").write_bytes(b"".join(s.tobytes() for s in sequences))
    header = HEADER + struct.pack("<QBQQ", version, CODES[dtype], len(sequences), len(bounds))
    Path(f"{prefix}.idx").write_bytes(header + lengths.tobytes() + pointers.tobytes() + bounds.tobytes())


def planted(count: int = 30, seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    documents = [[rng.integers(0, 1000, int(rng.integers(2, 40)))] for _ in range(count)]
    documents[4][0][3] = 1234  # token-out-of-range with --vocab-size 1000
    documents[11] = [np.zeros(0, np.int64)]  # empty-sequence
    documents[20] = [np.array([7])]  # one token: fine, GPTDataset packs documents into samples
    return documents


def found(result) -> set[tuple[str, int, str]]:
    return {(issue.key, issue.index, issue.check) for issue in result.issues()}


PLANTED = {("4", 4, "token-out-of-range"), ("11", 11, "empty-sequence")}


def megatron_dataset():
    pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("megatron.core.datasets.indexed_dataset")


@pytest.mark.slow
def test_a_pair_megatron_wrote_is_named_by_its_prefix_and_fixed_into_one_megatron_loads(tmp_path):
    indexed = megatron_dataset()
    import torch

    prefix = tmp_path / "data" / "my_text_document"
    prefix.parent.mkdir()
    builder = indexed.IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
    documents = planted()
    for (sequence,) in documents:
        builder.add_item(torch.tensor(sequence, dtype=torch.int64))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    result = scrub.scan(prefix, vocab_size=1000, max_length=64, scheduler="sync")
    assert found(result) == PLANTED
    assert result.summary.records == 30 and {i.source for i in result.issues()} == {"my_text_document.bin"}
    for named in (f"{prefix}.bin", f"{prefix}.idx"):  # either file names the same dataset
        assert found(scrub.scan(named, vocab_size=1000, max_length=64, scheduler="sync")) == PLANTED
    fixed = scrub.fix(
        prefix, out=tmp_path / "out" / "clean", vocab_size=1000, max_length=64, scheduler="sync"
    )
    assert fixed.verified and fixed.report["kept"] == 28
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["clean.bin", "clean.idx"]
    source, clean = (
        indexed.IndexedDataset(str(prefix)),
        indexed.IndexedDataset(str(tmp_path / "out" / "clean")),
    )
    kept = [i for i in range(30) if i not in (4, 11)]
    assert len(clean) == len(kept)
    assert all(np.array_equal(clean[j], source[i]) for j, i in enumerate(kept))
    assert clean.index.dtype == np.uint16
    assert list(clean.document_indices) == list(range(29))  # two one-sequence documents dropped
    assert not found(scrub.scan(tmp_path / "out" / "clean", vocab_size=1000, max_length=64, scheduler="sync"))


@pytest.mark.slow
def test_split_sentences_keep_their_documents_and_megatron_loads_the_copy(tmp_path):
    indexed = megatron_dataset()
    prefix = tmp_path / "sentences"
    rng = np.random.default_rng(1)
    documents = [[rng.integers(0, 1000, 5) for _ in range(3)] for _ in range(4)]
    documents[1][1] = np.array([1, 2000, 3])  # sequence 4: out of range
    documents[2] = [np.array([2000]), np.array([1, 2000])]  # sequences 6 and 7: the whole document goes
    write_pair(prefix, documents)
    result = scrub.scan(prefix, vocab_size=1000, scheduler="sync")
    assert {(i.index, i.check) for i in result.issues()} == {
        (4, "token-out-of-range"),
        (6, "token-out-of-range"),
        (7, "token-out-of-range"),
    }
    assert any("sequences in 4 documents" in note for note in result.summary.notes)
    fixed = scrub.fix(prefix, out=tmp_path / "clean.bin", quarantine=True, vocab_size=1000, scheduler="sync")
    assert fixed.verified and (tmp_path / "clean.idx").exists()
    clean = indexed.IndexedDataset(str(tmp_path / "clean"))
    assert list(clean.document_indices) == [0, 3, 5, 8]  # document 1 lost a sentence, document 2 all
    quarantine = indexed.IndexedDataset(str(fixed.quarantine / "sentences"))
    assert [list(quarantine[i]) for i in range(3)] == [[1, 2000, 3], [2000], [1, 2000]]
    assert list(quarantine.document_indices) == [0, 1, 3]


def test_the_layout_written_by_hand_is_read_alike_and_negative_ids_of_int32_are_found(tmp_path):
    prefix = tmp_path / "wide"
    documents = planted()
    documents[25] = [np.array([5, -3, 8])]
    write_pair(prefix, documents, dtype="int32")
    result = scrub.scan(prefix, vocab_size=1000, scheduler="sync")
    assert found(result) == PLANTED | {("25", 25, "token-out-of-range")}
    negative = next(i for i in result.issues() if i.index == 25)
    assert negative.message == "token id -3 is negative" and negative.details["position"] == 1
    assert result.summary.to_dict()["reading"]["format"] == "megatron"


def test_a_uint16_store_for_a_larger_vocabulary_is_token_dtype_overflow(tmp_path):
    write_pair(tmp_path / "d", planted())
    result = scrub.scan(tmp_path / "d", vocab_size=70000, scheduler="sync")
    overflow = [i for i in result.issues() if i.check == "token-dtype-overflow"]
    assert [(i.source, i.key) for i in overflow] == [("d.bin", "*")]
    assert "uint16 holds ids up to 65,535" in overflow[0].message


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda idx: b"NOTANIDX\x00" + idx[9:], "no MMIDIDX header"),
        (lambda idx: idx[:9] + struct.pack("<Q", 2) + idx[17:], "version 2"),
        (lambda idx: idx[:17] + bytes([9]) + idx[18:], "unknown dtype code 9"),
        (lambda idx: idx[:-20], "truncated?"),
        (lambda idx: idx[:-8] + struct.pack("<q", 29), "end at 29, not at its 30 sequences"),
        (lambda idx: idx[:10], "no MMIDIDX header"),
    ],
)
def test_a_damaged_index_is_one_line_and_exit_2(tmp_path, damage, said):
    write_pair(tmp_path / "d", planted())
    idx = tmp_path / "d.idx"
    idx.write_bytes(damage(idx.read_bytes()))
    assert said in one_line_error("scan", tmp_path / "d", "--vocab-size", "1000")


def test_a_missing_bin_is_one_line(tmp_path):
    write_pair(tmp_path / "d", planted())
    (tmp_path / "d.bin").unlink()
    assert "d.bin is missing" in one_line_error("scan", tmp_path / "d.idx", "--format", "megatron")


def test_sequences_past_the_end_of_a_truncated_bin_are_malformed_and_the_scan_goes_on(tmp_path):
    write_pair(tmp_path / "d", planted())
    data = (tmp_path / "d.bin").read_bytes()
    (tmp_path / "d.bin").write_bytes(data[:-30])  # the last sequence(s) lose their tail
    result = scrub.scan(tmp_path / "d", vocab_size=1000, scheduler="sync")
    issues = [i for i in result.issues() if i.check == "malformed-record"]
    malformed = sorted(i.index for i in issues)
    assert malformed and malformed[-1] == 29 and "run past the end of d.bin" in issues[-1].message
    assert found(result) >= PLANTED
    fixed = scrub.fix(tmp_path / "d", out=tmp_path / "c", quarantine=True, vocab_size=1000, scheduler="sync")
    assert fixed.verified and fixed.report["quarantined"] == len(PLANTED) + len(malformed)
    assert not [i for i in scrub.scan(tmp_path / "c", vocab_size=1000, scheduler="sync").issues()]


def test_restore_puts_every_sequence_back(tmp_path):
    from scrub.fixing.restoring import restore

    write_pair(tmp_path / "d", planted())
    fixed = scrub.fix(tmp_path / "d", quarantine=True, vocab_size=1000, max_length=64, scheduler="sync")
    assert fixed.clean == tmp_path / "d.clean" and (tmp_path / "d.clean.idx").exists()
    assert fixed.report["quarantined"] == 2
    partly = restore(fixed.quarantine, keys=["d.bin:11"], scheduler="sync")
    assert partly.verified and partly.report["kept"] == 29
    whole = restore(fixed.quarantine, scheduler="sync")
    assert whole.verified and whole.report["kept"] == 30
    assert (tmp_path / "d.clean.bin").read_bytes() == (tmp_path / "d.bin").read_bytes()
    assert (tmp_path / "d.clean.idx").read_bytes() == (tmp_path / "d.idx").read_bytes()


def test_memory_mapped_partitions_cover_a_pair_in_order(tmp_path):
    """Many small partitions (``--partition-size``) give the same findings as one."""
    write_pair(tmp_path / "d", planted(200, seed=3))
    one = scrub.scan(tmp_path / "d", vocab_size=900, scheduler="sync")
    many = scrub.scan(tmp_path / "d", vocab_size=900, partition_size=7, scheduler="threads", workers=2)
    assert found(one) == found(many) and len(found(one)) > 10
    assert many.summary.records == 200
