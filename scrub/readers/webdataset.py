"""WebDataset tar shards: one ``.tar`` (or ``.tar.gz``/``.tgz``) shard, or a folder of them.

A sample is the run of consecutive members that share a key, by WebDataset's own rule
(``webdataset.tariterators.base_plus_ext``): the member's path up to the first dot of its
basename; the rest is the member's extension (``jpg``, ``cls``, ``seg.png``). Members without an
extension, directories, links and ``__meta__``-style members belong to no sample, as for
WebDataset; `fix` copies them unchanged. A sample's record is its key, its data (the first image
member, else its ``.npy``, or the member ``--data-key`` names) and its label (``.cls`` and the
other class-id extensions, ``.txt`` when every sampled one is an integer, or ``--label-key``).
Its other ``.npy`` and ``.json`` members are checked to load.

Shards are read with the standard library's `tarfile`: the driver walks every shard's headers
(seeking past the data of an uncompressed shard; a compressed one is decompressed once) to count
samples and cut partitions at sample boundaries, and workers seek to their partition's first
header. A shard cut short gives a ``malformed-sample`` on the sample it cuts; headers that stop
before the shard's end (a damaged header: `tarfile` itself silently stops there) give a
``damaged-shard`` on the shard.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from scrub.checks.base import Finding, make_issue, problem
from scrub.checks.images import EXTENSION_FORMATS
from scrub.errors import UnusableDataset, UsageError
from scrub.readers.base import DatasetInfo, Reader
from scrub.readers.images import parse_label
from scrub.readers.lmdb import decode_value
from scrub.records import Record

SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz")
#: WebDataset's rule for a member's sample key and extension (`base_plus_ext`)
_KEY_AND_EXTENSION = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
#: members WebDataset skips as metadata (its ``skip_meta``)
_META = re.compile(r"__[^/]*__($|/)")
IMAGE_SUFFIXES = frozenset(extension.lstrip(".") for extension in EXTENSION_FORMATS)
#: extensions that hold a class id, in the order one is chosen (WebDataset decodes them as int)
LABEL_SUFFIXES = ("cls", "cls2", "class", "label", "target")
#: how many ``.txt`` members are read to tell class ids from captions
SAMPLED_TEXTS = 64
BLOCK = tarfile.BLOCKSIZE


def is_shard_name(name: str) -> bool:
    return name.lower().endswith(SHARD_SUFFIXES)


def is_compressed(path: Path | str) -> bool:
    return not str(path).lower().endswith(".tar")


def shard_files(folder: Path) -> list[Path]:
    """The shards directly inside ``folder``, by name."""
    return sorted(
        entry
        for entry in folder.iterdir()
        if is_shard_name(entry.name) and not entry.name.startswith(".") and entry.is_file()
    )


def looks_like_tar(path: Path) -> bool:
    """A ``.tar`` whose first header checks out, or a gzip file named ``.tar.gz``/``.tgz``."""
    try:
        with open(path, "rb") as file:
            head = file.read(BLOCK)
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


def split_name(name: str) -> tuple[str, str] | None:
    """(sample key, lower-case extension) of a member name, or None if it belongs to no sample."""
    if _META.match(name):
        return None
    match = _KEY_AND_EXTENSION.match(name)
    return None if match is None else (match.group(1), match.group(2).lower())


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
class Sample:
    key: str
    members: list[tuple[str, Member]] = field(default_factory=list)  # (extension, member)
    #: offset of its first member's header in the (uncompressed) shard
    offset: int = 0

    def get(self, extension: str) -> Member | None:
        return next((member for suffix, member in self.members if suffix == extension), None)


@dataclass
class Other:
    """A member that belongs to no sample (a folder, a link, ``__meta__``, no extension)."""

    member: Member


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


def open_shard(path: str) -> IO[bytes]:
    """The shard's uncompressed bytes, seekable (forward seeks of a compressed one decompress)."""
    if is_compressed(path):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


#: what a compressed shard cut short or damaged raises while it is read
_STREAM_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


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
    records: what ``tarfile`` and WebDataset's TarWriter write), at a fifth of `tarfile`'s cost
    per member (measured: shards are mostly headers and small members); anything else (GNU long
    names, sparse files, global pax headers, base-256 sizes, a header that fails its checksum)
    is left to `tarfile` from that member on (tested to agree with it).
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
        except _STREAM_ERRORS:
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
            try:
                records = file.read(size)
            except _STREAM_ERRORS:
                records = b""
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
        member = Member(
            name, first, offset_data, size, regular, header=b"".join(raw) if with_headers else None
        )
        pending, raw = {}, []
        stored = size if regular else 0
        if regular and with_data:
            try:
                member.data = file.read(size)
            except _STREAM_ERRORS:
                member.data = b""
            member.cut = len(member.data) < size
            available = offset_data + len(member.data)
        elif regular:
            available = size_of if size_of is not None else _size(file, offset_data + size)
            member.cut = offset_data + size > available
        offset = offset_data + stored + (-stored % BLOCK)
        walk.end = offset
        yield member
        if member.cut:
            walk.cut = True
            walk.end = min(available, offset_data + size)
            return
        first = offset
    walk.damaged, walk.cut = _rest(file, walk.end)
    if not walk.damaged and not walk.cut:
        walk.unterminated = _size(file, walk.end + 1) <= walk.end


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
    except _STREAM_ERRORS:
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
        except _STREAM_ERRORS:
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
            except _STREAM_ERRORS:
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
        except _STREAM_ERRORS:
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
    except _STREAM_ERRORS:
        return 0, True
    if damaged and total < BLOCK:
        return 0, True
    return damaged, False


def group_samples(members: Iterator[Member]) -> Iterator[Sample | Other]:
    """Members grouped into samples by WebDataset's rule (consecutive members sharing a key)."""
    current: Sample | None = None
    for member in members:
        split = split_name(member.name) if member.regular else None
        if split is None:
            if current is not None:
                yield current
                current = None
            yield Other(member)
            continue
        key, extension = split
        if current is None or key != current.key:
            if current is not None:
                yield current
            current = Sample(key, offset=member.offset)
        current.members.append((extension, member))
    if current is not None:
        yield current


@dataclass(frozen=True)
class ShardSpan:
    """A partition: ``count`` samples of one shard from the header at ``start``; the first is
    record ``first_index`` of the dataset."""

    path: str
    source: str
    start: int
    count: int
    first_index: int

    def __len__(self) -> int:
        return self.count


class WebDatasetReader(Reader[ShardSpan]):
    format = "webdataset"
    file_suffixes = SHARD_SUFFIXES
    records_per_task = 500
    provides = frozenset({"image", "bytes", "array", "samples"})
    options_used = frozenset({"data_key", "label_key"})
    worker_imports = ("PIL.Image", "numpy")

    #: the label's extension chosen by `open` (None: unlabelled)
    label_suffix: str | None = None

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_file():
            return is_shard_name(path.name) and looks_like_tar(path)
        if not path.is_dir():
            return False
        try:
            shards = shard_files(path)
        except OSError:
            return False
        return bool(shards) and looks_like_tar(shards[0])

    def shards(self) -> list[Path]:
        return [self.path] if self.path.is_file() else shard_files(self.path)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[ShardSpan]]:
        shards = self.shards()
        if not shards:
            raise UnusableDataset(f"{self.path}: no .tar shards in this folder")
        self.root = str(self.path.parent if self.path.is_file() else self.path)
        info = DatasetInfo(format=self.format, layout="shards", root=self.root, labelled=False, records=0)
        partitions: list[ShardSpan] = []
        suffixes: dict[str, int] = {}  # extension -> samples holding it
        several_images = others = 0
        texts: list[bytes] = []
        for shard in shards:
            source = shard.name
            walk = Walk()
            samples = 0
            first: int | None = None
            in_partition = 0
            try:
                with open_shard(str(shard)) as file:
                    members = walk_shard(file, with_data=False, walk=walk)
                    for item in group_samples(members):
                        if isinstance(item, Other):
                            others += 1
                            continue
                        extensions = [suffix for suffix, _ in item.members]
                        for suffix in set(extensions):
                            suffixes[suffix] = suffixes.get(suffix, 0) + 1
                        images = [s for s in extensions if s.rsplit(".", 1)[-1] in IMAGE_SUFFIXES]
                        several_images += len(images) > 1
                        if "txt" in extensions and len(texts) < SAMPLED_TEXTS:
                            texts.append(_member_bytes(str(shard), item.get("txt")))
                        if first is None:
                            first = item.offset
                        samples += 1
                        in_partition += 1
                        if in_partition == partition_size and not is_compressed(shard):
                            partitions.append(
                                ShardSpan(str(shard), source, first, in_partition, info.records)
                            )
                            info.records += in_partition
                            first, in_partition = None, 0
            except OSError as error:
                raise UnusableDataset(f"{shard}: cannot read ({error.strerror or error})") from None
            if in_partition:
                assert first is not None
                partitions.append(ShardSpan(str(shard), source, first, in_partition, info.records))
                info.records += in_partition
            described: dict[str, Any] = {"samples": samples, "compressed": is_compressed(shard)}
            if walk.damaged:
                described["damaged_after"] = walk.end
                info.issues.append(
                    make_issue(
                        "damaged-shard",
                        source,
                        "*",
                        None,
                        Finding(
                            f"no tar header at byte {walk.end}: {walk.damaged} non-zero bytes after it "
                            "are in no member (tarfile and WebDataset stop there silently)",
                            {"offset": walk.end, "unread_bytes": walk.damaged},
                        ),
                    )
                )
            elif walk.cut:
                described["cut_at"] = walk.end
                info.notes.append(
                    f"{source}: the shard ends at byte {walk.end}, inside a member: it was cut short"
                )
            elif walk.unterminated:
                info.notes.append(
                    f"{source}: no end-of-archive blocks: the shard may have been cut between two "
                    "members (its last sample may be missing members)"
                )
            info.files[source] = described
        self.label_suffix = self._label_suffix(suffixes, texts, info)
        info.labelled = self.label_suffix is not None
        data_key = self.options.data_key
        if data_key is not None and data_key.lower() not in suffixes:
            known = ", ".join(sorted(suffixes)) or "none"
            raise UsageError(f"--data-key {data_key}: no sample of {self.path} has it (extensions: {known})")
        if data_key is None and several_images:
            info.notes.append(
                f"{several_images} samples hold more than one image: only the first of each is "
                "checked (name another with --data-key)"
            )
        if others:
            info.skipped["member in no sample"] = others
        return info, partitions

    def _label_suffix(self, suffixes: dict[str, int], texts: list[bytes], info: DatasetInfo) -> str | None:
        given = self.options.label_key
        if given is not None:
            if given.lower() not in suffixes:
                known = ", ".join(sorted(suffixes)) or "none"
                raise UsageError(
                    f"--label-key {given}: no sample of {self.path} has it (extensions: {known})"
                )
            return given.lower()
        chosen = next((suffix for suffix in LABEL_SUFFIXES if suffix in suffixes), None)
        if chosen is not None:
            return chosen
        if texts and all(isinstance(parse_label(_text(t)), int) for t in texts):
            info.notes.append("labels read from the .txt members (every one sampled is an integer)")
            return "txt"
        if texts:
            info.notes.append(
                "the .txt members are text (captions), not class ids: no labels are checked "
                "(--label-key names a label member)"
            )
        else:
            info.notes.append("no .cls (or other class-id) member: no labels are checked")
        return None

    def read(self, partition: ShardSpan, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        stop = partition.count if stop is None else min(stop, partition.count)
        for offset, sample in self._samples(partition, start, stop, with_data=True):
            yield self._record(sample, partition.source, partition.first_index + offset)

    def _samples(
        self, partition: ShardSpan, start: int, stop: int, with_data: bool
    ) -> Iterator[tuple[int, Sample]]:
        if start >= stop:
            return
        with open_shard(partition.path) as file:
            offset = 0
            for item in group_samples(walk_shard(file, partition.start, with_data=with_data)):
                if isinstance(item, Other):
                    continue
                if offset >= start:
                    yield offset, item
                offset += 1
                if offset >= stop:
                    return

    def _record(self, sample: Sample, source: str, index: int) -> Record:
        record = Record(source, sample.key, index, None)
        data_suffix = self.options.data_key.lower() if self.options.data_key else None
        seen: set[str] = set()
        for suffix, member in sample.members:
            if suffix in seen:
                record.problems.append(
                    problem(
                        record,
                        "malformed-sample",
                        f"two members with extension .{suffix} ({member.name})",
                        member=member.name,
                    )
                )
            seen.add(suffix)
            if member.cut:
                assert member.data is not None
                record.problems.append(
                    problem(
                        record,
                        "malformed-sample",
                        f"the shard ends inside {member.name}: {len(member.data)} of {member.size} bytes",
                        member=member.name,
                        bytes=len(member.data),
                        size=member.size,
                    )
                )
        if data_suffix is None:
            data_suffix = next(
                (s for s, _ in sample.members if s.rsplit(".", 1)[-1] in IMAGE_SUFFIXES),
                "npy" if "npy" in seen else None,
            )
        data = sample.get(data_suffix) if data_suffix is not None else None
        if data is None:
            wanted = f".{data_suffix}" if self.options.data_key else "image or .npy"
            record.problems.append(
                problem(
                    record,
                    "malformed-sample",
                    f"no {wanted} member (has {', '.join('.' + s for s in sorted(seen)) or 'none'})",
                    extensions=sorted(seen),
                )
            )
        elif not data.cut:
            assert data.data is not None
            record.meta["name"] = data.name
            if data_suffix is not None and data_suffix.rsplit(".", 1)[-1] == "npy":
                decode_value(record, data.data, "npy", False)
            else:
                record.payload, record.meta["kind"] = data.data, "image"
        for suffix, member in sample.members:
            if member is not data and not member.cut:
                self._check_member(record, suffix, member)
        record.meta["label_known"] = self.label_suffix is not None
        label = sample.get(self.label_suffix) if self.label_suffix else None
        if label is not None and not label.cut:
            assert label.data is not None
            record.label = parse_label(_text(label.data))
        return record

    def _check_member(self, record: Record, suffix: str, member: Member) -> None:
        """A sample's ``.json`` and other ``.npy`` members must load."""
        assert member.data is not None
        last = suffix.rsplit(".", 1)[-1]
        if last in ("json", "jsn"):
            try:
                json.loads(member.data)
            except ValueError as error:
                record.problems.append(
                    problem(
                        record,
                        "malformed-sample",
                        f"{member.name} is not JSON: {error}",
                        member=member.name,
                    )
                )
        elif last == "npy":
            side = Record(record.source, record.key, record.index, None)
            decode_value(side, member.data, "npy", False)
            for found in side.problems:
                found.check = "malformed-sample"
                found.message = f"{member.name}: {found.message}"
                record.problems.append(found)
            values = side.payload
            if isinstance(values, np.ndarray) and values.dtype.kind in "fc":
                with np.errstate(invalid="ignore"):
                    bad = int(values.size - np.count_nonzero(np.isfinite(values)))
                if bad:
                    record.problems.append(
                        problem(
                            record,
                            "nonfinite-data",
                            f"{member.name}: {bad} NaN or infinite values",
                            member=member.name,
                            count=bad,
                        )
                    )

    def members(self, partitions: Sequence[ShardSpan]) -> Iterator[str]:
        for shard in self.shards():
            yield str(shard)

    def locate(self, partition: ShardSpan, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        wanted = set(offsets)
        found = {
            offset: (partition.source, sample.key, partition.first_index + offset)
            for offset, sample in self._samples(
                partition, min(offsets, default=0), max(offsets, default=-1) + 1, with_data=False
            )
            if offset in wanted
        }
        return [
            found.get(o) or (partition.source, f"#{partition.first_index + o}", partition.first_index + o)
            for o in offsets
        ]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()


def _member_bytes(path: str, member: Member | None) -> bytes:
    """The data of one member found by a walk over headers only."""
    if member is None:
        return b""
    with open_shard(path) as file:
        file.seek(member.offset_data)
        try:
            return file.read(min(member.size, 1 << 16))
        except _STREAM_ERRORS:
            return b""
