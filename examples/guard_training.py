"""A real PyTorch training run guarded by scrub's NaN guard, then cleaned by `scrub fix`.

    pip install torch && python examples/guard_training.py [FOLDER]

It writes an image folder (torchvision's ImageFolder layout: 3 classes of 8x8 gray PNGs, one of
them a constant image) into FOLDER (default: a temporary folder), reads it with per-image
standardization, as many pipelines do, and trains a small conv + BatchNorm net on it, shuffled,
with two loader workers. The constant image divides by its standard deviation, 0: it is a fine PNG,
which a scan only warns of (`constant-image`; an error with `--normalization per-record`), and
the batch that holds it goes NaN. The guard names it, skips that
step, and `scrub fix --manifest` sets it aside. The README's "When a run goes NaN anyway" shows
what this prints.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

from scrub.guard import NanGuard


class StandardizedFolder(Dataset):
    """Image files as torchvision's ``DatasetFolder`` lists them (``samples``, ``root``: the guard
    names a record by its file, as scrub does), each standardized per image."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        classes = sorted(path.name for path in root.iterdir() if path.is_dir())
        self.samples = [
            (str(path), label)
            for label, name in enumerate(classes)
            for path in sorted((root / name).glob("*.png"))
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, label = self.samples[index]
        pixels = torch.from_numpy(np.asarray(Image.open(path).convert("L"), dtype=np.float32))[None]
        return (pixels - pixels.mean()) / pixels.std(), label


def make_folder(root: Path) -> Path:
    rng = np.random.default_rng(0)
    for number in range(60):
        folder = root / ("cat", "dog", "bird")[number % 3]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(folder / f"{number:03d}.png")
    Image.fromarray(np.full((8, 8), 128, np.uint8)).save(root / "dog" / "gray.png")
    return root


def main(folder: Path) -> int:
    images = make_folder(folder / "images")
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 3)
    )
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    guard = NanGuard(model, loss_fn, manifest=folder / "guard.scrub.jsonl")
    loader = guard.wrap(DataLoader(StandardizedFolder(images), batch_size=16, shuffle=True, num_workers=2))
    for _epoch in range(3):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            if guard.ok(loss):
                optimizer.step()
    finite = all(
        bool(torch.isfinite(t).all())
        for t in [*model.parameters(), *model.buffers()]
        if t.is_floating_point()
    )
    print(
        f"{guard.steps} steps, {guard.skipped} skipped; the model is {'finite' if finite else 'NOT finite'}"
    )
    for issue in guard.issues:
        details = issue.details
        print(
            f"step {details['step']}: {issue.key}  {issue.check}  found by {details['found_by']} "
            f"in {details['passes']} passes"
        )
    fixed = subprocess.run(
        [sys.executable, "-m", "scrub", "fix", str(images), "--manifest", str(folder / "guard.scrub.jsonl")],
        capture_output=True,
        text=True,
        cwd=folder,
    )
    print(fixed.stdout.replace(str(folder) + "/", ""), end="")
    return fixed.returncode


if __name__ == "__main__":
    if len(sys.argv) > 1:
        raise SystemExit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory() as scratch:
        raise SystemExit(main(Path(scratch)))
