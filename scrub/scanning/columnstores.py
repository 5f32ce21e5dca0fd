"""The compact columns dataset checks run on, kept by the driver as partitions complete:
a plain column (one value per record, in record order), or a rare-value store that keeps the
records of the values few records hold, so that memory stays bounded however many rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from scrub.checks.base import RARE_KEPT, Check, Column, in_sorted, sorted_unique
from scrub.checks.numeric import MAGNITUDE_KEPT_PER_BIN, magnitude_bins
from scrub.scanning.results import LeftPart


class ColumnStore:
    """One dataset check's collected values, packed as they arrive; on a cluster, the parts
    left on its workers (`scrub.scanning.results.LeftPart`), to be joined there (`scrub.scanning.joins`)."""

    def __init__(self, dtype: str, check_id: str = "") -> None:
        self.dtype = dtype
        self.check_id = check_id
        self.categories: dict[str, int] = {}
        self._positions: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        #: (partition, part) of each part left on a cluster
        self.left: list[tuple[int, LeftPart]] = []

    @property
    def count(self) -> int:
        """How many values the column holds, here and left on a cluster."""
        return sum(len(values) for values in self._values) + sum(part.count for _, part in self.left)

    def add_left(self, partition: int, part: LeftPart) -> None:
        """A partition's values left on a cluster, in place of the values themselves."""
        self.left.append((partition, part))

    def add(self, partition: int, offsets: Any, values: Any) -> None:
        if len(offsets) == 0:
            return
        positions = np.empty((len(offsets), 2), dtype=np.int32)
        positions[:, 0] = partition
        positions[:, 1] = offsets
        self._positions.append(positions)
        if self.dtype == "category":
            codes = [self.categories.setdefault(v, len(self.categories)) for v in values]
            self._values.append(np.asarray(codes, dtype=np.uint16))
        else:
            self._values.append(np.asarray(values, dtype=self.dtype))

    def column(self) -> Column:
        """The whole column, here: the parts left on a cluster are fetched first."""
        if self.left:  # fetched at once: a round trip a part would add up
            parts, self.left = self.left, []
            futures = [part.future for _, part in parts]
            for (partition, _), columns in zip(parts, futures[0].client.gather(futures)):
                self.add(partition, *columns[self.check_id])
        return self.here()

    def here(self) -> Column:
        """The values this process holds (all of them, but for the parts left on a cluster)."""
        if not self._positions:
            empty = np.empty(0, dtype=object if self.dtype == "category" else self.dtype)
            return Column(np.empty((0, 2), dtype=np.int32), empty)
        positions = np.concatenate(self._positions)
        values = np.concatenate(self._values)
        if self.dtype == "category":
            names = list(self.categories)
            return Column(positions, np.array(names, dtype=object)[values], categories=(values, names))
        return Column(positions, values)


class RareValueStore:
    """A histogram of numeric values plus the positions of the values that are still rare.

    A value (or, with ``bins``, a bin of values) seen more than ``cap`` times is common: its
    positions are dropped and never kept again. With ``keep_negative``, negative values keep
    their positions (every negative label is reported). Vectorized: the only Python loop is the
    histogram update, once per distinct value (bin) of a partition.
    """

    def __init__(
        self,
        cap: int = RARE_KEPT,
        bins: Callable[[np.ndarray], np.ndarray] | None = None,
        keep_negative: bool = True,
    ) -> None:
        self.cap = cap
        self.bins = bins
        self.keep_negative = keep_negative
        #: the histogram so far: sorted distinct values (bins) and their counts, kept in NumPy: a
        #: Counter updated per value held the GIL for every partition, which the worker threads of
        #: an HDF5 scan waited for (`merge_histograms`; docs/benchmarks.md, "Design measurements")
        self.distinct = np.empty(0, dtype=np.float64)
        self.totals = np.empty(0, dtype=np.int64)
        self.common = np.empty(0, dtype=np.float64)
        self._positions: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []

    def add(
        self,
        partition: int,
        offsets: Any,
        values: Any,
        histogram: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Add a partition's values; with ``histogram`` (every value's bin and count, counted by
        the worker), ``values`` may be only the rare ones."""
        values = np.asarray(values, dtype=np.float64)
        if len(values) == 0 and histogram is None:
            return
        keys = values if self.bins is None else self.bins(values)
        distinct, counts = histogram if histogram is not None else np.unique(keys, return_counts=True)
        distinct = np.asarray(distinct, dtype=np.float64)
        self.distinct, self.totals = merge_histograms(
            self.distinct, self.totals, distinct, np.asarray(counts, dtype=np.int64)
        )
        totals = self.totals[np.searchsorted(self.distinct, distinct)]
        newly_common = np.sort(distinct[(totals > self.cap) & ((distinct >= 0) | (not self.keep_negative))])
        if len(newly_common):
            self.common = sorted_unique(np.concatenate((self.common, newly_common)))  # not union1d: see there
            for i, kept in enumerate(self._keys):
                rare = ~in_sorted(kept, newly_common)
                self._keys[i], self._values[i], self._positions[i] = (
                    kept[rare],
                    self._values[i][rare],
                    self._positions[i][rare],
                )
        rare = ~in_sorted(keys, self.common)
        if rare.any():
            positions = np.empty((int(rare.sum()), 2), dtype=np.int32)
            positions[:, 0], positions[:, 1] = partition, np.asarray(offsets)[rare]
            self._positions.append(positions)
            self._values.append(values[rare])
            self._keys.append(keys[rare])

    def column(self) -> Column:
        distinct, counts = self.distinct, self.totals
        if not self._positions:
            return Column(np.empty((0, 2), dtype=np.int32), np.empty(0), (distinct, counts))
        return Column(np.concatenate(self._positions), np.concatenate(self._values), (distinct, counts))


def merge_histograms(
    distinct: np.ndarray, counts: np.ndarray, more: np.ndarray, more_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Two histograms of sorted distinct values as one, sorted: counts of equal values summed.
    Values are float64: labels and magnitude bins, all finite (a NaN would stay an entry of its
    own, as in a Counter of them)."""
    if not len(more):
        return distinct, counts
    values = np.concatenate((distinct, more))
    order = np.argsort(values, kind="stable")
    values, summed = values[order], np.concatenate((counts, more_counts))[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    return values[starts], np.add.reduceat(summed, starts)


def store_for(dtype: str, check_id: str = "") -> ColumnStore | RareValueStore:
    if dtype == "rare":
        return RareValueStore()
    if dtype == "magnitude":
        return RareValueStore(MAGNITUDE_KEPT_PER_BIN, bins=magnitude_bins, keep_negative=False)
    return ColumnStore(dtype, check_id)


def column_store(check: Check) -> ColumnStore | RareValueStore:
    """A fresh store for a dataset check's column (dataset checks always declare its dtype)."""
    assert check.column_dtype is not None
    return store_for(check.column_dtype, check.id)
