"""The protocol buffers wire format's varint, for the readers that decode protobuf messages
themselves (Caffe's ``Datum`` in LMDB, TensorFlow's ``Example`` in TFRecord): one decoder, each
reader saying a malformed varint in its own words (`VarintError` tells where and how)."""

from __future__ import annotations

from typing import Any

#: a varint's value is taken modulo 2**64, as protobuf takes it
MASK64 = (1 << 64) - 1


class VarintError(ValueError):
    """A varint cut short by the end of its message (``cut``), or longer than ``limit`` bytes;
    ``start``: where it began."""

    def __init__(self, start: int, cut: bool, limit: int) -> None:
        self.start, self.cut, self.limit = start, cut, limit
        super().__init__(
            f"a varint cut short at byte {start}"
            if cut
            else f"a varint longer than {limit} bytes at byte {start}"
        )


def varint(data: Any, position: int, end: int, max_bytes: int = 10) -> tuple[int, int]:
    """The varint at ``position`` of ``data`` (bytes, or a buffer of them), read no further than
    ``end`` and ``max_bytes`` bytes (10: a 64-bit value; 5 for a tag or a length): (its value
    modulo 2**64, the position after it)."""
    start = position
    value = shift = 0
    while position < end:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & MASK64, position
        shift += 7
        if position - start >= max_bytes:
            raise VarintError(start, cut=False, limit=max_bytes)
    raise VarintError(start, cut=True, limit=max_bytes)
