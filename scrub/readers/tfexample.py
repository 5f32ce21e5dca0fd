"""``tf.Example`` messages decoded without TensorFlow or generated code.

The schema (proto3, tensorflow ``core/example/example.proto`` and ``feature.proto``)::

    message Example { Features features = 1; }
    message Features { map<string, Feature> feature = 1; }
    message Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                                   Int64List int64_list = 3; } }
    message BytesList { repeated bytes value = 1; }
    message FloatList { repeated float value = 1 [packed = true]; }
    message Int64List { repeated int64 value = 1 [packed = true]; }

`parse_example` is its own wire-format decoder, checked against protobuf by the tests: a packed
float list becomes one NumPy view and a packed int64 list is decoded in a few vectorized passes,
where protobuf would hand over one Python number per value (image records are a few fields; a
float or token list may hold thousands). It follows protobuf's rules: unknown fields and fields
with an unexpected wire type are skipped, packed and unpacked repeated scalars are both
accepted, a message that occurs twice is merged (a feature's list of the same kind is extended,
of another kind replaced), a map entry replaces an earlier one of the same key, and a key must be
UTF-8. Groups (wire types 3 and 4), which no Example holds, are an error here.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from scrub.readers.protowire import VarintError, varint

__all__ = ["ExampleError", "Feature", "example_class", "parse_example"]

_FLOAT_LE = np.dtype("<f4")
_NO_INTS = np.empty(0, np.int64)
_NO_FLOATS = np.empty(0, np.float32)
#: the kinds of a feature's list, by its field number in ``Feature``
KINDS = {1: "bytes", 2: "float", 3: "int64"}


class ExampleError(ValueError):
    """The bytes are not a well-formed Example; the message says where and why, briefly."""


#: (kind, values) of one feature: "bytes" and a list of bytes, "float" and a float32 array,
#: "int64" and an int64 array, or "none" and None (a Feature with no list set)
Feature = tuple[str, Any]


def _fields(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(field number, wire type, start, end or value) of every field of a message; varints
    (wire type 0) carry their value in the last place, the others where their bytes lie."""
    try:
        return _wire_fields(data, start, end)
    except VarintError as error:
        raise ExampleError(
            "a varint is cut short" if error.cut else "a varint longer than 10 bytes"
        ) from None


def _wire_fields(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    found = []
    position = start
    while position < end:
        tag, position = varint(data, position, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ExampleError("a field number 0")
        if wire == 0:
            value, position = varint(data, position, end)
            found.append((number, 0, position, value))
            continue
        if wire == 2:
            size, position = varint(data, position, end)
            first = position
            position += size
        elif wire == 1:
            first, position = position, position + 8
        elif wire == 5:
            first, position = position, position + 4
        else:
            raise ExampleError(f"wire type {wire} (groups are not part of an Example)")
        if position > end:
            raise ExampleError("a field runs past the end of its message")
        found.append((number, wire, first, position))
    return found


def _packed_varints(data: bytes, start: int, end: int) -> np.ndarray:
    """A packed run of varints as int64 (two's complement, as protobuf reads int64)."""
    values = np.frombuffer(data, np.uint8, end - start, start)
    if values.size == 0:
        return _NO_INTS
    if values[-1] & 0x80:
        raise ExampleError("a packed varint is cut short")
    ends = np.flatnonzero(values < 0x80)
    if ends.size == values.size:
        return values.astype(np.int64)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if int(lengths.max()) > 10:
        raise ExampleError("a varint longer than 10 bytes")
    shifts = (np.arange(values.size) - np.repeat(starts, lengths)).astype(np.uint64) * np.uint64(7)
    parts = (values & 0x7F).astype(np.uint64) << shifts
    return np.add.reduceat(parts, starts).view(np.int64)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _list(kind: str, data: bytes, start: int, end: int) -> Any:
    """The values of a BytesList, FloatList or Int64List message."""
    if kind == "bytes":
        return [
            data[first:last]
            for number, wire, first, last in _fields(data, start, end)
            if number == 1 and wire == 2
        ]
    runs: list[np.ndarray] = []
    singles: list[float | int] = []
    for number, wire, first, last in _fields(data, start, end):
        if number != 1:
            continue
        if kind == "float" and wire == 2:
            if (last - first) % 4:
                raise ExampleError("a packed float list whose size is not a multiple of 4")
            runs.append(np.frombuffer(data, _FLOAT_LE, (last - first) // 4, first))
        elif kind == "float" and wire == 5:
            runs.append(np.frombuffer(data, _FLOAT_LE, 1, first))
        elif kind == "int64" and wire == 2:
            runs.append(_packed_varints(data, first, last))
        elif kind == "int64" and wire == 0:
            singles.append(_signed(last))
            runs.append(np.array([singles[-1]], np.int64))
    if not runs:
        return _NO_FLOATS if kind == "float" else _NO_INTS
    values = runs[0] if len(runs) == 1 else np.concatenate(runs)
    return values.astype(np.float32 if kind == "float" else np.int64, copy=False)


def _merge_feature(current: Feature, data: bytes, start: int, end: int) -> Feature:
    """A Feature message's occurrence merged into what earlier ones gave (protobuf's merge: the
    oneof's list extended when of the same kind, replaced otherwise)."""
    for number, wire, first, last in _fields(data, start, end):
        kind = KINDS.get(number)
        if kind is None or wire != 2:
            continue
        values = _list(kind, data, first, last)
        if current[0] == kind:
            values = current[1] + values if kind == "bytes" else np.concatenate([current[1], values])
        current = (kind, values)
    return current


def parse_example(data: bytes) -> dict[str, Feature]:
    """The features of a serialized Example, by name; `ExampleError` when it does not parse."""
    features: dict[str, Feature] = {}
    for number, wire, first, last in _fields(data, 0, len(data)):
        if number != 1 or wire != 2:
            continue  # an unknown field of Example
        for entry_number, entry_wire, entry_first, entry_last in _fields(data, first, last):
            if entry_number != 1 or entry_wire != 2:
                continue
            key = b""
            value: Feature = ("none", None)
            for item_number, item_wire, item_first, item_last in _fields(data, entry_first, entry_last):
                if item_number == 1 and item_wire == 2:
                    key = data[item_first:item_last]
                elif item_number == 2 and item_wire == 2:
                    value = _merge_feature(value, data, item_first, item_last)
            try:
                name = key.decode("utf-8")
            except UnicodeDecodeError:
                raise ExampleError(f"a feature name that is not UTF-8 ({key[:40]!r})") from None
            features[name] = value
    return features


@functools.cache
def example_class() -> Any:
    """``tensorflow.Example`` as a protobuf message class built from a hand-written descriptor (no
    protoc step, no generated module): for tests and the samples, which write Examples."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="scrub/tf_example.proto", package="scrub.tf", syntax="proto3"
    )

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        added = file.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            entry = added.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                entry.type_name = type_name

    optional, repeated = field.LABEL_OPTIONAL, field.LABEL_REPEATED
    message("BytesList", ("value", 1, field.TYPE_BYTES, repeated, ""))
    message("FloatList", ("value", 1, field.TYPE_FLOAT, repeated, ""))
    message("Int64List", ("value", 1, field.TYPE_INT64, repeated, ""))
    message(
        "Feature",
        ("bytes_list", 1, field.TYPE_MESSAGE, optional, ".scrub.tf.BytesList"),
        ("float_list", 2, field.TYPE_MESSAGE, optional, ".scrub.tf.FloatList"),
        ("int64_list", 3, field.TYPE_MESSAGE, optional, ".scrub.tf.Int64List"),
    )
    feature = file.message_type[-1]
    feature.oneof_decl.add(name="kind")
    for each in feature.field:
        each.oneof_index = 0
    features = file.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=optional)
    entry.field.add(
        name="value", number=2, type=field.TYPE_MESSAGE, label=optional, type_name=".scrub.tf.Feature"
    )
    features.field.add(
        name="feature",
        number=1,
        type=field.TYPE_MESSAGE,
        label=repeated,
        type_name=".scrub.tf.Features.FeatureEntry",
    )
    message("Example", ("features", 1, field.TYPE_MESSAGE, optional, ".scrub.tf.Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("scrub.tf.Example"))


def serialize_example(features: dict[str, tuple[str, Any]]) -> bytes:
    """An Example of ``{name: (kind, values)}`` (kind "bytes", "float" or "int64"), serialized by
    protobuf (tests and samples)."""
    example = example_class()()
    for name, (kind, values) in features.items():
        feature = example.features.feature[name]
        target = {"bytes": feature.bytes_list, "float": feature.float_list, "int64": feature.int64_list}[kind]
        target.value.extend(values)
    return example.SerializeToString()
