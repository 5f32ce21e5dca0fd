"""Encoded values as records: the values of key-value stores (LMDB, LevelDB), and the ``.npy``
files of image folders and WebDataset samples. One decoding, shared by their readers.

Each value is decoded by the first codec that recognises it (``--lmdb-codec`` forces one):

* ``image``: encoded image bytes, by magic number (JPEG, PNG, GIF, BMP, WebP, TIFF);
* ``npy``: ``np.save`` output (loaded with ``allow_pickle=False``);
* ``datum``: a Caffe ``Datum``: encoded image bytes with a label, raw uint8 CHW ``data``
  (BGR), or ``float_data``;
* pickled values are never unpickled unless ``--allow-pickle`` (unpickling runs arbitrary
  code): they are ``undecodable-record``s with a hint.

"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable
from typing import Any

import numpy as np

from scrub.checks.base import Finding, make_issue, problem
from scrub.errors import UsageError, first_line
from scrub.readers.base import ReadOptions
from scrub.readers.caffe_datum import DatumError, looks_like_datum, parse_datum
from scrub.records import Record, Severity
from scrub.wording import counted

#: keys that loaders keep metadata under in key-value stores: not records, skipped
METADATA_KEYS = frozenset({b"__keys__", b"__len__", b"num-samples"})
CODECS = ("auto", "datum", "image", "npy", "pickle")
IMAGE_MAGIC = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
IMAGE_FIRST_BYTES = frozenset([magic[0] for magic, _ in IMAGE_MAGIC] + [ord("R")])  # R: RIFF (WEBP)
PICKLE_PROTOCOLS = frozenset(range(2, 6))
NPY_MAGIC = np.lib.format.MAGIC_PREFIX
#: First bytes of a Datum's fields (tag = field number << 3 | wire type): a value starting with
#: one is parsed as a Datum, so that a damaged one says why it does not parse.
DATUM_TAGS = frozenset({0x08, 0x10, 0x18, 0x22, 0x28, 0x32, 0x35, 0x38})


def values_carry_labels(
    values: Iterable, codec: str, allow_pickle: bool | None, fields: DictFields = (None, None)
) -> bool:
    """Whether key-value records carry labels (Datums, unpickled tuples), judged on ``values``
    (a database's first few): shared by the LMDB and LevelDB readers."""
    for value in values:
        record = Record("", "", 0, None)
        decode_value(record, bytes(value), codec, bool(allow_pickle), fields)
        if record.meta.get("label_known"):
            return True
    return False


#: the data and label fields of pickled dict values that --data-key/--label-key name (None: the
#: first of the usual names, `DICT_DATA_FIELDS` and `DICT_LABEL_FIELDS`)
DictFields = tuple[str | None, str | None]


def dict_fields(options: ReadOptions) -> DictFields:
    """The dict fields the options name; naming one needs --allow-pickle (only unpickled values
    have fields), else it is an error rather than an option that silently does nothing."""
    fields = (options.data_key, options.label_key)
    if fields != (None, None) and not options.allow_pickle:
        given = "--data-key" if options.data_key else "--label-key"
        raise UsageError(
            f"{given}: names a field of pickled dict values, which are read only with --allow-pickle"
        )
    return fields


def decode_value(
    record: Record, value: bytes, codec: str, allow_pickle: bool, fields: DictFields = (None, None)
) -> None:
    """Set the record's payload, kind and label from an LMDB value, or a problem saying why not.

    A value that carries no label (an image, an array, an undecodable value) is marked
    ``label_known=False``: its label is not missing, there is none to have.
    """
    record.meta["label_known"] = False
    if not value:
        record.payload = value  # empty-record
        return
    if codec in ("auto", "image") and _image_format(value):
        record.payload, record.meta["kind"] = value, "image"
        return
    if codec in ("auto", "npy") and value.startswith(NPY_MAGIC):
        _decode_npy(record, value)
        return
    if codec in ("auto", "pickle") and len(value) > 1 and value[0] == 0x80 and value[1] in PICKLE_PROTOCOLS:
        _decode_pickle(record, value, allow_pickle, fields)
        return
    if codec == "datum" or (codec == "auto" and (value[0] in DATUM_TAGS or looks_like_datum(value))):
        try:
            _use_datum(record, parse_datum(value))
        except DatumError as error:
            record.problems.append(problem(record, "undecodable-record", f"Datum does not parse: {error}"))
        return
    expected = "any known codec" if codec == "auto" else f"codec {codec!r}"
    record.problems.append(
        problem(
            record,
            "undecodable-record",
            f"{len(value)} bytes that {expected} does not understand",
            head=value[:8].hex(),
        )
    )


def _image_format(value: bytes) -> str | None:
    if value[0] not in IMAGE_FIRST_BYTES:  # a Datum, an array, a pickle: no magic to try
        return None
    for magic, name in IMAGE_MAGIC:
        if value.startswith(magic):
            return name
    if value[:4] == b"RIFF" and value[8:12] == b"WEBP":
        return "WEBP"
    return None


def _decode_npy(record: Record, value: bytes) -> None:
    try:
        array = np.load(io.BytesIO(value), allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        record.problems.append(
            problem(record, "undecodable-record", f".npy bytes do not load: {first_line(error)}")
        )
        return
    use_array(record, array)


#: Fields of a pickled dict value that hold the record's data, and its label, in the order tried.
DICT_DATA_FIELDS = ("img", "image", "jpg", "jpeg", "png", "webp", "data", "bytes", "x", "input", "array")
DICT_LABEL_FIELDS = ("label", "labels", "target", "targets", "cls", "class", "y")


def _dict_fields(value: dict, given: DictFields) -> tuple[str, str | None] | None:
    """(data field, label field or None) of a pickled dict value: the given ones, else by the
    usual names."""
    data = given[0] or next(
        (name for name in DICT_DATA_FIELDS if isinstance(value.get(name), (bytes, bytearray, np.ndarray))),
        None,
    )
    if data is None or data not in value:
        return None
    if given[1] is not None:
        return data, given[1]
    return data, next((name for name in DICT_LABEL_FIELDS if name in value), None)


def _decode_pickle(
    record: Record, value: bytes, allow_pickle: bool, given: DictFields = (None, None)
) -> None:
    if not allow_pickle:
        record.problems.append(
            problem(
                record,
                "undecodable-record",
                "pickled value, not unpickled: unpickling runs arbitrary code (use --allow-pickle for "
                "trusted data)",
            )
        )
        return
    try:
        obj = pickle.loads(value)
    except Exception as error:
        record.problems.append(problem(record, "undecodable-record", f"pickle does not load: {error!r}"))
        return
    label = None
    if isinstance(obj, dict):  # {'img': image bytes, 'label': 3} and its variants
        fields = _dict_fields(obj, given)
        if fields is None:
            names = ", ".join(sorted(map(str, obj)))[:200]
            looked = given[0] or ", ".join(DICT_DATA_FIELDS)
            record.problems.append(
                problem(
                    record,
                    "undecodable-record",
                    f"unpickled a dict with fields {names}: none is image bytes or an array "
                    f"(looked for {looked})",
                )
            )
            return
        data_field, label_field = fields
        obj = (obj[data_field], obj.get(label_field)) if label_field is not None else obj[data_field]
    if isinstance(obj, tuple) and len(obj) == 2:  # folder2lmdb style: (image bytes, label)
        obj, label = obj
        record.meta["label_known"] = True
        record.label = label if isinstance(label, (int, float, str)) or label is None else str(label)
    if isinstance(obj, (bytes, bytearray)):
        known = record.meta["label_known"]
        decode_value(record, bytes(obj), "auto", allow_pickle=False)
        record.label = label if record.label is None else record.label
        record.meta["label_known"] = known or record.meta["label_known"]
    elif isinstance(obj, np.ndarray):
        use_array(record, obj)
    else:
        record.problems.append(
            problem(
                record, "undecodable-record", f"unpickled a {type(obj).__name__}, not image bytes or an array"
            )
        )


def _use_datum(record: Record, datum) -> None:
    record.label = datum.label
    record.meta["label_known"] = True
    record.meta["codec"] = "datum"
    if datum.encoded:
        if datum.data:
            record.payload, record.meta["kind"] = datum.data, "image"
        else:
            record.payload = b""
        return
    array = datum.array()
    if array is None:
        size = len(datum.data) or len(datum.float_data)
        shape = (datum.channels, datum.height, datum.width)
        if not size:
            record.payload = b""  # empty-record
            return
        record.problems.append(
            make_issue(
                "shape-mismatch",
                record.source,
                record.key,
                record.index,
                Finding(
                    f"Datum holds {counted(size, 'value')} but channels x height x width = {shape}",
                    {"values": size, "channels": shape[0], "height": shape[1], "width": shape[2]},
                    Severity.ERROR,
                ),
            )
        )
        return
    use_array(record, array)


def use_array(record: Record, array: np.ndarray) -> None:
    """Make ``array`` the record's payload (numbers only: another dtype is a problem)."""
    if array.dtype.kind not in "biufc":
        record.problems.append(
            problem(record, "undecodable-record", f"array of dtype {array.dtype}, not numbers")
        )
        return
    record.payload, record.meta["kind"] = array, "array"
    record.meta["shape"] = "x".join(map(str, array.shape))  # uint8 data and float_data batch alike


def nonfinite_beside(record: Record, name: str, values: np.ndarray, **where: Any) -> None:
    """A ``nonfinite-data`` problem on ``record`` where ``values``, an array read beside its data
    (another ``.npy`` member, a float feature), holds NaN or infinite values; ``where`` names the
    array in the details (``member=...``, ``feature=...``)."""
    with np.errstate(invalid="ignore"):
        bad = int(values.size - np.count_nonzero(np.isfinite(values)))
    if bad:
        record.problems.append(
            problem(record, "nonfinite-data", f"{name}: {bad} NaN or infinite values", **where, count=bad)
        )
