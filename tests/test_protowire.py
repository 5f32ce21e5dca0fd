"""The one varint decoder of the readers that parse protobuf themselves (`scrub.readers.protowire`),
against protobuf's own encoder and decoder."""

from __future__ import annotations

import numpy as np
import pytest

from scrub.readers.protowire import VarintError, varint

encoder = pytest.importorskip("google.protobuf.internal.encoder")
decoder = pytest.importorskip("google.protobuf.internal.decoder")


def test_values_decode_as_protobuf_decodes_them():
    values = [0, 1, 127, 128, 300, 2**31 - 1, 2**32, 2**63, 2**64 - 1]
    values += np.random.default_rng(2).integers(0, 2**63, 200, dtype=np.int64).tolist()
    for value in values:
        data = b"\xff" + encoder._VarintBytes(value) + b"\x01"  # inside a message
        assert varint(data, 1, len(data)) == decoder._DecodeVarint(data, 1) == (value, len(data) - 1)
    negative = encoder._VarintBytes((-5) & (2**64 - 1))  # an int64 of -5: ten bytes
    assert varint(negative, 0, len(negative)) == (2**64 - 5, 10)


def test_a_varint_cut_short_or_too_long_says_where():
    with pytest.raises(VarintError) as cut:
        varint(b"\x08\x80\x80", 1, 3)
    assert cut.value.cut and cut.value.start == 1
    with pytest.raises(VarintError) as cut_by_end:
        varint(b"\x80\x01", 0, 1)  # the byte that ends it lies past the message
    assert cut_by_end.value.cut
    with pytest.raises(VarintError) as long:
        varint(b"\x80" * 10 + b"\x00", 0, 11)
    assert not long.value.cut and long.value.limit == 10
    assert "longer than 10 bytes at byte 0" in str(long.value)
    with pytest.raises(VarintError):
        varint(b"\x80\x80\x80\x80\x80\x01", 0, 6, max_bytes=5)  # a tag or a length: 5 bytes at most
    assert varint(b"\x80\x80\x80\x80\x01", 0, 5, max_bytes=5) == (2**28, 5)
