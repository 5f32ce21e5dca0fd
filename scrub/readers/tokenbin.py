"""Flat token files: nanoGPT's ``train.bin``/``val.bin`` (raw uint16 token ids, no header) and
llm.c's shards (a header of 256 int32: magic 20240520, version 1 for uint16 tokens or 2 for
uint32, the token count; then the tokens).

Such a file is one stream of tokens that a trainer cuts into blocks: the records here are
consecutive windows of ``--max-length`` tokens (the trainer's block size; the last, shorter
window is a record too), keyed by their number: window ``i`` holds tokens ``i*L`` to
``(i+1)*L - 1``. Without ``--max-length`` there is no record to name: one line, exit 2. Each
window is judged as a sequence of input ids whose labels are its ids shifted by one.

A raw file has nothing to recognise it by: a ``.bin`` is taken for one only when no ``.idx``
lies beside it (that pair is a Megatron dataset); ``--format tokenbin`` forces it. An llm.c
shard is recognised by its header, whatever its name. The file is memory-mapped and checked a
block of windows at a time (`TokenRows` views of the map, no copy).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scrub.checks.tokens import PACKED
from scrub.errors import UnusableDataset, UsageError
from scrub.readers.base import DatasetInfo, Reader
from scrub.readers.hdf5 import PLAIN_BYTES_PER_SECOND
from scrub.records import Batch, Carries, TokenRows
from scrub.wording import counted

#: llm.c's shard header: 256 int32, the first three magic, version, token count
MAGIC = 20240520
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
VERSIONS = {1: "uint16", 2: "uint32"}
#: nanoGPT's prepare.py writes uint16 (its vocabularies are under 65,536)
RAW_DTYPE = "uint16"
PARTITION_BYTES = 128 << 20
BLOCK_BYTES = 16 << 20


@dataclass(frozen=True)
class TokenFile:
    """Where a file's tokens are, and of which type (small: every partition holds it)."""

    path: str
    dtype: str
    offset: int  # bytes before the first token: llm.c's header, or none
    count: int  # tokens
    version: int | None  # llm.c's header version; None: a raw file

    def tokens(self) -> np.ndarray:
        if self.count == 0:
            return np.zeros(0, self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset, shape=(self.count,))


def header_of(path: Path) -> np.ndarray | None:
    """llm.c's header of ``path``, when it starts with one."""
    try:
        with open(path, "rb") as file:
            head = file.read(HEADER_BYTES)
    except OSError:
        return None
    if len(head) < HEADER_BYTES:
        return None
    header = np.frombuffer(head, dtype="<i4")
    return header if header[0] == MAGIC else None


def token_file(path: Path) -> TokenFile:
    """The tokens of ``path``; `UnusableDataset` with one line when its size and header disagree."""
    size = path.stat().st_size
    header = header_of(path)
    if header is None:
        itemsize = np.dtype(RAW_DTYPE).itemsize
        if size % itemsize:
            raise UnusableDataset(
                f"{path}: {size:,} bytes, not a whole number of {RAW_DTYPE} tokens (a raw token file; "
                "truncated?)"
            )
        return TokenFile(str(path.resolve()), RAW_DTYPE, 0, size // itemsize, None)
    version, count = int(header[1]), int(header[2])
    if version not in VERSIONS:
        raise UnusableDataset(
            f"{path}: llm.c shard version {version}; versions 1 (uint16) and 2 (uint32) exist"
        )
    dtype = VERSIONS[version]
    expected = HEADER_BYTES + count * np.dtype(dtype).itemsize
    if count < 0 or size != expected:
        raise UnusableDataset(
            f"{path}: its llm.c header declares {count:,} {dtype} tokens ({expected:,} bytes with the "
            f"header); the file has {size:,} (llm.c's loader refuses it)"
        )
    return TokenFile(str(path.resolve()), dtype, HEADER_BYTES, count, version)


@dataclass(frozen=True)
class Windows:
    """A partition: windows ``start:stop`` of ``window`` tokens."""

    file: TokenFile
    source: str
    window: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


class TokenBinReader(Reader[Windows]):
    format = "tokenbin"
    file_suffixes = (".bin",)
    files_are_datasets = True  # train.bin and val.bin: two streams, each cut into its own windows
    preferred_scheduler = "threads"
    records_per_task = 0  # partitions are sized in tokens
    provides = frozenset({Carries.TOKENS})
    positional_keys = True
    shaped_by = frozenset({"max_length"})  # the window is what a record is

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if not path.is_file():
            return False
        if header_of(path) is not None:
            return True
        return path.suffix.lower() == ".bin" and not path.with_suffix(".idx").exists()

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[Windows]]:
        window = self.options.max_length
        if window is None:
            raise UsageError(
                f"--max-length: {self.path} is a flat token file, read in windows of --max-length tokens "
                "(the trainer's block size): give it, e.g. --max-length 1024"
            )
        found = token_file(self.path)
        source = self.path.name
        self.root = str(self.path.parent)
        windows = -(-found.count // window)
        per_partition = partition_size or max(1, PARTITION_BYTES // (window * np.dtype(found.dtype).itemsize))
        partitions = [
            Windows(found, source, window, start, min(windows, start + per_partition))
            for start in range(0, windows, per_partition)
        ]
        info = DatasetInfo(
            format=self.format, layout="tokens", root=self.root, labelled=False, records=windows
        )
        info.token_dtypes[source] = found.dtype
        info.files[source] = {
            "dtype": found.dtype,
            "tokens": found.count,
            "window": window,
            "layout": "raw" if found.version is None else f"llm.c shard v{found.version}",
        }
        info.notes.append(
            f"{source}: {counted(found.count, 'token')} read as {counted(windows, 'window')} of {window} "
            "(--max-length); "
            f"window i holds tokens i*{window} to (i+1)*{window}-1"
        )
        info.notes.append(PACKED)
        self.work_seconds = found.count * np.dtype(found.dtype).itemsize / PLAIN_BYTES_PER_SECOND
        return info, partitions

    def read(self, partition: Windows, start: int = 0, stop: int | None = None) -> Iterator[Batch]:
        tokens = partition.file.tokens()
        window = partition.window
        first = partition.start + start
        last = partition.stop if stop is None else partition.start + stop
        step = max(1, BLOCK_BYTES // (window * tokens.dtype.itemsize))
        for begin in range(first, last, step):
            end = min(last, begin + step)
            bounds = np.minimum(np.arange(begin, end + 1, dtype=np.int64) * window, len(tokens))
            data = tokens[int(bounds[0]) : int(bounds[-1])]
            yield Batch(partition.source, begin, begin - partition.start, TokenRows(data, bounds - bounds[0]))

    def members(self, partitions: Sequence[Windows]) -> Iterator[str]:
        yield str(self.path)

    def locate(self, partition: Windows, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition.source, str(partition.start + o), partition.start + o) for o in offsets]
