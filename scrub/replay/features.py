"""Records and batches of rows as fixed-length float32 vectors: what the dummy model sees.

Featurizing runs on the workers, in parallel; the replay on the driver only does arithmetic.
Nothing here "cleans": no clipping, no NaN replacement, no normalization. Values reach the model
with the magnitude they have in the data, cast to float32 as a float32 training loader would
cast them, and multiplied by ``scale`` when one is given. So a float64 value above
3.4e38 becomes Inf here, as it would in float32 training: that is a finding, not an accident.

Images: decoded with Pillow, ``convert("RGB")`` (torchvision's default loader), resized to
``image_size`` x ``image_size`` (bilinear), laid out CHW as a tensor is, values 0..255:
D = 3·size². Images whose pixels are numbers (modes F, I, I;16: depth maps, microscopy) keep
their values: resized in their own mode (a NaN spreads to its neighbours, 1e30 stays 1e30) and
repeated over the three channels.
Arrays: flattened in C order; an array whose size is not D is skipped ("size"), since no loader
can stack it with the others (`shape-mismatch` reports it). Labels: integer labels as they are;
label vectors (N, K) as the index of their largest entry;
a record without a label trains as class 0 (what Caffe does; `missing-label` reports it in a
labelled dataset); a label that is not an integer is skipped ("label"). Records without a payload,
images Pillow cannot decode and images above ``max_pixels`` are skipped too: other checks report
them, and the replay cannot feed them to a model.
"""

from __future__ import annotations

import io
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from PIL import Image

from scrub.checks.imagedecode import NUMERIC_MODES
from scrub.checks.labels import integer_label, integral_labels
from scrub.records import Batch, Pieces, Record

Identity = tuple[str, str, int]  # (source, key, index)
_INT64_LIMIT = 2.0**63


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """How records become vectors. Picklable and immutable, for the workers."""

    dim: int
    image_size: int = 16
    scale: float | None = None  # multiplies every value after the float32 cast; nothing else
    max_pixels: int | None = None  # images above are not decoded (default: Pillow's limit)
    shape: tuple[int, ...] = ()  # a record's shape (C, H, W for images), for a PyTorch model
    images: bool = False

    @classmethod
    def for_images(cls, image_size: int = 16, **options) -> "FeatureSpec":
        return cls(
            3 * image_size * image_size, image_size, shape=(3, image_size, image_size), images=True, **options
        )

    @classmethod
    def for_arrays(cls, shape: tuple[int, ...] | int, **options) -> "FeatureSpec":
        """For arrays of ``shape`` (a record's shape, or an HDF5 row's)."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return cls(int(np.prod(shape)), shape=shape, **options)


@dataclass(slots=True)
class Features:
    """The usable records of a piece of data, in order, and why the others were left out."""

    identities: list[Identity]
    X: np.ndarray  # (n, dim) float32, owned (never a view of a reader's buffer)
    y: np.ndarray  # (n,) int64, possibly outside [0, C): the replay reports those
    rows: np.ndarray  # (n,) positions of these records in the input
    skipped: Counter = field(default_factory=Counter)  # reason -> count

    @classmethod
    def empty(cls, dim: int, skipped: Counter | None = None) -> "Features":
        nothing = np.empty(0, np.int64)
        return cls([], np.empty((0, dim), np.float32), nothing, nothing.copy(), skipped or Counter())

    @classmethod
    def concatenate(cls, parts: list["Features"], dim: int) -> "Features":
        """The parts one after another (``rows`` are then positions within each part)."""
        if not parts:
            return cls.empty(dim)
        skipped = sum((p.skipped for p in parts), Counter())
        identities = [identity for p in parts for identity in p.identities]
        X, y = np.concatenate([p.X for p in parts]), np.concatenate([p.y for p in parts])
        return cls(identities, X, y, np.concatenate([p.rows for p in parts]), skipped)

    def __len__(self) -> int:
        return len(self.identities)


def featurize_records(records: Iterable[Record], spec: FeatureSpec) -> Features:
    """Vectors for records (images or array values), in order; the rest counted as skipped."""
    identities, vectors, labels, rows = [], [], [], []
    skipped: Counter[str] = Counter()
    for position, record in enumerate(records):
        label = _record_label(record.label)
        vector = record_vector(record, spec) if label is not None else "label"
        if isinstance(vector, str):
            skipped[vector] += 1
            continue
        identities.append((record.source, record.key, record.index))
        vectors.append(vector)
        labels.append(label)
        rows.append(position)
    if not vectors:
        return Features.empty(spec.dim, skipped)
    X, y = np.stack(vectors), np.array(labels, np.int64)
    return Features(identities, X, y, np.array(rows, np.int64), skipped)


def record_vector(record: Record, spec: FeatureSpec) -> np.ndarray | str:
    """The record's vector, or the reason it has none: "payload", "image", "size", "dtype"."""
    payload, kind = record.payload, record.meta.get("kind")
    if payload is None or (isinstance(payload, (bytes, bytearray, memoryview)) and len(payload) == 0):
        return "payload"
    if kind == "image":
        vector = _image_vector(bytes(payload), spec)
    elif kind == "array":
        vector = _array_vector(np.asarray(payload), spec)
    else:
        return "payload"
    if isinstance(vector, str):
        return vector
    return _scaled(vector, spec)


def featurize_batch(batch: Batch, spec: FeatureSpec) -> Features:
    """Vectors for the rows of a batch (copied: ``batch.data`` may be a reused buffer)."""
    if isinstance(batch.data, Pieces):  # a row larger than a block: far beyond any replay width
        return Features.empty(spec.dim, Counter({"size": len(batch)}))
    data = np.asarray(batch.data)
    n = len(data)
    rows = data.reshape(n, -1)
    skipped: Counter = Counter()
    if rows.shape[1] != spec.dim or not _numeric(rows.dtype):
        skipped["size" if _numeric(rows.dtype) else "dtype"] += n
        return Features.empty(spec.dim, skipped)
    if batch.labels is None:
        usable, labels = np.ones(n, bool), np.zeros(n, np.int64)
    elif np.ndim(batch.labels) == 2:  # label vectors: the class is the largest entry
        vectors = np.asarray(batch.labels, np.float64)
        # a (n,) array, for 2-D vectors: NumPy's stubs allow for a scalar, whatever the shape
        usable = cast(np.ndarray, np.isfinite(vectors).all(axis=1))
        labels = np.argmax(np.where(usable[:, None], vectors, 0), axis=1).astype(np.int64)
        skipped["label"] += int(n - usable.sum())
    else:
        raw = np.asarray(batch.labels, np.float64).reshape(n)
        with np.errstate(invalid="ignore"):
            usable = integral_labels(raw) & (np.abs(raw) < _INT64_LIMIT)
        labels = np.where(usable, raw, 0).astype(np.int64)
        skipped["label"] += int(n - usable.sum())
    keep = np.flatnonzero(usable)
    with np.errstate(over="ignore", invalid="ignore"):
        X = rows[keep].astype(np.float32)  # fancy indexing copies, so nothing refers to the buffer
    X = _scaled(X, spec)
    identities = [(batch.source, batch.key(int(r)), batch.start + int(r)) for r in keep]
    return Features(identities, X, labels[keep], keep.astype(np.int64), skipped)


def _record_label(label: object) -> int | None:
    """The class index a loader would use; None for a label no loader can use."""
    if label is None:
        return 0
    value = integer_label(label)
    if value is None or abs(value) >= _INT64_LIMIT:
        return None
    return value


def _image_vector(data: bytes, spec: FeatureSpec) -> np.ndarray | str:
    size = spec.image_size
    limit = spec.max_pixels if spec.max_pixels is not None else Image.MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DecompressionBombWarning, libpng chatter
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if limit is not None and width * height > limit:
                return "image"  # never decoded: decompression-bomb reports it
            if image.mode in NUMERIC_MODES:  # values, not levels: no conversion may clip them
                plane = image.convert("F") if image.mode != "F" else image
                values = np.asarray(plane.resize((size, size), Image.Resampling.BILINEAR), np.float32)
                return np.tile(values.reshape(-1), 3)
            image.draft("RGB", (size, size))  # JPEG: decode at a reduced DCT scale, still >= size
            pixels = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(pixels, np.float32).transpose(2, 0, 1).reshape(-1)  # CHW, as ToTensor
    except Exception:
        return "image"


def _array_vector(array: np.ndarray, spec: FeatureSpec) -> np.ndarray | str:
    if not _numeric(array.dtype):
        return "dtype"
    if array.size != spec.dim:
        return "size"
    with np.errstate(over="ignore", invalid="ignore"):
        return array.astype(np.float32).reshape(-1)  # a copy: > 3.4e38 becomes Inf, as in training


def _scaled(X: np.ndarray, spec: FeatureSpec) -> np.ndarray:
    if spec.scale is None or spec.scale == 1:
        return X
    with np.errstate(over="ignore", invalid="ignore"):
        X *= np.float32(spec.scale)
    return X


def _numeric(dtype: np.dtype) -> bool:
    return dtype.kind in "biuf"  # complex values have no float32 meaning: skipped as "dtype"
