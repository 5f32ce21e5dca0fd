"""Walking tar shards member by member, headers first: where each member's headers and data
lie, its data when asked, and where and why a walk stopped (a shard cut short, headers damaged
where `tarfile` itself silently stops, no end-of-archive blocks).

An uncompressed shard is walked by seeking past each member's data, so counting a shard's
members reads its headers only; a compressed one (``.tar.gz``, ``.tgz``) is decompressed once,
forward. Workers seek to their partition's first header. What a member means (WebDataset's
samples) is the reader's business: `scrub.readers.webdataset`.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from scrub.storage import Location, RangeFile, open_range, read_range, storage_of
from scrub.storage.memo import current_memo

SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz")
BLOCK = tarfile.BLOCKSIZE


def is_shard_name(name: str) -> bool:
    return name.lower().endswith(SHARD_SUFFIXES)


def is_compressed(path: Path | str | Any) -> bool:
    return not str(path).lower().endswith(".tar")


def shard_files(folder: Location) -> list[Any]:
    """The shards directly inside ``folder`` (a folder, or a prefix of a bucket: one listing, no
    request per object), by name."""
    names = storage_of(folder).files_in(folder)
    return [folder / name for name in names if is_shard_name(name) and not name.startswith(".")]


def looks_like_tar(path: Location) -> bool:
    """A ``.tar`` whose first header checks out, or a gzip file named ``.tar.gz``/``.tgz`` (what
    this version of the file was, from the memo: an unchanged shard is not read to be sniffed)."""
    return current_memo().remembered("tar-head", path, lambda: _looks_like_tar(path))


def _looks_like_tar(path: Location) -> bool:
    try:
        head = read_range(path, 0, BLOCK)
    except OSError:
        return False
    if is_compressed(path):
        return head[:2] == b"\x1f\x8b"
    if len(head) < BLOCK:
        return False
    if not any(head):  # an empty archive: only its end-of-archive blocks
        return True
    try:
        tarfile.TarInfo.frombuf(head, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


@dataclass
class Member:
    """One tar member as read: where its headers and data lie, and its data (None when only
    headers were walked)."""

    name: str
    offset: int  # of its first header block (a pax or GNU extended header included)
    offset_data: int
    size: int
    regular: bool  # a regular file (what samples are made of); else a folder, a link, ...
    data: bytes | None = None
    #: the shard ends inside this member's data: ``data`` holds the bytes there were
    cut: bool = False
    #: its header blocks as they are in the shard (when the walk was asked for them)
    header: bytes | None = None


@dataclass
class Walk:
    """Where a walk over a shard's headers stopped, and why (see `walk_shard`)."""

    end: int = 0  # offset just after the last member read
    #: the shard ends inside a member or a header: the last member is `Member.cut` or lost
    cut: bool = False
    #: bytes after ``end`` that are neither headers nor the end-of-archive blocks
    damaged: int = 0
    #: no end-of-archive blocks: the shard may have been cut at a member boundary
    unterminated: bool = False


def open_shard(path: Location, start: int = 0, end: int | None = None, size: int | None = None) -> IO[bytes]:
    """The shard's uncompressed bytes, seekable (forward seeks of a compressed one decompress).
    An object of a bucket is read by ranges with read-ahead (`scrub.storage.open_range`), mostly
    within ``[start, end)`` when the shard is uncompressed (a partition's bytes); a compressed
    one is read from its start."""
    if is_compressed(path):
        return cast(IO[bytes], _ClosingGzip(fileobj=open_range(path, size=size), mode="rb"))
    return open_range(path, start, end, size=size)


class _ClosingGzip(gzip.GzipFile):
    """A gzip stream that closes the object it reads when it is closed."""

    def close(self) -> None:
        raw: Any = self.fileobj
        try:
            super().close()
        finally:
            if raw is not None:
                raw.close()


#: what a compressed shard cut short or damaged raises while it is read
STREAM_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def walk_shard(
    file: IO[bytes],
    start: int = 0,
    with_data: bool = True,
    walk: Walk | None = None,
    with_headers: bool = False,
) -> Iterator[Member]:
    """The members of a shard from the header at ``start``, in order; ``walk`` (if given) says
    afterwards how the walk ended.

    Headers are parsed here for the common cases (ustar and GNU headers, pax ``path``/``size``
    records: what ``tarfile`` and WebDataset's TarWriter write), far cheaper per member than
    `tarfile` (shards are mostly headers and small members; see docs/benchmarks.md, "Design
    measurements"); anything else (GNU long names, sparse files, global pax headers, base-256
    sizes, a header that fails its checksum) is left to `tarfile` from that member on (tested to
    agree with it).
    """
    walk = walk if walk is not None else Walk()
    walk.end = offset = start
    size_of = _plain_size(file)
    pending: dict[str, str] = {}
    first = start  # the member's first header block (its pax header's, if any)
    raw: list[bytes] = []
    while True:
        try:
            file.seek(offset)
            block = file.read(BLOCK)
        except STREAM_ERRORS:
            walk.cut = True
            return
        if len(block) < BLOCK or not any(block):
            if len(block) < BLOCK and (any(block) or pending):  # a header cut short
                walk.cut = True
                return
            break  # the end-of-archive blocks, or the end of the file
        parsed = _parse_header(block)
        if parsed is None:  # not a case parsed here: tarfile takes it from this member on
            yield from _tarfile_members(file, first, with_data, walk, with_headers)
            return
        name, size, kind = parsed
        if with_headers:
            raw.append(block)
        if kind == b"x":  # pax records for the next header
            records = _read_or_empty(file, size)
            if len(records) < size:
                walk.cut = True
                return
            keys = _pax_records(records)
            if keys is None:
                yield from _tarfile_members(file, first, with_data, walk, with_headers)
                return
            pending.update(keys)
            if with_headers:
                raw.append(records + bytes(-size % BLOCK))
            offset += BLOCK + size + (-size % BLOCK)
            continue
        header = b"".join(raw) if with_headers else None
        member, available = _member(
            file, (name, size, kind), pending, first, offset, header, with_data, size_of
        )
        pending, raw = {}, []
        stored = member.size if member.regular else 0
        offset = member.offset_data + stored + (-stored % BLOCK)
        walk.end = offset
        yield member
        if member.cut:
            walk.cut = True
            walk.end = min(available, member.offset_data + member.size)
            return
        first = offset
    walk.damaged, walk.cut = _rest(file, walk.end)
    if not walk.damaged and not walk.cut:
        walk.unterminated = _size(file, walk.end + 1) <= walk.end


def _read_or_empty(file: IO[bytes], size: int) -> bytes:
    """``size`` bytes from the file's position; fewer where the shard ends, none where a
    compressed shard's stream breaks."""
    try:
        return file.read(size)
    except STREAM_ERRORS:
        return b""


def _member(
    file: IO[bytes],
    parsed: tuple[str, int, bytes],
    pending: dict[str, str],
    first: int,
    offset: int,
    header: bytes | None,
    with_data: bool,
    size_of: int | None,
) -> tuple[Member, int]:
    """The member whose header (``parsed``: name, size, type flag) is at ``offset``, its pax
    records (``pending``) applied as tarfile applies them, its data read when ``with_data``; and
    how far the shard's bytes reach for it (where a cut member ends)."""
    name, size, kind = parsed
    if kind == b"\0" and name.endswith("/"):  # an old tar's folder, as tarfile reads it
        kind = b"5"
    if "path" in pending:
        name = pending["path"].rstrip("/")  # as tarfile applies it
    if "size" in pending:
        size = int(pending["size"])
    regular = kind in REGULAR_TYPES
    if kind == b"5":
        name = name.rstrip("/")
    offset_data = offset + BLOCK
    member = Member(name, first, offset_data, size, regular, header=header)
    available = offset_data + size
    if regular and with_data:
        member.data = _read_or_empty(file, size)
        member.cut = len(member.data) < size
        available = offset_data + len(member.data)
    elif regular:
        available = size_of if size_of is not None else _size(file, offset_data + size)
        member.cut = offset_data + size > available
    return member, available


#: tar type flags of regular files (``tarfile.REGULAR_TYPES``: old and new regular, contiguous)
REGULAR_TYPES = frozenset({b"0", b"\0", b"7"})
#: the type flags parsed here; the others (GNU long names "L"/"K", sparse "S", global pax "g",
#: vendor extensions) are left to `tarfile`
_PARSED_TYPES = REGULAR_TYPES | frozenset({b"1", b"2", b"3", b"4", b"5", b"6", b"x"})
_POSIX_MAGIC = b"ustar\x0000"


def _parse_header(block: bytes) -> tuple[str, int, bytes] | None:
    """(name, size, type flag) of a header block that checks out and is one of the cases parsed
    here (`_PARSED_TYPES`, an octal size); None for anything `tarfile` must decide."""
    try:
        checksum = int(block[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return None
    if checksum != 256 + sum(block) - sum(block[148:156]):
        return None  # tarfile also accepts the signed sum of old tars: left to it
    kind = block[156:157]
    if kind not in _PARSED_TYPES or block[124] & 0x80:
        return None
    try:
        size = int(block[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        return None
    name = block[:100].split(b"\0", 1)[0]
    if block[257:265] == _POSIX_MAGIC:
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape"), size, kind


def _pax_records(data: bytes) -> dict[str, str] | None:
    """The ``path`` and ``size`` of pax records (``"%d %s=%s\\n"``); None for records that only
    `tarfile` should interpret (another charset, GNU sparse maps) or that do not parse."""
    found: dict[str, str] = {}
    position = 0
    while position < len(data) and data[position] != 0:
        try:
            space = data.index(b" ", position)
            length = int(data[position:space])
        except ValueError:
            return None
        record = data[space + 1 : position + length]
        if length <= 0 or not record.endswith(b"\n"):
            return None
        key, equals, value = record[:-1].partition(b"=")
        if not equals or key == b"hdrcharset" or key.startswith(b"GNU.sparse"):
            return None
        if key in (b"path", b"size"):
            found[key.decode()] = value.decode("utf-8", "surrogateescape")
        position += length
    if "size" in found and not found["size"].isdigit():
        return None
    return found


def _plain_size(file: IO[bytes]) -> int | None:
    """The size of an uncompressed shard's file; None for a compressed one."""
    if isinstance(file, gzip.GzipFile):
        return None
    if isinstance(file, RangeFile):
        return file.size
    return os.fstat(file.fileno()).st_size


def _tarfile_members(
    file: IO[bytes], start: int, with_data: bool, walk: Walk, with_headers: bool
) -> Iterator[Member]:
    """`walk_shard` by `tarfile`, from the header at ``start``."""
    try:
        file.seek(start)
        tar = tarfile.open(fileobj=file, mode="r:")  # noqa: SIM115 - the caller owns ``file``
    except tarfile.ReadError as error:
        walk.end = start
        if "empty file" in str(error):
            walk.unterminated = True
            return
        walk.damaged, walk.cut = _rest(file, start)
        walk.cut = walk.cut or not walk.damaged
        return
    except STREAM_ERRORS:
        walk.end, walk.cut = start, True
        return
    walk.end = start
    while True:
        try:
            info = tar.next()
        except tarfile.ReadError:  # "unexpected end of data", or a damaged extended header
            walk.damaged, walk.cut = _rest(file, walk.end)
            walk.cut = walk.cut or not walk.damaged
            return
        except STREAM_ERRORS:
            walk.cut = True
            return
        if info is None:
            break
        tar.members = []  # type: ignore[attr-defined]  # keep no headers: a shard may hold millions of members
        member = Member(info.name, info.offset, info.offset_data, info.size, info.isreg())
        if with_headers:
            file.seek(info.offset)
            member.header = file.read(info.offset_data - info.offset)
        end = info.offset_data + (info.size if info.isreg() else 0)
        if info.isreg() and with_data:
            try:
                file.seek(info.offset_data)
                member.data = file.read(info.size)
            except STREAM_ERRORS:
                member.data = b""
            member.cut = len(member.data) < info.size
        elif info.isreg():
            available = _size(file, end)
            member.cut = end > available
        walk.end = info.offset_data + -(-(end - info.offset_data) // BLOCK) * BLOCK
        yield member
        if member.cut:
            walk.cut = True
            walk.end = info.offset_data + len(member.data) if member.data is not None else available
            return
    walk.damaged, walk.cut = _rest(file, walk.end)
    if not walk.damaged and not walk.cut:
        walk.unterminated = _size(file, walk.end + 1) <= walk.end


def _size(file: IO[bytes], at_least: int) -> int:
    """The stream's size if it is below ``at_least``, else ``at_least`` (cheap for plain files)."""
    if isinstance(file, gzip.GzipFile):
        try:
            file.seek(at_least - 1)
            return file.tell() + len(file.read(1))
        except STREAM_ERRORS:
            return file.tell()
    file.seek(0, io.SEEK_END)
    return file.tell()


def _rest(file: IO[bytes], offset: int) -> tuple[int, bool]:
    """(non-zero bytes after ``offset``, whether the shard was cut short there): bytes after the
    last header that are not end-of-archive zeros are damage, unless they are less than one
    header (a header cut short, which `tarfile` passes over in silence) or a compressed stream
    ends too early."""
    try:
        file.seek(offset)
        damaged = total = 0
        while chunk := file.read(1 << 20):
            damaged += len(chunk) - chunk.count(0)
            total += len(chunk)
    except STREAM_ERRORS:
        return 0, True
    if damaged and total < BLOCK:
        return 0, True
    return damaged, False
