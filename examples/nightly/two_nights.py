"""Two nights of a small HDF5 dataset, the second drifted: the README's drift example.

    python examples/nightly/two_nights.py [FOLDER]

writes ``monday.h5`` and ``tuesday.h5`` in FOLDER (default: here): 2,000 rows of 8 float32
features with class labels 0..3 (shares 40/30/20/10%). Tuesday's export went wrong three ways:
feature 3 arrives in other units (centimetres where metres were: times 100), class 2 is missing
(its rows were dropped), and so a fifth of the rows are gone. The data is seeded; the profile's
quantile sketches draw random bits of their own, so distances vary in their last digits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np


def write(path: Path, data: np.ndarray, labels: np.ndarray) -> None:
    with h5py.File(path, "w") as file:
        file["data"] = data
        file["label"] = labels


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(39)
    data = rng.normal(0, 1, size=(2_000, 8)).astype(np.float32)
    labels = rng.choice(4, size=2_000, p=[0.4, 0.3, 0.2, 0.1]).astype(np.int64)
    write(folder / "monday.h5", data, labels)
    tonight = rng.normal(0, 1, size=(2_000, 8)).astype(np.float32)  # another night's draw
    tonight[:, 3] *= 100
    labels_tonight = rng.choice(4, size=2_000, p=[0.4, 0.3, 0.2, 0.1]).astype(np.int64)
    kept = labels_tonight != 2
    write(folder / "tuesday.h5", tonight[kept], labels_tonight[kept])
    print(f"wrote {folder / 'monday.h5'} (2,000 rows) and {folder / 'tuesday.h5'} ({int(kept.sum()):,} rows)")


if __name__ == "__main__":
    main()
