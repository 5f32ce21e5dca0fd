"""The NaN guard's check of token ids against the model's input embedding, before the forward: an
id past it raises `IndexError` on the CPU and kills a CUDA process with a device-side assert, so
the records holding one are named (`token-out-of-range`) and dropped from the batch, or the guard
raises. Real models (an `nn.Embedding` transformer; a GPT-2 built from a config, nothing
downloaded), a real JSON Lines file that `scrub fix` cleans with the guard's manifest."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import manifest_lines  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

from scrub.guard import NanGuard, TokenOutOfRange  # noqa: E402

pytestmark = pytest.mark.torch

VOCAB = 32
#: line of the JSON Lines file (from 1, as scrub keys it) -> the id planted in its sequence
PLANTED = {14: VOCAB, 51: -1}


class TinyLM(nn.Module):
    """An embedding, one encoder layer, a head over the vocabulary."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tok_emb = nn.Embedding(VOCAB, 16)
        layer = nn.TransformerEncoderLayer(16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1)
        self.head = nn.Linear(16, VOCAB)

    def forward(self, tokens):
        return self.head(self.encoder(self.tok_emb(tokens)))


class Lines(Dataset):
    """Token sequences of a JSON Lines file (``input_ids``), each named as scrub names it: the
    file and its line, from 1 (``record_key``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = [json.loads(line)["input_ids"] for line in path.read_text().splitlines()]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int):
        ids = torch.tensor(self.rows[index])
        return ids, ids.roll(-1).clamp(0, VOCAB - 1)

    def record_key(self, index: int) -> tuple[str, str]:
        return self.path.name, str(index + 1)


def token_file(tmp_path: Path) -> Path:
    generator = torch.Generator().manual_seed(0)
    lines = []
    for line in range(1, 65):
        ids = torch.randint(0, VOCAB, (12,), generator=generator).tolist()
        if line in PLANTED:
            ids[7] = PLANTED[line]
        lines.append(json.dumps({"input_ids": ids}))
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def language_loss(model, batch):
    tokens, targets = batch
    return F.cross_entropy(model(tokens).transpose(1, 2), targets)


@pytest.mark.slow  # trains two epochs and runs `scrub fix`
def test_ids_past_the_embedding_are_named_dropped_and_fixed_away(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from scrub.cli import app

    path = token_file(tmp_path)
    data = Lines(path)
    generator = torch.Generator().manual_seed(0)
    plain = TinyLM()
    with pytest.raises(IndexError):  # what the loop does without the guard (on CUDA: the process dies)
        for batch in DataLoader(data, batch_size=16, shuffle=True, generator=generator):
            language_loss(plain, batch).backward()

    model = TinyLM()
    guard = NanGuard(
        model, manifest=tmp_path / "guard.scrub.jsonl", step=language_loss, embedding=model.tok_emb
    )
    loader = guard.wrap(DataLoader(data, batch_size=16, shuffle=True, generator=generator))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    sizes = []
    for _ in range(2):
        for batch in loader:
            assert int(batch[0].min()) >= 0 and int(batch[0].max()) < VOCAB  # none reaches the forward
            sizes.append(len(batch[0]))
            assert guard.current.indices is not None and len(guard.current.indices) == len(batch[0])
            optimizer.zero_grad()
            loss = language_loss(model, batch)
            loss.backward()
            if guard.ok(loss):
                optimizer.step()
    assert len(sizes) == 8 and sum(sizes) == 2 * 62 and min(sizes) < 16  # the two records, each epoch
    assert guard.dropped == 4 and guard.skipped == 0 and guard.steps == 8
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert sorted((line["key"], line["check"]) for line in lines) == sorted(
        [(str(line), "token-out-of-range") for line in PLANTED] * 2
    )
    by_key = {line["key"]: line for line in lines}
    assert by_key["14"]["details"]["value"] == VOCAB and by_key["14"]["details"]["position"] == 7
    assert by_key["14"]["details"]["vocab_size"] == VOCAB and by_key["14"]["severity"] == "error"
    assert "token id 32 >= the input embedding's 32 rows" in by_key["14"]["message"]
    assert "token id -1 is negative" in by_key["51"]["message"]
    assert by_key["51"]["source"] == "train.jsonl" and by_key["51"]["index"] == 50

    monkeypatch.chdir(tmp_path)
    fixed = CliRunner().invoke(
        app, ["fix", "train.jsonl", "--manifest", "guard.scrub.jsonl", "--out", "clean.jsonl"]
    )
    assert fixed.exit_code == 0, fixed.output
    kept = [json.loads(line)["input_ids"] for line in (tmp_path / "clean.jsonl").read_text().splitlines()]
    assert len(kept) == 62 and all(min(ids) >= 0 and max(ids) < VOCAB for ids in kept)


def test_raise_names_the_records_before_the_forward_with_the_manifest_on_disk(tmp_path):
    data = Lines(token_file(tmp_path))
    model = TinyLM()
    guard = NanGuard(
        model,
        step=language_loss,
        manifest=tmp_path / "g.jsonl",
        on_nonfinite="raise",
        embedding=model.tok_emb,
    )
    with pytest.raises(
        TokenOutOfRange, match=r"was stopped \(token ids outside the input embedding's 32 rows"
    ) as raised:
        for batch in guard.wrap(DataLoader(data, batch_size=16)):
            language_loss(model, batch).backward()
            guard.ok(language_loss(model, batch))
    assert [issue.key for issue in raised.value.issues] == ["14"]  # the first batch holding one
    assert [line["key"] for line in manifest_lines(tmp_path / "g.jsonl")] == ["14"]  # written first
    assert guard.steps == 0  # raised as the first batch was handed out: no forward ran


def test_a_batch_of_nothing_but_bad_records_is_not_handed_out_and_the_ids_can_be_named():
    """A dict batch whose ids sit under another key: ``token_ids`` says where; a batch all of
    whose records are out of range is left out of the epoch."""

    class Keyed(Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, index: int):
            return {"tokens": torch.full((4,), VOCAB + index if index < 4 else index), "weight": 1.0}

    model = TinyLM()
    guard = NanGuard(
        model,
        manifest=None,
        embedding=model.tok_emb,
        token_ids="tokens",
        step=lambda m, b: m(b["tokens"]).mean(),
    )
    batches = [batch["tokens"][:, 0].tolist() for batch in guard.wrap(DataLoader(Keyed(), batch_size=4))]
    assert batches == [[4, 5, 6, 7]]  # the first batch, all past the 32 rows, never reached the loop
    assert sorted(int(issue.key) for issue in guard.issues) == [0, 1, 2, 3] and guard.dropped == 4


def test_ids_that_cannot_be_told_are_said_once_and_a_model_without_an_embedding_is_not_checked():
    model = TinyLM()
    floats = TensorDataset(torch.randn(8, 3), torch.randn(8, 3))
    guard = NanGuard(model, nn.MSELoss(), manifest=None, embedding=model.tok_emb)
    with pytest.warns(
        UserWarning, match="token ids of a list batch cannot be told .* give NanGuard token_ids="
    ):
        assert len(list(guard.wrap(DataLoader(floats, batch_size=4)))) == 2  # said once, not per batch
    with pytest.raises(ValueError, match="token_ids='ids': the batch has no such tensor"):
        list(
            NanGuard(model, manifest=None, embedding=model.tok_emb, token_ids="ids").wrap(DataLoader(floats))
        )
    with pytest.raises(TypeError, match="embedding takes the model's input nn.Embedding"):
        NanGuard(model, manifest=None, embedding=model.head)
    ids = TensorDataset(torch.full((4, 3), 99), torch.zeros(4))  # no embedding named, none to find
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guard = NanGuard(nn.Linear(3, 1), nn.MSELoss(), manifest=None)
        assert len(list(guard.wrap(DataLoader(ids, batch_size=2)))) == 2 and not guard.issues


def gpt2(vocabulary: int = 64):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=vocabulary, n_positions=16, n_embd=16, n_layer=1, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


class Sequences(Dataset):
    """Hugging Face records (``input_ids``, ``labels``); record 9 holds id 64 of a 64-token
    vocabulary (a tokenizer with added tokens, the embedding never resized)."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 64, (40, 10), generator=generator)
        self.ids[9, 3] = 64

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int):
        return {"input_ids": self.ids[index], "labels": self.ids[index].clamp(max=63)}


@pytest.mark.slow  # builds and trains a GPT-2
def test_a_hugging_face_models_input_embedding_is_found_by_itself_in_a_plain_loop():
    model = gpt2()
    guard = NanGuard(model, manifest=None)  # no embedding given: get_input_embeddings()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for batch in guard.wrap(DataLoader(Sequences(), batch_size=8, shuffle=True)):
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        if guard.ok(loss):
            optimizer.step()
    assert [(issue.key, issue.check) for issue in guard.issues] == [("9", "token-out-of-range")]
    assert guard.issues[0].details["vocab_size"] == 64 and guard.steps == 5
