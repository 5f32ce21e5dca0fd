"""Standardize the replay's inputs the way a data pipeline does, from the scan's own statistics.

Plain SGD at a user's learning rate trains stably only on standardized inputs (on raw pixels at
lr 0.01 the loss of a linear softmax climbs to thousands within an epoch), so the replay feeds
its models what a pipeline would: ``(x - mean) / std`` per feature. Standardizing keeps every
pathology visible: a 1e30 value divided by a standard deviation of 60 is still 1e28, a NaN is
still NaN.

* 8-bit images: torchvision's ``ToTensor`` and ``Normalize`` with the ImageNet statistics,
  per channel (mean 0.485, 0.456, 0.406; std 0.229, 0.224, 0.225 of values scaled to [0, 1]),
  what nearly every image pipeline uses;
* arrays (HDF5 rows, ``.npy`` values, Datums): per-feature mean and standard deviation over the
  scan's typical rows (`Moments`);
* images whose pixels are numbers (modes F, I, I;16): one mean and standard deviation over all
  their pixels.

The statistics leave out, per batch of rows, those the scan calls non-finite or whose squares
overflow, and those whose largest magnitude is over 1000 times the batch's median (so that a
rare outlier row does not set the scale it is judged by); a feature whose standard deviation is
0 is divided by 1, as scikit-learn's ``StandardScaler`` does. ``--no-normalize`` replays the raw
values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: Rows at most this many times the batch's median magnitude go into the statistics.
TYPICAL_FACTOR = 1000.0
#: The statistics of a float image's pixels are kept under this key (one value per channel).
PIXELS = "pixels"


@dataclass
class Moments:
    """Count, sum and sum of squares per feature (or of all values, for ``PIXELS``), in float64."""

    count: int = 0
    total: Any = 0.0
    squares: Any = 0.0

    def add(self, rows: np.ndarray, per_feature: bool = True) -> None:
        if len(rows) == 0:
            return
        rows64 = rows.astype(np.float64, copy=False)
        if per_feature:
            self.count += len(rows)
            self.total = self.total + rows64.sum(axis=0)
            self.squares = self.squares + np.einsum("ij,ij->j", rows64, rows64)
        else:
            self.count += rows64.size
            self.total += float(rows64.sum())
            self.squares += float(np.einsum("ij,ij->", rows64, rows64))

    def merge(self, other: "Moments") -> None:
        self.count += other.count
        self.total = self.total + other.total
        self.squares = self.squares + other.squares

    def mean_std(self) -> tuple[np.ndarray, np.ndarray] | None:
        if self.count == 0:
            return None
        mean = np.asarray(self.total, np.float64) / self.count
        variance = np.maximum(np.asarray(self.squares, np.float64) / self.count - mean**2, 0.0)
        std = np.sqrt(variance)
        std[~(std > 0)] = 1.0  # constant features: left centred, not divided by 0
        return mean, std


def typical(magnitudes: np.ndarray, limit: float = np.inf, min_rows: int = 8) -> np.ndarray:
    """Mask of a batch's typical rows, by their largest magnitude: finite, below ``limit``
    and, when at least ``min_rows`` are, at most `TYPICAL_FACTOR` times the median of the
    non-zero ones. The statistics gather these rows; the replay judges records in their company."""
    with np.errstate(invalid="ignore"):
        keep = np.isfinite(magnitudes) & (magnitudes < limit)
    if keep.sum() >= min_rows:
        positive = magnitudes[keep & (magnitudes > 0)]
        if len(positive):
            keep &= magnitudes <= TYPICAL_FACTOR * float(np.median(positive))
    return keep


def typical_rows(rows: np.ndarray, magnitudes: np.ndarray, limit: float) -> np.ndarray:
    """The rows of a batch that may shape the statistics: `typical` ones, below ``limit``
    (where their squares would overflow), judged against the median in batches of 8 or more."""
    return rows[typical(magnitudes, limit)]


@dataclass(frozen=True)
class Standardizer:
    """``(x - mean) / std`` per feature, D-vectors of float32; ``source`` says where they came from."""

    mean: np.ndarray
    std: np.ndarray
    source: str
    notes: list[str] = field(default_factory=list)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return ((X - self.mean) / self.std).astype(np.float32, copy=False)

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "mean": _summary(self.mean), "std": _summary(self.std)}

    @classmethod
    def for_rgb(cls, image_size: int) -> "Standardizer":
        plane = image_size * image_size
        mean = np.repeat(np.asarray(IMAGENET_MEAN, np.float32) * 255, plane)  # the features are 0..255, CHW
        std = np.repeat(np.asarray(IMAGENET_STD, np.float32) * 255, plane)
        return cls(mean, std, "imagenet")

    @classmethod
    def from_moments(cls, moments: Moments | None, dim: int, source: str) -> "Standardizer | None":
        found = None if moments is None else moments.mean_std()
        if found is None:
            return None
        mean, std = found
        if np.ndim(mean) == 0:  # one value for every feature (float image pixels)
            mean, std = np.full(dim, float(mean)), np.full(dim, float(std))
        if mean.shape != (dim,):
            return None
        return cls(mean.astype(np.float32), std.astype(np.float32), source)


def _summary(values: np.ndarray) -> dict[str, float | None]:
    return {"min": _finite(values.min()), "max": _finite(values.max())}


def _finite(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
