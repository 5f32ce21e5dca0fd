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
ROWS_SAMPLED = 16_384
#: the values of the sampled rows pooled into an array group's ``row`` quantiles, at most (a
#: wide row gives some of its elements, a different set each row)
VALUES_SAMPLED = 1 << 20
#: the fewest elements of each sampled row that go into ``row``
ROW_ELEMENTS_MIN = 16
#: sampled rows of a group gathered before they are sketched (one update per feature per block)
PENDING_ROWS = 4096
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

    @classmethod
    def of(cls, records: int, labels: str | None, boxes: bool) -> "ProfileSettings":
        stride = max(1, math.ceil(records / ROWS_SAMPLED))
        sampled = max(1, math.ceil(records / stride))
        return cls(stride, max(ROW_ELEMENTS_MIN, VALUES_SAMPLED // sampled), labels, boxes)


class Collector:
    """Fills one partition's (or piece's) profile; `finish` hands it over."""

    def __init__(self, settings: ProfileSettings) -> None:
        self.settings = settings
        self.profile = PartitionProfile()
        #: group name -> sampled rows not yet sketched (2-D, one row each), with their indices
        self._rows: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._row_count: dict[str, int] = {}
        self._ids: list[np.ndarray] = []
        self._id_count = 0

    # -- per record

    def record(self, record: Record) -> None:
        """A record read one at a time: its image, array value, sequence, label and boxes."""
        meta = record.meta
        facts = meta.get("image")
        if facts is not None and facts.error is None and not facts.bomb and facts.width is not None:
            self._image(facts)
        if facts is not None and facts.pixels is not None:
            self._value(facts.pixels, record.index)
        elif meta.get("kind") == "array" and record.payload is not None:
            self._value(np.asarray(record.payload), record.index)
        tokens = meta.get("tokens")
        if tokens is not None:
            self._sequence(tokens)
        if self.settings.labels is not None and meta.get("label_known", True):
            self._label(record.label)
        if self.settings.boxes and meta.get("kind") == "image":
            boxes = meta.get("boxes") or []
            count = len(boxes)
            self.profile.boxes_per_image[str(count) if count < BOXES_CAP else f"{BOXES_CAP}+"] += 1
            for box in boxes:
                cls = box.cls
                self.profile.box_classes[str(int(cls)) if float(cls).is_integer() else str(cls)] += 1

    def _image(self, facts: Any) -> None:
        profile = self.profile
        profile.images += 1
        profile.width.add_one(float(facts.width))
        profile.height.add_one(float(facts.height))
        levels = facts.levels
        if levels is None:
            return
        profile.add_gray(levels.gray)
        for band, counts in levels.bands.items():
            held = profile.channels.get(band)
            if held is None:
                profile.channels[band] = np.array(counts, np.int64)
            else:
                held += counts

    def _value(self, values: np.ndarray, index: int | None) -> None:
        """An array value (or a float image's pixels): one row of the group of its shape."""
        group = self.profile.group(values.shape)
        if group is None:
            self.profile.arrays_left_out += 1
            return
        group.records += 1
        group.dtypes[values.dtype.name] += 1
        stride = self.settings.stride
        if stride == 1 or index is None or index % stride == 0:
            where = np.asarray([index or 0], np.int64)
            self._pend("x".join(map(str, values.shape)), values.reshape(1, -1), where, group)

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
        profile = self.profile
        if label is None or isinstance(label, str):
            profile.unlabelled += 1
            return
        profile.labelled += 1
        if self.settings.labels == "value":
            try:
                profile.label_values.add_one(float(label))
            except (TypeError, ValueError):  # a vector label: its elements
                profile.label_values.add(np.asarray(label, dtype=np.float64))

    # -- per batch

    def rows(self, batch: Batch) -> None:
        """A block of array rows (HDF5, NumPy, Parquet, LMDB arrays): counted, then sampled."""
        data = batch.data
        shape = tuple(int(n) for n in data.shape[1:])
        group = self.profile.group(shape)
        count = len(batch)
        if group is None:
            self.profile.arrays_left_out += count
            return
        group.records += count
        group.dtypes[np.dtype(data.dtype).name] += count
        labels = batch.labels
        if labels is not None and self.settings.labels is not None:
            self.profile.labelled += count
        if isinstance(data, Pieces):  # a row too large to hold: counted, not sketched
            return
        first = (-batch.start) % self.settings.stride
        sampled = np.asarray(data[first :: self.settings.stride])
        if sampled.size:
            where = batch.start + first + np.arange(len(sampled), dtype=np.int64) * self.settings.stride
            self._pend("x".join(map(str, shape)), sampled.reshape(len(sampled), -1), where, group)
        if labels is not None and self.settings.labels == "value":
            self.profile.label_values.add(np.asarray(labels)[first :: self.settings.stride])

    def tokens(self, batch: Batch) -> None:
        """Token sequences of a flat store (`TokenRows`): lengths and ids of the sampled ones."""
        rows = cast(TokenRows, batch.data)
        profile = self.profile
        profile.token_records += len(batch)
        stride = self.settings.stride
        first = (-batch.start) % stride
        lengths = np.asarray(rows.lengths)
        profile.length.add(lengths[first::stride])
        if stride == 1:
            self._count_ids(np.asarray(rows.tokens))
            return
        bounds = rows.bounds
        for row in range(first, len(batch), stride):
            piece = rows.tokens[int(bounds[row]) : int(bounds[row + 1])]
            if len(piece):
                self._count_ids(np.asarray(piece))

    # -- sketching in blocks

    def _pend(self, name: str, rows: np.ndarray, indices: np.ndarray, group: ArrayGroup) -> None:
        pending = self._rows.setdefault(name, [])
        pending.append((np.array(rows), indices))  # a copy: a reader may reuse its buffer
        self._row_count[name] = self._row_count.get(name, 0) + len(rows)
        if self._row_count[name] >= PENDING_ROWS:
            self._sketch_rows(name, group)

    def _sketch_rows(self, name: str, group: ArrayGroup) -> None:
        pending = self._rows.pop(name, [])
        self._row_count.pop(name, None)
        if not pending:
            return
        rows = pending[0][0] if len(pending) == 1 else np.concatenate([rows for rows, _ in pending])
        indices = pending[0][1] if len(pending) == 1 else np.concatenate([where for _, where in pending])
        for position, feature in enumerate(group.features):
            feature.add(rows[:, position])
        width = rows.shape[1]
        elements = min(width, self.settings.row_elements)
        if elements >= width:
            group.row.add(rows)
            return
        # a different set of elements from each row (evenly spread, shifted by the row's index:
        # the same elements of the same row however the dataset is partitioned)
        step = width / elements
        picked = (np.arange(elements) * step).astype(np.int64)
        shift = (indices * 7919) % width
        group.row.add(rows[np.arange(len(rows))[:, None], (picked[None, :] + shift[:, None]) % width])

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
        for name in list(self._rows):
            self._sketch_rows(name, self.profile.arrays[name])
        self._flush_ids()
        self.profile.records = records
        self.profile.flush()
        return self.profile
