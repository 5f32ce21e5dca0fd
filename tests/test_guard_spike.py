"""The guard's spike rule in real PyTorch training: a finite but absurd record (1.4e19, whose
loss is still a float32) is named by itself in a shuffled run before its update breaks the
weights; clean runs raise no spike; suspects are written once a failing window; the record beside
the manifest counts every step; `scrub fix` says which warnings it kept. Skipped without torch."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import manifest_lines  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

from scrub.guard import NanGuard, NonFiniteStep, Spike  # noqa: E402

pytestmark = pytest.mark.torch


def finite_model(model: nn.Module) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in model.parameters())


def absurd_rows(rows: int = 1024) -> TensorDataset:
    """Regression rows of unit scale; row 777 holds 1.4e19 (its MSE, ~1e38, still a float32)."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(rows, 16, generator=generator)
    targets = inputs[:, :1] * 2 + 0.1 * torch.randn(rows, 1, generator=generator)
    inputs[777] = 1.4e19
    return TensorDataset(inputs, targets)


def regressor() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))


def regress(guard: NanGuard, model: nn.Module, loader, epochs: int) -> list[int]:
    """The guard's docstring loop; the steps at which row 777 was in the batch."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    for _ in range(epochs):
        for inputs, targets in loader:
            if 777 in guard.current.indices:
                seen.append(guard.steps + 1)
            optimizer.zero_grad()
            loss = F.mse_loss(model(inputs), targets)
            loss.backward()
            if guard.ok(loss):
                optimizer.step()
    return seen


@pytest.mark.slow
def test_a_finite_but_absurd_record_is_named_by_itself_in_a_shuffled_run(tmp_path):
    model = regressor()
    guard = NanGuard(model, nn.MSELoss(), manifest=tmp_path / "guard.scrub.jsonl")
    loader = guard.wrap(
        DataLoader(absurd_rows(), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(5))
    )
    seen = regress(guard, model, loader, epochs=2)
    assert len(seen) == 2 and min(seen) > Spike().warmup  # judged both times, not in the warm-up
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert [(line["key"], line["check"], line["severity"]) for line in lines] == [
        ("777", "training-spike", "error")
    ] * 2
    assert [line["details"]["step"] for line in lines] == seen  # the spiking step itself
    assert lines[0]["details"]["found_by"] == "bisection" and lines[0]["details"]["grad_norm"] is None
    assert lines[0]["details"]["median_grad_norm"] > 0
    assert "spiked (gradient norm past float32's range" in lines[0]["message"]
    assert guard.skipped == 2 and guard.steps == 64
    assert finite_model(model) and max(p.abs().max().item() for p in model.parameters()) < 100


@pytest.mark.slow
def test_without_the_rule_the_suspects_are_written_once_a_failing_window(tmp_path):
    """The issue's run: the absurd step is taken, every step after fails; the 4 batches before
    are named once (128 lines), not on each of the 10 skipped steps (1,280)."""
    model = regressor()
    guard = NanGuard(model, nn.MSELoss(), manifest=tmp_path / "guard.scrub.jsonl", spike=None)
    loader = guard.wrap(
        DataLoader(absurd_rows(), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(5))
    )
    with pytest.raises(NonFiniteStep, match=r"10 steps in a row went non-finite .*: training-suspect: "):
        regress(guard, model, loader, epochs=2)
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert guard.skipped == 10 and len(lines) == 4 * 32
    assert {line["check"] for line in lines} == {"training-suspect"} and "777" in {x["key"] for x in lines}
    assert len({line["details"]["step"] for line in lines}) == 1


def clean_classifier_run(steps: int, seed: int) -> NanGuard:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(4096, 16, generator=generator)
    labels = (inputs @ torch.randn(16, 5, generator=generator)).argmax(1)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, steps // 3, 0.1)
    guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=None)
    loader = guard.wrap(
        DataLoader(TensorDataset(inputs, labels), batch_size=32, shuffle=True, generator=generator)
    )
    while guard.steps < steps:
        for batch_inputs, targets in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_inputs), targets)
            loss.backward()
            if guard.ok(loss):
                optimizer.step()
            schedule.step()
            if guard.steps == steps:
                break
    return guard


@pytest.mark.slow
def test_a_clean_run_of_thousands_of_steps_raises_no_spike():
    """The model whose clean gradient norms strayed furthest from their median (10.9x, near
    convergence: docs/guard.md), with shuffling and a step-decay schedule (the other models and
    seeds: `benchmarks/bench_guard.py`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threads only contend
    try:
        guard = clean_classifier_run(3000, seed=1)
    finally:
        torch.set_num_threads(threads)
    assert guard.skipped == 0 and guard.issues == []
    assert guard.spike is not None and guard.spike.seen == 3000  # every step judged and kept


def test_the_record_counts_every_step_not_the_last_finding(tmp_path):
    """A 256-step run whose one finding is at step 193: its record says 256 once the run is
    over (close, or the guard collected), not the step of its last finding."""
    inputs = torch.randn(256 * 4, 4)
    inputs[192 * 4 + 1, 0] = float("nan")  # in the 193rd batch
    model = nn.Linear(4, 3)
    manifest = tmp_path / "guard.scrub.jsonl"
    for ending in ("close", "collected"):
        guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=manifest, spike=None)
        loader = guard.wrap(DataLoader(TensorDataset(inputs, torch.zeros(256 * 4).long()), batch_size=4))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for batch_inputs, targets in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_inputs), targets)
            loss.backward()
            if guard.ok(loss):
                optimizer.step()
        record = json.loads((tmp_path / "guard.scrub.scan.json").read_text())
        assert record["steps"] == 193  # written with the finding (and every 10 s): not yet the end
        if ending == "close":
            guard.close()
        else:
            del guard, loader
            gc.collect()
        record = json.loads((tmp_path / "guard.scrub.scan.json").read_text())
        assert (record["steps"], record["skipped"]) == (256, 1)
    assert [line["key"] for line in manifest_lines(manifest)] == ["769", "769"]


class Rows(Dataset):
    """Rows of an HDF5 file, named as scrub names them (``record_key``)."""

    def __init__(self, path) -> None:
        import h5py

        self.path = path
        with h5py.File(path) as file:
            self.data = torch.from_numpy(file["data"][:])
            self.label = torch.from_numpy(file["label"][:])

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        return self.data[index], self.label[index]

    def record_key(self, index: int) -> tuple[str, str]:
        return self.path.name, str(index)


def test_fix_says_how_many_warning_records_of_the_guard_it_kept(tmp_path, monkeypatch):
    """Under float16 autocast rows 10 and 11 overflow a sum only together (a joint failure, a
    warning); row 40 is NaN (an error). `fix --manifest` sets 40 aside and says it kept 2."""
    import h5py
    from typer.testing import CliRunner

    from scrub.cli import app

    monkeypatch.chdir(tmp_path)
    data = np.random.default_rng(0).random((64, 1)).astype(np.float32)
    data[[10, 11]] = 250.0
    data[40] = np.nan
    with h5py.File(tmp_path / "train.h5", "w") as file:
        file["data"], file["label"] = data, np.zeros(64, np.float32)
    model = nn.Linear(1, 1, bias=False)
    nn.init.ones_(model.weight)

    def squared_error(outputs, targets):
        return ((outputs - targets[:, None].to(outputs.dtype)) ** 2).sum() / len(targets)

    autocast = {"device_type": "cpu", "dtype": torch.float16}
    guard = NanGuard(model, squared_error, manifest="guard.scrub.jsonl", autocast=autocast, spike=None)
    for inputs, targets in guard.wrap(DataLoader(Rows(tmp_path / "train.h5"), batch_size=32)):
        with torch.autocast(**autocast):
            loss = squared_error(model(inputs), targets)
        loss.backward()
        guard.ok(loss)
    checks = sorted((line["key"], line["check"]) for line in manifest_lines(tmp_path / "guard.scrub.jsonl"))
    assert checks == [("10", "training-joint-nonfinite"), ("11", "training-joint-nonfinite")] + [
        ("40", "training-nonfinite")
    ]
    run = CliRunner().invoke
    fixed = run(app, ["fix", "train.h5", "--manifest", "guard.scrub.jsonl", "--out", "clean.h5"])
    assert fixed.exit_code == 0, fixed.output
    assert "quarantined 1 record" in fixed.output
    assert (
        "note: kept 2 records the NaN guard named with warnings only (training-joint-nonfinite 2): "
        "--severity warning sets them aside too"
    ) in fixed.output
    both = run(
        app,
        ["fix", "train.h5", "--manifest", "guard.scrub.jsonl", "--out", "all.h5", "--severity", "warning"],
    )
    assert both.exit_code == 0, both.output
    assert "quarantined 3 records" in both.output and "kept 2 records the NaN guard" not in both.output
