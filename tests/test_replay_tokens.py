"""The dummy-loss replay on token data: sequences, the embedding language model, PyTorch language
models, and the replay inside a scan.

The built-in model is checked against a float64 reference written here, position by position,
and against PyTorch (``nn.Embedding``, a linear head, ``F.cross_entropy(ignore_index=-100)`` on
the flattened batch, as Hugging Face reduces); the records it names against the token checks
(`no-supervised-tokens`, `empty-sequence`) and against real training: a tiny GPT-2 built from a
config (nothing downloaded) whose own loss goes NaN on exactly those records.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import scrub
from scrub import pipeline
from scrub.checks.base import CheckOptions, Finding
from scrub.checks.tokens import empty_attention, empty_sequence, no_supervised_tokens, token_out_of_range
from scrub.errors import UsageError
from scrub.manifest import dumps
from scrub.options.model import ReplayOptions
from scrub.records import Record
from scrub.replay import ReplayConfig, Replayer
from scrub.replay.stage import ReplayStage, ReplayWork, TokenExtent, TokenExtentWork, replay_tokens
from scrub.replay.tokens import (
    EMBEDDING_DIM,
    MODEL_VOCABULARY,
    NOT_COUNTED,
    EmbeddingLM,
    Sequences,
    TokenSpec,
    featurize_token_records,
)

V = 40
IGNORE = -100


def tokens(key: int, ids, labels=None, mask=None, source: str = "train.jsonl") -> Record:
    meta: dict = {"kind": "tokens"}
    if labels is not None:
        meta["token_labels"] = np.asarray(labels, np.int64)
    if mask is not None:
        meta["attention_mask"] = np.asarray(mask, np.int64)
    return Record(source, str(key), key, np.asarray(ids, np.int32), None, meta)  # type: ignore[arg-type]


def corpus(seed: int = 0) -> tuple[list[Record], dict[int, str]]:
    """Token records with planted faults: {index: what} of those the replay must name, plus an id
    beyond V (index 40: token-out-of-range's, skipped) and a text (index 90: skipped)."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(100):
        ids = rng.integers(0, V, int(rng.integers(4, 20)))
        records.append(tokens(i, ids))
    ids = records[3].payload
    records[3] = tokens(3, ids, np.full(len(ids), IGNORE))  # every label ignored
    ids = records[17].payload
    records[17] = tokens(17, ids, np.r_[ids[:1], np.full(len(ids) - 1, IGNORE)])  # only label 0: shifted away
    records[29] = tokens(29, [])  # an empty sequence
    ids = records[55].payload
    records[55] = tokens(55, ids, mask=np.zeros(len(ids)))  # padding only: no label from its ids
    # a prompt of 12 tokens, its answer after --max-length 10 (see below)
    records[71] = tokens(71, np.arange(14) % V, np.r_[np.full(12, IGNORE), [5, 6]])
    records[40] = tokens(40, np.r_[records[40].payload, V + 3])
    records[90] = Record("train.jsonl", "90", 90, (("text", "hello", True),), None, {"kind": "text"})
    planted = {
        3: "no-supervised-tokens",
        17: "no-supervised-tokens",
        29: "empty-sequence",
        55: "empty-attention",  # labelled by its mask, which is empty
    }
    return records, planted


def spec(**options) -> TokenSpec:
    return TokenSpec(V, replace(CheckOptions(), **options))


def replay(records, batch_size=16, model="linear", precision="float32", chunks=None, **options):
    features = featurize_token_records(records, spec(**options))
    longest = int(features.X.lengths().max())
    replayer = Replayer(
        ReplayConfig(batch_size=batch_size, model=model, precision=precision),
        V,
        EMBEDDING_DIM,
        input_shape=(longest,),
        tokens=True,
    )
    bounds = chunks or [0, len(features)]
    issues = []
    for low, high in zip(bounds, bounds[1:]):
        issues += replayer.feed(features.identities[low:high], features.X[low:high], features.y[low:high])
    return replayer, issues + replayer.finish(), features


# -- sequences ----------------------------------------------------------------------------------


def test_records_become_shifted_targets_as_the_token_checks_judge_them():
    records = [
        tokens(0, [5, 6, 7, 8]),  # no labels: its ids, shifted
        tokens(1, [5, 6, 7, 8], [IGNORE, IGNORE, 7, 8]),  # a prompt and an answer
        tokens(2, [5, 6, 7, 8], mask=[1, 1, 1, 0]),  # the padded position is not a label
        tokens(3, [5, 6, 7, 8, 9, 10], [IGNORE] * 4 + [9, 10]),  # the answer cut off by --max-length 4
        tokens(4, [5, 6, 7], [5, 6]),  # labels shorter than the ids: no collator stacks them
        tokens(5, [5, -1, 7]),  # a negative id: token-out-of-range's
        tokens(6, [5, 6, 7], [IGNORE, 6, V]),  # a label beyond V: token-out-of-range's
        Record("t", "7", 7, None, None, {}),
        Record("t", "8", 8, (("prompt", "2+2?", False), ("completion", "4", True)), None, {"kind": "text"}),
    ]
    features = featurize_token_records(records, spec(max_length=4))
    X = features.X
    assert [key for _, key, _ in features.identities] == ["0", "1", "2", "3"]
    assert [t.tolist() for t in X.targets] == [
        [6, 7, 8, NOT_COUNTED],
        [NOT_COUNTED, 7, 8, NOT_COUNTED],
        [6, 7, NOT_COUNTED, NOT_COUNTED],
        [NOT_COUNTED] * 4,
    ]
    assert X.ids[3].tolist() == [5, 6, 7, 8] and X.counted().tolist() == [3, 2, 2, 0]
    assert features.skipped == {"length": 1, "token": 2, "payload": 1, "text": 1}
    options = replace(CheckOptions(), vocab_size=V, max_length=4)
    for record in records[5:7]:  # what the replay skips as "token", the check names
        assert isinstance(token_out_of_range(record, options), Finding)
    picked = X[np.array([3, 0])]
    assert isinstance(picked, Sequences) and picked.ids[1].tolist() == [5, 6, 7, 8]
    assert len(Sequences.concatenate([X[:1], X[2:]])) == 3


# -- the model -----------------------------------------------------------------------------------


def reference_pass(model: EmbeddingLM, X: Sequences):
    """float64, position by position: per-record mean losses, the batch's mean loss, and the
    gradients of the batch's mean over its counted tokens."""
    E, W, b = (p.astype(np.float64) for p in (model.embedding, model.weight, model.bias))
    gE, gW, gb = np.zeros_like(E), np.zeros_like(W), np.zeros_like(b)
    total = int(X.counted().sum())
    sums, counts = np.zeros(len(X)), np.zeros(len(X))
    for r in range(len(X)):
        for token, target in zip(X.ids[r], X.targets[r]):
            if target < 0:
                continue
            z = E[token] @ W + b
            top = z.max()
            lse = top + np.log(np.exp(z - top).sum())
            sums[r] += lse - z[target]
            counts[r] += 1
            delta = np.exp(z - lse)
            delta[target] -= 1
            delta /= total
            gW += np.outer(E[token], delta)
            gb += delta
            gE[token] += W @ delta
    with np.errstate(invalid="ignore"):
        return sums / counts, sums.sum() / total, gE, gW, gb


def test_the_language_model_computes_what_the_reference_computes():
    records = corpus()[0][:30]
    features = featurize_token_records(records, spec())
    model = EmbeddingLM(V, seed=3)
    found = model.run(features.X)
    losses, mean, gE, gW, gb = reference_pass(model, features.X)
    np.testing.assert_allclose(found.losses, losses, rtol=1e-5, atol=1e-6)  # NaN where the reference's is
    assert np.isnan(found.losses[[3, 17, 29]]).all() and np.isfinite(found.mean_loss)
    assert found.mean_loss == pytest.approx(mean, rel=1e-6)
    np.testing.assert_allclose(found.grad_w, gW, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(found.grad_b, gb, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(found.grad_rows, gE[found.rows], rtol=1e-4, atol=1e-8)
    assert not np.delete(gE, found.rows, axis=0).any()  # the other rows have no gradient
    assert found.nonfinite() == ["loss"] and not found.rows_finite()[[3, 17, 29]].any()


def test_the_logits_are_computed_in_blocks_exactly(monkeypatch):
    import scrub.replay.tokens as module

    records = corpus()[0][:30]
    features = featurize_token_records(records, spec())
    whole = EmbeddingLM(V, seed=1).run(features.X)
    monkeypatch.setattr(module, "LOGIT_BLOCK", 3 * V)  # three input ids at a time
    blocks = EmbeddingLM(V, seed=1).run(features.X)
    np.testing.assert_allclose(whole.losses, blocks.losses, rtol=1e-6)  # BLAS sums by its shapes
    np.testing.assert_allclose(whole.grad_w, blocks.grad_w, rtol=1e-4, atol=1e-7)  # summed in another order
    np.testing.assert_allclose(whole.grad_rows, blocks.grad_rows, rtol=1e-4, atol=1e-9)


def hashed(X: Sequences, classes: int) -> Sequences:
    """The sequences with each token taken as its hash, as the built-in model takes them."""
    return Sequences(
        tuple(ids % classes for ids in X.ids),
        tuple(np.where(t >= 0, t % classes, t) for t in X.targets),
        X.masks,
    )


def test_a_large_vocabulary_is_hashed_into_the_models_own():
    """Above its vocabulary the model is exactly itself on a vocabulary of C, each token taken
    mod C: a pass costs C x C logits at most, whatever V is."""
    records = corpus()[0][:40]
    large = featurize_token_records(records, TokenSpec(32_000, CheckOptions()))
    big = EmbeddingLM(32_000, seed=4, hashed_vocabulary=16)
    assert big.hashed and big.classes == 16 and big.embedding.shape == (16, EMBEDDING_DIM)
    assert big.vocab_size == 32_000
    found = big.run(large.X)
    small = EmbeddingLM(16, seed=4)
    expected = small.run(hashed(large.X, 16))
    assert not small.hashed
    np.testing.assert_array_equal(found.losses, expected.losses)
    np.testing.assert_array_equal(found.grad_w, expected.grad_w)
    np.testing.assert_array_equal(found.grad_rows, expected.grad_rows)
    assert found.rows.tolist() == expected.rows.tolist()
    assert np.isnan(found.losses[[3, 17, 29]]).all()  # a mean over no token: no hash changes that


# -- the replay ----------------------------------------------------------------------------------


def test_the_replay_names_exactly_the_records_whose_own_loss_is_nan():
    records, planted = corpus()
    replayer, issues, features = replay(records)
    assert {i.index: i.details["confirms"] for i in issues} == planted
    assert all(i.check == "loss-nonfinite" and i.severity.value == "error" for i in issues)
    first = next(i for i in issues if i.index == 3)
    assert first.details["counted_tokens"] == 0 and first.details["model"] == "lm"
    assert "mean over 0 counted tokens" in first.message
    # the token checks name the same records (and the replay nothing else)
    options = CheckOptions()
    checked = {
        r.index
        for r in records
        if r.index not in (40, 90)
        and any(check(r, options) for check in (no_supervised_tokens, empty_sequence, empty_attention))
    }
    assert checked == set(planted)
    assert features.skipped == {"token": 1, "text": 1}
    stats = replayer.stats
    assert stats.records_replayed == 98 and stats.records_applied == 98 - len(planted)
    assert stats.batches == 7 and stats.batches_applied == 7 and np.isfinite(stats.final_loss)
    for issue in issues:
        json.loads(dumps(issue))  # manifest-ready: no NaN in the details


def test_max_length_cuts_an_answer_away():
    records, planted = corpus()
    _, issues, _ = replay(records, max_length=10)
    assert {i.index for i in issues} == set(planted) | {71}
    records, _ = corpus()  # fresh records: a record keeps what the checks computed of it
    _, issues, _ = replay(records, max_length=13)  # one answer token is left: it counts
    assert {i.index for i in issues} == set(planted)


@pytest.mark.parametrize("chunks", [[0, 1, 2, 50, 98], [0, 7, 14, 21, 60, 61, 98], [0, 98]])
def test_same_result_whatever_the_chunking(chunks):
    records, _ = corpus()
    whole, expected, _ = replay(records, batch_size=8)
    pieces, issues, _ = replay(records, batch_size=8, chunks=chunks)
    assert [i.to_dict() for i in issues] == [i.to_dict() for i in expected]
    assert np.array_equal(pieces.model.weight, whole.model.weight)
    assert np.array_equal(pieces.model.embedding, whole.model.embedding)
    assert pieces.stats == whole.stats


def test_a_batch_of_nothing_but_unsupervised_records_moves_nothing():
    records = [tokens(i, [1, 2, 3], [IGNORE] * 3) for i in range(4)] + [tokens(4, [1, 2, 3])]
    replayer, issues, _ = replay(records, batch_size=4)
    assert [i.index for i in issues] == [0, 1, 2, 3]
    assert replayer.stats.batches_skipped == 1 and replayer.stats.records_applied == 1


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_mixed_precision_finds_the_same(precision):
    records, planted = corpus()
    _, issues, _ = replay(records, precision=precision)
    assert {i.index for i in issues} == set(planted)
    assert issues[0].details["precision"] == precision


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_a_vocabulary_of_32000_finds_the_same(precision):
    """The issue's vocabulary: ids spread over 32,000 tokens, the model hashed into its 1,024."""
    records, planted = corpus()
    for record in records:
        if record.meta.get("kind") == "tokens" and record.index != 40:
            ids = np.asarray(record.payload, np.int64) * 797  # < 40 * 797 = 31,880
            labels = record.meta.get("token_labels")
            if labels is not None:
                record.meta["token_labels"] = np.where(labels == IGNORE, IGNORE, labels * 797)
            record.payload = ids
    features = featurize_token_records(records, TokenSpec(32_000, CheckOptions()))
    replayer = Replayer(ReplayConfig(batch_size=16, precision=precision), 32_000, EMBEDDING_DIM, tokens=True)
    assert replayer.model.classes == MODEL_VOCABULARY
    issues = replayer.feed(features.identities, features.X, features.y) + replayer.finish()
    assert {i.index: i.details["confirms"] for i in issues} == planted
    assert replayer.stats.records_applied == 99 - len(planted)  # 40 is below 32,000 now: replayed
    assert replayer.stats.first_loss == pytest.approx(np.log(MODEL_VOCABULARY), rel=0.01)


def test_the_replay_learns():
    """A sequence repeated: the loss falls, the replay trains as well as judges."""
    records = [tokens(i, np.arange(32) % 8) for i in range(400)]
    config = ReplayConfig(batch_size=8, lr=1.0)
    replayer = Replayer(config, V, EMBEDDING_DIM, tokens=True)
    features = featurize_token_records(records, spec())
    assert replayer.feed(features.identities, features.X, features.y) + replayer.finish() == []
    assert replayer.stats.final_loss < 0.5 * replayer.stats.first_loss


def not_a_model(X, y):
    return np.zeros(len(y))


def test_models_of_vectors_are_refused_on_tokens():
    with pytest.raises(UsageError, match="--model l2 is a model of vectors"):
        Replayer(ReplayConfig(model="l2"), V, EMBEDDING_DIM, tokens=True)
    with pytest.raises(UsageError, match="names a factory of a language model"):
        Replayer(ReplayConfig(model="test_replay_tokens:not_a_model"), V, EMBEDDING_DIM, tokens=True)


# -- the stage, as a scan runs it ------------------------------------------------------------------


class ListReader:
    """A reader's one method the replay calls, over lists of records (the partitions)."""

    def read(self, partition, start=0, stop=None):
        yield from partition[start:stop]


class Aggregate:
    def __init__(self):
        self.notes: list[str] = []
        self.issues: list = []
        self.label_flagged: set = set()
        self.marks: dict = {}  # severity -> partition -> records with an issue of it

    def add_issue(self, issue):
        self.issues.append(issue)


class Dataset:
    def __init__(self, partitions):
        self.reader = ListReader()
        self.partitions = partitions


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_the_stage_replays_partitions_in_record_order(scheduler):
    records, planted = corpus()
    partitions = [records[i : i + 13] for i in range(0, len(records), 13)]
    plan = pipeline.Plan(scheduler, 3, 60.0)
    aggregate = Aggregate()
    options = replace(CheckOptions(), max_length=10)
    replay_options = ReplayOptions(batch_size=16)
    found = replay_tokens(Dataset(partitions), options, replay_options, plan, aggregate, {"loss-nonfinite"})
    assert {i.index for i in aggregate.issues} == set(planted) | {71}
    assert found["tokens"] == {
        "vocab_size": V + 4,
        "vocab_from": "data",
        "ignore_index": IGNORE,
        "max_length": 10,
        "model_vocabulary": V + 4,
    }
    assert found["records_replayed"] == 99 and found["skipped"] == {"text": 1}  # V from the data: 43 is in it
    assert aggregate.notes == [
        "dummy-loss replay: 1 text record not replayed: it becomes tokens only with --tokenizer"
    ]
    _, expected, _ = replay(records, max_length=10)
    assert {i.index for i in expected} == {i.index for i in aggregate.issues}


def test_the_vocabulary_comes_from_the_options_else_the_data():
    records, _ = corpus()
    extent = TokenExtentWork(ListReader(), spec())
    found = TokenExtent()
    found.add(extent(0, records[:50]))
    found.add(extent(1, records[50:]))
    assert (found.largest, found.longest, found.texts) == (
        V + 3,
        max(len(r.payload) for r in records if r.index != 90),
        1,
    )
    aggregate = Aggregate()
    options = replace(CheckOptions(), vocab_size=V)
    result = replay_tokens(
        Dataset([records]),
        options,
        ReplayOptions(),
        pipeline.Plan("sync", 1, 60.0),
        aggregate,
        set(),
    )
    assert result["tokens"]["vocab_from"] == "--vocab-size" and result["skipped"] == {"token": 1, "text": 1}
    assert aggregate.issues == []  # loss-nonfinite not selected
    huge = [tokens(0, [1, 2, 3]), tokens(1, [2**31 - 1, 1])]
    aggregate = Aggregate()
    result = replay_tokens(
        Dataset([huge]),
        CheckOptions(),
        ReplayOptions(),
        pipeline.Plan("sync", 1, 60.0),
        aggregate,
        set(),
    )
    assert result["records"] == 0 and "beyond any vocabulary" in aggregate.notes[0]
    work = ReplayWork(ListReader(), spec())
    assert work.failure(0, [], 5, "crashed").features.skipped == {"crashed": 1}
    stage = ReplayStage(
        Replayer(ReplayConfig(), V, EMBEDDING_DIM, tokens=True), [len(records)], lambda issue: None
    )
    stage.add(work(0, records))
    assert stage.finish()["records_replayed"] == 98


# -- PyTorch language models --------------------------------------------------------------------


def tiny_gpt2(vocab_size: int, max_length: int):
    """A GPT-2 from a config, nothing downloaded (the factory `--model` names)."""
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(
        n_layer=1,
        n_head=2,
        n_embd=16,
        vocab_size=vocab_size,
        n_positions=max_length,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def small_gpt2(max_length: int):
    """A GPT-2 whose embedding is smaller than the data's vocabulary: it raises on ids >= 30."""
    return tiny_gpt2(30, max_length)


@pytest.mark.torch
def test_the_language_model_is_what_pytorch_computes():
    torch = pytest.importorskip("torch")
    records = corpus()[0][:40]
    features = featurize_token_records(records, spec())
    model = EmbeddingLM(V, seed=2)
    found = model.run(features.X)
    E = torch.tensor(model.embedding, requires_grad=True)
    W = torch.tensor(model.weight, requires_grad=True)
    b = torch.tensor(model.bias, requires_grad=True)
    X = features.X
    width = int(X.lengths().max())
    ids = torch.zeros(len(X), width, dtype=torch.long)
    labels = torch.full((len(X), width), IGNORE)
    for i in range(len(X)):
        n = len(X.ids[i])
        ids[i, :n] = torch.from_numpy(X.ids[i])
        labels[i, :n] = torch.from_numpy(np.where(X.targets[i] >= 0, X.targets[i], IGNORE))
    loss = torch.nn.functional.cross_entropy(
        (E[ids] @ W + b).reshape(-1, V), labels.reshape(-1), ignore_index=IGNORE
    )
    loss.backward()
    assert found.mean_loss == pytest.approx(loss.item(), rel=1e-5)
    np.testing.assert_allclose(found.grad_w, W.grad.numpy(), rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(found.grad_rows, E.grad.numpy()[found.rows], rtol=1e-4, atol=1e-8)
    alone = torch.nn.functional.cross_entropy(
        (E[ids[3]] @ W + b), labels[3], ignore_index=IGNORE
    )  # record 3 alone: a mean over nothing
    assert torch.isnan(alone) and np.isnan(found.losses[3])


@pytest.mark.torch
@pytest.mark.slow
def test_a_tiny_gpt2_finds_the_records_its_own_training_goes_nan_on():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    records, planted = corpus()
    replayer, issues, features = replay(records, model="test_replay_tokens:tiny_gpt2", max_length=10)
    expected = set(planted) | {71}
    assert {i.index for i in issues} == expected
    assert all(
        i.check == "loss-nonfinite" and i.details["model"] == "test_replay_tokens:tiny_gpt2" for i in issues
    )
    assert replayer.stats.records_applied == len(features) - len(expected)
    # the judge: the model's own loss (Hugging Face shifts the labels itself), each record alone
    torch.manual_seed(0)
    model = tiny_gpt2(V, 10).eval()
    nan = set()
    for record in records:
        if record.index in (40, 90):
            continue  # an id beyond the vocabulary raises; a text has no ids
        ids = torch.as_tensor(np.asarray(record.payload, np.int64)[:10])[None]
        own = record.meta.get("token_labels")
        mask = record.meta.get("attention_mask")
        labels = ids.clone() if own is None else torch.as_tensor(own[:10])[None]
        if own is None and mask is not None:
            labels[torch.as_tensor(mask[:10])[None] == 0] = IGNORE
        if ids.shape[1] == 0:
            nan.add(record.index)  # nothing to run: the collator's mean over nothing
            continue
        with torch.no_grad():
            loss = model(input_ids=ids, labels=labels).loss
        if not torch.isfinite(loss):
            nan.add(record.index)
    assert nan == expected


@pytest.mark.slow  # over half a second: out of the quick subset
@pytest.mark.torch
def test_ids_beyond_the_models_embedding_are_named_with_the_error():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    records = [tokens(i, [1, 2, 3, 4]) for i in range(8)]
    records[2] = tokens(2, [1, 35, 3])  # < V, so the replay feeds it; >= the model's 30 embeddings
    records[5] = tokens(5, [1, 2, 3], [IGNORE, 2, 33])  # a target beyond its logits
    _, issues, _ = replay(records, batch_size=4, model="test_replay_tokens:small_gpt2")
    assert [(i.index, i.check) for i in issues] == [(2, "loss-nonfinite"), (5, "loss-nonfinite")]
    assert "index out of range" in issues[0].details["error"]
    assert "out of bounds" in issues[1].details["error"]


# -- end to end --------------------------------------------------------------------------------


def test_scan_with_dummy_loss_on_a_jsonl_file(tmp_path):
    pytest.importorskip(
        "scrub.readers.jsonl", reason="no token reader on this branch yet (JSON Lines: issue 30)"
    )
    records, planted = corpus()
    lines = []
    for record in records:
        if record.meta.get("kind") == "text":
            lines.append({"text": "hello"})
            continue
        line: dict = {"input_ids": np.asarray(record.payload).tolist()}
        if "token_labels" in record.meta:
            line["labels"] = record.meta["token_labels"].tolist()
        if "attention_mask" in record.meta:
            line["attention_mask"] = record.meta["attention_mask"].tolist()
        lines.append(line)
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    # the token checks condemn the planted records (and 40's id beyond V): the replay skips them
    result = scrub.scan(path, dummy_loss=True, vocab_size=V, scheduler="sync")
    assert not [i for i in result.issues() if i.check == "loss-nonfinite"]
    condemned = {i.index for i in result.issues() if i.severity.value == "error"}
    assert condemned == set(planted) | {40}
    replay_summary = result.summary.replay
    assert replay_summary["skipped"] == {"condemned": 5, "text": 1}
    assert replay_summary["records_replayed"] == 100 - 6
    assert "dummy-loss replay: 5 records skipped: already condemned by the scan" in "\n".join(
        result.summary.notes
    )
    assert replay_summary["tokens"]["vocab_from"] == "--vocab-size"
    # without those checks nothing condemns them, and the replay names them itself
    unchecked = ("no-supervised-tokens", "empty-sequence", "empty-attention")
    result = scrub.scan(path, dummy_loss=True, vocab_size=V, scheduler="sync", ignore=unchecked)
    replayed = {i.index: i.details["confirms"] for i in result.issues() if i.check == "loss-nonfinite"}
    assert replayed == planted
    assert result.summary.replay["skipped"] == {"condemned": 1, "text": 1}  # 40: token-out-of-range's


def token_table(records) -> dict[str, list]:
    """The corpus's token records as columns (labels: their own, else their ids)."""
    columns: dict[str, list] = {"input_ids": [], "labels": []}
    for record in records:
        if record.meta.get("kind") != "tokens" or "attention_mask" in record.meta:
            continue
        ids = np.asarray(record.payload).tolist()
        columns["input_ids"].append(ids)
        columns["labels"].append(record.meta.get("token_labels", np.asarray(ids)).tolist())
    return columns


@pytest.mark.parametrize(
    ("scheduler", "partition_size"),
    [("sync", None), pytest.param("processes", 13, marks=pytest.mark.slow)],  # starts worker processes
)
def test_scan_with_dummy_loss_on_a_parquet_file_of_token_columns(tmp_path, scheduler, partition_size):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    records, planted = corpus()
    columns = token_table(records)  # 98 rows: without the masked record (55) and the text (90)
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table(columns), path)
    rows = {i: np.asarray(ids) for i, ids in enumerate(columns["input_ids"])}
    expected = {row for row, ids in rows.items() if len(ids) == 0}
    expected |= {row for row, labels in enumerate(columns["labels"]) if all(v == IGNORE for v in labels[1:])}
    assert len(expected) == 3  # records 3, 17 and 29
    unchecked = ("no-supervised-tokens", "empty-sequence")
    result = scrub.scan(
        path,
        dummy_loss=True,
        vocab_size=V,
        scheduler=scheduler,
        workers=2,
        partition_size=partition_size,
        ignore=unchecked,
    )
    replayed = {int(i.key) for i in result.issues() if i.check == "loss-nonfinite"}
    assert replayed == expected
    replay_summary = result.summary.replay
    assert replay_summary["tokens"]["vocab_from"] == "--vocab-size"
    assert replay_summary["skipped"] == {"condemned": 1}  # the id beyond V: token-out-of-range's
    assert {i.key for i in result.issues() if i.check == "token-out-of-range"} == {"40"}
    # with the token checks, they condemn those records (in every partition) and the replay skips them
    checked = scrub.scan(
        path, dummy_loss=True, vocab_size=V, scheduler=scheduler, workers=2, partition_size=partition_size
    )
    assert {int(i.key) for i in checked.issues() if i.check in unchecked} == expected
    assert not [i for i in checked.issues() if i.check == "loss-nonfinite"]
    assert checked.summary.replay["skipped"] == {"condemned": 4}
    assert checked.summary.replay["records_replayed"] == len(rows) - 4
    derived = scrub.scan(path, dummy_loss=True, scheduler="sync", ignore=unchecked)
    assert derived.summary.replay["tokens"] == {
        "vocab_size": V + 4,
        "vocab_from": "data",
        "ignore_index": IGNORE,
        "max_length": None,
        "model_vocabulary": V + 4,
    }
    assert {int(i.key) for i in derived.issues() if i.check == "loss-nonfinite"} == expected


def test_scan_with_dummy_loss_on_a_flat_token_file(tmp_path):
    """nanoGPT's train.bin, read as windows (`TokenRows` batches): the last window of one token
    is not replayed alone (training packs it with its neighbours: no loss of its own, no finding),
    and the window with an id beyond V is token-out-of-range's."""
    ids = np.random.default_rng(0).integers(0, 1000, 10 * 64 + 1).astype(np.uint16)
    ids[3 * 64 + 5] = 1100
    ids.tofile(tmp_path / "train.bin")
    result = scrub.scan(
        tmp_path / "train.bin",
        dummy_loss=True,
        vocab_size=1000,
        max_length=64,
        batch_size=4,
        scheduler="sync",
    )
    assert {(i.key, i.check) for i in result.issues()} == {("3", "token-out-of-range")}
    replay_summary = result.summary.replay
    assert replay_summary["skipped"] == {"condemned": 1, "packed": 1}
    assert any("1 document of fewer than two tokens not replayed alone" in n for n in result.summary.notes)
    assert replay_summary["records_replayed"] == 9 and replay_summary["records_applied"] == 9


def test_the_command_says_the_cost_up_front_and_what_it_skipped(tmp_path, monkeypatch):
    """`scrub scan DATA --vocab-size 32000 --dummy-loss`, as the issue ran it, on a nanoGPT file:
    the estimate after the first batch (every replay is "expensive" here: the limit is 0 s), the
    hashed vocabulary in the replay's line, the condemned window skipped and said."""
    from typer.testing import CliRunner

    import scrub.replay.stage as stage
    from scrub.cli import app

    ids = np.random.default_rng(1).integers(0, 32_000, 40 * 128 + 1).astype(np.uint16)
    ids[5 * 128 + 7] = 40_000  # window 5: token-out-of-range's
    ids.tofile(tmp_path / "train.bin")
    monkeypatch.setattr(stage, "SAID_COST_SECONDS", 0.0)
    command = [
        "scan",
        str(tmp_path / "train.bin"),
        "--vocab-size",
        "32000",
        "--dummy-loss",
        "--max-length",
        "128",
    ]
    result = CliRunner().invoke(app, [*command, "--batch-size", "8", "--manifest", str(tmp_path / "m.jsonl")])
    assert result.exit_code == 1, result.output
    output = " ".join(result.output.split())  # the console wraps its lines
    assert "scrub: dummy-loss replay: the first batch took" in output
    assert "for the other 5 batches" in output  # 41 windows, in batches of 8: 6 at most
    assert "vocabulary 32,000 (from --vocab-size) hashed into 1,024" in output
    assert "dummy-loss replay: 1 record skipped: already condemned by the scan" in output
    assert "1 record not replayable" in output  # the last window, of one token (packed)
    monkeypatch.setattr(stage, "SAID_COST_SECONDS", 1e9)
    quiet = CliRunner().invoke(app, [*command, "--manifest", str(tmp_path / "m2.jsonl")])
    assert "the first batch took" not in quiet.output  # cheap: nothing to say
