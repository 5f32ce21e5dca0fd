"""WebDataset tar shards: one ``.tar`` (or ``.tar.gz``/``.tgz``) shard, or a folder of them.

A sample is the run of consecutive members that share a key, by WebDataset's own rule
(``webdataset.tariterators.base_plus_ext``): the member's path up to the first dot of its
basename; the rest is the member's extension (``jpg``, ``cls``, ``seg.png``). Members without an
extension, directories, links and ``__meta__``-style members belong to no sample, as for
WebDataset; `fix` copies them unchanged. A sample's record is its key, its data (the member
``--data-key`` names, else the first of these) and its label (``.cls`` and the other class-id
extensions, ``.txt`` when every sampled one is an integer, or ``--label-key``):

* an image member: an image record;
* a ``.npy`` member: an array record;
* a ``.json`` or msgpack (``.mp``, ``.msgpack``, ``.msg``) object with a language model's fields
  (``input_ids``, ``messages``, ``prompt``/``completion``, ``text``: read by
  `scrub.readers.tokenfields.fill_record`): a token or text record;
* a ``.ten`` (``.tenbin``, ``.tb``) member (WebDataset's tenbin, `decode_tenbin`): its first
  integer array is the input ids of a token record (an array named ``labels`` is their labels,
  one named ``attn`` or ``mask`` their attention mask); without an integer array its first array
  is an array record;
* a ``.txt`` (``.text``, ``.transcript``) member that is not the label: a text record (UTF-8, as
  WebDataset decodes it);
* a ``.json`` or msgpack value of numbers (an object of numbers, a list of them): an array
  record of those numbers. Another object is metadata (a URL, a source): a sample with nothing
  else is ``malformed-sample``, as one with no member to train on (named by ``--data-key``:
  ``malformed-record``, naming its fields).

A member compressed with gzip (``.txt.gz``, as WebDataset decompresses it) is read as the member
it holds. The dataset is a language model's (`Carries.TOKENS`) when the first samples are
token or text records. Its other ``.npy``, ``.json``, msgpack and ``.ten`` members are checked to
load.

Shards are walked by `scrub.readers.tarwalk`: the driver walks every shard's headers (seeking
past the data of an uncompressed shard; a compressed one is decompressed once) to count samples
and cut partitions at sample boundaries, and workers seek to their partition's first header. A
shard cut short gives a ``malformed-sample`` on the sample it cuts (inside a member's data) or
on the last one read (inside a header: the samples after it are lost); headers that stop before the
shard's end (a damaged header: `tarfile` itself silently stops there) give a ``damaged-shard``
on the shard.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from scrub.checks.base import Finding, make_issue, problem
from scrub.checks.images import EXTENSION_FORMATS
from scrub.errors import UnusableDataset, UsageError
from scrub.readers.base import CacheEntry, DatasetInfo, FileSetReader
from scrub.readers.images import parse_label
from scrub.readers.tarwalk import (
    SHARD_SUFFIXES,
    STREAM_ERRORS,
    Member,
    Walk,
    is_compressed,
    is_shard_name,
    looks_like_tar,
    open_shard,
    shard_files,
    walk_shard,
)
from scrub.readers.tokenfields import KNOWN, fill_record
from scrub.readers.values import decode_value, use_array
from scrub.records import Carries, Record
from scrub.storage import forget_listings, is_url, location, stat_version
from scrub.wording import agreeing, counted

#: WebDataset's rule for a member's sample key and extension (`base_plus_ext`)
_KEY_AND_EXTENSION = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
#: members WebDataset skips as metadata (its ``skip_meta``)
_META = re.compile(r"__[^/]*__($|/)")
IMAGE_SUFFIXES = frozenset(extension.lstrip(".") for extension in EXTENSION_FORMATS)
#: extensions that hold a class id, in the order one is chosen (WebDataset decodes them as int)
LABEL_SUFFIXES = ("cls", "cls2", "class", "label", "target")
#: how many ``.txt`` members are read to tell class ids from captions
SAMPLED_TEXTS = 64
#: how many of the first samples are read to tell a language model's dataset (`Carries.TOKENS`)
SAMPLED_RECORDS = 32
JSON_SUFFIXES = frozenset({"json", "jsn"})
MSGPACK_SUFFIXES = frozenset({"mp", "msgpack", "msg"})
TEXT_SUFFIXES = frozenset({"txt", "text", "transcript"})
#: WebDataset's extensions of tenbin members
TENBIN_SUFFIXES = frozenset({"ten", "tenbin", "tb"})
#: how many shards of a bucket the driver walks at once (each waits on its requests)
WALKERS = 8
#: a gzip member decompresses to at most this much (a small bomb is not read whole)
GZIP_LIMIT = 1 << 28


def split_name(name: str) -> tuple[str, str] | None:
    """(sample key, lower-case extension) of a member name, or None if it belongs to no sample."""
    if _META.match(name):
        return None
    match = _KEY_AND_EXTENSION.match(name)
    return None if match is None else (match.group(1), match.group(2).lower())


@dataclass
class Sample:
    key: str
    members: list[tuple[str, Member]] = field(default_factory=list)  # (extension, member)
    #: offset of its first member's header in the (uncompressed) shard
    offset: int = 0
    #: the shard ends inside the tar header after this sample's last member (cut short there):
    #: the offset it ends at (None: it does not). The samples after it are lost, and this one
    #: may lack members: its next member's header may be the one cut
    cut_after: int | None = None
    #: the key of the sample before it in its partition (what a cut names as the last whole one)
    previous: str | None = None

    def get(self, extension: str) -> Member | None:
        return next((member for suffix, member in self.members if suffix == extension), None)


@dataclass
class Other:
    """A member that belongs to no sample (a folder, a link, ``__meta__``, no extension)."""

    member: Member


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
    #: where the next partition of the shard starts (None: the shard's end): what a worker
    #: reading an object fetches (`scrub.storage.open_range`)
    end: int | None = None
    #: only these samples (offsets from ``start``): what the result cache left to read
    only: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return self.count if self.only is None else len(self.only)


class WebDatasetReader(FileSetReader[ShardSpan]):
    format = "webdataset"
    forks_cleanly = True  # its scan holds shards' offsets, no handle
    file_suffixes = SHARD_SUFFIXES
    records_per_task = 500
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.ARRAY, Carries.SAMPLES})
    options_used = frozenset({"data_key", "label_key"})
    worker_imports = ("PIL.Image", "numpy")

    #: the label's extension chosen by `open` (None: unlabelled)
    label_suffix: str | None = None

    @classmethod
    def is_set_file(cls, path: Path) -> bool:
        return is_shard_name(path.name) and looks_like_tar(path)

    @classmethod
    def set_files_in(cls, folder: Any) -> list[Any]:
        """The shards: local paths, or objects of a bucket (`scrub.storage`)."""
        return shard_files(folder)

    @classmethod
    def set_of_files(cls, files: list[Any]) -> bool:
        # the first shard may be the damaged one of many (a `damaged-shard` finding): any other
        return any(looks_like_tar(shard) for shard in files)

    def place(self, path: str) -> Any:
        """A partition's shard as a path or an object (a worker opens it itself)."""
        return location(path, self.options.storage)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[ShardSpan]]:
        forget_listings(self.path)
        shards = self.files()
        if not shards:
            raise UnusableDataset(f"{self.path}: no .tar shards in this folder")
        self.root = str(self.path.parent if self.path.is_file() else self.path)
        info = DatasetInfo(format=self.format, layout="shards", root=self.root, labelled=False, records=0)
        partitions: list[ShardSpan] = []
        suffixes: dict[str, int] = {}  # extension -> samples holding it
        several_images = others = 0
        texts: list[bytes] = []
        if is_url(self.path) and len(shards) > 1:  # objects: walked side by side, as requests wait
            with ThreadPoolExecutor(min(WALKERS, len(shards))) as pool:
                walks = list(pool.map(lambda shard: _walk(shard, partition_size), shards))
        else:
            walks = [_walk(shard, partition_size) for shard in shards]
        for shard, walked in zip(shards, walks, strict=True):
            source = shard.name
            walk = walked.walk
            for extension, count in walked.suffixes.items():
                suffixes[extension] = suffixes.get(extension, 0) + count
            several_images += walked.several_images
            others += walked.others
            texts += walked.texts[: SAMPLED_TEXTS - len(texts)]
            for number, (first, count) in enumerate(walked.cuts):
                end = walked.cuts[number + 1][0] if number + 1 < len(walked.cuts) else None
                partitions.append(ShardSpan(str(shard), source, first, count, info.records, end))
                info.records += count
            described: dict[str, Any] = {"samples": walked.samples, "compressed": is_compressed(shard)}
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
                last = (
                    f"its last, {walked.last}, is malformed-sample; those after it are lost"
                    if walked.last is not None
                    else "it holds none to scan"
                )
                info.notes.append(
                    f"{source}: the shard ends at byte {walk.end}, inside a member or its header: it "
                    f"was cut short after {counted(walked.samples, 'sample')} ({last})"
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
        self._judge_kinds(partitions, info)
        if data_key is None and several_images:
            info.notes.append(
                f"{counted(several_images, 'sample')} {agreeing(several_images, 'holds', 'hold')} more than "
                "one image: only the first of each is "
                "checked (name another with --data-key)"
            )
        if others:
            info.skipped["member in no sample"] = others
        return info, partitions

    def _judge_kinds(self, partitions: list[ShardSpan], info: DatasetInfo) -> None:
        """A language model's dataset (`Carries.TOKENS`) when the first samples read are token or
        text records; mixed with images or arrays, both kinds' checks run."""
        kinds: dict[str, int] = {}
        read = 0
        for partition in partitions:
            for record in self.read(partition, 0, SAMPLED_RECORDS - read):
                kind = record.meta.get("kind")
                if kind is not None:
                    kinds[kind] = kinds.get(kind, 0) + 1
                read += 1
            if read >= SAMPLED_RECORDS:
                break
        language = {kind for kind in kinds if kind in ("tokens", "text")}
        if not language:
            return
        if language == set(kinds):
            self.provides = frozenset({Carries.TOKENS, Carries.SEQUENCES, Carries.SAMPLES})
            info.notes.append(
                f"language-model samples: {' and '.join(sorted(language))} records (of the first {read} read)"
            )
        else:
            self.provides = type(self).provides | {Carries.TOKENS, Carries.SEQUENCES}

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
        if partition.only is not None:
            wanted = partition.only[start:stop]
            chosen = set(wanted)
            for offset, sample in self._samples(
                partition, min(wanted, default=0), max(wanted, default=-1) + 1, True
            ):
                if offset in chosen:
                    yield self._record(sample, partition.source, partition.first_index + offset)
            return
        stop = partition.count if stop is None else min(stop, partition.count)
        for offset, sample in self._samples(partition, start, stop, with_data=True):
            yield self._record(sample, partition.source, partition.first_index + offset)

    def cache_entries(self, partition: ShardSpan) -> list[CacheEntry | None]:
        """A sample's verdict depends on its shard's bytes, named without reading them by the
        shard's (size, version) (`scrub.storage.stat_version`: its mtime locally, its ETag in a
        bucket, so an object not rewritten is not read again), its place in the shard, and how
        the dataset was read (its label member, what its records carry)."""
        versions = self.__dict__.setdefault("_versions", {})
        if partition.path not in versions:
            versions[partition.path] = stat_version(self.place(partition.path))
        size, version = versions[partition.path]
        context = f"{self.label_suffix}|{sorted(str(carried) for carried in self.provides)}"
        identity = f"{partition.source}\0{size}\0{version}\0{partition.start}\0"
        return [
            (
                f"{partition.source}\0#{partition.first_index + offset}",
                None,
                context,
                xxhash.xxh3_128_digest(f"{identity}{offset}".encode()),
            )
            for offset in range(partition.count)
        ]

    def subset(self, partition: ShardSpan, offsets: Sequence[int]) -> ShardSpan:
        return replace(partition, only=tuple(offsets))

    def _samples(
        self, partition: ShardSpan, start: int, stop: int, with_data: bool
    ) -> Iterator[tuple[int, Sample]]:
        if start >= stop:
            return
        with open_shard(self.place(partition.path), partition.start, partition.end) as file:
            offset = 0
            walk = Walk()
            previous: str | None = None
            for item in group_samples(walk_shard(file, partition.start, with_data=with_data, walk=walk)):
                if isinstance(item, Other):
                    continue
                # the last sample is grouped once the walk has ended: a cut in the header after it
                # is known then (a cut inside a member is that member's `Member.cut`)
                if walk.cut and not any(member.cut for _, member in item.members):
                    item.cut_after = walk.end
                item.previous, previous = previous, item.key
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
                        f"the shard ends inside {member.name}: {len(member.data)} of {member.size} "
                        f"bytes (cut short: any samples after it are lost{_last_whole(sample)})",
                        member=member.name,
                        bytes=len(member.data),
                        size=member.size,
                    )
                )
        if sample.cut_after is not None:
            record.problems.append(
                problem(
                    record,
                    "malformed-sample",
                    f"the shard ends at byte {sample.cut_after}, inside the tar header after this "
                    "sample's last member (cut short): this sample may lack members and any samples "
                    f"after it are lost{_last_whole(sample)}",
                    offset=sample.cut_after,
                )
            )
        if data_suffix is None:
            data_suffix = self._data_suffix(sample, seen)
        data = sample.get(data_suffix) if data_suffix is not None else None
        if data is None:
            wanted = f".{data_suffix}" if self.options.data_key else "image, .npy, text, .json, .mp or .ten"
            record.problems.append(
                problem(
                    record,
                    "malformed-sample",
                    f"no {wanted} member (has {', '.join('.' + s for s in sorted(seen)) or 'none'})",
                    extensions=sorted(seen),
                )
            )
        elif not data.cut:
            assert data.data is not None and data_suffix is not None
            record.meta["name"] = data.name
            self._read_data(record, data_suffix, data)
        for suffix, member in sample.members:
            if member is not data and not member.cut:
                self._check_member(record, suffix, member)
        record.meta["label_known"] = self.label_suffix is not None
        label = sample.get(self.label_suffix) if self.label_suffix else None
        if label is not None and not label.cut:
            assert label.data is not None
            record.label = parse_label(_text(label.data))
        return record

    def _data_suffix(self, sample: Sample, seen: set[str]) -> str | None:
        """The extension of the member that is a sample's data (see the module's docstring)."""
        lasts = [(suffix, _inner(suffix)) for suffix, _ in sample.members if suffix != self.label_suffix]
        for suffix, last in lasts:
            if last.rsplit(".", 1)[-1] in IMAGE_SUFFIXES:
                return suffix
        if "npy" in seen:
            return "npy"
        values: dict[str, Any] = {}
        for suffix, last in lasts:
            member = sample.get(suffix)
            if (last in JSON_SUFFIXES or last in MSGPACK_SUFFIXES) and member is not None and member.data:
                try:
                    value = values[suffix] = _decoded(last, member.data)
                except ValueError:
                    continue  # said where it is checked
                if isinstance(value, dict) and any(name in value for name in KNOWN):
                    return suffix
        for wanted in (TENBIN_SUFFIXES, TEXT_SUFFIXES):
            found = next((suffix for suffix, last in lasts if last in wanted), None)
            if found is not None:
                return found
        # numbers are data (WebDataset's mpdata.tar); another object is metadata (a URL, a source)
        return next((suffix for suffix, value in values.items() if _numbers(value) is not None), None)

    def _read_data(self, record: Record, suffix: str, member: Member) -> None:
        """Set the record's payload from its data member (see the module's docstring)."""
        assert member.data is not None
        data = member.data
        last = _inner(suffix)
        if last != suffix:  # a gzip member: the member it holds
            try:
                data = _gunzip(data)
            except ValueError as error:
                record.problems.append(problem(record, "malformed-sample", f"{member.name}: {error}"))
                return
        if last.rsplit(".", 1)[-1] in IMAGE_SUFFIXES:
            record.payload, record.meta["kind"] = data, "image"
        elif last == "npy":
            decode_value(record, data, "npy", False)
        elif last in TEXT_SUFFIXES:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as error:
                record.problems.append(
                    problem(record, "malformed-record", f"{member.name} is not UTF-8 text: {error.reason}")
                )
                return
            record.payload, record.meta["kind"] = (("text", text, True),), "text"
        elif last in TENBIN_SUFFIXES:
            try:
                arrays = decode_tenbin(data)
            except ValueError as error:
                record.problems.append(problem(record, "malformed-sample", f"{member.name}: {error}"))
                return
            _use_tensors(record, arrays, member.name)
        elif last in JSON_SUFFIXES or last in MSGPACK_SUFFIXES:
            try:
                value = _decoded(last, data)
            except ValueError as error:
                record.problems.append(problem(record, "malformed-sample", f"{member.name}: {error}"))
                return
            numbers = _numbers(value)
            if numbers is not None:
                use_array(record, numbers)
            elif isinstance(value, dict):
                fill_record(record, value)
            else:
                record.problems.append(
                    problem(
                        record,
                        "malformed-record",
                        f"{member.name} holds {type(value).__name__}, not an object",
                    )
                )
        else:  # a member --data-key names, of no known kind: its bytes (as images are read)
            record.payload, record.meta["kind"] = data, "image"

    def _check_member(self, record: Record, suffix: str, member: Member) -> None:
        """A sample's ``.json``, msgpack, ``.ten`` and other ``.npy`` members must load."""
        assert member.data is not None
        last = suffix.rsplit(".", 1)[-1]
        if last in JSON_SUFFIXES or last in MSGPACK_SUFFIXES or last in TENBIN_SUFFIXES:
            try:
                decode_tenbin(member.data) if last in TENBIN_SUFFIXES else _decoded(last, member.data)
            except ValueError as error:
                record.problems.append(
                    problem(
                        record,
                        "malformed-sample",
                        f"{member.name} does not load: {error}",
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
        for shard in self.files():
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


#: tenbin's dtype codes (webdataset.tenbin's ``long_to_short``; its ``u4`` is NumPy's uint32)
TENBIN_DTYPES = frozenset({"f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"})
TENBIN_MAGIC = b"~TenBin~"


def decode_tenbin(data: bytes) -> list[tuple[str, np.ndarray]]:
    """The (name, array) pairs of a ``.ten`` member, by WebDataset's tenbin layout: chunks of
    ``~TenBin~``, an int64 length and that many bytes padded to a multiple of 64, in pairs of a
    header chunk (int64s: the dtype code as 8 ASCII bytes, the name as 8 ASCII bytes, the rank,
    the dimensions) and a data chunk. Little-endian, as every machine WebDataset runs on writes
    it. ValueError saying what is wrong."""
    chunks: list[bytes] = []
    offset = 0
    while offset < len(data):
        if data[offset : offset + 8] != TENBIN_MAGIC:
            raise ValueError(f"no tenbin chunk at byte {offset} (magic {data[offset : offset + 8]!r})")
        if offset + 16 > len(data):
            raise ValueError(f"tenbin chunk at byte {offset} is cut short")
        size = int.from_bytes(data[offset + 8 : offset + 16], "little", signed=True)
        if size < 0 or offset + 16 + size > len(data):
            raise ValueError(
                f"tenbin chunk at byte {offset} claims {size} bytes, {len(data) - offset - 16} follow"
            )
        chunks.append(data[offset + 16 : offset + 16 + size])
        offset += 16 + -(-size // 64) * 64
    if len(chunks) % 2:
        raise ValueError(f"{counted(len(chunks), 'tenbin chunk')}: a header without its data")
    arrays = []
    for header, values in zip(chunks[::2], chunks[1::2]):
        if len(header) < 24 or len(header) % 8:
            raise ValueError(f"a tenbin header of {len(header)} bytes")
        code = header[:8].rstrip(b"\0").decode("ascii", errors="replace")
        name = header[8:16].rstrip(b"\0").decode("ascii", errors="replace")
        numbers = np.frombuffer(header, dtype="<i8")
        rank = int(numbers[2])
        if code not in TENBIN_DTYPES:
            raise ValueError(f"tenbin dtype {code!r} is not one tenbin writes")
        if not 0 <= rank < 10 or len(numbers) < 3 + rank or (numbers[3 : 3 + rank] < 0).any():
            raise ValueError(f"a tenbin header of rank {rank} with dimensions {numbers[3:].tolist()}")
        shape = tuple(int(n) for n in numbers[3 : 3 + rank])
        dtype = np.dtype("<" + code)
        count = int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize > len(values):
            raise ValueError(
                f"tenbin array {name!r} of shape {shape} needs {count * dtype.itemsize} bytes, "
                f"has {len(values)}"
            )
        arrays.append((name, np.frombuffer(values, dtype=dtype, count=count).reshape(shape)))
    return arrays


def _use_tensors(record: Record, arrays: list[tuple[str, np.ndarray]], name: str) -> None:
    """A ``.ten`` member's arrays as a record: the first integer array not named as labels or a
    mask is the input ids (see the module's docstring), else the first array is an array record."""
    labels = next((a for n, a in arrays if n == "labels" and a.dtype.kind in "iu"), None)
    mask = next(
        (a for n, a in arrays if n.startswith(("attn", "attentio", "mask")) and a.dtype.kind in "iu"), None
    )
    ids = next((a for n, a in arrays if a.dtype.kind in "iu" and a is not labels and a is not mask), None)
    if ids is not None:
        record.payload, record.meta["kind"] = ids.ravel(), "tokens"
        if labels is not None:
            record.meta["token_labels"] = labels.ravel()
        if mask is not None:
            record.meta["attention_mask"] = mask.ravel()
    elif arrays:
        use_array(record, arrays[0][1])
    else:
        record.problems.append(problem(record, "malformed-sample", f"{name} holds no array"))


def _inner(suffix: str) -> str:
    """The extension of the member a gzip member holds (``txt.gz`` -> ``txt``), else ``suffix``."""
    return suffix[:-3] if suffix.endswith(".gz") else suffix


def _gunzip(data: bytes) -> bytes:
    """A gzip member's content, at most `GZIP_LIMIT` bytes; ValueError saying why not."""
    inflater = zlib.decompressobj(wbits=47)  # gzip or zlib headers
    try:
        out = inflater.decompress(data, GZIP_LIMIT)
    except zlib.error as error:
        raise ValueError(f"does not decompress: {error}") from None
    if inflater.unconsumed_tail:
        raise ValueError(f"decompresses to more than {GZIP_LIMIT} bytes")
    return out


def _decoded(suffix: str, data: bytes) -> Any:
    """A ``.json`` or msgpack member's value; ValueError saying why it does not load."""
    if suffix in JSON_SUFFIXES:
        try:
            return json.loads(data)
        except ValueError as error:
            raise ValueError(f"not JSON: {error}") from None
    try:
        import msgpack
    except ImportError:
        raise ValueError("msgpack is not installed: pip install msgpack") from None
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise ValueError(f"not msgpack: {error}") from None


def _numbers(value: Any) -> np.ndarray | None:
    """An object of numbers or a list of them as a float64 row (WebDataset's numeric ``.mp``
    samples), else None."""
    items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else None
    if not items or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return None
    if isinstance(value, list) and all(isinstance(v, int) for v in items):
        return None  # a bare list of integers: read as a record's fields cannot name it
    try:
        return np.asarray(items, dtype=np.float64)
    except OverflowError:
        return None


def _last_whole(sample: Sample) -> str:
    """What a cut's message says of the last whole sample before ``sample`` (when its partition
    holds it)."""
    return f"; the last whole sample is {sample.previous}" if sample.previous is not None else ""


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()


@dataclass
class ShardWalk:
    """What the driver learned of one shard by walking its headers (see `_walk`)."""

    walk: Walk
    samples: int = 0
    #: (offset of the first header, samples) of each partition, in order
    cuts: list[tuple[int, int]] = field(default_factory=list)
    suffixes: dict[str, int] = field(default_factory=dict)  # extension -> samples holding it
    several_images: int = 0
    others: int = 0
    texts: list[bytes] = field(default_factory=list)  # the first ``.txt`` members
    last: str | None = None  # the key of its last sample


def _walk(shard: Any, partition_size: int) -> ShardWalk:
    """Walk one shard's headers: its samples, cut into partitions of ``partition_size`` (an
    uncompressed shard; a compressed one is one partition)."""
    walked = ShardWalk(Walk())
    first: int | None = None
    in_partition = 0
    try:
        with open_shard(shard) as file:
            for item in group_samples(walk_shard(file, with_data=False, walk=walked.walk)):
                if isinstance(item, Other):
                    walked.others += 1
                    continue
                extensions = [suffix for suffix, _ in item.members]
                for suffix in set(extensions):
                    walked.suffixes[suffix] = walked.suffixes.get(suffix, 0) + 1
                images = [s for s in extensions if s.rsplit(".", 1)[-1] in IMAGE_SUFFIXES]
                walked.several_images += len(images) > 1
                if "txt" in extensions and len(walked.texts) < SAMPLED_TEXTS:
                    walked.texts.append(_member_bytes(shard, item.get("txt")))
                if first is None:
                    first = item.offset
                walked.samples += 1
                walked.last = item.key
                in_partition += 1
                if in_partition == partition_size and not is_compressed(shard):
                    walked.cuts.append((first, in_partition))
                    first, in_partition = None, 0
    except OSError as error:
        raise UnusableDataset(f"{shard}: cannot read ({error.strerror or error})") from None
    if in_partition:
        assert first is not None
        walked.cuts.append((first, in_partition))
    return walked


def _member_bytes(path: Any, member: Member | None) -> bytes:
    """The data of one member found by a walk over headers only."""
    if member is None:
        return b""
    length = min(member.size, 1 << 16)
    with open_shard(path, member.offset_data, member.offset_data + length) as file:
        file.seek(member.offset_data)
        try:
            return file.read(length)
        except STREAM_ERRORS:
            return b""
