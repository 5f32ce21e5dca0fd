"""The dataset as a whole: a profile of what a scan read, made in the same pass.

Each partition fills a `PartitionProfile` as it reads (`scrub.profile.collect`, called by the
runner); the driver merges them as results come in (`scrub.scanning.summary.ScanAggregate.add`, the same
way under ``dask.distributed``) and `finish_profile` turns the merged one, with the scan's exact
counts (`ScanAggregate.stats`), into the JSON form the scan record holds (``record["profile"]``;
one per part in a run of several datasets). Its size does not grow with the record count:
counts are per class, mode or shape, numbers are sketches (`scrub.profile.sketches`). The form,
field by field, the sampling and the error bounds: docs/profile.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from scrub.profile.sketches import PENDING, Numeric, Pending, TopCounts, describe_columns, sketch_columns

__all__ = ["PROFILE_VERSION", "PartitionProfile", "finish_profile", "load_profile"]

#: the JSON form's version (``profile["version"]``)
PROFILE_VERSION = 1
#: element positions of a wide array row profiled one by one ("features"): its first ones; the
#: row as a whole (every element, pooled) is profiled whatever its width
FEATURES = 32
#: a row of at most this many elements (a table's scalar columns, a feature vector) has every
#: position profiled: a drift in column 60 of 100 is a drift of ``features.60``, not a shift the
#: pooled row of 100 columns hides (docs/benchmarks.md, the drift benchmark)
EVERY_FEATURE = 256
#: array groups (row shapes) profiled; rows of further shapes are counted in ``records`` only
#: (a folder of float images of many sizes would otherwise grow the profile with the data)
GROUPS = 64
#: channel histograms: 32 bins of 8 levels each
LEVEL_BINS = 32
#: the most frequent token ids the profile lists
TOP_IDS = 64
#: boxes per image above this are counted together, under "CAP+"
BOXES_CAP = 100
_LEVELS = np.arange(256, dtype=np.float64)
_SQUARES = _LEVELS * _LEVELS


class ArrayGroup(Pending):
    """The rows of one shape: how many, their dtypes, their values pooled and per position.

    The sampled rows' first positions are held as blocks until more than `PENDING` rows are (a
    merge adopts the other's), then sketched all columns at once (`sketch_columns`); a sample of
    at most `PENDING` rows (every dataset's, at `ROWS_SAMPLED`) is stated exactly when the
    profile is finished (`describe_columns`), as a Numeric of that many values is."""

    __slots__ = ("records", "dtypes", "row", "features", "positions", "names")

    def __init__(self, positions: int, thin: int = 1) -> None:
        super().__init__()  # held: (rows, features) blocks
        self.records = 0
        self.dtypes: Counter[str] = Counter()
        self.row = Numeric(thin)
        self.positions = positions
        profiled = positions if positions <= EVERY_FEATURE else FEATURES
        self.features = [Numeric(thin) for _ in range(profiled)]
        #: the names of the row's elements where the reader knows them (a table's columns)
        self.names: tuple[str, ...] | None = None

    def add_rows(self, features: np.ndarray, pooled: np.ndarray) -> None:
        """Sampled rows: their first positions (one column a feature; the group's own copy),
        and the elements they give to ``row``."""
        self._held.append(features)
        self._size += len(features)
        self.row.add(pooled)
        if self._size > PENDING:
            self.flush()

    def flush(self) -> None:
        if not self._held:
            return
        held = self._joined()
        self._held, self._size = [], 0
        sketch_columns(self.features, held)

    def _joined(self) -> np.ndarray:
        """The held blocks as one (rows, features) block (there must be some)."""
        return self._held[0] if len(self._held) == 1 else np.concatenate(self._held)

    def merge(self, other: "ArrayGroup") -> None:
        self.records += other.records
        if self.names is None:
            self.names = other.names
        self.dtypes.update(other.dtypes)
        self.row.merge(other.row)
        for mine, theirs in zip(self.features, other.features):
            mine.merge(theirs)
        self._adopt_pending(other)

    def to_dict(self) -> dict[str, Any]:
        if self._held and self._size <= PENDING and all(feature.empty for feature in self.features):
            # every row sampled is still held (the sample is at most `PENDING` rows): exact, as
            # a Numeric of that many values is
            features = describe_columns(self._joined(), len(self.features))
        else:
            self.flush()
            features = [feature.to_dict() for feature in self.features]
        form = {
            "records": self.records,
            "dtypes": dict(sorted(self.dtypes.items())),
            "row": self.row.to_dict(),
            "features": {str(i): feature for i, feature in enumerate(features)},
            "positions": self.positions,
        }
        if self.names is not None:
            form["names"] = {str(i): name for i, name in enumerate(self.names[: len(self.features)])}
        return form

    def __getstate__(self) -> tuple:
        held = self._joined() if self._held else None
        return (self.records, self.dtypes, self.row, self.features, self.positions, self.names, held)

    def __setstate__(self, state: tuple) -> None:
        self.records, self.dtypes, self.row, self.features, self.positions, self.names, held = state
        self._held = [] if held is None else [held]
        self._size = 0 if held is None else len(held)


class PartitionProfile:
    """What one partition read, in mergeable form; picklable (a partition's result carries it
    back to the driver, through Dask or ``dask.distributed``)."""

    def __init__(self, records: int = 0, reused: int = 0) -> None:
        #: records read (or reused from the cache), whatever they hold
        self.records = records
        #: records whose result came from the cache: in the counts, not in any `Numeric`
        self.reused = reused
        self.labelled = 0
        self.unlabelled = 0
        self.label_values = Numeric()
        self.arrays: dict[str, ArrayGroup] = {}
        #: rows of a shape beyond `GROUPS`
        self.arrays_left_out = 0
        self.images = 0
        self.width = Numeric()
        self.height = Numeric()
        self.brightness = Numeric()
        self.contrast = Numeric()
        #: band -> pixels per level (256; `LEVEL_BINS` bins in the JSON form), over every image profiled
        self.channels: dict[str, np.ndarray] = {}
        #: sizes of images not yet added to the sketches, and the levels (`ImageLevels`) of the
        #: sampled ones: added a block at a time (`flush`), which costs a fraction of adding each
        self._widths: list[int] = []
        self._heights: list[int] = []
        self._levels: list[Any] = []
        self.token_records = 0
        self.length = Numeric()
        self.supervised = Numeric()
        self.top_ids = TopCounts()
        self.boxes_per_image: Counter[str] = Counter()
        self.box_classes: Counter[str] = Counter()

    # -- filled by `scrub.profile.collect`

    def group(self, shape: tuple[int, ...], thin: int = 1) -> ArrayGroup | None:
        """The group of rows of ``shape`` (None past `GROUPS` groups); ``thin``: how its values
        go into their sketches (`scrub.profile.sketches.Quantiles.update`)."""
        name = "x".join(map(str, shape))
        found = self.arrays.get(name)
        if found is None and len(self.arrays) < GROUPS:
            found = self.arrays[name] = ArrayGroup(int(np.prod(shape, dtype=np.int64)), thin)
        return found

    def add_image(self, width: int, height: int, levels: Any = None) -> None:
        """An image that decodes: its size, and its levels (`ImageLevels`) when it is one of the
        images sampled for them (`scrub.profile.collect.ProfileSettings.image_stride`)."""
        self.images += 1
        self._widths.append(width)
        self._heights.append(height)
        if levels is not None:
            self._levels.append(levels)
        if len(self._widths) >= PENDING:
            self.flush()

    def flush(self) -> None:
        """The pending images into the sketches: every size; per sampled image, brightness (the
        mean gray level) and contrast (its standard deviation); each band's levels summed."""
        if self._widths:
            self.width.add(np.asarray(self._widths, np.float64))
            self.height.add(np.asarray(self._heights, np.float64))
            self._widths, self._heights = [], []
        if not self._levels:
            return
        kept, self._levels = self._levels, []
        totals: dict[str, np.ndarray] = {}
        # a JPEG's grayscale decode (its one band is L): the pixels themselves, stacked by shape
        by_shape: dict[tuple[int, ...], list[np.ndarray]] = {}
        for levels in kept:
            if levels.gray is None:
                by_shape.setdefault(levels.pixels.shape, []).append(levels.pixels)
        for same in by_shape.values():
            block = np.stack(same).reshape(len(same), -1)
            values = block.astype(np.float64)
            mean = values.mean(axis=1)
            variance = np.einsum("ij,ij->i", values, values) / values.shape[1] - mean * mean
            self.brightness.add(mean)
            self.contrast.add(np.sqrt(np.maximum(variance, 0.0)))
            totals["L"] = totals.get("L", 0) + np.bincount(block.reshape(-1), minlength=256)
        # other formats come with their histograms: moments from the gray one, bands summed
        given = [levels for levels in kept if levels.gray is not None]
        if given:
            grays = np.stack([levels.gray for levels in given])
            for levels in given:
                for band, counts in (levels.bands or {}).items():
                    totals[band] = totals.get(band, 0) + counts
            pixels = grays.sum(axis=1, dtype=np.int64)
            seen = pixels > 0
            weights, pixels = grays[seen].astype(np.float64), pixels[seen]
            mean = weights @ _LEVELS / pixels
            variance = np.maximum(weights @ _SQUARES / pixels - mean * mean, 0.0)
            self.brightness.add(mean)
            self.contrast.add(np.sqrt(variance))
        for band, total in totals.items():
            held = self.channels.get(band)
            self.channels[band] = np.asarray(total if held is None else held + total, np.int64)

    # -- merged by the driver

    def merge(self, other: "PartitionProfile") -> None:
        self.flush()
        other.flush()
        self.records += other.records
        self.reused += other.reused
        self.labelled += other.labelled
        self.unlabelled += other.unlabelled
        self.label_values.merge(other.label_values)
        for name, theirs in other.arrays.items():
            held = self.arrays.get(name)
            if held is None and len(self.arrays) >= GROUPS:
                self.arrays_left_out += theirs.records
            elif held is None:
                self.arrays[name] = theirs
            else:
                held.merge(theirs)
        self.arrays_left_out += other.arrays_left_out
        self.images += other.images
        for numeric, other_numeric in (
            (self.width, other.width),
            (self.height, other.height),
            (self.brightness, other.brightness),
            (self.contrast, other.contrast),
            (self.length, other.length),
            (self.supervised, other.supervised),
        ):
            numeric.merge(other_numeric)
        for band, counts in other.channels.items():
            if band in self.channels:
                self.channels[band] = self.channels[band] + counts
            else:
                self.channels[band] = counts.copy()
        self.token_records += other.token_records
        self.top_ids.merge(other.top_ids)
        self.boxes_per_image.update(other.boxes_per_image)
        self.box_classes.update(other.box_classes)

    def __getstate__(self) -> dict[str, Any]:
        self.flush()
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def finish_profile(
    merged: PartitionProfile,
    stats: Mapping[str, Mapping[Any, int]] | None = None,
    labels: str | None = None,
) -> dict[str, Any]:
    """The profile's JSON form (docs/profile.md) from the merged partitions' profile and the
    scan's exact counts (``stats``: class ids, image modes and formats, mask pixels, row shapes;
    they count the records reused from the cache too). ``labels``: the dataset's label kind
    ("class" or "value"), None for a dataset without labels."""
    merged.flush()
    stats = stats or {}
    profile: dict[str, Any] = {"version": PROFILE_VERSION, "records": merged.records, "reused": merged.reused}
    if labels is not None:
        profile["labels"] = _labels(merged, stats, labels)
    if merged.arrays:
        profile["arrays"] = {name: group.to_dict() for name, group in sorted(merged.arrays.items())}
    modes = stats.get("modes") or {}
    if merged.images or modes:
        profile["images"] = {
            "records": sum(modes.values()) if modes else merged.images,
            "width": merged.width.to_dict(),
            "height": merged.height.to_dict(),
            "modes": _named(modes),
            "formats": _named(stats.get("formats") or {}),
            "brightness": merged.brightness.to_dict(),
            "contrast": merged.contrast.to_dict(),
            "channels": {
                band: [int(n) for n in counts.reshape(LEVEL_BINS, -1).sum(axis=1)]
                for band, counts in sorted(merged.channels.items(), key=lambda item: _band_order(item[0]))
            },
        }
    if merged.token_records:
        tokens: dict[str, Any] = {"records": merged.token_records, "length": merged.length.to_dict()}
        supervised = merged.supervised.to_dict()
        if supervised["count"] or supervised["nan"]:
            tokens["supervised"] = supervised
        tokens["top_ids"] = merged.top_ids.top(TOP_IDS)
        tokens["max_id"] = merged.top_ids.max_id
        profile["tokens"] = tokens
    pixels = stats.get("mask_pixels") or {}
    if pixels:
        profile["masks"] = {"pixels": _named(pixels)}
    if merged.boxes_per_image:
        profile["boxes"] = {
            "per_image": _named(merged.boxes_per_image),
            "classes": _named(merged.box_classes),
        }
    return profile


def _labels(merged: PartitionProfile, stats: Mapping[str, Mapping[Any, int]], kind: str) -> dict[str, Any]:
    if kind == "class":
        classes = stats.get("labels") or {}
        labelled = sum(classes.values())
        return {
            "kind": "class",
            "labelled": labelled,
            "missing": max(merged.records - labelled, 0),
            "classes": _named(classes),
        }
    return {
        "kind": "value",
        "labelled": merged.labelled,
        "missing": merged.unlabelled,
        "values": merged.label_values.to_dict(),
    }


def _named(counts: Mapping[Any, int]) -> dict[str, int]:
    """Counts keyed by strings (JSON's keys), integer keys in numeric order."""
    return {str(key): int(n) for key, n in sorted(counts.items(), key=lambda item: _order(item[0]))}


def _order(key: Any) -> tuple:
    if isinstance(key, (int, np.integer)):
        return (0, int(key), "")
    text = str(key)
    number = text.rstrip("+")
    return (0, int(number), text) if number.isdigit() else (1, 0, text)


def _band_order(band: str) -> int:
    order = "LRGBA"
    return order.index(band) if band in order else len(order)


def load_profile(scan_record: Mapping[str, Any], dataset: str | None = None) -> dict[str, Any] | None:
    """The profile a scan record holds: the top level's (a scan of one dataset), or, in a run of
    several datasets, the part whose ``path`` or ``absolute_path`` is ``dataset`` (with
    ``dataset`` None, the only part's, if there is only one). None when there is none."""
    profile = scan_record.get("profile")
    parts = scan_record.get("parts") or []
    if dataset is None:
        if isinstance(profile, dict):
            return profile
        if len(parts) == 1 and isinstance(parts[0], dict):
            found = parts[0].get("profile")
            return found if isinstance(found, dict) else None
        return None
    for part in parts:
        if isinstance(part, dict) and dataset in (part.get("path"), part.get("absolute_path")):
            found = part.get("profile")
            return found if isinstance(found, dict) else None
    if isinstance(profile, dict) and dataset in (scan_record.get("path"), scan_record.get("absolute_path")):
        return profile
    if isinstance(profile, dict) and not parts:
        return profile  # a one-dataset record names its dataset as it was given: it is that one
    return None
