"""TFRecord files of ``tf.Example`` records (TensorFlow, TFDS, DALI pipelines): one file, or a
folder of them (its files directly inside; a glob or brace pattern names several datasets).

A file is TFRecord by its name (``.tfrecord``, ``.tfrecords``, ``.tfrec``, a ``.gz`` of one,
TFDS's ``name.tfrecord-00000-of-00010``), or by its first record's header where its name is
only a shard's (``train-00000-of-00010``). A GZIP-compressed file (TensorFlow's
``compression_type="GZIP"``) is recognised by its magic. Framing and both CRC32Cs are checked
(`scrub.readers.tfframes`): a bad CRC is `record-crc-mismatch`, a file that ends inside a
record `truncated-record`, on that record.

A record's key is its position in its file, from 0 ("1234"), as TensorFlow counts records (its
``DataLossError`` names the offset, ``tfds`` and ``skip()``/``take()`` the position); its source
is the file's name. What its Example's features hold (decoded by `scrub.readers.tfexample`,
without TensorFlow), and how they make the record, is the content interpreter's,
`scrub.readers.examplecontents`; a record that is not an Example is `malformed-record`. What the
dataset carries (`Reader.provides`) is judged from its first records, as the WebDataset reader
judges it.

Partitions are ranges of records found by walking the length headers (seeking past the data);
a GZIP file is one partition, read forward (counting its records decompresses it once). With
``--cache``, a record's result is reused while its file's (size, version) is unchanged, and what
opening learned of the file (its partitions, what its first records are) is kept by the same
version (`scrub.storage.memo`): a night when no file changed reads none.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from scrub.checks.base import problem
from scrub.errors import UnusableDataset, UsageError
from scrub.readers.base import CacheEntry, DatasetInfo, FileSetReader, entries_by_place, sampled_files
from scrub.readers.examplecontents import LABEL_FEATURES, ExampleContents
from scrub.readers.tfexample import ExampleError, Feature, parse_example
from scrub.readers.tfframes import (
    CRC_IMPLEMENTATION,
    DATA_CRC,
    LENGTH_CRC,
    Frame,
    first_bytes,
    header_ok,
    open_records,
    stored_size,
    walk_frames,
)
from scrub.records import Carries, Record
from scrub.storage import storage_of
from scrub.storage.memo import current_memo
from scrub.storage.spool import copy_carried, current_spool, read_from, read_once

#: names that say a file is TFRecord
_NAMED = re.compile(r"\.tfrec(ord)?s?(\.gz)?$|\.tfrecords?-\d+-of-\d+$", re.IGNORECASE)
#: a shard's name without an extension (``train-00000-of-00010``): its first header decides
_SHARD = re.compile(r"-\d{5}-of-\d{5}$")
#: how many of the first records are read to judge what the dataset carries
SAMPLED_RECORDS = 32
#: one core's time to check a record (to tell a dataset worth a pool of processes): an image's
#: decode, as the image reader estimates it; another record's parse and checks
IMAGE_SECONDS, RECORD_SECONDS = 220e-6, 30e-6
#: a partition reads at most about this many bytes
PARTITION_BYTES = 64 << 20


def is_tfrecord_file(path: Path) -> bool:
    """Whether ``path`` is a TFRecord file, by its name or, for a bare shard name, its header."""
    if _NAMED.search(path.name):
        return path.is_file()
    return bool(_SHARD.search(path.name)) and path.is_file() and _header_ok(path)


def tfrecord_files(folder: Path) -> list[Path]:
    """The TFRecord files directly inside ``folder``, by name (a prefix's: from one listing)."""
    names = [name for name in storage_of(folder).files_in(folder) if not name.startswith(".")]
    return [
        folder / name
        for name in names
        if _NAMED.search(name) or (_SHARD.search(name) and _header_ok(folder / name))
    ]


def _header_ok(path: Path) -> bool:
    try:
        return header_ok(first_bytes(path)[0])
    except OSError:
        return False


@dataclass(frozen=True)
class FrameSpan:
    """A partition: ``count`` records of one file from the header at ``offset`` of its record
    stream, the first at ``position`` in the file and ``first_index`` in the dataset."""

    path: str
    source: str
    gzipped: bool
    offset: int
    position: int
    count: int
    first_index: int
    size: int | None  # the file's size where it is not compressed (frames are skipped by seeking)
    #: only these records (offsets from ``position``): what the result cache left to read
    only: tuple[int, ...] | None = None
    #: the local copy its walk made of a file in a bucket (`scrub.storage.spool`): what the
    #: worker reads instead of fetching the object again
    copy: str | None = None

    def __len__(self) -> int:
        return self.count if self.only is None else len(self.only)


class TFRecordReader(FileSetReader[FrameSpan]):
    format = "tfrecord"
    reads_objects = True  # through fsspec (`scrub.storage`)
    forks_cleanly = True  # its scan holds record offsets, no handle
    file_suffixes = (".tfrecord", ".tfrecords", ".tfrec", ".tfrecord.gz", ".tfrecords.gz")
    records_per_task = 500
    provides = frozenset({Carries.IMAGE, Carries.BYTES, Carries.ARRAY, Carries.FRAMES})
    options_used = frozenset({"data_key", "label_key"})
    worker_imports = ("PIL.Image", "numpy")

    #: how an Example becomes a record (`scrub.readers.examplecontents`), set by `open`: the data
    #: feature, and the label's (None: unlabelled)
    contents: ExampleContents = ExampleContents(None, None, None)

    @classmethod
    def is_set_file(cls, path: Path) -> bool:
        return is_tfrecord_file(path)

    @classmethod
    def set_files_in(cls, folder: Path) -> list[Path]:
        return tfrecord_files(folder)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[FrameSpan]]:
        files = self.files()
        if not files:
            raise UnusableDataset(f"{self.path}: no TFRecord files in this folder")
        self.root = str(self.path.parent if self.path.is_file() else self.path)
        info = DatasetInfo(format=self.format, layout="records", root=self.root, labelled=False, records=0)
        partitions: list[FrameSpan] = []
        for file in files:
            try:
                partitions += self._spans(file, partition_size, info)
            except OSError as error:
                raise UnusableDataset(f"{file}: cannot read ({error.strerror or error})") from None
        info.notes.append(
            "records are keyed by their position in their file, from 0, as TensorFlow counts them"
        )
        if CRC_IMPLEMENTATION == "pure Python":
            info.notes.append(
                "CRC32C computed in pure Python (slow): pip install 'scrub[tfrecord]' (google-crc32c)"
            )
        self._judge(partitions, info)
        # what a pool would save a small dataset (see `Reader.work_seconds`): a decode per image
        self.work_seconds = info.records * (
            IMAGE_SECONDS if Carries.IMAGE in self.provides else RECORD_SECONDS
        )
        return info, partitions

    def _spans(self, file: Path, partition_size: int, info: DatasetInfo) -> list[FrameSpan]:
        """The file's partitions (from the memo where this version of it was walked before); an
        object walked is copied first where the opening keeps copies (read once)."""
        spool = current_spool()

        def learn() -> tuple[bool, int | None, list[tuple[int, int, int]]]:
            return _walk_file(read_once(file, spool), partition_size)

        gzipped, size, cuts = current_memo().remembered("tfrecord-walk", file, learn, str(partition_size))
        copy = copy_carried(file, spool)
        spans = []
        for offset, position, count in cuts:
            span = FrameSpan(
                str(file), file.name, gzipped, offset, position, count, info.records, size, copy=copy
            )
            spans.append(span)
            info.records += count
        info.files[file.name] = {"records": sum(count for *_, count in cuts), "compressed": gzipped}
        return spans

    def _sampled(self, partitions: list[FrameSpan]) -> tuple[dict[str, str], list[str], int]:
        """(feature -> kind, the kinds of records, how many were read) of the first Examples,
        from the memo where the files they come from are unchanged."""
        sampled, places = sampled_files(self, partitions, SAMPLED_RECORDS)
        if not sampled:
            return {}, [], 0
        extra = f"{sampled[0].offset}|{self.options.data_key}|{self.options.label_key}"
        learn = partial(self._examples, sampled)
        names, kinds, read = current_memo().remembered(
            "tfrecord-examples", places[0], learn, extra, list, also=places[1:]
        )
        return names, kinds, read

    def _examples(self, partitions: list[FrameSpan]) -> tuple[dict[str, str], list[str], int]:
        """`_sampled`, read."""
        names: dict[str, str] = {}  # feature -> kind, over the sampled records
        examples: list[dict[str, Feature]] = []
        for partition in partitions:
            for frame in self._frames(partition, 0, SAMPLED_RECORDS - len(examples)):
                if frame.data is not None:
                    try:
                        examples.append(parse_example(frame.data))
                    except ExampleError:
                        examples.append({})
                else:
                    examples.append({})
                for name, (kind, _) in examples[-1].items():
                    names.setdefault(name, kind)
            if len(examples) >= SAMPLED_RECORDS:
                break
        data_key, label_key = self.options.data_key, self.options.label_key
        label_feature = label_key or next((name for name in LABEL_FEATURES if name in names), None)
        kinds: set[str] = set()
        judging = ExampleContents(data_key, label_key, label_feature)
        for example in examples:
            record = Record("", "", 0, None)
            judging.fill(record, example)
            if record.meta.get("kind"):
                kinds.add(record.meta["kind"])
        return names, sorted(kinds), len(examples)

    def _judge(self, partitions: list[FrameSpan], info: DatasetInfo) -> None:
        """The label feature and what the dataset carries, from its first Examples."""
        names, kind_list, read = self._sampled(partitions)
        kinds = set(kind_list)
        data_key, label_key = self.options.data_key, self.options.label_key
        if data_key is not None and data_key not in names and read:
            known = ", ".join(sorted(names)) or "none"
            raise UsageError(
                f"--data-key {data_key}: no record of the first {read} of {self.path} has it "
                f"(features: {known})"
            )
        if label_key is not None and label_key not in names and read:
            known = ", ".join(sorted(names)) or "none"
            raise UsageError(
                f"--label-key {label_key}: no record of the first {read} of {self.path} has it "
                f"(features: {known})"
            )
        label_feature = label_key or next((name for name in LABEL_FEATURES if name in names), None)
        language = kinds & {"tokens", "text"}
        if language and label_key is None:
            label_feature = None  # a language model's labels are its tokens'
        info.labelled = label_feature is not None
        self.contents = ExampleContents(data_key, label_key, label_feature)
        if kinds:
            provides = {Carries.FRAMES}
            if "image" in kinds:
                provides |= {Carries.IMAGE, Carries.BYTES}
            if "array" in kinds or "float" in names.values():  # float lists beside the data are checked too
                provides.add(Carries.ARRAY)
            if language:
                provides |= {Carries.TOKENS, Carries.SEQUENCES}
                info.notes.append(
                    f"language-model records: {' and '.join(sorted(language))} (of the first {read} read)"
                )
            self.provides = frozenset(provides)
        if label_feature is not None:
            info.notes.append(f"labels from the feature {label_feature!r}")

    def _frames(self, partition: FrameSpan, start: int, stop: int) -> Iterator[Frame]:
        """Frames ``start:stop`` of a partition; data read only from ``start`` on."""
        stop = min(stop, partition.count)
        if start >= stop:
            return
        place = read_from(partition.path, partition.copy, self.options.storage)
        with open_records(place, partition.gzipped) as stream:
            offset, position = partition.offset, partition.position
            if start:
                for frame in walk_frames(stream, offset, position, start, partition.size, with_data=False):
                    offset, position = frame.offset + frame.size, frame.position + 1
                    if frame.problem is not None:  # cannot happen before the partition's last record
                        return
            yield from walk_frames(stream, offset, position, stop - start, partition.size)

    def read(self, partition: FrameSpan, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        if partition.only is not None:  # the records the cache left: from the first to the last
            wanted = set(partition.only[start:stop])
            first, last = min(wanted, default=0), max(wanted, default=-1) + 1
            for frame in self._frames(partition, first, last):
                offset = frame.position - partition.position
                if offset in wanted:
                    yield self._record(frame, partition.source, partition.first_index + offset)
            return
        stop = partition.count if stop is None else stop
        for frame in self._frames(partition, start, stop):
            index = partition.first_index + frame.position - partition.position
            yield self._record(frame, partition.source, index)

    def cache_entries(self, partition: FrameSpan) -> list[CacheEntry | None]:
        """A record's verdict depends on its bytes, named without reading them by its file's
        version and its position in the file (`scrub.readers.base.entries_by_place`), and on how
        the dataset was read (its data and label features, what its records carry)."""
        contents = self.contents
        context = (
            f"{contents.data_key}|{contents.label_key}|{contents.label_feature}|"
            f"{sorted(str(carried) for carried in self.provides)}"
        )
        positions = range(partition.position, partition.position + partition.count)
        source = partition.source
        return entries_by_place(
            self, partition.path, source, "", positions, context, lambda position: f"{source}\0#{position}"
        )

    def subset(self, partition: FrameSpan, offsets: Sequence[int]) -> FrameSpan:
        return replace(partition, only=tuple(offsets))

    def _record(self, frame: Frame, source: str, index: int) -> Record:
        record = Record(source, str(frame.position), index, None)
        record.meta["label_known"] = self.contents.label_feature is not None
        if frame.problem is not None:
            check = "record-crc-mismatch" if frame.problem in (LENGTH_CRC, DATA_CRC) else "truncated-record"
            details: dict[str, Any] = {"offset": frame.offset, "length": frame.length}
            if check == "record-crc-mismatch":
                details["part"] = frame.problem
            message = f"the record at byte {frame.offset:,}: {frame.why}"
            record.problems.append(problem(record, check, message, **details))
            record.meta["label_known"] = False  # nothing was read: no label to miss
            return record
        assert frame.data is not None
        try:
            example = parse_example(frame.data)
        except ExampleError as error:
            record.problems.append(problem(record, "malformed-record", f"not a tf.Example: {error}"))
            record.meta["label_known"] = False
            return record
        self.contents.fill(record, example)
        return record

    def members(self, partitions: Sequence[FrameSpan]) -> Iterator[str]:
        for file in self.files():
            yield str(file)

    def locate(self, partition: FrameSpan, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition.source, str(partition.position + o), partition.first_index + o) for o in offsets]


def _walk_file(file: Path, partition_size: int) -> tuple[bool, int | None, list[tuple[int, int, int]]]:
    """(whether it is gzipped, its size where it is not, the (header offset, position, records)
    of each partition): its length headers walked, seeking past the data (a compressed file is
    one partition)."""
    gzipped = first_bytes(file)[1]
    size = None if gzipped else stored_size(file)
    cuts: list[tuple[int, int, int]] = []
    first: Frame | None = None
    count = 0
    with open_records(file, gzipped) as stream:
        for frame in walk_frames(stream, size=size, with_data=False):
            if first is None:
                first = frame
            count += 1
            if not gzipped and (
                count >= partition_size or frame.offset + frame.length - first.offset >= PARTITION_BYTES
            ):
                cuts.append((first.offset, first.position, count))
                first, count = None, 0
    if first is not None:
        cuts.append((first.offset, first.position, count))
    return gzipped, size, cuts
