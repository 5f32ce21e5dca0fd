"""WebDataset tar shards: each source shard becomes a shard of the same name in the cleaned copy
(a folder of shards stays a folder, one shard stays one file) holding its kept samples, member
by member with the source's headers (names, order, modes, times) and bytes; the quarantine
holds shards of the set-aside samples only. Members that belong to no sample (``__meta__``,
folders) go into the cleaned copy unchanged. A compressed shard is written compressed. A shard
set aside whole (``damaged-shard``) is copied byte for byte into the quarantine. WebDataset
(and `tarfile`) read every output; each sample is checksummed over its members' names and bytes.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from scrub.fixing.ledger import Ledger, identity_seed
from scrub.readers.tarwalk import SHARD_SUFFIXES, Member, is_compressed, open_shard, walk_shard
from scrub.readers.webdataset import Other, Sample, WebDatasetReader, group_samples
from scrub.writers.base import FileSetWriter, Tally, Verdicts


def shard_stem(name: str) -> tuple[str, str]:
    """(name without its shard suffix, the suffix): ``train-0001.tar.gz`` -> (``train-0001``,
    ``.tar.gz``)."""
    lower = name.lower()
    suffix = next((s for s in sorted(SHARD_SUFFIXES, key=len, reverse=True) if lower.endswith(s)), "")
    return name[: len(name) - len(suffix)], name[len(name) - len(suffix) :]


class WebDatasetWriter(FileSetWriter[WebDatasetReader]):
    format = "webdataset"
    reads_objects = True

    split_name = staticmethod(shard_stem)

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        tally = Tally()
        quarantines = self.make_outputs(clean, quarantine)
        index = 0
        for shard, clean_shard in self.file_targets(clean):
            source = shard.name
            if source in verdicts.files:
                if shard in quarantines:
                    shutil.copyfile(shard, quarantines[shard])
                for sample in _samples(shard):
                    seed, contents = _ledger_entry(source, sample)
                    tally.quarantined.add_record(seed, *contents)
                    tally.records_quarantined += 1
                    index += 1
                continue
            with _new_shard(clean_shard, is_compressed(shard)) as kept, contextlib.ExitStack() as opened:
                set_aside: IO[bytes] | None = None
                for item in _items(shard, with_headers=True):
                    if isinstance(item, Other):
                        _add(kept, item.member)
                        tally.other_files += 1
                        continue
                    quarantined = verdicts.quarantined(source, index)
                    index += 1
                    seed, contents = _ledger_entry(source, item)
                    (tally.quarantined if quarantined else tally.kept).add_record(seed, *contents)
                    if not quarantined:
                        tally.records_kept += 1
                        target: IO[bytes] | None = kept
                    else:
                        tally.records_quarantined += 1
                        if set_aside is None and shard in quarantines:
                            set_aside = opened.enter_context(
                                _new_shard(quarantines[shard], is_compressed(shard))
                            )
                        target = set_aside
                    if target is not None:
                        for _, member in item.members:
                            _add(target, member)
        return tally

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not target.exists():
            return ledger
        for shard, output in self.file_targets(target):
            if output.exists():
                for sample in _samples(output):
                    seed, contents = _ledger_entry(shard.name, sample)
                    ledger.add_record(seed, *contents)
        return ledger


@contextlib.contextmanager
def _new_shard(path: Path, compressed: bool) -> Iterator[IO[bytes]]:
    """A new shard's file; closed with the end-of-archive blocks, padded to a whole record as
    `tarfile` pads it."""
    with cast(IO[bytes], gzip.open(path, "xb")) if compressed else open(path, "xb") as file:
        yield file
        file.write(bytes(2 * tarfile.BLOCKSIZE))
        written = file.tell()
        file.write(bytes(-written % tarfile.RECORDSIZE))


def _items(path: Path, with_headers: bool = False) -> Iterator[Sample | Other]:
    with open_shard(path) as file:
        yield from group_samples(walk_shard(file, with_headers=with_headers))


def _samples(path: Path) -> Iterator[Sample]:
    return (item for item in _items(path) if isinstance(item, Sample))


def _ledger_entry(source: str, sample: Sample) -> tuple[int, list[bytes | None]]:
    """A sample's identity seed and contents: each member's name and bytes."""
    contents: list[bytes | None] = []
    for _, member in sample.members:
        contents += [member.name.encode("utf-8", "surrogateescape"), member.data]
    return identity_seed(source, sample.key), contents


def _add(output: IO[bytes], member: Member) -> None:
    """Write a member with the source's header blocks, byte for byte; a member cut short gets a
    header of the size there was (its other fields as they were) and keeps its bytes."""
    assert member.header is not None
    header = member.header
    data = member.data if member.regular else None
    if data is not None and len(data) != member.size:
        info = tarfile.TarInfo.frombuf(header[-tarfile.BLOCKSIZE :], "utf-8", "surrogateescape")
        info.name, info.size = member.name, len(data)
        header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    output.write(header)
    if data:
        output.write(data)
        output.write(bytes(-len(data) % tarfile.BLOCKSIZE))
