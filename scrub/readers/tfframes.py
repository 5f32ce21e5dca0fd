"""TFRecord framing: each record is ``uint64 length``, ``uint32 masked_crc32c(length)``, the data,
``uint32 masked_crc32c(data)``, little-endian (TensorFlow's ``core/lib/io/record_writer.cc``),
the mask being ``((crc >> 15) | (crc << 17)) + 0xa282ead8`` modulo 2^32. A file written with
``compression_type="GZIP"`` is that byte stream gzip-compressed as a whole: it is recognised by
its magic (its name says nothing), and read forward only.

A frame is read as TensorFlow reads it, both CRCs checked, but a bad one is a fact about that
frame rather than the end of the reading: a bad data CRC leaves the framing intact (the next
frame is found by the length); a bad length CRC, a length that runs past the end of the file or
a compressed stream that breaks mid-frame leave nothing to frame the rest by, so the rest of the
file is that one last frame (`fix` sets it aside byte for byte).

Every access to a file goes through `open_raw` (the one place a file is opened), so that files
elsewhere than on a local disk can be read by changing it alone.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, cast

from scrub.storage import Location, open_binary

HEADER = 12  # uint64 length + uint32 masked CRC of it
FOOTER = 4  # uint32 masked CRC of the data
MASK_DELTA = 0xA282EAD8
GZIP_MAGIC = b"\x1f\x8b"
#: what a compressed file cut short or damaged raises while it is read
STREAM_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)
#: the most read at once (a length is only a claim until the bytes are there)
CHUNK = 1 << 26
#: the CRC problems and the cut of a frame, as `Frame.problem` names them
LENGTH_CRC, DATA_CRC, CUT = "length", "data", "cut"


def _crc_library() -> tuple[Callable[[bytes], int], str]:
    """A maintained CRC32C implementation in C, else this module's own (pure Python, ~1000x
    slower: see docs/benchmarks.md)."""
    try:
        import google_crc32c

        return google_crc32c.value, "google-crc32c"
    except ImportError:
        pass
    try:
        import crc32c as _crc32c

        return _crc32c.crc32c, "crc32c"
    except ImportError:
        return crc32c_python, "pure Python"


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return table


_TABLE = _table()


def crc32c_python(data: bytes | bytearray | memoryview) -> int:
    """CRC32C (Castagnoli) of ``data``, table-driven: the fallback where no C library installs
    (tested against them)."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c, CRC_IMPLEMENTATION = _crc_library()


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C of ``data``."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """``data`` framed as one TFRecord record (for tests and samples; `fix` copies frames)."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def open_raw(path: str | Location) -> IO[bytes]:
    """A file's bytes as stored, buffered for many small reads: the one place a file is opened (an
    object of a bucket through `scrub.storage`, read in ranges with read-ahead)."""
    return open_binary(path)


def stored_size(path: str | Location) -> int:
    """A file's size as stored (through `open_raw`, as every access)."""
    with open_raw(path) as file:
        return file.seek(0, 2)


def header_ok(head: bytes) -> bool:
    """Whether 12 bytes are a TFRecord header (the length's CRC checks out)."""
    return len(head) == HEADER and masked_crc(head[:8]) == struct.unpack_from("<I", head, 8)[0]


def compressed(head: bytes) -> bool:
    """Whether a file that starts with ``head`` (its first 12 bytes) is gzip-compressed: the gzip
    magic where no TFRecord header is (a record's length may start with those two bytes too)."""
    return head[:2] == GZIP_MAGIC and not header_ok(head)


def open_records(path: str | Location, gzipped: bool) -> IO[bytes]:
    """The file's TFRecord byte stream: decompressed as it is read when ``gzipped``."""
    raw = open_raw(path)
    if not gzipped:
        return raw
    return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))


def first_bytes(path: str | Location, gzipped: bool | None = None) -> tuple[bytes, bool]:
    """(the first 12 bytes of the record stream, whether the file is compressed)."""
    with open_raw(path) as file:
        head = file.read(HEADER)
    if gzipped is None:
        gzipped = compressed(head)
    if not gzipped:
        return head, False
    try:
        with open_records(path, True) as stream:
            return stream.read(HEADER), True
    except (OSError, *STREAM_ERRORS):
        return b"", True


@dataclass(slots=True)
class Frame:
    """One record's frame as read: where it starts, its data (None where it cannot be had or
    its length cannot be trusted), its bytes as stored, and what is wrong with it."""

    position: int  # in its file, from 0 (as TensorFlow counts records)
    offset: int  # of its header in the record stream
    length: int  # what its header claims (0 where the header is cut)
    data: bytes | None
    head: bytes  # its header as stored (what there is of it)
    #: its data and footer as stored; for a frame that ends the framing, what was read of them
    body: bytes = b""
    problem: str | None = None  # LENGTH_CRC, DATA_CRC or CUT
    why: str = ""  # the details of the problem, for its message

    @property
    def size(self) -> int:
        """Its size as its header claims (where the next frame starts)."""
        return HEADER + self.length + FOOTER

    @property
    def raw(self) -> bytes:
        """The frame's bytes as stored (empty where a walk skipped its data)."""
        return self.head + self.body


def _read(stream: IO[bytes], count: int) -> tuple[bytes, str | None]:
    """Up to ``count`` bytes (fewer at the end of the stream), in chunks: a damaged length must
    not allocate what it claims. The second value says why a compressed stream broke, if it did."""
    parts: list[bytes] = []
    left = count
    while left > 0:
        try:
            part = stream.read(min(left, CHUNK))
        except STREAM_ERRORS as error:
            return b"".join(parts), str(error) or type(error).__name__
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return (parts[0] if len(parts) == 1 else b"".join(parts)), None


def _framing_problem(head: bytes, offset: int, size: int | None) -> tuple[int, tuple[str, str] | None]:
    """The length a frame's header at ``offset`` claims, and (problem, why) where the framing
    ends at it: a header cut short, a length whose CRC fails, a length past the file's end."""
    if len(head) < HEADER:
        return 0, (CUT, f"the file ends {len(head)} bytes into its header")
    (length,) = struct.unpack_from("<Q", head)
    if not header_ok(head):
        unframed = f"the {size - offset:,} bytes" if size is not None else "the bytes"
        why = f"its length's CRC does not match (length field {length:,}): {unframed} from there on "
        why += "cannot be framed"
        return length, (LENGTH_CRC, why)
    if size is not None and offset + HEADER + length + FOOTER > size:
        left = size - offset - HEADER
        why = f"it claims {length:,} bytes of data; the file ends {left:,} bytes after its header"
        return length, (CUT, why)
    return length, None


def _read_frame(stream: IO[bytes], position: int, offset: int, length: int, head: bytes) -> Frame:
    """The frame whose header ``head`` was just read: its data and footer read and checked (cut
    short where the stream ends inside them, its data's CRC failing)."""
    body, broken = _read(stream, length + FOOTER)
    if len(body) < length + FOOTER:
        where = f"the compressed stream breaks ({broken})" if broken else "the file ends"
        why = f"it claims {length:,} bytes of data; {where} {len(body):,} bytes after its header"
        return Frame(position, offset, length, None, head, body, CUT, why)
    data = body[:length]
    (stored,) = struct.unpack_from("<I", body, length)
    if masked_crc(data) != stored:
        return Frame(position, offset, length, None, head, body, DATA_CRC, "its data's CRC does not match")
    return Frame(position, offset, length, data, head, body)


def walk_frames(
    stream: IO[bytes],
    offset: int = 0,
    position: int = 0,
    count: int | None = None,
    size: int | None = None,
    with_data: bool = True,
) -> Iterator[Frame]:
    """The frames of a record stream from the header at ``offset`` (record ``position``), at most
    ``count``. ``size``: the stream's length where it is known (an uncompressed file): frames
    are then skipped by seeking when ``with_data`` is False (their ``data`` and ``raw`` are then
    empty). A frame whose header is damaged or that the stream ends inside is the last one (see
    the module's docstring): its ``raw`` is what was read of it, and the rest of the stream (what
    the frame claims and what cannot be framed) is left to be read by whoever needs it (`fix`
    copies it), so that a damaged length never has a whole file read into memory."""
    if offset:
        stream.seek(offset)
    read = 0
    while count is None or read < count:
        read += 1
        try:
            head = stream.read(HEADER)
        except STREAM_ERRORS as error:
            yield Frame(position, offset, 0, None, b"", b"", CUT, f"the compressed stream breaks: {error}")
            return
        if not head:
            return
        length, problem = _framing_problem(head, offset, size)
        if problem is not None:  # the framing ends here
            yield Frame(position, offset, length, None, head, b"", *problem)
            return
        end = offset + HEADER + length + FOOTER
        if not with_data and size is not None:
            stream.seek(end)
            yield Frame(position, offset, length, None, b"")
        else:
            frame = _read_frame(stream, position, offset, length, head)
            yield frame
            if frame.problem == CUT:
                return
        offset = end
        position += 1
