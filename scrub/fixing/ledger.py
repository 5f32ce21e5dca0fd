"""Per-record checksums, tallied so that "clean ∪ quarantine = source" can be checked in O(1) memory.

Each record contributes one 64-bit hash of its identity and its bytes: XXH3 of a file's bytes
or an LMDB value; for HDF5 rows, millions of them, a vectorized multilinear hash (the row's
64-bit words times fixed random odd keys, summed: a change to any one word always changes it)
mixed with the row's identity by SplitMix64, with no Python per row. A ledger keeps the count
and the sum of those hashes modulo 2**64, so the order of records does not matter and nothing
per record is kept.
`fix` tallies the source's records as it writes them (kept and quarantined apart), then reads
its outputs back and tallies them again: equal counts and sums on each side mean every record
arrived byte for byte, exactly once, on the side it was meant for (a lost, duplicated, altered
or misplaced record changes a sum unless 64-bit hashes collide).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import xxhash

MASK = (1 << 64) - 1
#: What a record without bytes (a missing file, a path never read) contributes as its content.
ABSENT = b"\x00scrub:absent\x00"
FILE_BLOCK = 8 << 20


def identity_seed(*parts: object) -> int:
    """A 64-bit seed naming a record (its key, label, row...)."""
    return xxhash.xxh3_64_intdigest("\x1f".join(map(str, parts)).encode("utf-8", "surrogateescape"))


def record_hash(seed: int, *contents: bytes | memoryview | None) -> int:
    """The hash of a record's contents, chained from its identity seed."""
    value = seed
    for content in contents:
        value = xxhash.xxh3_64_intdigest(ABSENT if content is None else content, seed=value)
    return value


GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, elementwise: every input bit affects every output bit."""
    values = values ^ (values >> np.uint64(30))
    values = values * np.uint64(0xBF58476D1CE4E5B9)
    values = values ^ (values >> np.uint64(27))
    values = values * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


@cache
def _keys(words: int) -> np.ndarray:
    return np.random.default_rng(0x5C2B).integers(0, 2**63, size=words, dtype=np.uint64) * np.uint64(
        2
    ) + np.uint64(1)


def row_digests(block: np.ndarray) -> np.ndarray:
    """One 64-bit digest per row of ``block`` (any dtype, any row shape)."""
    rows = len(block)
    if block.dtype.hasobject:  # variable-length values: their text stands for their bytes
        texts = (repr(row.tolist() if hasattr(row, "tolist") else row).encode() for row in block)
        return np.fromiter((xxhash.xxh3_64_intdigest(text) for text in texts), dtype=np.uint64, count=rows)
    width = block.dtype.itemsize * int(np.prod(block.shape[1:], dtype=np.int64))
    if rows == 0 or width == 0:
        return np.full(rows, width, dtype=np.uint64)
    raw = np.ascontiguousarray(block).reshape(-1).view(np.uint8).reshape(rows, width)
    if width % 8:
        raw = np.concatenate([raw, np.zeros((rows, 8 - width % 8), dtype=np.uint8)], axis=1)
    with np.errstate(over="ignore"):
        return _mix(raw.view(np.uint64) @ _keys(raw.shape[1] // 8) + np.uint64(width))


def row_values(seed: int, indices: np.ndarray, digests: list[np.ndarray]) -> np.ndarray:
    """The ledger values of rows ``indices`` of a source named by ``seed``, from their digests."""
    with np.errstate(over="ignore"):
        values = _mix(np.uint64(seed) + indices.astype(np.uint64) * GOLDEN)
        for digest in digests:
            values = _mix(values ^ digest)
    return values


@dataclass
class Ledger:
    """How many records, and the sum of their hashes."""

    count: int = 0
    total: int = 0

    def add(self, value: int) -> None:
        self.count += 1
        self.total = (self.total + value) & MASK

    def add_record(self, seed: int, *contents: bytes | memoryview | None) -> None:
        self.add(record_hash(seed, *contents))

    def merge(self, other: "Ledger") -> None:
        """Add the records ``other`` tallied (a sum: the order records are tallied in is free)."""
        self.count += other.count
        self.total = (self.total + other.total) & MASK

    def add_values(self, values: np.ndarray) -> None:
        """Many records' values at once (see `row_values`)."""
        self.count += len(values)
        self.total = (self.total + int(values.sum(dtype=np.uint64))) & MASK

    def add_file(self, seed: int, path: str) -> None:
        """A record whose content is a whole file, hashed as it streams (the same value as
        `add_record` with the file's bytes)."""
        try:
            with open(path, "rb") as file:
                digest = xxhash.xxh3_64(seed=seed)
                while block := file.read(FILE_BLOCK):
                    digest.update(block)
        except OSError:
            self.add(record_hash(seed, None))
            return
        self.add(digest.intdigest())

    def to_dict(self) -> dict[str, object]:
        return {"records": self.count, "checksum": f"{self.total:016x}"}
