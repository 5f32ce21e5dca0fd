"""Caffe ``Datum`` protobuf messages, the values of a Caffe LMDB (convert_imageset, Python tools).

The schema (proto2, BVLC/caffe ``src/caffe/proto/caffe.proto``)::

    message Datum {
      optional int32 channels = 1;  optional int32 height = 2;  optional int32 width = 3;
      optional bytes data = 4;      // uint8, CHW, BGR; or the image file when encoded
      optional int32 label = 5;
      repeated float float_data = 6;
      optional bool encoded = 7 [default = false];
    }

`parse_datum` is its own wire-format decoder, checked against protobuf by the tests, because
protobuf is slow exactly where Caffe datasets are big: Caffe writes ``float_data`` unpacked,
one 5-byte record (tag ``0x35`` + little-endian float32) per value, and upb decodes those one
field at a time, far slower than a packed field. Here a run of such records is one strided NumPy
copy, a packed field one copy (see docs/benchmarks.md, "Design measurements").
Scalars follow protobuf: int32 is the low 32 bits of the varint, bool is "varint != 0", the
last occurrence of a scalar wins, every ``float_data`` occurrence (packed or not) appends.

It is stricter than protobuf in one way: a known field with the wrong wire type is an error
(protobuf keeps it as an unknown field and silently leaves the field unset). Unknown fields
are skipped as protobuf does; unknown *groups* (never written by Caffe) go to protobuf itself.
protobuf is otherwise only needed for `datum_class`, which tests and sample generators use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from scrub.readers.protowire import VarintError, varint

__all__ = ["Datum", "DatumError", "datum_class", "looks_like_datum", "parse_datum"]

_FIELDS = {1: "channels", 2: "height", 3: "width", 4: "data", 5: "label", 6: "float_data", 7: "encoded"}
#: The wire types Caffe's fields may arrive with (float_data: unpacked 5, or packed 2).
_WIRE_TYPES = {1: (0,), 2: (0,), 3: (0,), 4: (2,), 5: (0,), 6: (5, 2), 7: (0,)}
#: Every single-byte tag a Datum can start with, for the cheap first test of `looks_like_datum`.
_FIRST_TAGS = frozenset((number << 3) | wire for number, wires in _WIRE_TYPES.items() for wire in wires)
_UNPACKED_TAG = 0x35  # field 6, wire type 5 (fixed32)
_FLOAT_LE = np.dtype("<f4")
_NO_FLOATS = np.empty(0, np.float32)
_NO_FLOATS.setflags(write=False)


class DatumError(ValueError):
    """The bytes are not a well-formed Datum; the message says where and why, briefly."""


@dataclass(frozen=True, eq=False)
class Datum:
    """One decoded Datum. Optional int fields are None when absent (Caffe would read 0).

    ``float_data`` is a read-only float32 array that owns its memory: it never points into the
    value it came from, which may be LMDB memory that goes away with the transaction.
    """

    channels: int | None
    height: int | None
    width: int | None
    data: bytes
    label: int | None
    float_data: np.ndarray
    encoded: bool

    def array(self) -> np.ndarray | None:
        """The raw payload as a (C, H, W) array, chosen as Caffe's DataTransformer does.

        uint8 from ``data`` when it is non-empty, else float32 from ``float_data``. None for
        encoded Datums (``data`` is an image file), missing or negative shape fields, or a
        payload whose size is not C*H*W. Read-only; shares memory with this Datum.
        """
        if self.encoded or self.channels is None or self.height is None or self.width is None:
            return None
        shape = (self.channels, self.height, self.width)
        if min(shape) < 0:
            return None
        size = shape[0] * shape[1] * shape[2]
        if self.data:
            if len(self.data) != size:
                return None
            return np.frombuffer(self.data, np.uint8).reshape(shape)
        if self.float_data.size != size:
            return None
        return self.float_data.reshape(shape)

    def __eq__(self, other: object) -> bool:
        """Field by field; ``float_data`` bit for bit (NaN payloads and -0.0 included)."""
        if not isinstance(other, Datum):
            return NotImplemented
        mine, theirs = self.float_data, other.float_data
        return (
            (self.channels, self.height, self.width, self.label, self.encoded, self.data)
            == (other.channels, other.height, other.width, other.label, other.encoded, other.data)
            and mine.dtype == theirs.dtype
            and mine.shape == theirs.shape
            and mine.tobytes() == theirs.tobytes()
        )

    __hash__ = None  # type: ignore[assignment]  # holds an array; equal Datums need not be identical

    def __repr__(self) -> str:
        """Short: sizes instead of payloads, which are often megabytes."""
        return (
            f"Datum(channels={self.channels}, height={self.height}, width={self.width}, "
            f"data=<{len(self.data)} bytes>, label={self.label}, "
            f"float_data=<{self.float_data.size} {self.float_data.dtype}>, encoded={self.encoded})"
        )


def _file_descriptor(packed: bool) -> Any:
    """caffe.proto's Datum as a FileDescriptorProto: no protoc step, no generated module."""
    from google.protobuf import descriptor_pb2

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="scrub/caffe_datum.proto", package="caffe", syntax="proto2"
    )
    message = file.message_type.add(name="Datum")
    for number, (name, kind) in enumerate(
        [
            ("channels", field.TYPE_INT32),
            ("height", field.TYPE_INT32),
            ("width", field.TYPE_INT32),
            ("data", field.TYPE_BYTES),
            ("label", field.TYPE_INT32),
            ("float_data", field.TYPE_FLOAT),
            ("encoded", field.TYPE_BOOL),
        ],
        start=1,
    ):
        label = field.LABEL_REPEATED if name == "float_data" else field.LABEL_OPTIONAL
        entry = message.field.add(name=name, number=number, type=kind, label=label)
        if name == "encoded":
            entry.default_value = "false"
        if name == "float_data" and packed:
            entry.options.packed = True
    return file


@functools.cache
def datum_class(packed: bool = False) -> type:
    """The protobuf message class of caffe.Datum, built at run time (cached).

    ``packed=False`` is Caffe's own schema: proto2 repeated floats serialize unpacked, exactly
    as Caffe writes them. ``packed=True`` differs only in serializing ``float_data`` packed
    (both classes parse both encodings). Each class lives in a private descriptor pool, so it
    never clashes with a real ``caffe_pb2`` imported into the same process.
    """
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor(packed))
    descriptor = pool.FindMessageTypeByName("caffe.Datum")
    if hasattr(message_factory, "GetMessageClass"):  # the new API; GetPrototype is gone in 6.30
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)  # older protobuf


class _NeedsProtobuf(Exception):
    """Raised by the decoder for input it leaves to protobuf (unknown group fields)."""


def _varint(buf: Any, pos: int, end: int, what: str, max_bytes: int = 10) -> tuple[int, int]:
    """Decode the varint at ``pos``; return (value mod 2**64, position after it)."""
    try:
        return varint(buf, pos, end, max_bytes)
    except VarintError as error:
        if error.cut:
            raise DatumError(f"truncated {what} varint at byte {error.start}") from None
        raise DatumError(f"{what} varint longer than {max_bytes} bytes at byte {error.start}") from None


def _length(buf: Any, pos: int, end: int, what: str) -> tuple[int, int]:
    """Decode a length prefix and check that the payload fits; return (length, payload start)."""
    size, pos = _varint(buf, pos, end, f"{what} length", 5)
    if size > end - pos:
        raise DatumError(f"{what}: length {size} at byte {pos} runs past the end ({end - pos} bytes left)")
    return size, pos


def _int32(value: int | None) -> int | None:
    """protobuf's int32 from a varint: the low 32 bits, signed."""
    if value is None:
        return None
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _unpacked_run(octets: np.ndarray, start: int, end: int) -> int:
    """How many whole 5-byte records with tag 0x35 follow each other from ``start``.

    Checks the tag bytes in growing blocks, so a run costs time in proportion to its length
    even when runs are short and many (a Datum made to be slow).
    """
    available = (end - start) // 5
    count = 0
    block = 64
    while count < available:
        take = min(block, available - count)
        first = start + 5 * count
        # copy, then compare: NumPy's strided copy is faster than a strided comparison
        good = octets[first : first + 5 * take : 5].copy() == _UNPACKED_TAG
        if not good.all():
            return count + int(good.argmin())
        count += take
        block *= 8
    return count


def _float_data(
    buf: Any, start: int, pos: int, end: int, wire: int, octets: np.ndarray | None, floats: list[np.ndarray]
) -> int:
    """Read a ``float_data`` field whose tag began at ``start`` (its value at ``pos``) into
    ``floats``, as a view of ``buf``; the position after it. Unpacked values behind the canonical
    one-byte tag are read as one run of every such field that follows (``octets``: ``buf`` as
    bytes), each ``float_data`` value of a long run costing no Python step."""
    if wire == 2:  # packed
        size, pos = _length(buf, pos, end, "float_data")
        if size % 4:
            raise DatumError(f"float_data: packed length {size} at byte {start} is not 4*n")
        floats.append(np.frombuffer(buf, _FLOAT_LE, size // 4, pos))
        return pos + size
    if octets is not None:  # unpacked, canonical tag: the fast path
        count = _unpacked_run(octets, start, end)
        if count == 0:
            raise DatumError(f"float_data: truncated float at byte {pos}")
        floats.append(np.ndarray((count,), _FLOAT_LE, buf, pos, (5,)))
        return start + 5 * count
    if end - pos < 4:  # unpacked behind an over-long tag: one value
        raise DatumError(f"float_data: truncated float at byte {pos}")
    floats.append(np.frombuffer(buf, _FLOAT_LE, 1, pos))
    return pos + 4


def _skipped(buf: Any, start: int, pos: int, end: int, number: int, wire: int) -> int:
    """The position after an unknown field's value (its tag began at ``start``); a group is left
    to protobuf (`_NeedsProtobuf`)."""
    if wire == 0:
        return _varint(buf, pos, end, f"field {number}")[1]
    if wire == 2:
        size, pos = _length(buf, pos, end, f"field {number}")
        return pos + size
    if wire in (1, 5):
        pos += 8 if wire == 1 else 4
        if pos > end:
            raise DatumError(f"field {number}: truncated at byte {start}")
        return pos
    if wire == 3:
        raise _NeedsProtobuf
    raise DatumError(f"end-group tag without a group at byte {start}")


def _decode(buf: Any, strict: bool) -> Datum:
    """The decoder behind `parse_datum` (``strict=False``) and `looks_like_datum` (unknown fields
    are errors too). ``buf`` is any bytes-like object supporting indexing and the buffer API."""
    end = len(buf)
    pos = 0
    scalars: dict[int, int] = {}
    data: tuple[int, int] | None = None
    floats: list[np.ndarray] = []
    octets: np.ndarray | None = None
    while pos < end:
        start = pos
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(buf, pos, end, "tag", 5)
            if tag > 0xFFFFFFFF:
                raise DatumError(f"tag out of range at byte {start}")
        number, wire = tag >> 3, tag & 7
        if wire > 5:
            raise DatumError(f"invalid wire type {wire} at byte {start}")
        if number == 0:
            raise DatumError(f"field number 0 at byte {start}")
        if number in _FIELDS:
            name = _FIELDS[number]
            if wire not in _WIRE_TYPES[number]:
                expected = _WIRE_TYPES[number][0]
                raise DatumError(f"{name}: wire type {wire} at byte {start}, expected {expected}")
            if wire == 0:
                scalars[number], pos = _varint(buf, pos, end, name)
            elif number == 4:
                size, pos = _length(buf, pos, end, name)
                data = (pos, pos + size)
                pos += size
            else:
                canonical = wire == 5 and pos == start + 1  # unpacked behind a one-byte tag
                if canonical and octets is None:
                    octets = np.frombuffer(buf, np.uint8)  # the fast path's view, made once
                pos = _float_data(buf, start, pos, end, wire, octets if canonical else None, floats)
            continue
        if strict:
            raise DatumError(f"unknown field {number} at byte {start}")
        pos = _skipped(buf, start, pos, end, number, wire)

    if not floats:
        float_data = _NO_FLOATS
    elif len(floats) == 1:
        float_data = np.array(floats[0], np.float32)  # copies: owns its memory, contiguous, native
    else:
        float_data = np.concatenate(floats).astype(np.float32, copy=False)
    float_data.setflags(write=False)
    return Datum(
        channels=_int32(scalars.get(1)),
        height=_int32(scalars.get(2)),
        width=_int32(scalars.get(3)),
        data=bytes(buf[data[0] : data[1]]) if data else b"",
        label=_int32(scalars.get(5)),
        float_data=float_data,
        encoded=bool(scalars.get(7, 0)),
    )


def _decode_with_protobuf(value: bytes | bytearray | memoryview) -> Datum:
    """The slow path, for messages with unknown groups: protobuf parses, we convert."""
    from google.protobuf.message import DecodeError

    message = datum_class()()
    try:
        message.ParseFromString(bytes(value))
    except DecodeError as error:
        raise DatumError(f"malformed protobuf: {error}") from None
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet
    except ImportError:  # older protobuf cannot list unknown fields: accept its verdict
        pass
    else:
        for unknown in UnknownFieldSet(message):
            if unknown.field_number in _FIELDS:
                number, wire = unknown.field_number, unknown.wire_type
                raise DatumError(f"{_FIELDS[number]}: wire type {wire}, expected {_WIRE_TYPES[number][0]}")
    float_data = np.array(message.float_data, np.float32)
    float_data.setflags(write=False)
    has = message.HasField
    return Datum(
        channels=message.channels if has("channels") else None,
        height=message.height if has("height") else None,
        width=message.width if has("width") else None,
        data=message.data,
        label=message.label if has("label") else None,
        float_data=float_data,
        encoded=message.encoded,
    )


def parse_datum(value: bytes | bytearray | memoryview) -> Datum:
    """Decode one serialized Datum, as protobuf would; raise `DatumError` if it is malformed.

    Accepts any contiguous bytes-like value (an LMDB ``buffers=True`` memoryview too): the
    result never references ``value``, so the buffer may be released right after.
    """
    if isinstance(value, memoryview) and (value.ndim != 1 or value.itemsize != 1):
        value = value.cast("B")
    try:
        return _decode(value, strict=False)
    except _NeedsProtobuf:
        return _decode_with_protobuf(value)


def looks_like_datum(value: bytes | bytearray | memoryview) -> bool:
    """Whether ``value`` is plausibly a Datum: for sniffing the codec of an LMDB's values.

    protobuf parses many random byte strings (as unknown fields), so this demands more: a
    first byte that is the tag of a Datum field with its wire type, and a message made of
    Datum fields only that decodes to the end. False for JPEG, PNG, .npy, pickle, most random
    bytes, and the empty value (an empty Datum is valid but says nothing). Sniff several values:
    a short text can pass by chance (b"(1" is a Datum with label 49).
    """
    if isinstance(value, memoryview) and (value.ndim != 1 or value.itemsize != 1):
        value = value.cast("B")
    if len(value) == 0 or value[0] not in _FIRST_TAGS:
        return False
    try:
        _decode(value, strict=True)
    except DatumError:
        return False
    return True
