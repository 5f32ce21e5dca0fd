"""The NaN guard in real PyTorch training: linear, conv + BatchNorm and a tiny transformer, float32
and float16 autocast, shuffled loaders with workers, on datasets whose planted records no
offline check flags alone. Each test asserts the records named, the steps skipped, and a model
that is finite at the end. Skipped without PyTorch (`.ci/run` installs it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import manifest_lines  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

from scrub.guard import NanGuard, NonFiniteStep  # noqa: E402


def finite_model(model: nn.Module) -> bool:
    return all(
        bool(torch.isfinite(t).all())
        for t in [*model.parameters(), *model.buffers()]
        if t.is_floating_point()
    )


def train(guard: NanGuard, model: nn.Module, loader, loss_of, epochs: int = 1, lr: float = 0.01) -> int:
    """The loop of the guard's docstring; the number of steps applied."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    applied = 0
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            loss = loss_of(model, batch)
            loss.backward()
            if guard.ok(loss):
                optimizer.step()
                applied += 1
    return applied


def culprits(path: Path, check: str = "training-nonfinite") -> set[str]:
    return {line["key"] for line in manifest_lines(path) if line["check"] == check}


class Standardized(Dataset):
    """Image files read as torchvision's ``DatasetFolder`` reads them (``samples`` of (path,
    class), ``root``), each standardized per image, ``(x - mean) / std``, as many pipelines do: a
    constant image (a fine PNG) divides by 0."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.samples = [
            (str(path), number)
            for number, name in enumerate(classes)
            for path in sorted((root / name).glob("*.png"))
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, label = self.samples[index]
        pixels = torch.from_numpy(np.asarray(Image.open(path).convert("L"), dtype=np.float32))[None]
        return (pixels - pixels.mean()) / pixels.std(), label


@pytest.fixture
def image_folder(tmp_path) -> Path:
    """48 noise PNGs in 3 class folders, and one constant (uniform gray) image."""
    rng = np.random.default_rng(0)
    root = tmp_path / "images"
    for number in range(48):
        folder = root / f"class{number % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(folder / f"{number:03d}.png")
    Image.fromarray(np.full((8, 8), 128, np.uint8)).save(root / "class1" / "gray.png")
    return root


def convnet() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3)
    )


def classify(model, batch):
    inputs, targets = batch
    return F.cross_entropy(model(inputs), targets)


@pytest.mark.slow
def test_a_constant_image_under_per_image_standardization_is_named_as_scrub_names_it(image_folder, tmp_path):
    model = convnet()
    guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=tmp_path / "guard.scrub.jsonl")
    generator = torch.Generator().manual_seed(1)
    loader = guard.wrap(
        DataLoader(Standardized(image_folder), batch_size=8, shuffle=True, num_workers=2, generator=generator)
    )
    applied = train(guard, model, loader, classify, epochs=2)
    assert guard.skipped == 2 and applied == 2 * math.ceil(49 / 8) - 2  # one batch an epoch
    assert culprits(tmp_path / "guard.scrub.jsonl") == {"class1/gray.png"}  # scrub's key of the file
    assert finite_model(model)  # BatchNorm's statistics were put back: the forward had made them NaN
    line = manifest_lines(tmp_path / "guard.scrub.jsonl")[0]
    # BatchNorm spreads the NaN to every record's loss: per-sample losses cannot tell, a bisection can
    assert line["details"]["found_by"] == "bisection" and line["details"]["named_by"] == "samples"
    assert line["details"]["buffers_restored"] is True
    assert line["details"]["passes"] <= 2 * math.log2(8) + 3
    assert line["index"] == next(
        i for i, (p, _) in enumerate(loader.dataset.samples) if p.endswith("gray.png")
    )


def test_the_loader_is_the_same_batches_in_the_same_order_and_each_knows_its_records():
    """Shuffled with a seeded generator, two workers, drop_last, a DistributedSampler: the
    wrapped loader gives the same batches, and the indices recorded are those of each."""
    from torch.utils.data.distributed import DistributedSampler

    data = TensorDataset(torch.arange(103).float()[:, None], torch.arange(103))

    def loaders():  # each made twice: a generator's state advances as a loader draws from it
        yield lambda: dict(
            batch_size=8, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(3)
        )
        yield lambda: dict(
            batch_size=10, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(4)
        )
        yield lambda: dict(
            batch_size=7, sampler=DistributedSampler(data, num_replicas=2, rank=1, seed=5), num_workers=2
        )

    for options in loaders():
        plain = [batch[1].tolist() for batch in DataLoader(data, **options())]
        guard = NanGuard(nn.Linear(1, 1), nn.MSELoss(), manifest=None)
        seen, recorded = [], []
        for batch in guard.wrap(DataLoader(data, **options())):
            seen.append(batch[1].tolist())
            recorded.append(guard.current.indices)
        assert seen == plain and recorded == plain and plain
        assert len({tuple(batch) for batch in plain}) == len(plain)  # not vacuous: the batches differ


def masked_mean(logits, labels):
    """A per-sequence mean of the token losses over the tokens not ignored, then the batch mean:
    a sequence whose labels are all -100 (truncation cut its answer away) is 0/0."""
    tokens = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")
    counted = (labels != -100).sum(dim=1)
    return (tokens.sum(dim=1) / counted).mean()


class TinyTransformer(nn.Module):
    def __init__(self, vocabulary: int = 32, width: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocabulary, width)
        layer = nn.TransformerEncoderLayer(width, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1)
        self.head = nn.Linear(width, vocabulary)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


@pytest.mark.slow
def test_a_sequence_whose_labels_are_all_ignored_is_found_by_bisection(tmp_path):
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 32, (64, 12), generator=generator)
    labels = tokens.roll(-1, dims=1)
    labels[:, :4] = -100  # the prompt is not trained on
    labels[41] = -100  # truncation cut the answer away
    model = TinyTransformer()
    guard = NanGuard(model, masked_mean, manifest=tmp_path / "guard.scrub.jsonl")
    loader = guard.wrap(
        DataLoader(TensorDataset(tokens, labels), batch_size=16, shuffle=True, generator=generator)
    )
    train(guard, model, loader, lambda m, b: masked_mean(m(b[0]), b[1]))
    assert guard.skipped == 1 and culprits(tmp_path / "guard.scrub.jsonl") == {"41"}
    line = manifest_lines(tmp_path / "guard.scrub.jsonl")[0]
    assert line["details"]["found_by"] == "bisection" and finite_model(model)
    assert guard.last_passes <= 2 * math.log2(16) + 3


@pytest.mark.slow  # over half a second: out of the quick subset
def test_records_fine_alone_that_overflow_a_float16_sum_together_are_a_joint_failure(tmp_path):
    """Under float16 autocast, two rows whose squared error is 62,500 each (float16 holds up to
    65,504) make a sum of 125,000: Inf. Neither is a culprit; the pair is named as a group."""
    inputs = torch.rand(64, 1)
    inputs[[10, 11]] = 250.0
    model = nn.Linear(1, 1, bias=False)
    nn.init.ones_(model.weight)

    def squared_error(outputs, targets):
        return ((outputs - targets[:, None].to(outputs.dtype)) ** 2).sum() / len(targets)  # in float16

    autocast = {"device_type": "cpu", "dtype": torch.float16}
    guard = NanGuard(model, squared_error, manifest=tmp_path / "guard.scrub.jsonl", autocast=autocast)
    loader = guard.wrap(DataLoader(TensorDataset(inputs, torch.zeros(64)), batch_size=64))

    def loss_of(m, batch):
        with torch.autocast(**autocast):
            return squared_error(m(batch[0]), batch[1])

    train(guard, model, loader, loss_of, lr=1e-6)
    assert guard.skipped == 1
    assert culprits(tmp_path / "guard.scrub.jsonl") == set()  # never an invented culprit
    joint = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert sorted(line["key"] for line in joint) == ["10", "11"]  # the bisection narrowed to the pair
    assert all(
        line["check"] == "training-joint-nonfinite" and line["severity"] == "warning" for line in joint
    )
    assert all(line["details"]["group_size"] == 2 for line in joint)
    assert finite_model(model)


def test_a_finite_but_absurd_step_is_named_through_the_batches_before(tmp_path):
    """A row of 1e19 makes a finite step that leaves a weight near -1e34; the next batch's loss
    overflows for every record. The weights, not that batch, are the cause: the batches just
    trained on are named as suspects, the planted row among them."""
    inputs = torch.rand(64, 1)
    inputs[5] = 1e19
    model = nn.Linear(1, 1, bias=False)
    nn.init.constant_(model.weight, 0.5)
    guard = NanGuard(model, nn.MSELoss(), manifest=tmp_path / "guard.scrub.jsonl", suspects=2, max_skips=2)
    loader = guard.wrap(DataLoader(TensorDataset(inputs, torch.zeros(64, 1)), batch_size=16))
    with pytest.raises(NonFiniteStep, match="2 steps in a row went non-finite"):
        train(guard, model, loader, lambda m, b: F.mse_loss(m(b[0]), b[1]))
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert {line["check"] for line in lines} == {"training-suspect"}
    first = [line for line in lines if line["details"]["step"] == 2]
    assert {line["key"] for line in first} == {str(i) for i in range(16)} and "5" in {
        line["key"] for line in first
    }
    assert all(line["details"]["trained_at"] == 1 for line in first)


class Flaky(nn.Module):
    """A linear layer whose third forward pass gives NaN: a fault of the machine, not the data."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.calls = 0

    def forward(self, inputs):
        self.calls += 1
        out = self.linear(inputs)
        return out * float("nan") if self.calls == 3 else out


def test_a_step_that_is_finite_when_run_again_is_transient_not_the_data(tmp_path):
    model = Flaky()
    guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=tmp_path / "guard.scrub.jsonl")
    loader = guard.wrap(
        DataLoader(TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,))), batch_size=8)
    )
    assert train(guard, model, loader, classify) == 4
    lines = manifest_lines(tmp_path / "guard.scrub.jsonl")
    assert {line["check"] for line in lines} == {"training-transient"} and len(lines) == 8
    assert {line["key"] for line in lines} == {str(i) for i in range(16, 24)}  # the third batch
    assert guard.last_passes == 1


def test_raise_names_the_records_and_the_manifest_is_on_disk_already(tmp_path):
    inputs = torch.randn(32, 4)
    inputs[9, 1] = float("inf")
    model = nn.Linear(4, 3)
    guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=tmp_path / "g.jsonl", on_nonfinite="raise")
    loader = guard.wrap(DataLoader(TensorDataset(inputs, torch.randint(0, 3, (32,))), batch_size=8))
    with pytest.raises(
        NonFiniteStep, match=r"step 2 went non-finite \(on_nonfinite='raise'\): records: 9; see "
    ) as raised:
        train(guard, model, loader, classify)
    assert [issue.key for issue in raised.value.issues] == ["9"]
    assert culprits(tmp_path / "g.jsonl") == {"9"}  # written before the exception
    record = json.loads((tmp_path / "g.scan.json").read_text())
    assert record["kind"] == "guard" and record["skipped"] == 1
    assert all(p.grad is None for p in model.parameters()) and finite_model(model)


def test_a_restarted_run_keeps_the_findings_and_a_scan_manifest_is_never_overwritten(tmp_path):
    inputs = torch.randn(16, 4)
    inputs[3, 0] = float("nan")
    for _ in range(2):  # the same manifest twice: the second run adds to the first's
        model = nn.Linear(4, 3)
        guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=tmp_path / "g.jsonl")
        train(
            guard,
            model,
            guard.wrap(DataLoader(TensorDataset(inputs, torch.zeros(16).long()), batch_size=8)),
            classify,
        )
    assert [line["key"] for line in manifest_lines(tmp_path / "g.jsonl")] == ["3", "3"]
    (tmp_path / "scan.jsonl").write_text("")
    (tmp_path / "scan.scan.json").write_text('{"fingerprint": {"digest": "x"}}')
    with pytest.raises(ValueError, match="a scan's manifest, not a guard's"):
        NanGuard(nn.Linear(1, 1), nn.MSELoss(), manifest=tmp_path / "scan.jsonl")


@pytest.mark.parametrize("per_sample", [True, False])
def test_one_culprit_in_a_batch_of_256_costs_at_most_2_log2_b_plus_3_passes(tmp_path, per_sample):
    inputs = torch.randn(256, 4)
    inputs[201, 2] = float("nan")
    model = nn.Linear(4, 3)
    loss = (
        nn.CrossEntropyLoss() if per_sample else (lambda outputs, targets: F.cross_entropy(outputs, targets))
    )
    guard = NanGuard(model, loss, manifest=None)
    loader = guard.wrap(
        DataLoader(TensorDataset(inputs, torch.zeros(256).long()), batch_size=256, shuffle=True)
    )
    train(guard, model, loader, classify)
    assert [issue.key for issue in guard.issues] == ["201"]
    assert guard.last_passes == (3 if per_sample else 2 * 8 + 1)  # rerun, then one pass or two a level
    assert guard.last_passes <= 2 * math.log2(256) + 3


def test_per_sample_losses_all_finite_while_their_weighted_mean_is_not_is_joint(tmp_path):
    """A class-weighted mean over a batch of classes of weight 0 is 0/0: no record is the cause."""
    model = nn.Linear(4, 3)
    loss = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 0.0, 1.0]))
    guard = NanGuard(model, loss, manifest=None)
    targets = torch.tensor([0] * 8 + [1] * 8 + [2] * 8)
    loader = guard.wrap(DataLoader(TensorDataset(torch.randn(24, 4), targets), batch_size=8))
    train(guard, model, loader, lambda m, b: loss(m(b[0]), b[1]))
    assert guard.skipped == 1
    assert {issue.check for issue in guard.issues} == {"training-joint-nonfinite"}
    assert sorted(int(issue.key) for issue in guard.issues) == list(range(8, 16))
    # the whole batch, and the finding says why no smaller group: any record alone fails too
    assert all("whichever records it holds" in issue.details["unnarrowed"] for issue in guard.issues)
    assert all("not narrowed further" in issue.message for issue in guard.issues)


@pytest.mark.parametrize("loss_name", ["MSELoss module", "plain function"])
def test_a_pair_that_overflows_a_mean_together_is_named_as_the_pair_in_a_shuffled_batch(tmp_path, loss_name):
    """Two targets of 1.4e19: each squared error, 1.96e38, is a float32; their sum is not. With
    ``nn.MSELoss()`` the per-sample losses are all finite while the mean is Inf; the guard tries
    the records largest loss first and names the pair, as bisection does for a plain function,
    wherever the shuffle put the two in the batch (positions no halving keeps together)."""
    inputs, targets = torch.rand(64, 1), torch.zeros(64, 1)
    targets[[3, 40]] = 1.4e19
    loss = (
        nn.MSELoss() if loss_name == "MSELoss module" else (lambda outputs, goal: F.mse_loss(outputs, goal))
    )
    named = []
    for seed in range(3):  # three shuffles of one batch of 64
        model = nn.Linear(1, 1)
        guard = NanGuard(model, loss, manifest=tmp_path / f"{seed}.jsonl", spike=None)
        generator = torch.Generator().manual_seed(seed)
        loader = guard.wrap(
            DataLoader(TensorDataset(inputs, targets), batch_size=64, shuffle=True, generator=generator)
        )
        train(guard, model, loader, lambda m, b: loss(m(b[0]), b[1]))
        assert guard.skipped == 1 and finite_model(model)
        lines = manifest_lines(tmp_path / f"{seed}.jsonl")
        assert {line["check"] for line in lines} == {"training-joint-nonfinite"}
        assert all(
            line["details"]["group_size"] == 2 and "unnarrowed" not in line["details"] for line in lines
        )
        tried = lines[0]["details"]["tried"]
        assert ("loss-order" in tried) == (loss_name == "MSELoss module")
        named.append(sorted(int(line["key"]) for line in lines))
        assert guard.last_passes <= 4 * math.log2(64) + 3
    assert named == [[3, 40]] * 3


def test_a_record_whose_own_row_overflows_only_when_summed_is_a_culprit_not_its_batch(tmp_path):
    """A record of two targets of 1.4e19: each element's squared error is finite, so the
    per-sample values (one per element) are, but the record's own mean is not: it fails alone,
    and is named as such, while the batch's other records are left alone."""
    inputs, targets = torch.rand(32, 2), torch.zeros(32, 2)
    targets[21] = 1.4e19
    model = nn.Linear(2, 2)
    guard = NanGuard(model, nn.MSELoss(), manifest=None, spike=None)
    loader = guard.wrap(DataLoader(TensorDataset(inputs, targets), batch_size=16, shuffle=True))
    train(guard, model, loader, lambda m, b: F.mse_loss(m(b[0]), b[1]))
    assert [(issue.check, issue.key) for issue in guard.issues] == [("training-nonfinite", "21")]
    assert guard.issues[0].details["found_by"] == "loss-order" and finite_model(model)


def test_gradient_accumulation_guards_each_micro_batch_and_amp_overflows_are_the_scalers(tmp_path):
    """float16 autocast with a GradScaler whose first scale overflows (as it expects to), and two
    micro-batches a step: the scaler's overflows are skipped without a finding; the planted NaN
    is found in its micro-batch and its step applies nothing."""
    inputs = torch.randn(256, 4)
    inputs[37, 0] = float("nan")
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    autocast = {"device_type": "cpu", "dtype": torch.float16}
    guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=tmp_path / "g.jsonl", autocast=autocast)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)  # float16 gradients overflow at first
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = guard.wrap(DataLoader(TensorDataset(inputs, torch.randint(0, 3, (256,))), batch_size=8))
    applied = 0
    for number, (batch_inputs, targets) in enumerate(loader):
        with torch.autocast(**autocast):
            loss = F.cross_entropy(model(batch_inputs), targets) / 2
        scaler.scale(loss).backward()
        if number % 2 == 1:  # every second micro-batch: the step
            scaler.unscale_(optimizer)
            if guard.ok(loss, scaler=scaler):
                scaler.step(optimizer)
                applied += 1
            scaler.update()
            optimizer.zero_grad()
        elif not guard.ok(loss, scaler=scaler):
            optimizer.zero_grad()
    assert culprits(tmp_path / "g.jsonl") == {"37"}
    assert scaler.get_scale() < 2.0**24 and applied > 0 and finite_model(model)
    assert {line["check"] for line in manifest_lines(tmp_path / "g.jsonl")} == {"training-nonfinite"}


def test_scrub_fix_takes_the_guards_manifest_alone_or_merged_with_a_scans(
    image_folder, tmp_path, monkeypatch
):
    """The guard names the gray image as scrub names the file (`class1/gray.png`): `scrub fix
    --manifest` sets it aside; given with a scan's manifest too, the verdicts of both."""
    from typer.testing import CliRunner

    from scrub.cli import app

    monkeypatch.chdir(tmp_path)
    (image_folder / "class0" / "empty.jpg").write_bytes(b"")  # a scan's finding the training never reads
    model = convnet()
    guard = NanGuard(model, nn.CrossEntropyLoss(), manifest="guard.scrub.jsonl")
    train(
        guard, model, guard.wrap(DataLoader(Standardized(image_folder), batch_size=8, shuffle=True)), classify
    )
    run = CliRunner().invoke
    fixed = run(
        app, ["fix", str(image_folder), "--manifest", "guard.scrub.jsonl", "--out", "clean", "--quarantine"]
    )
    assert fixed.exit_code == 0, fixed.output
    assert "reused the NaN guard's findings in guard.scrub.jsonl" in fixed.output
    assert "quarantined 1 record -> " in fixed.output
    assert (
        not (tmp_path / "clean" / "class1" / "gray.png").exists()
        and (tmp_path / "clean" / "class0" / "empty.jpg").exists()
    )
    held = manifest_lines(tmp_path / "images.quarantine" / "manifest.jsonl")
    assert [(line["key"], line["check"]) for line in held] == [("class1/gray.png", "training-nonfinite")]
    assert held[0]["details"]["training_index"] == next(
        i for i, (p, _) in enumerate(Standardized(image_folder).samples) if p.endswith("gray.png")
    )
    # the images are 8x8 for a small model: not tiny-image here
    scan = ["scan", str(image_folder), "--manifest", "scan.jsonl", "--min-image-side", "8", "-q"]
    assert run(app, scan).exit_code == 1
    both = run(
        app,
        [
            "fix",
            str(image_folder),
            "--manifest",
            "scan.jsonl",
            "--manifest",
            "guard.scrub.jsonl",
            "--out",
            "both",
        ],
    )
    assert both.exit_code == 0, both.output
    assert "reused the scan in scan.jsonl and the NaN guard's findings in guard.scrub.jsonl" in both.output
    assert not (tmp_path / "both" / "class1" / "gray.png").exists()
    assert not (tmp_path / "both" / "class0" / "empty.jpg").exists()
    assert len(list((tmp_path / "both").rglob("*.png"))) == 48


class Rows(Dataset):
    """Rows of an HDF5 file, each named as scrub names it (``record_key``: the file and the row)."""

    def __init__(self, path: Path) -> None:
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


def test_hdf5_rows_named_by_record_key_are_removed_by_fix(tmp_path):
    import h5py

    import scrub

    data = np.random.default_rng(0).normal(size=(96, 6)).astype(np.float32)
    data[70, 2] = np.inf
    with h5py.File(tmp_path / "train.h5", "w") as file:
        file["data"], file["label"] = data, np.arange(96) % 3
    model = nn.Linear(6, 3)
    guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=tmp_path / "guard.scrub.jsonl")
    train(
        guard,
        model,
        guard.wrap(DataLoader(Rows(tmp_path / "train.h5"), batch_size=16, shuffle=True)),
        classify,
    )
    assert culprits(tmp_path / "guard.scrub.jsonl") == {"70"}
    fixed = scrub.fix(
        tmp_path / "train.h5", manifest=tmp_path / "guard.scrub.jsonl", out=tmp_path / "clean.h5"
    )
    assert fixed.verified and fixed.report["quarantined"] == 1
    with h5py.File(tmp_path / "clean.h5") as file:
        assert file["data"].shape == (95, 6) and np.isfinite(file["data"][:]).all()
    # a guard that could only number the records: fix refuses to guess which record it meant
    (tmp_path / "other.scrub.jsonl").write_text(
        '{"source": "3", "key": "3", "index": 3, "check": "training-nonfinite", "severity": "error", '
        '"message": "m", "details": {"named_by": "index"}}\n'
    )
    (tmp_path / "other.scrub.scan.json").write_text('{"kind": "guard", "fingerprint": null}')
    with pytest.raises(scrub.UsageError, match="could name them by index only"):
        scrub.fix(tmp_path / "train.h5", manifest=tmp_path / "other.scrub.jsonl", out=tmp_path / "again.h5")


@pytest.mark.slow
def test_the_example_names_the_gray_image_and_fix_sets_it_aside(tmp_path):
    """`examples/guard_training.py`, whose output the README shows."""
    import subprocess
    import sys

    from conftest import REPO

    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "guard_training.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "12 steps, 3 skipped; the model is finite"
    assert [line.split("  ")[0].split(": ")[1] for line in lines[1:4]] == ["dog/gray.png"] * 3
    assert "quarantined 1 record -> not written (use --quarantine)" in done.stdout
    assert not (tmp_path / "images.clean" / "dog" / "gray.png").exists()
    assert len(list((tmp_path / "images.clean").rglob("*.png"))) == 60


class Stream(torch.utils.data.IterableDataset):
    """Samples of a stream (WebDataset's shape): dicts with a ``__key__``; sample ``s0013`` is NaN."""

    def __iter__(self):
        generator = torch.Generator().manual_seed(0)
        for number in range(40):
            features = torch.randn(4, generator=generator)
            if number == 13:
                features[0] = float("nan")
            yield {"__key__": f"s{number:04d}", "features": features, "label": number % 3}


def test_an_iterable_datasets_samples_are_named_by_their_key_through_collation(tmp_path):
    model = nn.Linear(4, 3)

    def step(m, batch):
        return F.cross_entropy(m(batch["features"]), torch.as_tensor(batch["label"]))

    guard = NanGuard(model, step=step, manifest=None)
    train(guard, model, guard.wrap(DataLoader(Stream(), batch_size=8)), step)
    assert [(issue.key, issue.index, issue.details["named_by"]) for issue in guard.issues] == [
        ("s0013", None, "__key__")
    ]


def test_a_key_function_names_records_and_an_unordered_loader_is_refused():
    inputs = torch.randn(24, 4)
    inputs[5, 0] = float("nan")
    model = nn.Linear(4, 3)
    guard = NanGuard(
        model, nn.CrossEntropyLoss(), manifest=None, key=lambda index: ("train.h5", f"row{index}")
    )
    train(
        guard,
        model,
        guard.wrap(DataLoader(TensorDataset(inputs, torch.zeros(24).long()), batch_size=8)),
        classify,
    )
    assert [(issue.source, issue.key, issue.index) for issue in guard.issues] == [("train.h5", "row5", 5)]
    unordered = DataLoader(TensorDataset(inputs), batch_size=8, num_workers=2, in_order=False)
    with pytest.raises(ValueError, match="in_order=False"):
        guard.wrap(unordered)
