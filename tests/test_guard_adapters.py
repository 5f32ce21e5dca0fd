"""The NaN guard where users train: a PyTorch Lightning callback, a Hugging Face `Trainer`, and
`DistributedDataParallel` on the CPU with gloo and two processes. Real libraries, tiny models built
from a config (nothing downloaded); each skips without its library (`.ci/run` installs them)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import REPO, manifest_lines  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

#: real trainers and two-process training: `-m "not slow"` (the quick subset) leaves them out
pytestmark = pytest.mark.slow


def finite(model: nn.Module) -> bool:
    return all(
        bool(torch.isfinite(t).all())
        for t in [*model.parameters(), *model.buffers()]
        if t.is_floating_point()
    )


def test_a_lightning_callback_names_the_record_and_the_run_ends_finite(tmp_path):
    lightning = pytest.importorskip("lightning")
    from scrub.guard.lightning import NanGuardCallback

    class Classifier(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))

        def training_step(self, batch, batch_idx):
            inputs, targets = batch
            loss = F.cross_entropy(self.net(inputs), targets)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    inputs, targets = torch.randn(200, 8), torch.randint(0, 3, (200,))
    inputs[123, 4] = float("nan")
    guard = NanGuardCallback(manifest=tmp_path / "guard.scrub.jsonl")
    loader = guard.wrap(
        DataLoader(TensorDataset(inputs, targets), batch_size=16, shuffle=True, num_workers=2)
    )
    model = Classifier()
    trainer = lightning.Trainer(
        max_epochs=2,
        accelerator="cpu",
        precision="bf16-mixed",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[guard],
    )
    trainer.fit(model, train_dataloaders=loader)
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert [(line["key"], line["check"]) for line in lines] == [
        ("123", "training-nonfinite")
    ] * 2  # each epoch
    assert guard.guard.skipped == 2 and guard.guard.autocast["dtype"] is torch.bfloat16
    assert finite(model)  # BatchNorm1d's statistics put back; its batch of one ran as the record twice


class Standardized(Dataset):
    """8x8 gray images standardized per image, as a vision pipeline does: image 17 is constant."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = torch.rand(40, 1, 8, 8, generator=generator)
        self.images[17] = 0.5
        self.labels = torch.randint(0, 3, (40,), generator=generator)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        image = self.images[index]
        return {"pixel_values": (image - image.mean()) / image.std(), "labels": self.labels[index]}

    def record_key(self, index: int) -> str:
        return f"images/{index:03d}.png"


def test_a_hugging_face_trainer_names_the_record_and_the_run_ends_finite(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from scrub.guard.huggingface import NanGuardTrainer

    config = transformers.ViTConfig(
        image_size=8,
        patch_size=4,
        num_channels=1,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=3,
    )
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        num_train_epochs=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        dataloader_num_workers=2,
        disable_tqdm=True,
    )
    trainer = NanGuardTrainer(
        model=model,
        args=args,
        train_dataset=Standardized(),
        nan_guard={"manifest": tmp_path / "guard.scrub.jsonl"},
    )
    trainer.train()
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert [(line["key"], line["check"]) for line in lines] == [("images/017.png", "training-nonfinite")] * 2
    assert trainer.nan_guard.skipped == 2 and finite(model)


def test_a_hugging_face_trainer_drops_ids_past_the_embedding_before_the_forward(tmp_path):
    """A GPT-2 built from a config whose record 9 holds id 64 of a 64-token vocabulary: without
    the guard the Trainer's forward raises (a device-side assert on CUDA); with it, the record is
    named at each epoch from ``get_input_embeddings()`` alone and the run ends."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from scrub.guard.huggingface import NanGuardTrainer

    class Sequences(Dataset):
        def __init__(self) -> None:
            generator = torch.Generator().manual_seed(1)
            self.ids = torch.randint(0, 64, (40, 10), generator=generator)
            self.ids[9, 3] = 64

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, index: int):
            return {"input_ids": self.ids[index], "labels": self.ids[index].clamp(max=63)}

    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_train_epochs=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    with pytest.raises(IndexError):
        transformers.Trainer(model=model, args=args, train_dataset=Sequences()).train()
    trainer = NanGuardTrainer(
        model=model,
        args=args,
        train_dataset=Sequences(),
        nan_guard={"manifest": tmp_path / "guard.scrub.jsonl"},
    )
    trainer.train()
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert [(line["key"], line["check"]) for line in lines] == [("9", "token-out-of-range")] * 2
    assert trainer.nan_guard.dropped == 2 and trainer.nan_guard.steps == 10 and finite(model)


DDP = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    from scrub.guard import NanGuard

    def run(rank, world, folder):
        # a file store: the TCP store's server thread aborted a process now and then at its exit
        store = f"file://{os.path.join(folder, 'store')}"
        dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world)
        torch.manual_seed(0)
        inputs, targets = torch.randn(128, 6), torch.randint(0, 3, (128,))
        inputs[77, 1] = float("nan")
        model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
        model = nn.parallel.DistributedDataParallel(model)
        guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=os.path.join(folder, "guard.scrub.jsonl"))
        data = TensorDataset(inputs, targets)
        sampler = DistributedSampler(data, world, rank, seed=1)
        loader = guard.wrap(DataLoader(data, batch_size=8, sampler=sampler))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            for batch_inputs, batch_targets in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(batch_inputs), batch_targets)
                loss.backward()
                if guard.ok(loss):
                    optimizer.step()
        ok = all(bool(torch.isfinite(p).all()) for p in model.parameters())
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as out:
            json.dump({"skipped": guard.skipped, "steps": guard.steps, "finite": ok}, out)
        # the DDP wrapper (its reducer) goes before its process group: destroyed after it, at the
        # interpreter's exit, it aborted the process now and then ("terminate called without an
        # active exception")
        del guard, loader, optimizer, model
        import gc

        gc.collect()
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        torch.multiprocessing.spawn(run, args=(2, sys.argv[1]), nprocs=2)
    """
)


def test_distributed_data_parallel_ranks_agree_to_skip_and_the_rank_holding_it_names_it(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "ddp.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    finished = all((tmp_path / f"rank{rank}.json").exists() for rank in (0, 1))
    # gloo's teardown aborts a process now and then as it exits, after its work (and this test's
    # evidence) is done and written: not the guard's doing; anything else is a failure
    torn_down = finished and "terminate called without an active exception" in done.stderr
    assert done.returncode == 0 or torn_down, done.stderr[-2000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks[0]["skipped"] == ranks[1]["skipped"] == 2  # once an epoch, on both: they agree
    assert ranks[0]["steps"] == ranks[1]["steps"] and all(rank["finite"] for rank in ranks)
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert [(line["key"], line["check"]) for line in lines] == [("77", "training-nonfinite")] * 2
    assert not list(Path(tmp_path).glob("*.tmp"))  # the manifest's staging went with each write


DDP_TOKENS = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    from scrub.guard import NanGuard

    def run(rank, world, folder):
        store = f"file://{os.path.join(folder, 'store')}"
        dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world)
        torch.manual_seed(0)
        ids, targets = torch.randint(0, 16, (64, 5)), torch.randint(0, 3, (64,))
        ids[[10, 61], 2] = 16  # past the embedding's 16 rows: 10 on rank 0, 61 on rank 1 (seed 1)
        embedding = nn.Embedding(16, 4)
        model = nn.parallel.DistributedDataParallel(
            nn.Sequential(embedding, nn.Flatten(), nn.Linear(20, 3))
        )
        guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=os.path.join(folder, "guard.scrub.jsonl"),
                         embedding=embedding)
        data = TensorDataset(ids, targets)
        sampler = DistributedSampler(data, world, rank, seed=1)
        loader = guard.wrap(DataLoader(data, batch_size=8, sampler=sampler))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for batch_ids, batch_targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(batch_ids), batch_targets)
            loss.backward()
            if guard.ok(loss):
                optimizer.step()
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as out:
            json.dump({"dropped": guard.dropped, "steps": guard.steps}, out)
        del guard, loader, optimizer, model
        import gc

        gc.collect()
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        torch.multiprocessing.spawn(run, args=(2, sys.argv[1]), nprocs=2)
    """
)


def test_distributed_ranks_findings_of_ids_past_the_embedding_reach_rank_zeros_manifest(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP_TOKENS)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "ddp.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    finished = all((tmp_path / f"rank{rank}.json").exists() for rank in (0, 1))
    torn_down = finished and "terminate called without an active exception" in done.stderr
    assert done.returncode == 0 or torn_down, done.stderr[-2000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [rank["dropped"] for rank in ranks] == [1, 1]  # one each: rank 1's reached rank 0
    assert ranks[0]["steps"] == ranks[1]["steps"] == 4
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert sorted((line["key"], line["check"]) for line in lines) == [
        ("10", "token-out-of-range"),
        ("61", "token-out-of-range"),
    ]  # rank 0 wrote both
