"""Does the cleaned copy train? Real PyTorch training on a planted dataset, before and after
``scrub fix``: ``python examples/torch_crosscheck.py`` (needs PyTorch; ~20 s on 2 cores).

An HDF5 file of float64 rows (3 x 16 x 16, labels 0..9, N(0, 1) values) with the faults that
make losses go NaN planted in a few rows, read as every float32 loader reads it
(``torch.from_numpy(rows).float()``), and trained in record order (no shuffle), batch 64, plain
SGD at lr 0.01, by three small networks: a linear softmax, a conv net with BatchNorm, and a head
that L2-normalizes its input by hand (``x / x.norm()``); in float32, and in float16 autocast. A
batch whose loss or gradients are not finite is counted and its step skipped (as a GradScaler
skips it), so that every batch is judged on healthy weights.

``tests/test_torch_training.py`` asserts, with these functions, that every batch that goes
non-finite on the source holds a record scrub reports as an error, and that the cleaned copy
trains with none.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROWS, SHAPE, CLASSES, BATCH, LR = 1280, (3, 16, 16), 10, 64, 0.01

#: row -> (what is planted, why it breaks training)
PLANTS = {
    37: "a NaN",
    150: "+Inf",
    260: "1e39 (float64: Inf once cast to float32)",
    333: "1e30 everywhere (its squares overflow; one step throws the weights to ~1e26)",
    480: "one value of 1e20 (its square overflows float32)",
    600: "ten values of 7e4 (Inf in float16)",
    777: "all zero (0/0 in an L2 normalization)",
    900: "1e6 everywhere (a million times the rest)",
}


def make_planted(path: Path) -> Path:
    rng = np.random.default_rng(2026)
    data = rng.normal(size=(ROWS, *SHAPE))
    label = rng.integers(0, CLASSES, ROWS)
    data[37, 1, 5, 5] = np.nan
    data[150, 0, 0, 3] = np.inf
    data[260, 2, 8, 8] = 1e39
    data[333] = 1e30
    data[480, 0, 3, 3] = 1e20
    data[600, 1, 0, :10] = 7e4
    data[777] = 0.0
    data[900] = 1e6
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data, chunks=(64, *SHAPE))
        file["label"] = label
    return path


class L2Head(nn.Module):
    """A linear classifier on the L2-normalized input, normalized by hand as many models do."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(int(np.prod(SHAPE)), CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        return self.linear(x / x.norm(dim=1, keepdim=True))


def make_net(name: str) -> nn.Module:
    torch.manual_seed(0)
    if name == "linear":
        return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(SHAPE)), CLASSES))
    if name == "conv+bn":
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, CLASSES),
        )
    return L2Head()


NETS = ("linear", "conv+bn", "l2-head")


def load(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows as float32, labels, the source row of each): what a loader of the dataset gives.
    A cleaned copy made by scrub fix has fewer rows; its rows are matched to the source's."""
    with h5py.File(path) as file:
        with np.errstate(over="ignore"):
            data = file["data"][:].astype(np.float32)
        return data, file["label"][:].astype(np.int64), np.arange(len(data))


def train(data: np.ndarray, labels: np.ndarray, net_name: str, precision: str) -> list[int]:
    """Train one epoch in record order; the numbers of the batches that went non-finite."""
    net = make_net(net_name)
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    broken = []
    for number, start in enumerate(range(0, len(data), BATCH)):
        x = torch.from_numpy(data[start : start + BATCH])
        y = torch.from_numpy(labels[start : start + BATCH])
        optimizer.zero_grad()
        if precision == "float16":
            with torch.autocast("cpu", dtype=torch.float16):
                logits = net(x)
        else:
            logits = net(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        finite = bool(torch.isfinite(loss)) and all(
            bool(torch.isfinite(p.grad).all()) for p in net.parameters()
        )
        if finite:
            optimizer.step()
        else:
            broken.append(number)
    return broken


def scrub_options(net_name: str, precision: str) -> dict:
    """What a user tells scrub about this training: the precision, and for a model that
    normalizes its input, the replay with the l2 model (then an all-zero row is an error)."""
    import scrub.api

    options: dict = {"num_classes": CLASSES, "precision": precision}
    if net_name == "l2-head":
        options["dummy_loss"] = scrub.api.ReplayOptions(model="l2")
    return options


def main() -> int:
    import scrub

    with tempfile.TemporaryDirectory() as folder:
        source = make_planted(Path(folder) / "planted.h5")
        data, labels, _ = load(source)
        print(f"{ROWS} rows, planted: " + "; ".join(f"{row}: {what}" for row, what in PLANTS.items()))
        print(
            f"{'network':9} {'precision':9} {'source: batches non-finite':32} "
            f"{'batches with a scrub error':28} "
            f"{'cleaned copy: non-finite'}"
        )
        failures = 0
        for precision in ("float32", "float16"):
            for net_name in NETS:
                options = scrub_options(net_name, precision)
                errors = {
                    i.index for i in scrub.scan(source, **options).issues() if i.severity.value == "error"
                }
                broken = train(data, labels, net_name, precision)
                explained = [b for b in broken if errors & set(range(b * BATCH, (b + 1) * BATCH))]
                fixed = scrub.fix(
                    source, out=Path(folder) / f"{net_name}-{precision}.h5", force=True, **options
                )
                clean_data, clean_labels, _ = load(fixed.clean)
                after = train(clean_data, clean_labels, net_name, precision)
                failures += len(broken) - len(explained) + len(after)
                print(
                    f"{net_name:9} {precision:9} {len(broken):>3} of {-(-ROWS // BATCH)} {str(broken):22} "
                    f"{len(explained):>3} of {len(broken):<24} {len(after)} of "
                    f"{-(-len(clean_data) // BATCH)} "
                    f"({fixed.report['quarantined']} rows quarantined)"
                )
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
