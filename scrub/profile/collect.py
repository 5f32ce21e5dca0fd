"""What the runner calls, per record and per batch, to fill a partition's `PartitionProfile`.

It reads what the checks already computed (the image decode's levels, a sequence's
`TokenFacts`, a batch's rows as read) and never decodes or reads anything again. Array rows and
token sequences are sampled by their index in their source (every ``stride``-th), so that the
sample, and every count made from it, is the same however the dataset is partitioned; the
stride is chosen once, on the driver, from the dataset's record count (`ProfileSettings.of`),
so that a large dataset costs what one of `ROWS_SAMPLED` records does (docs/profile.md,
"Sampling").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from scrub.checks.tokens import CAUSAL_SHIFT
from scrub.profile import BOXES_CAP, ArrayGroup, PartitionProfile
from scrub.records import Batch, Pieces, Record, TokenRows

#: array rows (or token sequences) a dataset's profile samples, at most: every one of a dataset
#: of this many or fewer; one in ``stride`` of a larger one
ROWS_SAMPLED = 8192
#: images whose pixel levels (brightness, contrast, channel histograms) a dataset's profile takes,
#: at most: every image of a dataset of this many or fewer, one in ``image_stride`` of a larger
#: one (sizes, modes and formats count every image). Beyond a few thousand images the levels'
#: quantiles move by less than the sketch's own error, and the drift floor follows the count
#: sampled (docs/drift.md)
IMAGES_SAMPLED = 4096
#: the values of the rows of a dataset read whole (one of at most `ROWS_SAMPLED` rows) pooled
#: into an array group's ``row`` quantiles, at most (a wide row gives some of its elements, a
#: different set each row). A sampled dataset's rows give one element each instead: drift counts
#: a row's elements as one sample (they come together), so more of them would buy little, and
#: at most `ROWS_SAMPLED` values are stated exactly, with no sketch to make (docs/profile.md)
VALUES_SAMPLED = 1 << 18
#: token ids of the sampled sequences counted for ``top_ids``, about (each sampled sequence
#: gives a run of them, at least `SEQUENCE_IDS_MIN`): enough to rank the most frequent ids of a
#: Zipf-like vocabulary (the 64th of a 50,000-id one holds ~0.2% of the tokens: ~130 of them)
TOKENS_SAMPLED = 1 << 16
SEQUENCE_IDS_MIN = 4
#: the fewest elements of each row of a dataset read whole that go into ``row``
ROW_ELEMENTS_MIN = 16
#: a dataset of at least this many records has its sampled rows' values thinned by `THIN` on their way
#: into the sketches (`Quantiles.update`): 4,096 values a feature still, for a k=200 sketch
THIN_FROM = ROWS_SAMPLED
THIN = 4
#: sampled rows of a group held before they are sketched (one update per feature for all of them),
#: at most; and their bytes, at most
PENDING_ROWS = 4096
PENDING_BYTES = 4 << 20
#: positions of the elements of sampled rows `Collector._pooled` keeps at hand, at most
WHERE_CACHED = 1 << 16
#: token ids gathered before they are counted
PENDING_TOKENS = 1 << 16


@dataclass(frozen=True)
class ProfileSettings:
    """How a dataset's partitions profile it (decided once, on the driver; pickled with the work)."""

    #: one row (sequence) in ``stride`` is sampled, by its index in its source
    stride: int = 1
    #: each sampled row gives this many of its elements to the pooled ``row`` quantiles (at most)
    row_elements: int = VALUES_SAMPLED
    #: the dataset's label kind ("class", "value"), None without labels
    labels: str | None = None
    #: the reader gives detection boxes: an image without any counts as 0 boxes
    boxes: bool = False
    #: each sampled sequence of a flat token store gives this many of its ids (at most)
    sequence_ids: int = TOKENS_SAMPLED
    #: the sampled rows' values go into their quantile sketches thinned by this (`Quantiles.update`)
    thin: int = 1
    #: one image in ``image_stride`` has its pixel levels profiled, by its index in its source
    image_stride: int = 1

    @classmethod
    def of(cls, records: int, labels: str | None, boxes: bool) -> "ProfileSettings":
        stride = max(1, math.ceil(records / ROWS_SAMPLED))
        sampled = max(1, math.ceil(records / stride))
        elements = max(ROW_ELEMENTS_MIN, VALUES_SAMPLED // sampled) if stride == 1 else 1
        ids = max(SEQUENCE_IDS_MIN, TOKENS_SAMPLED // sampled)
        thin = THIN if records >= THIN_FROM else 1
        return cls(stride, elements, labels, boxes, ids, thin, max(1, math.ceil(records / IMAGES_SAMPLED)))

    def samples_levels(self, index: int | None) -> bool:
        """Whether the image at ``index`` of its source is one whose levels are profiled (the
        decode keeps them only then: `scrub.checks.properties.annotate`)."""
        return self.image_stride == 1 or index is None or index % self.image_stride == 0


class HeldRows:
    """A group's sampled rows not yet sketched: their first positions, and the elements each
    gives to ``row`` (or the whole row, where it gives all of them), copied into buffers as they
    come (a reader may reuse its own) and sketched once the buffers are full. A block read gives
    a few rows, and what is made per block (arrays, NumPy calls) costs the scan more than their
    values do (docs/benchmarks.md, "The profile's cost")."""

    __slots__ = ("features", "pooled", "count")

    def __init__(self, features: int, pooled: int | None, dtype: np.dtype) -> None:
        width = features + (pooled or 0)
        capacity = min(PENDING_ROWS, max(1, PENDING_BYTES // max(1, width * dtype.itemsize)))
        self.features = np.empty((capacity, features), dtype)
        self.pooled = None if pooled is None else np.empty((capacity, pooled), dtype)
        self.count = 0


class Collector:
    """Fills one partition's (or piece's) profile; `finish` hands it over."""

    def __init__(self, settings: ProfileSettings) -> None:
        self.settings = settings
        self.profile = PartitionProfile()
        #: group name -> its sampled rows not yet sketched
        self._held: dict[str, HeldRows] = {}
        #: row shape -> (its group's name, the group), and dtype -> its name: looked up per block
        self._shapes: dict[tuple, tuple[str, ArrayGroup | None]] = {}
        self._dtype_names: dict[Any, str] = {}
        #: (row width, rows, the first row's shift) -> the positions `_pooled` takes: blocks of
        #: as many rows, whose first rows' indices differ by a multiple of the width, take the same
        self._where: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._where_size = 0
        self._ids: list[np.ndarray] = []
        #: value labels of the sampled rows of blocks, counted and sketched at the end (`finish`)
        self._labels: list[np.ndarray] = []
        self._id_count = 0

    # -- per record

    def record(self, record: Record) -> None:
        """A record read one at a time: its image, array value, sequence, label and boxes."""
        meta = record.meta
        facts = meta.get("image")
        if facts is not None:
            if facts.error is None and not facts.bomb and facts.width is not None:
                self.profile.add_image(facts.width, facts.height or 0, facts.levels)
            if facts.pixels is not None:
                self._value(facts.pixels, record.index)
        elif meta.get("kind") == "array" and record.payload is not None:
            self._value(np.asarray(record.payload), record.index)
        tokens = meta.get("tokens")
        if tokens is not None:
            self._sequence(tokens)
        settings = self.settings
        if settings.labels == "value" and meta.get("label_known", True):  # classes: the scan's counts
            self._label(record.label)
        if settings.boxes and meta.get("kind") == "image":
            boxes = meta.get("boxes") or []
            count = len(boxes)
            self.profile.boxes_per_image[str(count) if count < BOXES_CAP else f"{BOXES_CAP}+"] += 1
            for box in boxes:
                cls = box.cls
                self.profile.box_classes[str(int(cls)) if float(cls).is_integer() else str(cls)] += 1

    def _value(self, values: np.ndarray, index: int | None) -> None:
        """An array value (or a float image's pixels): one row of the group of its shape."""
        group = self.profile.group(values.shape, self.settings.thin)
        if group is None:
            self.profile.arrays_left_out += 1
            return
        group.records += 1
        group.dtypes[values.dtype.name] += 1
        stride = self.settings.stride
        if stride == 1 or index is None or index % stride == 0:
            self._pend("x".join(map(str, values.shape)), values.reshape(1, -1), index or 0, group)

    def _sequence(self, facts: Any) -> None:
        """A language-model record (`TokenFacts`): its length, its supervised share, its ids."""
        profile = self.profile
        profile.token_records += 1
        if facts.length is not None:
            profile.length.add_one(float(facts.length))
        if facts.labels is not None and facts.supervised is not None:
            positions = len(facts.labels) - CAUSAL_SHIFT
            if positions > 0:
                profile.supervised.add_one(facts.supervised / positions)
        if facts.ids is not None and len(facts.ids):
            self._count_ids(np.asarray(facts.ids))

    def _label(self, label: Any) -> None:
        """A value label (class labels are counted by the scan: `finish_profile` takes those)."""
        profile = self.profile
        if label is None or isinstance(label, str):
            profile.unlabelled += 1
            return
        profile.labelled += 1
        try:
            profile.label_values.add_one(float(label))
        except (TypeError, ValueError):  # a vector label: its elements
            profile.label_values.add(np.asarray(label, dtype=np.float64))

    # -- per batch

    def rows(self, batch: Batch) -> None:
        """A block of array rows (HDF5, NumPy, Parquet, LMDB arrays): counted, then sampled.
        Called once per block of rows read: the little it does per block is kept little (the
        sampled rows are copied and set aside; `_sketch_rows` works on many blocks at once)."""
        data = batch.data
        shape = data.shape[1:]
        known = self._shapes.get(shape)
        if known is None:
            name = "x".join(str(int(n)) for n in shape)
            known = self._shapes[shape] = (
                name,
                self.profile.group(tuple(map(int, shape)), self.settings.thin),
            )
        name, group = known
        count = len(batch)
        if group is None:
            self.profile.arrays_left_out += count
            return
        group.records += count
        if group.names is None and "columns" in batch.meta:
            group.names = tuple(batch.meta["columns"])
        dtype = data.dtype
        dtype_name = self._dtype_names.get(dtype)
        if dtype_name is None:
            dtype_name = self._dtype_names[dtype] = np.dtype(dtype).name
        group.dtypes[dtype_name] += count
        labels = batch.labels
        if labels is not None and self.settings.labels is not None:
            self.profile.labelled += count
        if isinstance(data, Pieces):  # a row too large to hold: counted, not sketched
            return
        stride = self.settings.stride
        first = (-batch.start) % stride
        if first >= count:
            return
        sampled = data[first::stride]
        if sampled.ndim != 2:
            sampled = sampled.reshape(len(sampled), -1)
        self._pend(name, sampled, batch.start + first, group)
        if labels is not None and self.settings.labels == "value":
            self._labels.append(np.array(labels[first::stride], dtype=np.float64))

    def tokens(self, batch: Batch) -> None:
        """Token sequences of a flat store (`TokenRows`): the lengths of the sampled ones, and
        a run of up to `ProfileSettings.sequence_ids` of the ids of each, from its middle."""
        rows = cast(TokenRows, batch.data)
        profile = self.profile
        profile.token_records += len(batch)
        stride = self.settings.stride
        first = (-batch.start) % stride
        bounds = np.asarray(rows.bounds, np.int64)
        starts = bounds[first:-1:stride]
        lengths = bounds[first + 1 :: stride] - starts
        profile.length.add(lengths)
        if not lengths.size:
            return
        taken = self.settings.sequence_ids
        if int(lengths.max()) <= taken and stride == 1:  # every id of every sequence
            self._count_ids(np.asarray(rows.tokens[int(bounds[0]) : int(bounds[-1])]))
            return
        # a run of up to k ids from the middle of each: one or two pages of a memory-mapped file
        # each (ids spread over a sequence would fault in every page of the file)
        steps = np.arange(taken, dtype=np.int64)
        first_ids = starts + np.maximum(lengths - taken, 0) // 2
        keep = steps[None, :] < np.minimum(lengths, taken)[:, None]
        where = (first_ids[:, None] + steps[None, :])[keep]
        self._count_ids(np.asarray(rows.tokens)[where])

    # -- sketching in blocks

    def _pend(self, name: str, rows: np.ndarray, first: int, group: ArrayGroup) -> None:
        """Copy what the sketches take of sampled rows into the group's held rows, the first of
        them at index ``first`` of its source; sketch them when they are full."""
        width = rows.shape[1]
        held = self._held.get(name)
        if held is None or held.features.dtype != rows.dtype:  # another dtype: its own buffers
            self._sketch_rows(name, group)
            elements = self.settings.row_elements
            pooled = None if elements >= width else elements  # None: a row gives all its elements
            kept = width if pooled is None else len(group.features)
            held = self._held[name] = HeldRows(kept, pooled, rows.dtype)
        stride = self.settings.stride
        done = 0
        while done < len(rows):
            count = held.count
            taken = min(len(held.features) - count, len(rows) - done)
            part = rows if taken == len(rows) else rows[done : done + taken]
            held.features[count : count + taken] = part[:, : held.features.shape[1]]
            if held.pooled is not None:
                held.pooled[count : count + taken] = self._pooled(part, first + done * stride)
            held.count += taken
            done += taken
            if held.count == len(held.features):
                self._sketch_rows(name, group)

    def _pooled(self, rows: np.ndarray, first: int) -> np.ndarray:
        """The `row_elements` elements of each of ``rows`` (the first at index ``first`` of its
        source, the others every ``stride`` after it) that go into ``row``: spread evenly over it
        and shifted by its index (a different set from each row; the same set of the same row
        however the dataset is partitioned)."""
        count, width = rows.shape
        key = (width, count, first * 7919 % width)  # what the positions depend on
        where = self._where.get(key)
        if where is None:
            elements = self.settings.row_elements
            picked = (np.arange(elements) * (width / elements)).astype(np.int64)
            indices = first + np.arange(count, dtype=np.int64) * self.settings.stride
            where = (np.arange(count)[:, None], (picked + (indices * 7919 % width)[:, None]) % width)
            if self._where_size + where[1].size <= WHERE_CACHED:
                self._where[key] = where
                self._where_size += where[1].size
        return rows[where]

    def _sketch_rows(self, name: str, group: ArrayGroup) -> None:
        """The group's held rows into its sketches (the first positions copied: the group keeps
        them; the buffers are filled again)."""
        held = self._held.get(name)
        if held is None or not held.count:
            return
        count, held.count = held.count, 0
        features = np.array(held.features[:count, : len(group.features)])
        group.add_rows(features, held.features[:count] if held.pooled is None else held.pooled[:count])

    def _count_ids(self, ids: np.ndarray) -> None:
        self._ids.append(ids)
        self._id_count += len(ids)
        if self._id_count >= PENDING_TOKENS:
            self._flush_ids()

    def _flush_ids(self) -> None:
        if self._ids:
            ids = self._ids[0] if len(self._ids) == 1 else np.concatenate(self._ids)
            self._ids, self._id_count = [], 0
            if ids.dtype.kind in "iu":
                self.profile.top_ids.add(ids)

    def finish(self, records: int) -> PartitionProfile:
        """The partition's profile, every pending value sketched; ``records``: all it read."""
        for name in list(self._held):
            self._sketch_rows(name, self.profile.arrays[name])
        self._held = {}
        self._flush_ids()
        if self._labels:
            self.profile.label_values.add(np.concatenate(self._labels))
            self._labels = []
        self.profile.records = records
        self.profile.flush()
        return self.profile
