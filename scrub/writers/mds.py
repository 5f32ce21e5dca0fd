"""MosaicML Streaming (MDS) datasets: the cleaned copy is a dataset folder of its own, each source
``index.json`` rewritten at the same place and each source shard becoming a shard of the same name
that holds its kept samples, in order, each sample's bytes exactly as they were (its columns are
never decoded and encoded again), with the source shard's config and the index's columns,
compression and hash algorithms (the hashes are those of the new files). A shard left with no
sample, or missing from the source, is left out of the index. ``streaming.StreamingDataset(
local=...)`` reads the copy, its keys renumbered from 0 as any dataset's. The quarantine is the
same for the set-aside samples. `scrub restore` writes both again from the source, as every
writer does.

A sample whose bytes lie outside its shard cannot be copied: it goes to the quarantine (as the
bytes there are, none) whatever the verdicts, and the fix says so. A shard stored in a
compression scrub cannot write (Brotli, Snappy) is written uncompressed, and its index entry
says so. Each sample is checksummed by its shard, its index in the source and its bytes.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import xxhash

from scrub.fixing.ledger import Ledger, identity_seed
from scrub.readers.mds import INDEX, Column, MDSReader, Shard, ShardBytes, parse_index
from scrub.writers.base import Tally, Verdicts, Writer

#: how much of a shard is copied at a time
COPY_BLOCK = 8 << 20


@dataclass
class _Output:
    """One output shard being written: its samples' bytes come from the source shard."""

    entry: dict[str, Any]
    spans: list[tuple[int, int] | None] = field(default_factory=list)  # None: no bytes to copy


class MDSWriter(Writer[MDSReader]):
    format = "mds"

    def _shards(self) -> dict[str, Shard]:
        return {shard.source: shard for shard in self.reader.shards}

    def _unreadable(self, shard: Shard, opened: ShardBytes | None = None) -> set[int]:
        """The samples of a source shard whose bytes lie outside it (kept for `tally_output`)."""
        known: dict[str, set[int]] = self.__dict__.setdefault("_unreadable_of", {})
        if shard.source not in known:
            if opened is None:
                with ShardBytes(shard) as source:
                    spans = source.spans(0, shard.samples)
            else:
                spans = opened.spans(0, shard.samples)
            known[shard.source] = {n for n, span in enumerate(spans) if isinstance(span, str)}
        return known[shard.source]

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        tally = Tally()
        root = Path(self.reader.root)
        shards = self._shards()
        sides = {False: clean} | ({True: quarantine} if quarantine is not None else {})
        for index in map(Path, self.reader.indexes):
            relative = index.parent.relative_to(root)
            entries: dict[bool, list[dict[str, Any]]] = {side: [] for side in sides}
            for entry in parse_index(index, root):
                folder = entry.pop("_folder")
                source = (
                    f"{folder}/{entry['raw_data']['basename']}" if folder else entry["raw_data"]["basename"]
                )
                shard = shards.get(source)
                if shard is None:
                    tally.forced.append(f"{source}: missing: left out of the index")
                    continue
                with ShardBytes(shard) as opened:
                    spans = opened.spans(0, shard.samples)
                    unreadable = self._unreadable(shard, opened)
                    outputs = {side: _Output(dict(entry)) for side in sides}
                    kept = quarantined = 0
                    for sample, span in enumerate(spans):
                        index_of = shard.first + sample
                        aside = verdicts.quarantined(source, index_of) or sample in unreadable
                        if sample in unreadable and not verdicts.quarantined(source, index_of):
                            tally.forced.append(f"{source}: sample {index_of}: {span}")
                        data = opened.sample(span) if isinstance(span, tuple) else b""
                        (tally.quarantined if aside else tally.kept).add_record(
                            identity_seed(source, index_of), data
                        )
                        quarantined += aside
                        kept += not aside
                        if aside in outputs:
                            outputs[aside].spans.append(span if isinstance(span, tuple) else None)
                    tally.records_kept += kept
                    tally.records_quarantined += quarantined
                    for side, output in outputs.items():
                        if output.spans:
                            target = sides[side] / folder  # the index.json folder, inside the dataset
                            entries[side].append(_write_shard(opened, output, target, tally))
            for side, target in sides.items():
                (target / relative).mkdir(parents=True, exist_ok=True)
                document = {"version": 2, "shards": entries[side]}
                (target / relative / INDEX).write_text(json.dumps(document, sort_keys=True), encoding="utf-8")
        return tally

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        root = Path(self.reader.root)
        shards = self._shards()
        for index in map(Path, self.reader.indexes):
            written = target / index.parent.relative_to(root) / INDEX
            if not written.exists():
                continue
            for entry in parse_index(written, target):
                folder = entry["_folder"]
                source = (
                    f"{folder}/{entry['raw_data']['basename']}" if folder else entry["raw_data"]["basename"]
                )
                shard = shards.get(source)
                if shard is None:  # a shard the source does not have: the sums cannot match
                    ledger.add_values(np.zeros(1, np.uint64))
                    continue
                unreadable = self._unreadable(shard)
                wanted = [
                    shard.first + sample
                    for sample in range(shard.samples)
                    if (verdicts.quarantined(source, shard.first + sample) or sample in unreadable)
                    == (side == "quarantine")
                ]
                output = _output_shard(entry, target, source)
                with ShardBytes(output) as opened:
                    spans = opened.spans(0, output.samples)
                    if len(spans) != len(wanted):
                        ledger.add_values(np.zeros(1, np.uint64))
                    for index_of, span in zip(wanted, spans):
                        data = opened.sample(span) if isinstance(span, tuple) else b"\x00scrub:damaged"
                        ledger.add_record(identity_seed(source, index_of), data)
        return ledger


def _output_shard(entry: dict[str, Any], target: Path, source: str) -> Shard:
    """A written shard as the reader reads one (the file its entry names)."""
    folder = target / entry["_folder"]
    zipped = entry.get("zip_data")
    path, compression = (
        (folder / zipped["basename"], entry.get("compression"))
        if zipped
        else (folder / entry["raw_data"]["basename"], None)
    )
    columns = tuple(
        Column(name, encoding, size)
        for name, encoding, size in zip(
            entry["column_names"], entry["column_encodings"], entry["column_sizes"]
        )
    )
    return Shard(source, str(path), compression, int(entry["samples"]), 0, columns)


def _config(opened: ShardBytes, entry: dict[str, Any]) -> bytes:
    """The shard's config (the writer's settings as JSON, between the offsets and the samples):
    the source's own bytes where they read as JSON, else the ones MDSWriter writes from the
    index's entry."""
    if opened.count is not None and opened.size >= opened.table_end:
        first = int.from_bytes(opened.data[4:8], "little")  # offsets[0]: where the samples start
        if opened.table_end <= first <= opened.size:
            config = bytes(opened.data[opened.table_end : first])
            try:
                json.loads(config)
                return config
            except ValueError:
                pass
    keys = ("column_encodings", "column_names", "column_sizes", "compression", "format", "hashes")
    settings = {key: entry.get(key) for key in keys} | {
        "size_limit": entry.get("size_limit"),
        "version": entry.get("version", 2),
    }
    return json.dumps(settings, sort_keys=True).encode("utf-8")


class _Hashes:
    """The index's hash algorithms over a file written piece by piece (streaming's `get_hash`
    names: hashlib's and xxhash's); an algorithm neither knows is dropped."""

    def __init__(self, names: list[str]) -> None:
        self.hashers: dict[str, Any] = {}
        for name in names:
            if name in hashlib.algorithms_available and not name.startswith("shake_"):
                self.hashers[name] = hashlib.new(name)
            elif name in xxhash.algorithms_available:
                self.hashers[name] = getattr(xxhash, name)()

    def update(self, data: bytes | memoryview) -> None:
        for hasher in self.hashers.values():
            hasher.update(data)

    def hexdigests(self) -> dict[str, str]:
        return {name: hasher.hexdigest() for name, hasher in self.hashers.items()}


class _Sink:
    """A shard's file: its raw bytes, compressed as they are written, each side hashed."""

    def __init__(self, path: Path, compression: str | None, raw_size: int, hashes: list[str]) -> None:
        self.file: IO[bytes] = open(path, "xb")  # noqa: SIM115 - closed by close()
        self.raw_hashes, self.zip_hashes = _Hashes(hashes), _Hashes(hashes)
        self.zip_bytes = 0
        family, _, level = (compression or "").partition(":")
        self.compressor: Any = None
        if family == "zstd":
            import zstandard

            self.compressor = zstandard.ZstdCompressor(
                level=int(level or 3), write_content_size=True
            ).compressobj(size=raw_size)
        elif family == "gz":
            self.compressor = zlib.compressobj(int(level or 9), zlib.DEFLATED, 31)
        elif family == "bz2":
            self.compressor = bz2.BZ2Compressor(int(level or 9))

    def write(self, data: bytes | memoryview) -> None:
        self.raw_hashes.update(data)
        self._out(self.compressor.compress(data) if self.compressor is not None else data)

    def _out(self, data: bytes | memoryview) -> None:
        if data:
            self.file.write(data)
            self.zip_hashes.update(data)
            self.zip_bytes += len(data)

    def close(self) -> None:
        if self.compressor is not None:
            self._out(self.compressor.flush())
        self.file.close()


def writable_compression(compression: str | None) -> str | None:
    """The compression an output shard is written in: the source's where scrub can write it
    (zstd with zstandard installed, gzip, bz2), else none."""
    family = (compression or "").split(":")[0]
    if family == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError:
            return None
        return compression
    return compression if family in ("gz", "bz2") else None


def _write_shard(opened: ShardBytes, output: _Output, folder: Path, tally: Tally) -> dict[str, Any]:
    """Write one output shard (its samples copied from the source shard) and return its entry."""
    entry = output.entry
    config = _config(opened, entry)
    sizes = [0 if span is None else span[1] - span[0] for span in output.spans]
    count = len(sizes)
    offsets = np.zeros(count + 1, dtype=np.int64)
    offsets[0] = 4 + 4 * (count + 1) + len(config)
    offsets[1:] = offsets[0] + np.cumsum(sizes, dtype=np.int64)
    if offsets[-1] >= 1 << 32:
        raise ValueError(f"{entry['raw_data']['basename']}: a shard beyond 4 GiB cannot be written")
    compression = writable_compression(entry.get("compression"))
    if compression != entry.get("compression"):
        tally.notes.append(
            f"{entry['raw_data']['basename']}: written uncompressed (scrub cannot write "
            f"{entry.get('compression')})"
        )
    raw_name = entry["raw_data"]["basename"]
    zip_name = None
    if compression:  # streaming names it by the family (``zstd`` for ``zstd:7``)
        zip_name = (entry.get("zip_data") or {}).get("basename") or f"{raw_name}.{compression.split(':')[0]}"
    name = zip_name or raw_name
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    hashes = list(entry.get("hashes") or [])
    sink = _Sink(folder / name, compression, int(offsets[-1]), hashes)
    try:
        sink.write(np.uint32(count).tobytes() + offsets.astype(np.uint32).tobytes() + config)
        for piece in _pieces(opened, output.spans):
            sink.write(piece)
    finally:
        sink.close()
    kept_hashes = sorted(sink.raw_hashes.hashers)
    entry.update(
        samples=count,
        compression=compression,
        hashes=kept_hashes,
        raw_data={"basename": raw_name, "bytes": int(offsets[-1]), "hashes": sink.raw_hashes.hexdigests()},
        zip_data=(
            {"basename": zip_name, "bytes": sink.zip_bytes, "hashes": sink.zip_hashes.hexdigests()}
            if compression
            else None
        ),
    )
    return entry


def _pieces(opened: ShardBytes, spans: list[tuple[int, int] | None]) -> Iterator[bytes | memoryview]:
    """The samples' bytes, consecutive samples joined into one read of up to `COPY_BLOCK`."""
    begin = end = None
    for span in spans:
        if span is None:
            continue
        if begin is not None and end == span[0] and span[1] - begin <= COPY_BLOCK:
            end = span[1]
            continue
        if begin is not None:
            yield opened.data[begin:end]
        begin, end = span
    if begin is not None:
        yield opened.data[begin:end]
