"""Mergeable summaries of values, whose size does not grow with how many values they saw.

`Quantiles` wraps Apache DataSketches' KLL sketch (what whylogs builds on): any number of values
in a few KB, mergeable across partitions, with a rank error that does not depend on how many
values it saw (measured and chosen over a NumPy histogram of fixed bins in docs/profile.md).
`Numeric` adds the exact counts (non-finite, zero, extremes, sum) beside it. `TopCounts` keeps
the most frequent integer ids (token ids). All three pickle (Dask and ``dask.distributed``
ship a partition's profile back to the driver): a sketch travels as its serialized bytes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: the KLL sketch's size parameter: normalized rank error ~1.33% (one quantile) and ~1.65%
#: (a PMF: shares between ranks) with 99% confidence, ~5 KB serialized once full
QUANTILE_K = 200
#: the ranks a profile states its quantiles at: 0, 0.01, ..., 1
RANKS = np.linspace(0.0, 1.0, 101)
#: values a `Numeric` holds, at most, before it counts and sketches them at once: one vectorized
#: update costs what ~10 scalar ones do, and a sketch made for a few values costs more than they
#: do; a Numeric that never held more states exact quantiles. A dataset's sample of rows or
#: sequences (`scrub.profile.collect.ROWS_SAMPLED`) is no larger, so sampled lengths and value
#: labels are never sketched (an array group's features are, all columns at once:
#: `sketch_columns`)
PENDING = 8192


def _kll() -> Any:
    """DataSketches' KLL sketch class, imported on first use: a scan whose Numerics each hold
    at most `PENDING` values (a token store's sampled lengths, say) never pays the import."""
    from datasketches import kll_doubles_sketch

    return kll_doubles_sketch


class Quantiles:
    """A KLL sketch of doubles (float32's range would turn a 1e300 value into Inf: the values
    this tool cares about most), kept as its serialized bytes between uses.

    The binding's objects live only inside a call: one still alive when the interpreter exits
    (a profile held by a failed run's frames) makes nanobind print hundreds of "leaked
    instance" lines after scrub's one-line error. Serializing costs a few microseconds, once
    per `PENDING` values."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state: bytes | None = None  # None: nothing seen

    def _sketch(self, state: bytes | None = None) -> Any:
        """A live sketch of ``state`` (default: this one's)."""
        kll = _kll()
        state = self._state if state is None else state
        return kll(QUANTILE_K) if state is None else kll.deserialize(state)

    def update(self, values: np.ndarray, thin: int = 1, ordered: bool = False) -> None:
        """Add finite values (the caller takes NaN and Inf out: a sketch cannot rank them).

        ``thin`` > 1 adds every ``thin``-th of the values in sorted order, from a random first
        one: what the sketch's own first compaction does, at a fraction of its cost (the sketch
        takes ~50 ns a value, ~20 sorted). Each value added stands for ``thin``, so one sketch
        must always be thinned alike; its rank error grows by at most ``thin`` values per
        update (docs/profile.md, "Error bounds"). ``ordered``: the values come sorted."""
        if values.size:
            array = np.asarray(values, dtype=np.float64).reshape(-1)
            if thin > 1:
                # where thinning starts: a uniform offset keeps every value's weight
                array = (array if ordered else np.sort(array))[random.randrange(thin) :: thin]
                if not array.size:
                    return
            if not (array.flags.writeable and array.flags.c_contiguous):  # the binding takes neither
                array = array.copy()
            sketch = self._sketch()
            sketch.update(array)
            self._state = bytes(sketch.serialize())

    def merge(self, other: "Quantiles") -> None:
        if other._state is None:
            return
        if self._state is None:
            self._state = other._state
            return
        sketch = self._sketch()
        sketch.merge(self._sketch(other._state))
        self._state = bytes(sketch.serialize())

    @property
    def n(self) -> int:
        return 0 if self._state is None else int(self._sketch().n)

    def quantiles(self) -> list[float]:
        """The values at `RANKS` (empty when the sketch saw nothing)."""
        if self._state is None:
            return []
        sketch = self._sketch()
        if sketch.is_empty():
            return []
        return [float(v) for v in sketch.get_quantiles(RANKS)]

    @staticmethod
    def rank_error() -> float:
        """The sketch's normalized rank error for one quantile (99% confidence)."""
        return float(_kll().get_normalized_rank_error(QUANTILE_K, False))

    def __getstate__(self) -> tuple[bytes | None]:
        return (self._state,)  # a tuple: pickle skips `__setstate__` for a false state (None)

    def __setstate__(self, state: tuple[bytes | None]) -> None:
        (self._state,) = state


class Pending:
    """What holds values as they come until more than `PENDING` are, then folds them into its
    sketches at once (`flush`); a merge adopts the other's held values (`_adopt_pending`)."""

    __slots__ = ("_held", "_size")

    def __init__(self) -> None:
        self._held: list[Any] = []
        self._size = 0

    def flush(self) -> None:
        raise NotImplementedError

    def _adopt_pending(self, other: "Pending") -> None:
        if other._held:
            self._held += other._held
            self._size += other._size
            if self._size > PENDING:
                self.flush()


class Numeric(Pending):
    """One feature's numbers: exact counts of what was seen (finite, NaN, Inf, zero), the
    extremes and the sum, and the quantiles of the finite values.

    Values are held as they come (a private float64 copy) until more than `PENDING` of them are,
    then counted and sketched at once; a merge adopts the other's held values. So a partition that
    saw few values (most do: rows are sampled, an image gives one width) ships them as they
    are, and the sketch is made once per `PENDING` values, wherever they meet: a sketch costs
    a few microseconds to make and to merge, which per feature per partition added up to more
    than the sketching itself (docs/profile.md, "Cost")."""

    __slots__ = ("count", "nan", "inf", "zero", "low", "high", "total", "quantiles", "thin")

    def __init__(self, thin: int = 1) -> None:
        super().__init__()  # held: float64 arrays, or per-record floats (a list)
        self.count = self.nan = self.inf = self.zero = 0
        self.low: float | None = None
        self.high: float | None = None
        self.total = 0.0
        self.quantiles = Quantiles()
        #: the values go into the sketch thinned by this (`Quantiles.update`); alike in every
        #: partition of a dataset
        self.thin = thin

    def add(self, values: Any) -> None:
        """Add an array of values (any shape, any real or complex dtype; booleans as 0/1)."""
        values = np.asarray(values).reshape(-1)
        if not values.size:
            return
        if values.dtype.kind == "c":
            values = np.abs(values)  # a complex value by its magnitude
        if self._size + values.size <= PENDING:
            self._held.append(np.array(values, dtype=np.float64))  # a copy: a reader may reuse its buffer
            self._size += values.size
            return
        self.flush()
        self.sketch(values)

    def add_one(self, value: float) -> None:
        """Add one value (per record)."""
        held = self._held
        if held and isinstance(held[-1], list):
            held[-1].append(value)
        else:
            held.append([value])
        self._size += 1
        if self._size > PENDING:
            self.flush()

    def flush(self) -> None:
        """Count and sketch the values held."""
        if not self._held:
            return
        held, self._held, self._size = self._held, [], 0
        self.sketch(np.concatenate([np.asarray(part, dtype=np.float64) for part in held]))

    def sketch(self, values: np.ndarray) -> None:
        """Count and sketch ``values`` now (1-D; the caller holds them no longer than this)."""
        finite = self._count(values)
        if finite.size:
            self.quantiles.update(finite, self.thin)

    def _count(self, values: np.ndarray) -> np.ndarray:
        """Count ``values`` in; return the finite ones."""
        if values.dtype.kind == "b":
            values = values.view(np.uint8)
        elif values.dtype.kind not in "fiu":
            values = values.astype(np.float64)
        if values.dtype.kind == "f":
            finite = np.isfinite(values)
            if not finite.all():
                nan = int(np.count_nonzero(np.isnan(values)))
                self.nan += nan
                self.inf += int(values.size - np.count_nonzero(finite)) - nan
                values = values[finite]
        if not values.size:
            return values
        self.count += int(values.size)
        self.zero += int(values.size - np.count_nonzero(values))
        low, high = float(values.min()), float(values.max())
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        with np.errstate(over="ignore"):
            self.total += float(values.sum(dtype=np.float64))
        return values

    @property
    def empty(self) -> bool:
        """Nothing seen (most of a partition's Numerics: an HDF5 file has no images)."""
        return not (self.count or self.nan or self.inf or self._held)

    def merge(self, other: "Numeric") -> None:
        if other.empty:
            return
        self.count += other.count
        self.nan += other.nan
        self.inf += other.inf
        self.zero += other.zero
        self.total += other.total
        if other.low is not None:
            assert other.high is not None  # the extremes come together
            self.low = other.low if self.low is None else min(self.low, other.low)
            self.high = other.high if self.high is None else max(self.high, other.high)
        self.quantiles.merge(other.quantiles)
        self._adopt_pending(other)

    def to_dict(self) -> dict[str, Any]:
        """The profile's ``Numeric`` (docs/profile.md). While every value is still held (at most
        `PENDING`: a small dataset's), its quantiles are exact, from the values themselves: no
        sketch error (and none of the sketch's randomness) where there is no need for one."""
        if self.count == 0 and self._held:
            whole = Numeric()
            finite = whole._count(np.concatenate([np.asarray(part, dtype=np.float64) for part in self._held]))
            whole.nan += self.nan
            whole.inf += self.inf
            return whole._as_dict(exact_quantiles(finite))
        self.flush()
        return self._as_dict(self.quantiles.quantiles() if self.count else [])

    def _as_dict(self, quantiles: list[float]) -> dict[str, Any]:
        mean = self.total / self.count if self.count else None
        return {
            "count": self.count,
            "nan": self.nan,
            "inf": self.inf,
            "zero": self.zero,
            "min": self.low,
            "max": self.high,
            "mean": mean if mean is None or math.isfinite(mean) else None,
            "quantiles": quantiles,
        }

    def __getstate__(self) -> tuple:
        held = (
            np.concatenate([np.asarray(part, dtype=np.float64) for part in self._held])
            if self._held
            else None
        )
        counts = (self.count, self.nan, self.inf, self.zero, self.low, self.high, self.total)
        return (*counts, self.quantiles, self.thin, held)

    def __setstate__(self, state: tuple) -> None:
        (self.count, self.nan, self.inf, self.zero, self.low, self.high, self.total) = state[:7]
        self.quantiles, self.thin, held = state[7:]
        self._held = [held] if held is not None else []
        self._size = 0 if held is None else int(held.size)


def sketch_columns(numerics: Sequence[Numeric], block: np.ndarray) -> None:
    """Count and sketch each column of ``block`` (rows, columns) into its Numeric, as
    `Numeric.sketch` would one at a time, but with a few calls for all the columns rather than
    ~10 for each: over 32 or 256 columns of a few thousand sampled rows, the calls, not the
    values, were the cost (docs/benchmarks.md, "The profile's cost")."""
    columns = _Columns.of(block, len(numerics))
    if columns is None:
        return
    for column, numeric in enumerate(numerics):
        ordered = columns.count_into(numeric, column)
        if ordered.size:
            numeric.quantiles.update(ordered, numeric.thin, ordered=True)


def describe_columns(block: np.ndarray, count: int) -> list[dict[str, Any]]:
    """The Numeric form (`Numeric.to_dict`) of each of the first ``count`` columns of ``block``
    (rows, columns), with exact quantiles: what one Numeric given each column states, as a
    Numeric of at most `PENDING` values does, with a few calls for all the columns."""
    columns = _Columns.of(block, count)
    if columns is None:
        return [Numeric().to_dict() for _ in range(count)]
    numerics = [Numeric() for _ in range(count)]
    ordered = [columns.count_into(numeric, column) for column, numeric in enumerate(numerics)]
    if len({part.size for part in ordered}) == 1 and ordered[0].size:  # as many each: one call
        stated = columns.values[:, _ranked(ordered[0].size)].tolist()
    else:
        stated = [part[_ranked(part.size)].tolist() if part.size else [] for part in ordered]
    return [numeric._as_dict(quantiles) for numeric, quantiles in zip(numerics, stated)]


@dataclass(frozen=True, slots=True)
class _Columns:
    """The counts of each column of a block of rows, and its finite values sorted."""

    values: np.ndarray  # (columns, rows), each column's finite values sorted first, NaN after
    nan: np.ndarray
    inf: np.ndarray
    counts: np.ndarray  # finite values
    zeros: np.ndarray
    totals: np.ndarray

    @classmethod
    def of(cls, block: np.ndarray, count: int) -> "_Columns | None":
        """The first ``count`` columns of ``block`` (rows, columns); None for no values."""
        if not len(block) or not count:
            return None
        if block.dtype.kind == "c":
            block = np.abs(block)  # a complex value by its magnitude
        # (columns, rows), our own copy, sorted in its own dtype (float32: half the bytes to
        # sort), then made float64: the order is the same
        values = np.array(block[:, :count].T)
        if values.dtype.kind not in "fiu":
            values = values.astype(np.float64)
        finite = np.isfinite(values)
        rows = values.shape[1]
        if finite.all():
            nan = inf = np.zeros(len(values), np.int64)
        else:
            nan = np.count_nonzero(np.isnan(values), axis=1)
            inf = rows - np.count_nonzero(finite, axis=1) - nan
            values[~finite] = np.nan  # sorted last
        values.sort(axis=1)
        values = values.astype(np.float64, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            totals = np.nansum(values, axis=1)
        return cls(values, nan, inf, rows - nan - inf, np.count_nonzero(values == 0, axis=1), totals)

    def count_into(self, numeric: Numeric, column: int) -> np.ndarray:
        """Add column ``column``'s counts to ``numeric``; return its finite values, sorted."""
        numeric.nan += int(self.nan[column])
        numeric.inf += int(self.inf[column])
        count = int(self.counts[column])
        ordered = self.values[column, :count]
        if count:
            numeric.count += count
            numeric.zero += int(self.zeros[column])
            low, high = float(ordered[0]), float(ordered[-1])
            numeric.low = low if numeric.low is None else min(numeric.low, low)
            numeric.high = high if numeric.high is None else max(numeric.high, high)
            numeric.total += float(self.totals[column])
        return ordered


def _ranked(count: int) -> np.ndarray:
    """The positions in ``count`` sorted values of the values at `RANKS`: NumPy's own
    ``inverted_cdf`` arithmetic (`exact_quantiles`), so that the two agree to the last bit."""
    index = count * RANKS - 1
    previous = np.floor(index)
    positions = np.where(index - previous == 0, previous, previous + 1).astype(np.intp)
    positions[positions < 0] = 0
    return positions


def exact_quantiles(values: np.ndarray) -> list[float]:
    """The values at `RANKS`, as the sketch states them (the smallest value whose share of the
    values at or below it reaches the rank), computed from all of them; empty for none."""
    if not values.size:
        return []
    return [float(v) for v in np.quantile(values, RANKS, method="inverted_cdf")]


class TopCounts:
    """The most frequent non-negative integer ids with their counts, mergeable.

    Each partition counts its ids exactly (`np.bincount`), then keeps the `CAPACITY` most
    frequent; a merge adds the counts and keeps the `CAPACITY` largest again. An id's count is
    exact unless a partition (or a merge) dropped it; ``dropped`` is the largest count ever
    dropped, a bound on how much any kept count may be short by (and on the count of any id
    not listed). Token ids follow a Zipf law: the top few dozen are far above the 1,024th."""

    CAPACITY = 1024
    __slots__ = ("ids", "counts", "dropped", "max_id")

    def __init__(self) -> None:
        self.ids = np.empty(0, np.int64)
        self.counts = np.empty(0, np.int64)
        self.dropped = 0
        self.max_id: int | None = None

    def add(self, ids: np.ndarray) -> None:
        """Count a block of ids (negative ones are left to the token checks: not counted)."""
        ids = np.asarray(ids).reshape(-1)
        if not ids.size:
            return
        if ids.dtype.kind == "i" and ids.min() < 0:
            ids = ids[ids >= 0]
            if not ids.size:
                return
        top = int(ids.max())
        self.max_id = top if self.max_id is None else max(self.max_id, top)
        if top < 1 << 22:  # a vocabulary: bincount, no sort
            per_id = np.bincount(ids.astype(np.int64, copy=False))
            distinct = np.flatnonzero(per_id)
            counts = per_id[distinct]
        else:
            distinct, counts = np.unique(ids.astype(np.int64, copy=False), return_counts=True)
        self._combine(distinct.astype(np.int64), counts.astype(np.int64))

    def merge(self, other: "TopCounts") -> None:
        if other.max_id is not None:
            self.max_id = other.max_id if self.max_id is None else max(self.max_id, other.max_id)
        self.dropped = max(self.dropped, other.dropped)
        self._combine(other.ids, other.counts)

    def _combine(self, ids: np.ndarray, counts: np.ndarray) -> None:
        if self.ids.size:
            ids = np.concatenate([self.ids, ids])
            counts = np.concatenate([self.counts, counts])
            ids, inverse = np.unique(ids, return_inverse=True)
            counts = np.bincount(inverse.reshape(-1), weights=counts).astype(np.int64)
        if ids.size > self.CAPACITY:
            order = np.argsort(-counts, kind="stable")
            self.dropped = max(self.dropped, int(counts[order[self.CAPACITY]]))
            kept = np.sort(order[: self.CAPACITY])
            ids, counts = ids[kept], counts[kept]
        self.ids, self.counts = ids, counts

    def top(self, n: int) -> list[list[int]]:
        """The ``n`` most frequent ids as [id, count], most frequent first (ties: smaller id)."""
        order = np.lexsort((self.ids, -self.counts))[:n]
        return [[int(self.ids[i]), int(self.counts[i])] for i in order]

    def __getstate__(self) -> tuple:
        return (self.ids, self.counts, self.dropped, self.max_id)

    def __setstate__(self, state: tuple) -> None:
        self.ids, self.counts, self.dropped, self.max_id = state
