"""Per-record checksums, tallied so that "clean ∪ quarantine = source" can be checked in O(1) memory.

Each record contributes one 64-bit XXH3 hash of its identity and its bytes (a file's bytes, an
LMDB value, an HDF5 row of data plus its label). A ledger keeps the count and the sum of those
hashes modulo 2**64, so the order of records does not matter and nothing per record is kept.
`fix` tallies the source's records as it writes them (kept and quarantined apart), then reads
its outputs back and tallies them again: equal counts and sums on each side mean every record
arrived byte for byte, exactly once, on the side it was meant for (a lost, duplicated, altered
or misplaced record changes a sum unless 64-bit hashes collide).
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def __iadd__(self, other: "Ledger") -> "Ledger":
        self.count += other.count
        self.total = (self.total + other.total) & MASK
        return self

    def to_dict(self) -> dict[str, object]:
        return {"records": self.count, "checksum": f"{self.total:016x}"}
