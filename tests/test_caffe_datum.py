"""Caffe Datum decoding: every Datum is checked against protobuf's own parse of the same bytes."""

from __future__ import annotations

import io
import pickle
import struct
import time

import numpy as np
import pytest
from conftest import image_bytes
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrub.readers.caffe_datum import Datum, DatumError, datum_class, looks_like_datum, parse_datum

# --- hand encoding, to produce exactly the bytes Caffe (or a malicious writer) would ---------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32 -> 10-byte two's complement, as protobuf does
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def unpacked(values) -> bytes:
    """float_data as Caffe writes it: tag 0x35 and a little-endian float32 per value (bit exact,
    unlike struct.pack, which goes through a double and quiets signalling NaNs)."""
    floats = np.asarray(values, "<f4").reshape(-1, 1)
    records = np.empty((len(floats), 5), np.uint8)
    records[:, 0] = 0x35
    records[:, 1:] = floats.view(np.uint8)
    return records.tobytes()


def packed(values) -> bytes:
    payload = np.asarray(values, "<f4").tobytes()
    return b"\x32" + varint(len(payload)) + payload


def float_bits(*bits: int) -> np.ndarray:
    return np.array(bits, np.uint32).view(np.float32)


# --- the reference: protobuf's parse, turned into a Datum without scrub's decoder -------------


def protobuf_parse(value: bytes):
    message = datum_class()()
    message.ParseFromString(bytes(value))
    return message


def reference(value: bytes) -> Datum:
    message = protobuf_parse(value)
    has = message.HasField
    return Datum(
        channels=message.channels if has("channels") else None,
        height=message.height if has("height") else None,
        width=message.width if has("width") else None,
        data=message.data,
        label=message.label if has("label") else None,
        float_data=np.array(message.float_data, dtype=np.float32),
        encoded=message.encoded,
    )


def check(value: bytes) -> Datum:
    """parse_datum agrees with protobuf, bit for bit, on bytes, bytearray and memoryview."""
    expected = reference(value)
    for form in (bytes(value), bytearray(value), memoryview(bytes(value))):
        got = parse_datum(form)
        assert got == expected, (got, expected)
        assert got.float_data.dtype == np.float32 and got.float_data.ndim == 1
    return got


def serialize(packed_floats: bool = False, **fields) -> bytes:
    return datum_class(packed=packed_floats)(**fields).SerializeToString()


# --- the runtime message class ---------------------------------------------------------------


def test_datum_class_is_cached_and_serializes_as_caffe_does():
    assert datum_class() is datum_class()
    values = [1.0, -2.5, 3.25]
    # proto2 repeated floats are unpacked by default: Caffe's bytes, field by field
    assert serialize(float_data=values) == unpacked(values)
    assert serialize(True, float_data=values) == packed(values)
    assert serialize(channels=3, label=-1) == b"\x08\x03" + b"\x28" + b"\xff" * 9 + b"\x01"
    # each class parses both encodings
    for cls in (datum_class(), datum_class(packed=True)):
        for encoding in (unpacked(values), packed(values)):
            message = cls()
            message.ParseFromString(encoding)
            assert list(message.float_data) == values


# --- well-formed Datums ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 4, 5), (1, 28, 28), (3, 32, 32), (4, 7, 3), (2, 1, 9)])
def test_raw_uint8(shape):
    pixels = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    c, h, w = shape
    datum = check(serialize(channels=c, height=h, width=w, data=pixels.tobytes(), label=7))
    assert (datum.channels, datum.height, datum.width, datum.label, datum.encoded) == (c, h, w, 7, False)
    assert datum.float_data.size == 0
    array = datum.array()
    assert array.dtype == np.uint8 and np.array_equal(array, pixels)


@pytest.mark.parametrize("packed_floats", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 4), (1, 17, 3), (3, 32, 32)])
def test_float_data(shape, packed_floats):
    values = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    c, h, w = shape
    value = serialize(packed_floats, channels=c, height=h, width=w, float_data=values.ravel(), label=2)
    assert value.count(b"\x35") >= values.size if not packed_floats else b"\x32" in value
    datum = check(value)
    array = datum.array()
    assert array.dtype == np.float32 and array.shape == shape
    assert array.tobytes() == values.tobytes()


@pytest.mark.parametrize("packed_floats", [False, True], ids=["unpacked", "packed"])
def test_full_size_float_datum(packed_floats):
    values = np.random.default_rng(1).standard_normal(3 * 256 * 256).astype(np.float32)
    datum = check(serialize(packed_floats, channels=3, height=256, width=256, float_data=values, label=1))
    assert datum.array().shape == (3, 256, 256)


def test_special_floats_bit_for_bit():
    # NaN with payload, signalling NaN, -0.0, infinities, the smallest denormal, the largest float
    specials = float_bits(
        0x7FC00000, 0xFFC12345, 0x7F800001, 0x80000000, 0x7F800000, 0xFF800000, 1, 0x7F7FFFFF
    )
    for encoding in (unpacked, packed):
        datum = check(b"\x08\x01\x10\x01\x18\x08" + encoding(specials))
        assert datum.float_data.tobytes() == specials.tobytes()


def test_encoded_jpeg_with_label():
    jpeg = image_bytes(seed=3)
    datum = check(serialize(data=jpeg, label=4, encoded=True))
    assert datum.data == jpeg and datum.label == 4 and datum.encoded
    assert (datum.channels, datum.height, datum.width) == (None, None, None)
    assert datum.array() is None


def test_label_absent_negative_and_extreme():
    assert check(serialize(channels=1, height=1, width=1, data=b"\x05")).label is None
    for label in (-1, -(2**31), 2**31 - 1, 0):
        value = serialize(channels=1, height=1, width=1, data=b"\x05", label=label)
        if label < 0:
            assert len(varint(label)) == 10 and varint(label) in value
        assert check(value).label == label


def test_empty_datum():
    datum = check(b"")
    assert datum == Datum(None, None, None, b"", None, np.empty(0, np.float32), False)
    assert datum.array() is None


def test_protobuf_corner_cases():
    """Encodings Caffe never writes but protobuf accepts: the decoder must agree with it."""
    floats = [1.0, 2.0, 3.0, 4.0]
    cases = [
        unpacked(floats[:1]) + packed(floats[1:3]) + b"\x28\x05" + unpacked(floats[3:]),  # mixed, interleaved
        b"\x08\x01\x08\x02" + b"\x22\x01A\x22\x02BC" + b"\x38\x01\x38\x00",  # the last scalar wins
        b"\x08\x85\x80\x80\x80\x10",  # int32 keeps the low 32 bits of a bigger varint: 5
        b"\x08" + b"\xff" * 9 + b"\x7f",  # 10th varint byte with bits beyond 64
        b"\x88\x80\x80\x80\x00\x03",  # a 5-byte (over-long) tag for channels
        b"\xb5\x00" + struct.pack("<f", 1.5) + unpacked([2.5]),  # over-long float_data tag
        b"\x22\x81\x80\x80\x80\x00x",  # a 5-byte length
        b"\x38\x02",  # bool from 2
        b"\x38" + b"\x80" * 9 + b"\x02",  # bool from a varint that is 0 modulo 2**64
        b"\x32\x00",  # empty packed float_data
        b"\x40\x01\x41" + bytes(8) + b"\x4a\x02hi\x4d" + bytes(4) + b"\x08\x03",  # unknown fields skipped
        b"\xf8\xff\xff\xff\x0f\x01\x10\x02",  # the largest field number
        b"\x4b\x08\x01\x53\x54\x4c\x08\x03",  # an unknown group (protobuf's path)
    ]
    for value in cases:
        check(value)


def test_many_short_float_runs():
    """Unpacked floats interleaved with other fields: correct, and time linear in the size."""
    value = b"".join(unpacked([float(i)]) + b"\x28" + varint(i) for i in range(20000))
    start = time.perf_counter()
    datum = check(value)
    assert time.perf_counter() - start < 2
    assert np.array_equal(datum.float_data, np.arange(20000, dtype=np.float32)) and datum.label == 19999


@pytest.mark.parametrize("run", [63, 64, 65, 100, 575, 576, 577, 4673, 5000])
def test_float_runs_broken_at_block_edges(run):
    """A run of unpacked floats ends at the first other tag, wherever it falls."""
    values = np.arange(2 * run + 3, dtype=np.float32)
    first, second, last = unpacked(values[:run]), unpacked(values[run:-3]), packed(values[-3:])
    value = first + b"\x28\x01" + second + last + b"\x38\x01"
    datum = check(value)
    assert np.array_equal(datum.float_data, values) and datum.label == 1 and datum.encoded


def test_result_owns_its_memory():
    values = np.arange(12, dtype=np.float32)
    buffer = bytearray(serialize(channels=3, height=2, width=2, float_data=values, data=b""))
    datum = parse_datum(buffer)
    buffer[:] = bytes(len(buffer))
    assert np.array_equal(datum.float_data, values)
    assert not datum.float_data.flags.writeable and datum.float_data.flags.c_contiguous
    with pytest.raises(ValueError):
        datum.array()[0, 0, 0] = 1


def test_array_follows_caffe_and_rejects_bad_shapes():
    pixels = bytes(range(24))
    floats = np.arange(24, dtype=np.float32)
    uint8 = parse_datum(serialize(channels=2, height=3, width=4, data=pixels, float_data=floats))
    assert uint8.array().dtype == np.uint8  # Caffe uses data when it is non-empty
    float32 = parse_datum(serialize(channels=2, height=3, width=4, float_data=floats))
    assert float32.array().dtype == np.float32
    for fields in (
        dict(channels=2, height=3, width=5, data=pixels),  # sizes disagree
        dict(channels=2, height=3, width=5, float_data=floats),
        dict(channels=2, height=12, data=pixels),  # width missing
        dict(channels=-2, height=-3, width=4, data=pixels),  # negative
        dict(channels=2, height=3, width=4, data=pixels, encoded=True),  # data is an image file
    ):
        assert parse_datum(serialize(**fields)).array() is None, fields


# --- malformed input ---------------------------------------------------------------------------

MALFORMED = {
    "truncated varint": b"\x08\x80",
    "varint of 11 bytes": b"\x08" + b"\x80" * 10 + b"\x00",
    "truncated tag": b"\x88",
    "tag of 6 bytes": b"\x88\x80\x80\x80\x80\x00\x01",
    "tag above 32 bits": b"\x88\x80\x80\x80\x10\x01",
    "field number 0": b"\x00\x01",
    "wire type 6": b"\x0e",
    "wire type 7": b"\x3f",
    "data past the end": b"\x22\x10abc",
    "length of 6 bytes": b"\x22\x81\x80\x80\x80\x80\x00x",
    "huge length": b"\x22\xff\xff\xff\xff\x0f",
    "truncated float": b"\x35\x00\x00\x80",
    "truncated float after a run": unpacked([1.0, 2.0]) + b"\x35\x00",
    "packed length not a multiple of 4": b"\x32\x07" + bytes(7),
    "packed past the end": b"\x32\x08" + bytes(4),
    "end-group at top level": b"\x4c",
    "unterminated group": b"\x4b\x08\x01",
    "mismatched group": b"\x4b\x54",
    "unknown fixed64 truncated": b"\x41" + bytes(7),
    "unknown fixed32 truncated": b"\x45" + bytes(3),
}

WRONG_WIRE_TYPE = {  # protobuf keeps these as unknown fields and leaves the field unset
    "channels length-delimited": b"\x0a\x01\x05",
    "data as varint": b"\x20\x01",
    "label as fixed32": b"\x2d" + bytes(4),
    "float_data as fixed64": b"\x31" + bytes(8),
    "encoded as group": b"\x3b\x3c",
    "width after a group": b"\x4b\x4c\x1d" + bytes(4),  # caught on protobuf's path too
}


@pytest.mark.parametrize("value", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_raises_datum_error(value):
    with pytest.raises(DecodeError):
        protobuf_parse(value)
    with pytest.raises(DatumError):
        parse_datum(value)
    assert not looks_like_datum(value)


@pytest.mark.parametrize("value", WRONG_WIRE_TYPE.values(), ids=WRONG_WIRE_TYPE.keys())
def test_wrong_wire_type_raises_datum_error(value):
    message = protobuf_parse(value)
    assert any(field.field_number <= 7 for field in UnknownFieldSet(message))
    with pytest.raises(DatumError, match="wire type"):
        parse_datum(value)


def agrees_with_protobuf(value: bytes) -> None:
    """Accepted means protobuf accepts with the same result; rejected is always DatumError and
    means protobuf rejects too, or saw a known field with the wrong wire type."""
    try:
        got = parse_datum(value)
    except DatumError:
        try:
            message = protobuf_parse(value)
        except DecodeError:
            return
        assert any(field.field_number <= 7 for field in UnknownFieldSet(message)), value
        return
    assert got == reference(value), value


def sample_datums() -> list[bytes]:
    return [
        serialize(channels=2, height=2, width=3, data=bytes(range(12)), label=-3),
        serialize(channels=1, height=2, width=3, float_data=np.linspace(-1, 1, 6), label=1),
        serialize(True, channels=1, height=2, width=3, float_data=np.linspace(-1, 1, 6), label=1),
        serialize(data=image_bytes(seed=1, size=8), label=2, encoded=True),
    ]


def test_every_truncation_is_rejected_or_agrees():
    for value in sample_datums():
        for cut in range(len(value)):
            agrees_with_protobuf(value[:cut])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64))
def test_fuzz_random_bytes(value):
    agrees_with_protobuf(value)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(4)), st.data())
def test_fuzz_mutated_datums(which, data):
    value = bytearray(sample_datums()[which])
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(value) - 1))
        value[position] = data.draw(st.integers(0, 255))
    agrees_with_protobuf(bytes(value))


# --- the fast path against protobuf, over random shapes and values ---------------------------


@settings(max_examples=150, deadline=None)
@given(
    shape=st.tuples(st.integers(0, 5), st.integers(0, 6), st.integers(0, 6)),
    packed_floats=st.booleans(),
    label=st.none() | st.integers(-(2**31), 2**31 - 1),
    data=st.data(),
)
def test_property_float_data_matches_protobuf(shape, packed_floats, label, data):
    size = shape[0] * shape[1] * shape[2]
    values = data.draw(st.lists(st.floats(width=32), min_size=size, max_size=size))
    fields = dict(channels=shape[0], height=shape[1], width=shape[2], float_data=values)
    if label is not None:
        fields["label"] = label
    datum = check(serialize(packed_floats, **fields))
    assert datum.float_data.tobytes() == np.array(values, np.float32).tobytes()
    assert datum.label == label
    assert datum.array().shape == shape


# --- codec sniffing ----------------------------------------------------------------------------


def test_looks_like_datum_on_real_datums():
    for value in sample_datums():
        assert looks_like_datum(value) and looks_like_datum(memoryview(value))
    assert not looks_like_datum(b"")
    assert not looks_like_datum(b"\x08\x01\x40\x01")  # valid protobuf, but an unknown field


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_looks_like_datum_rejects_other_codecs():
    others = [image_bytes(seed=s, fmt=f) for s in range(3) for f in ("JPEG", "PNG")]
    others += [_npy(np.arange(n, dtype=t)) for n in (0, 7, 100) for t in (np.uint8, np.float32)]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        for obj in (np.arange(10.0), {"label": 3, "data": b"xy"}, [1, 2, 3], (b"\x08\x01", 5)):
            others.append(pickle.dumps(obj, protocol=protocol))
    rng = np.random.default_rng(0)
    others += [rng.bytes(int(n)) for n in rng.integers(16, 4096, 1000)]
    assert [value[:16] for value in others if looks_like_datum(value)] == []
