"""WebDataset tar shards: one ``.tar`` (or ``.tar.gz``/``.tgz``) shard, or a folder of them.

A sample is the run of consecutive members that share a key, by WebDataset's own rule
(``webdataset.tariterators.base_plus_ext``): the member's path up to the first dot of its
basename; the rest is the member's extension (``jpg``, ``cls``, ``seg.png``). Members without an
extension, directories, links and ``__meta__``-style members belong to no sample, as for
WebDataset; `fix` copies them unchanged. This module is the container: it walks shards and groups
their members into samples, and says what the shard did to a sample (cut short, a doubled
extension); what the members hold, and how a sample becomes a record, is the content
interpreter's, `scrub.readers.samplecontents` (WebDataset's ``decode`` stage). The dataset is a
language model's (`Carries.TOKENS`) when the first samples are token or text records.

Shards are walked by `scrub.readers.tarwalk`: the driver walks every shard's headers (seeking
past the data of an uncompressed shard; a compressed one is decompressed once) to count samples
and cut partitions at sample boundaries, and workers seek to their partition's first header. A
shard in a bucket is fetched once, with one request, into a local copy that the walk and the
workers read (`scrub.storage.spool`; where scratch has room). A
shard cut short gives a ``malformed-sample`` on the sample it cuts (inside a member's data) or
on the last one read (inside a header: the samples after it are lost); headers that stop before the
shard's end (a damaged header: `tarfile` itself silently stops there) give a ``damaged-shard``
on the shard.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scrub.checks.base import Finding, make_issue, problem
from scrub.errors import UnusableDataset, UsageError
from scrub.readers.base import CacheEntry, DatasetInfo, FileSetReader, entries_by_place, sampled_files
from scrub.readers.samplecontents import (
    IMAGE_SUFFIXES,
    SampleContents,
    choose_label_suffix,
)
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
from scrub.records import Carries, Record
from scrub.storage import location, side_by_side, storage_of
from scrub.storage.memo import Memo, current_memo
from scrub.storage.spool import Spool, copy_carried, current_spool, read_from, read_once
from scrub.wording import agreeing, counted

#: WebDataset's rule for a member's sample key and extension (`base_plus_ext`)
_KEY_AND_EXTENSION = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
#: members WebDataset skips as metadata (its ``skip_meta``)
_META = re.compile(r"__[^/]*__($|/)")
#: how many ``.txt`` members are read to tell class ids from captions
SAMPLED_TEXTS = 64
#: how many of the first samples are read to tell a language model's dataset (`Carries.TOKENS`)
SAMPLED_RECORDS = 32


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
    #: the shard's bytes, as the driver's listing (or stat) gave them: a worker reading an
    #: object's range need not ask its size
    size: int | None = None
    #: the local copy its walk made of a shard in a bucket (`scrub.storage.spool`): what the
    #: worker reads instead of fetching the object again
    copy: str | None = None

    def __len__(self) -> int:
        return self.count if self.only is None else len(self.only)


class WebDatasetReader(FileSetReader[ShardSpan]):
    format = "webdataset"
    reads_objects = True  # through fsspec (`scrub.storage`)
    forks_cleanly = True  # its scan holds shards' offsets, no handle
    file_suffixes = SHARD_SUFFIXES
    records_per_task = 500
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.ARRAY, Carries.SAMPLES})
    options_used = frozenset({"data_key", "label_key"})
    worker_imports = ("PIL.Image", "numpy")

    #: how a sample's members become a record (`scrub.readers.samplecontents`), set by `open`: the
    #: data's extension, and the label's (None: unlabelled)
    contents: SampleContents = SampleContents(None, None)

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
        shards = self.files()
        if not shards:
            raise UnusableDataset(f"{self.path}: no .tar shards in this folder")
        self.root = str(self.path.parent if self.path.is_file() else self.path)
        info = DatasetInfo(format=self.format, layout="shards", root=self.root, labelled=False, records=0)
        partitions: list[ShardSpan] = []
        suffixes: dict[str, int] = {}  # extension -> samples holding it
        several_images = others = 0
        texts: list[bytes] = []
        spool = current_spool()
        walks = self._walks(shards, partition_size, spool)
        #: (shard, first header) -> the keys of the partition's samples, joined by NULs (which no
        #: tar name holds): `locate` names reused results' records without reading the shard
        self._sample_keys: dict[tuple[str, int], str] = {}
        for shard, walked in zip(shards, walks, strict=True):
            source = shard.name
            for extension, count in walked.suffixes.items():
                suffixes[extension] = suffixes.get(extension, 0) + count
            several_images += walked.several_images
            others += walked.others
            texts += walked.texts[: SAMPLED_TEXTS - len(texts)]
            done, size = 0, storage_of(shard).size(shard)  # an object's: from the listing
            copy = copy_carried(shard, spool)
            for number, (first, count) in enumerate(walked.cuts):
                end = walked.cuts[number + 1][0] if number + 1 < len(walked.cuts) else None
                partitions.append(
                    ShardSpan(str(shard), source, first, count, info.records, end, size=size, copy=copy)
                )
                self._sample_keys[str(shard), first] = "\0".join(walked.keys[done : done + count])
                info.records += count
                done += count
            info.files[source] = _described(shard, walked, info)
        label_suffix = choose_label_suffix(self.options.label_key, suffixes, texts, info, self.path)
        self.contents = SampleContents(self.options.data_key, label_suffix)
        info.labelled = label_suffix is not None
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

    def _walks(self, shards: list[Any], partition_size: int, spool: Spool | None) -> list[ShardWalk]:
        """Each shard's walk; objects' side by side, as each waits on its requests. An object
        walked (not remembered) is copied by ``spool`` first, where there is one: read once."""
        memo = current_memo()  # (a thread of the pool does not see the opening's)
        return side_by_side(lambda shard: _walk(shard, partition_size, memo, spool), shards, self.path)

    def _judge_kinds(self, partitions: list[ShardSpan], info: DatasetInfo) -> None:
        """A language model's dataset (`Carries.TOKENS`) when the first samples read are token or
        text records; mixed with images or arrays, both kinds' checks run. What they are is
        remembered with the versions of the shards they come from (`scrub.storage.memo`)."""
        sampled, places = sampled_files(self, partitions, SAMPLED_RECORDS)
        if not sampled:
            return
        extra = f"{sampled[0].start}|{self.options.data_key}|{self.contents.label_suffix}"
        kinds, read = current_memo().remembered(
            "webdataset-kinds", places[0], lambda: self._kinds(sampled), extra, list, tuple, places[1:]
        )
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

    def _kinds(self, partitions: list[ShardSpan]) -> tuple[dict[str, int], int]:
        """(kind -> records of it, records read) of the first `SAMPLED_RECORDS` samples."""
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
        return kinds, read

    def __getstate__(self) -> dict[str, Any]:
        """A worker gets no sample keys: it reads the samples it names."""
        return {key: value for key, value in self.__dict__.items() if key != "_sample_keys"}

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
        shard's version and the sample's place in it (`scrub.readers.base.entries_by_place`), and
        on how the dataset was read (its label member, what its records carry)."""
        context = f"{self.contents.label_suffix}|{sorted(str(carried) for carried in self.provides)}"
        source, first = partition.source, partition.first_index
        return entries_by_place(
            self,
            partition.path,
            source,
            partition.start,
            range(partition.count),
            context,
            lambda offset: f"{source}\0#{first + offset}",
        )

    def subset(self, partition: ShardSpan, offsets: Sequence[int]) -> ShardSpan:
        return replace(partition, only=tuple(offsets))

    def _samples(
        self, partition: ShardSpan, start: int, stop: int, with_data: bool
    ) -> Iterator[tuple[int, Sample]]:
        if start >= stop:
            return
        place = read_from(partition.path, partition.copy, self.options.storage)
        with open_shard(place, partition.start, partition.end, partition.size) as file:
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
        """A sample's record: what the shard did to it (a cut, a doubled extension) said here, what
        its members hold read by `SampleContents`."""
        record = Record(source, sample.key, index, None)
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
        self.contents.fill(record, sample.members, seen)
        return record

    def members(self, partitions: Sequence[ShardSpan]) -> Iterator[str]:
        for shard in self.files():
            yield str(shard)

    def locate(self, partition: ShardSpan, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        known = self.__dict__.get("_sample_keys", {}).get((partition.path, partition.start))
        if known is not None:  # the walk's (or its memo's) keys: no read
            keys = known.split("\0")
            return [(partition.source, keys[o], partition.first_index + o) for o in offsets]
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


def _described(shard: Any, walked: ShardWalk, info: DatasetInfo) -> dict[str, Any]:
    """What the summary says of a shard; its damage as a `damaged-shard` finding, a cut or a
    missing end as a note."""
    source, walk = shard.name, walked.walk
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
    return described


def _last_whole(sample: Sample) -> str:
    """What a cut's message says of the last whole sample before ``sample`` (when its partition
    holds it)."""
    return f"; the last whole sample is {sample.previous}" if sample.previous is not None else ""


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
    keys: list[str] = field(default_factory=list)  # of every sample, in order

    def dump(self) -> dict[str, Any]:
        """As msgpack holds it (`scrub.storage.memo`)."""
        walk = self.walk
        return {
            "walk": [walk.end, walk.cut, walk.damaged, walk.unterminated],
            **{name: getattr(self, name) for name in ("samples", "suffixes", "several_images", "others")},
            **{"texts": self.texts, "last": self.last, "keys": "\0".join(self.keys), "cuts": self.cuts},
        }

    @classmethod
    def load(cls, held: dict[str, Any]) -> ShardWalk:
        end, cut, damaged, unterminated = held["walk"]
        return cls(
            Walk(end, cut, damaged, unterminated),
            held["samples"],
            [(first, count) for first, count in held["cuts"]],
            held["suffixes"],
            held["several_images"],
            held["others"],
            held["texts"],
            held["last"],
            held["keys"].split("\0") if held["samples"] else [],
        )


def _walk(shard: Any, partition_size: int, memo: Memo, spool: Spool | None = None) -> ShardWalk:
    """Walk one shard's headers (or take the walk of this version of it from the memo), on the
    copy ``spool`` makes of it where it is an object."""

    def learn() -> ShardWalk:
        return _walk_headers(shard, partition_size, read_once(shard, spool))

    return memo.remembered(
        "webdataset-walk",
        shard,
        learn,
        str(partition_size),
        ShardWalk.dump,
        ShardWalk.load,
    )


def _walk_headers(shard: Any, partition_size: int, bytes_from: Any) -> ShardWalk:
    """Walk one shard's headers (read from ``bytes_from``: the shard, or its local copy): its
    samples, cut into partitions of ``partition_size`` (an uncompressed shard; a compressed one
    is one partition)."""
    walked = ShardWalk(Walk())
    first: int | None = None
    in_partition = 0
    try:
        with open_shard(bytes_from) as file:
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
                    walked.texts.append(_member_bytes(bytes_from, item.get("txt")))
                if first is None:
                    first = item.offset
                walked.samples += 1
                walked.last = item.key
                walked.keys.append(item.key)
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
