"""The NaN guard's cost: training steps with and without it, and the passes a culprit costs.

    python benchmarks/bench_guard.py [--steps 50] [--rounds 21]

Two models on the CPU, as the issue asks: a small convnet (conv + BatchNorm, 32x32 RGB, batch 64)
and a small transformer encoder (2 layers, width 128, sequences of 64 tokens, batch 32). Each
round times ``--steps`` training steps of the plain loop, then of the same loop through the guard
(`guard.wrap` and `guard.ok`), on the same batches: the rounds interleave the two, so that this
machine's drift falls on both; the table gives the median of the rounds' ratios. Then one NaN
record is planted in a batch of 2^k (k = 4 .. 8) and the passes the triage took are counted,
against the bound 2·log2(B)+3 (with per-sample losses: 3).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from scrub.guard import NanGuard


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
    model: nn.Module, data: TensorDataset, batch: int, steps: int, guarded: bool
) -> tuple[float, float]:
    """(wall seconds of ``steps`` training steps, seconds spent in the guard's own calls)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = NanGuard(model, nn.CrossEntropyLoss(), manifest=None)
    inside = [0.0]
    deliver = guard.deliver

    def timed_deliver(*args, **kwargs):  # the wrapped loader's share: the batch made current
        started = time.perf_counter()
        deliver(*args, **kwargs)
        inside[0] += time.perf_counter() - started

    guard.deliver = timed_deliver  # type: ignore[method-assign]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(
        "| model | steps a round | plain (median of rounds) | guarded | guarded / plain: medians "
        "| middle half of the rounds' ratios | the guard's own calls, of a guarded step |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for name, make, batch in (
        ("convnet + BatchNorm, batch 64", convnet, 64),
        ("transformer, batch 32", transformer, 32),
    ):
        model, data = make()
        seconds(model, data, batch, 10, True)  # warm: allocations, threads
        plain, guarded, ratios, own = [], [], [], []
        for number in range(args.rounds):  # which runs first alternates: neither always runs warmer
            if number % 2:
                two, inside = seconds(model, data, batch, args.steps, True)
                one, _ = seconds(model, data, batch, args.steps, False)
            else:
                one, _ = seconds(model, data, batch, args.steps, False)
                two, inside = seconds(model, data, batch, args.steps, True)
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
        print(f"| {name} | {args.steps} | {shown} |")
    print()
    print("| batch B | passes, bisection | 2·log2(B)+3 | passes, per-sample losses |")
    print("|---:|---:|---:|---:|")
    for power in range(4, 9):
        batch = 2**power
        print(f"| {batch} | {passes(batch, False)} | {2 * power + 3} | {passes(batch, True)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
