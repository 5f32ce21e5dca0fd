"""The NaN guard's cost: training steps with and without it, and the passes a culprit costs.

    python benchmarks/bench_guard.py [--steps 50] [--rounds 21] [--clean-steps 3000]
                                     [--only convnet|transformer] [--no-passes]

Two models on the CPU, as the issue asks: a small convnet (conv + BatchNorm, 32x32 RGB, batch 64)
and a small transformer encoder (2 layers, width 128, sequences of 64 tokens, batch 32). Each
round times ``--steps`` training steps of the plain loop, then of the same loop through the guard
(`guard.wrap` and `guard.ok`), on the same batches: the rounds interleave the two, so that this
machine's drift falls on both; the table gives the median of the rounds' ratios. The last row
checks the transformer's token ids against its embedding before each forward (``embedding=``). Then one NaN
record is planted in a batch of 2^k (k = 4 .. 8) and the passes the triage took are counted,
against the bound 2·log2(B)+3 (with per-sample losses: 3).

Last, the spike rule's false alarms (``--clean-steps``, 0 to leave it out): clean runs of the
test suite's models (an MLP regressor with Adam and a cosine schedule with warm-up, an MLP
classifier with SGD and step decay, the conv + BatchNorm net with a one-cycle schedule, the tiny
transformer with AdamW and dropout on a Markov chain's sequences; shuffled, three seeds each),
guarded with the default rule: the steps it skipped, and the highest ratio of a step's gradient
norm to the median of the 100 before it (the rule's own measure) and robust z-score
((norm - median) / (1.4826 MAD), the alternative it was chosen over).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from scrub.guard import NanGuard, Spike
from scrub.guard.spike import gradient_norm


def convnet() -> tuple[nn.Module, TensorDataset]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    return model, TensorDataset(torch.randn(64 * 16, 3, 32, 32), torch.randint(0, 10, (64 * 16,)))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(1000, 128)
        layer = nn.TransformerEncoderLayer(128, 4, 256, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(128, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def transformer() -> tuple[nn.Module, TensorDataset]:
    return Encoder(), TensorDataset(torch.randint(0, 1000, (32 * 16, 64)), torch.randint(0, 10, (32 * 16,)))


def seconds(
    model: nn.Module,
    data: TensorDataset,
    batch: int,
    steps: int,
    guarded: bool,
    spike: Spike | None = Spike(),  # noqa: B008 - frozen
    ids: bool = False,
) -> tuple[float, float]:
    """(wall seconds of ``steps`` training steps, seconds spent in the guard's own calls);
    ``ids``: the token ids of each batch checked against the model's ``embed`` before the forward."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    embedding = getattr(model, "embed", None) if ids else None
    guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=None, spike=spike, embedding=embedding)
    inside = [0.0]
    deliver, screen = guard.deliver, guard.screen

    def timed_deliver(*args, **kwargs):  # the wrapped loader's share: the batch made current
        started = time.perf_counter()
        deliver(*args, **kwargs)
        inside[0] += time.perf_counter() - started

    def timed_screen(*args, **kwargs):  # ... and the ids checked against the embedding
        started = time.perf_counter()
        screened = screen(*args, **kwargs)
        inside[0] += time.perf_counter() - started
        return screened

    guard.deliver = timed_deliver  # type: ignore[method-assign]
    guard.screen = timed_screen  # type: ignore[method-assign]
    loader = DataLoader(data, batch_size=batch)
    source = guard.wrap(loader) if guarded else loader
    done = 0
    started = time.perf_counter()
    while done < steps:
        for inputs, targets in source:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs), targets)
            loss.backward()
            if guarded:
                checked = time.perf_counter()
                ok = guard.ok(loss)
                inside[0] += time.perf_counter() - checked
            if not guarded or ok:
                optimizer.step()
            done += 1
            if done == steps:
                break
    return time.perf_counter() - started, inside[0]


def passes(batch: int, per_sample: bool) -> int:
    inputs = torch.randn(batch, 8)
    inputs[batch // 3, 2] = float("nan")
    model = nn.Linear(8, 3)
    loss = (
        nn.CrossEntropyLoss() if per_sample else (lambda outputs, targets: F.cross_entropy(outputs, targets))
    )
    guard = NanGuard(model, loss, manifest=None)
    for batch_inputs, targets in guard.wrap(
        DataLoader(TensorDataset(inputs, torch.zeros(batch).long()), batch_size=batch)
    ):
        output = F.cross_entropy(model(batch_inputs), targets)
        output.backward()
        assert not guard.ok(output)
    assert [issue.key for issue in guard.issues] == [str(batch // 3)]
    return guard.last_passes


class TinyTransformer(nn.Module):
    """tests/test_guard.py's."""

    def __init__(self, vocabulary: int = 32, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        layer = nn.TransformerEncoderLayer(width, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1)
        self.head = nn.Linear(width, vocabulary)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


#: (model, data, batch size, loss of a batch, optimizer, learning rate, schedule) of a clean run
Run = tuple[nn.Module, TensorDataset, int, Callable[[nn.Module, Any], torch.Tensor], str, float, str]


def mlp_regression(seed: int) -> Run:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(4096, 16, generator=generator)
    teacher = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    with torch.no_grad():
        targets = teacher(inputs) + 0.1 * torch.randn(4096, 1, generator=generator)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    data = TensorDataset(inputs, targets)
    return model, data, 32, lambda m, b: F.mse_loss(m(b[0]), b[1]), "adam", 1e-3, "cosine-warmup"


def mlp_classifier(seed: int) -> Run:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(4096, 16, generator=generator)
    labels = (inputs @ torch.randn(16, 5, generator=generator)).argmax(1)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5))
    data = TensorDataset(inputs, labels)
    return model, data, 32, lambda m, b: F.cross_entropy(m(b[0]), b[1]), "sgd", 0.1, "step"


def small_convnet(seed: int) -> Run:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(2048, 1, 8, 8, generator=generator)
    labels = (images.flatten(1) @ torch.randn(64, 3, generator=generator)).argmax(1)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3)
    )
    data = TensorDataset(images, labels)
    return model, data, 16, lambda m, b: F.cross_entropy(m(b[0]), b[1]), "sgd", 0.05, "onecycle"


def tiny_transformer(seed: int) -> Run:
    """Next-token prediction on a Markov chain's sequences (each token has 3 successors)."""
    generator = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, 32, (32, 3), generator=generator)
    sequences = torch.empty(2048, 13, dtype=torch.long)
    sequences[:, 0] = torch.randint(0, 32, (2048,), generator=generator)
    for position in range(1, 13):
        pick = torch.randint(0, 3, (2048,), generator=generator)
        sequences[:, position] = successors[sequences[:, position - 1], pick]
    torch.manual_seed(seed)
    data = TensorDataset(sequences[:, :-1], sequences[:, 1:])

    def loss_of(model: nn.Module, batch: Any) -> torch.Tensor:
        return F.cross_entropy(model(batch[0]).transpose(1, 2), batch[1])

    return TinyTransformer(), data, 16, loss_of, "adamw", 3e-3, "cosine-warmup"


def scheduled(optimizer: torch.optim.Optimizer, kind: str, steps: int) -> Any:
    if kind == "cosine-warmup":  # 100 steps of linear warm-up, then a cosine to 0
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)),
        )
    if kind == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, max(1, steps // 3), 0.1)
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=optimizer.param_groups[0]["lr"], total_steps=steps + 1
    )


def clean_run(make: Callable[[int], Run], seed: int, steps: int) -> tuple[int, float, float]:
    """(steps the default spike rule skipped, the highest ratio of a step's gradient norm to the
    median of the 100 before it, the highest robust z-score) over ``steps`` clean guarded steps."""
    model, data, batch, loss_of, kind, lr, schedule = make(seed)
    if kind == "sgd":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        optimizer = (torch.optim.Adam if kind == "adam" else torch.optim.AdamW)(model.parameters(), lr=lr)
    scheduler = scheduled(optimizer, schedule, steps)
    rule = Spike()
    guard = NanGuard(model, step=loss_of, manifest=None, spike=rule)
    loader = guard.wrap(
        DataLoader(data, batch_size=batch, shuffle=True, generator=torch.Generator().manual_seed(seed))
    )
    norms: list[float] = []
    ratio = z = 0.0
    while len(norms) < steps:
        for inputs in loader:
            optimizer.zero_grad()
            loss = loss_of(model, inputs)
            loss.backward()
            norm = gradient_norm([p.grad for p in model.parameters()])
            recent = norms[-rule.window :]
            if len(norms) >= rule.warmup:
                median = statistics.median(recent)
                spread = 1.4826 * statistics.median(abs(n - median) for n in recent)
                ratio = max(ratio, norm / median)
                z = max(z, (norm - median) / spread if spread else math.inf)
            norms.append(norm)
            if guard.ok(loss):
                optimizer.step()
            scheduler.step()
            if len(norms) == steps:
                break
    return guard.skipped, ratio, z


def timed(steps: int, rounds: int, only: str = "") -> None:
    """The table of training steps with and without the guard (the module's docstring), with
    the spike rule (the default) and without it, and with the token ids checked; ``only``: the
    rows of that model (``convnet``, ``transformer``)."""
    print(
        "| model | steps a round | plain (median of rounds) | guarded | guarded / plain: medians "
        "| middle half of the rounds' ratios | the guard's own calls, of a guarded step |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for name, make, batch, spike, ids in (
        ("convnet + BatchNorm, batch 64", convnet, 64, Spike(), False),
        ("the same, spike=None", convnet, 64, None, False),
        ("transformer, batch 32", transformer, 32, Spike(), False),
        ("the same, spike=None", transformer, 32, None, False),
        ("the same, ids checked (embedding=)", transformer, 32, Spike(), True),
    ):
        if only and make.__name__ != only:
            continue
        model, data = make()
        seconds(model, data, batch, 10, True)  # warm: allocations, threads
        plain, guarded, ratios, own = [], [], [], []
        for number in range(rounds):  # which runs first alternates: neither always runs warmer
            if number % 2:
                two, inside = seconds(model, data, batch, steps, True, spike, ids)
                one, _ = seconds(model, data, batch, steps, False)
            else:
                one, _ = seconds(model, data, batch, steps, False)
                two, inside = seconds(model, data, batch, steps, True, spike, ids)
            plain.append(one)
            guarded.append(two)
            ratios.append(two / one)
            own.append(inside / two)
        middle = statistics.median
        quartiles = statistics.quantiles(ratios, n=4)
        shown = (
            f"{middle(plain):.3f} s | {middle(guarded):.3f} s | {middle(guarded) / middle(plain):.3f} | "
            f"{quartiles[0]:.3f}–{quartiles[2]:.3f} | {100 * middle(own):.2f}%"
        )
        print(f"| {name} | {steps} | {shown} |")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=21, help="0 leaves the timing out")
    parser.add_argument("--clean-steps", type=int, default=3000, help="0 leaves the false alarms out")
    parser.add_argument("--only", choices=["convnet", "transformer"], help="time that model's rows only")
    parser.add_argument(
        "--passes", action=argparse.BooleanOptionalAction, default=True, help="the passes table"
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.rounds:
        timed(args.steps, args.rounds, args.only or "")
    if not args.passes:
        return 0
    print("| batch B | passes, bisection | 2·log2(B)+3 | passes, per-sample losses |")
    print("|---:|---:|---:|---:|")
    for power in range(4, 9):
        batch = 2**power
        print(f"| {batch} | {passes(batch, False)} | {2 * power + 3} | {passes(batch, True)} |")
    if args.clean_steps:
        print()
        print(
            f"| clean run ({args.clean_steps:,} steps, seeds 0-2) | steps skipped as spikes | highest "
            "gradient norm / running median | highest robust z-score |"
        )
        print("|---|---:|---:|---:|")
        for make in (mlp_regression, mlp_classifier, small_convnet, tiny_transformer):
            results = [clean_run(make, seed, args.clean_steps) for seed in range(3)]
            skipped = sum(r[0] for r in results)
            ratio, z = max(r[1] for r in results), max(r[2] for r in results)
            print(f"| {make.__name__.replace('_', ' ')} | {skipped} | {ratio:.2f} | {z:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
