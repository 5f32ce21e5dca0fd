"""Megatron-LM indexed datasets: the cleaned copy is a new pair, ``OUT.bin`` and ``OUT.idx``
(``fix data/my_text_document --out OUT``; ``--out OUT.bin`` names the same pair), in the
source's dtype and index version, holding the kept sequences in order, their pointers
recomputed end to end, their document indices renumbered (a document that loses every sequence
is dropped; the modes of a multimodal index kept): Megatron's ``IndexedDataset`` loads it. The
quarantine holds a pair of the set-aside sequences in source order, named as the source; the
manifest beside it names each by its index (as the NumPy writer's quarantine).

A sequence the ``.bin`` does not hold all of (its pointer past the end) is written as what the
file holds of it. Every sequence is checksummed by its tokens' bytes and its index
(`scrub.fixing.ledger.row_values`); both outputs are read back and checksummed again. Written a chunk
of the index at a time, through temporary files for the index arrays: memory does not grow with
the dataset.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np
import xxhash

from scrub.fixing.ledger import Ledger, identity_seed, row_values
from scrub.readers.megatron import (
    CODES,
    ENDINGS,
    HEADER,
    INDEX_CHUNK,
    IndexFacts,
    MegatronReader,
    read_index,
    readable_span,
)
from scrub.writers.base import Tally, Verdicts, Writer


class MegatronWriter(Writer[MegatronReader]):
    format = "megatron"
    output_suffixes = ENDINGS  # named by a prefix, as the source (`Writer.prefix`)

    def _bad(self, verdicts: Verdicts, facts: IndexFacts) -> np.ndarray:
        """The indices of the sequences set aside, sorted."""
        source = Path(facts.bin).name
        if source in verdicts.files:
            return np.arange(facts.sequences, dtype=np.int64)
        bad = np.array(sorted({i for name, i in verdicts.records if name == source}), dtype=np.int64)
        return bad[(bad >= 0) & (bad < facts.sequences)]

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        facts = read_index(self.prefix)
        bad = self._bad(verdicts, facts)
        tally = Tally()
        sides = {False: _PairWriter(clean, facts)}
        if quarantine is not None:
            sides[True] = _PairWriter(quarantine, facts)
        lengths, pointers, documents, modes = facts.arrays()
        whole = _bytes_of(facts)
        seed = identity_seed(Path(facts.bin).name)
        for first in range(0, facts.sequences, INDEX_CHUNK):
            last = min(facts.sequences, first + INDEX_CHUNK)
            set_aside = np.zeros(last - first, dtype=bool)
            set_aside[bad[(bad >= first) & (bad < last)] - first] = True
            chunk_lengths, chunk_pointers = np.asarray(lengths[first:last]), np.asarray(pointers[first:last])
            chunk_modes = None if modes is None else np.asarray(modes[first:last])
            digests = np.empty(last - first, np.uint64)
            for side, chosen in ((False, ~set_aside), (True, set_aside)):
                rows = np.flatnonzero(chosen)
                writer = sides.get(side)
                if writer is None:  # no quarantine written: its sequences are only checksummed
                    digests[rows] = _digests(whole, facts, chunk_lengths[rows], chunk_pointers[rows])
                else:
                    digests[rows] = writer.add(
                        whole,
                        chunk_lengths[rows],
                        chunk_pointers[rows],
                        None if chunk_modes is None else chunk_modes[rows],
                    )
            values = row_values(seed, np.arange(first, last), [digests])
            tally.kept.add_values(values[~set_aside])
            tally.quarantined.add_values(values[set_aside])
        for side, writer in sides.items():
            writer.finish(_documents(documents, bad, quarantine=side))
        tally.records_quarantined = len(bad)
        tally.records_kept = facts.sequences - len(bad)
        return tally

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not Path(f"{target}.idx").exists():
            return ledger
        source = read_index(self.prefix)
        bad = self._bad(verdicts, source)
        written = read_index(target)
        lengths, pointers, _, _ = written.arrays()
        whole = _bytes_of(written)
        seed = identity_seed(Path(source.bin).name)
        expected = len(bad) if side == "quarantine" else source.sequences - len(bad)
        if written.sequences != expected:
            ledger.add_values(np.zeros(1, np.uint64))  # a sequence lost or added: no match
            return ledger
        shifted = bad - np.arange(len(bad))  # the j-th kept index is j + how many of these are <= j
        for first in range(0, written.sequences, INDEX_CHUNK):
            last = min(written.sequences, first + INDEX_CHUNK)
            numbers = np.arange(first, last)
            origin = (
                bad[numbers] if side == "quarantine" else numbers + np.searchsorted(shifted, numbers, "right")
            )
            digests = _digests(
                whole, written, np.asarray(lengths[first:last]), np.asarray(pointers[first:last])
            )
            ledger.add_values(row_values(seed, origin, [digests]))
        return ledger


def _bytes_of(facts: IndexFacts) -> memoryview:
    """The ``.bin``'s bytes, mapped (nothing for an empty file)."""
    if facts.bin_bytes == 0:
        return memoryview(b"")
    return memoryview(np.memmap(facts.bin, dtype=np.uint8, mode="r"))  # type: ignore[arg-type]


def _digests(whole: memoryview, facts: IndexFacts, lengths: np.ndarray, pointers: np.ndarray) -> np.ndarray:
    """Each sequence's digest: XXH3 of the bytes the ``.bin`` holds of it."""
    size = facts.itemsize
    out = np.empty(len(lengths), np.uint64)
    for row, (length, pointer) in enumerate(zip(lengths.tolist(), pointers.tolist())):
        first, count = readable_span(facts, length, pointer)
        out[row] = xxhash.xxh3_64_intdigest(whole[first * size : (first + count) * size])
    return out


def _documents(documents: np.ndarray, bad: np.ndarray, quarantine: bool):
    """The document indices of one side, a chunk at a time: each boundary renumbered by the
    sequences of that side before it; a document emptied by the split is dropped (one that was
    empty already stays, as Megatron wrote it)."""
    previous_old = previous_new = None
    for first in range(0, len(documents), INDEX_CHUNK):
        old = np.asarray(documents[first : first + INDEX_CHUNK], dtype=np.int64)
        before = np.searchsorted(bad, old, side="left")  # set-aside sequences before each boundary
        new = before if quarantine else old - before
        if previous_old is None:
            keep = np.ones(len(old), dtype=bool)
            keep[1:] = ~((new[1:] == new[:-1]) & (old[1:] > old[:-1]))
        else:
            old_prev = np.concatenate([[previous_old], old[:-1]])
            new_prev = np.concatenate([[previous_new], new[:-1]])
            keep = ~((new == new_prev) & (old > old_prev))
        previous_old, previous_new = int(old[-1]), int(new[-1])
        yield new[keep]


class _PairWriter:
    """One output pair: the ``.bin`` written as sequences arrive, the index arrays into
    temporary files beside it, joined under their header at the end."""

    def __init__(self, prefix: Path, facts: IndexFacts) -> None:
        self.prefix = prefix
        self.facts = facts
        # open until `finish`: the pair is written across many calls
        self.bin: BinaryIO = open(f"{prefix}.bin", "wb")  # noqa: SIM115
        self.parts = {
            name: open(f"{prefix}.{name}.part", "w+b")  # noqa: SIM115
            for name in ("lengths", "pointers", "modes")
        }
        self.count = 0
        self.pointer = 0

    def add(
        self, whole: memoryview, lengths: np.ndarray, pointers: np.ndarray, modes: np.ndarray | None
    ) -> np.ndarray:
        """Append these sequences; their digests (of the bytes written)."""
        size = self.facts.itemsize
        digests = np.empty(len(lengths), np.uint64)
        written = np.empty(len(lengths), np.int64)
        for row, (length, pointer) in enumerate(zip(lengths.tolist(), pointers.tolist())):
            first, count = readable_span(self.facts, length, pointer)
            data = whole[first * size : (first + count) * size]
            self.bin.write(data)
            digests[row] = xxhash.xxh3_64_intdigest(data)
            written[row] = count
        starts = (
            self.pointer + np.concatenate([[0], np.cumsum(written)[:-1]]) * size if len(written) else written
        )
        self.pointer += int(written.sum()) * size
        self.count += len(lengths)
        self.parts["lengths"].write(written.astype(np.int32).tobytes())
        self.parts["pointers"].write(np.asarray(starts, np.int64).tobytes())
        if modes is not None:
            self.parts["modes"].write(np.asarray(modes, np.int8).tobytes())
        return digests

    def finish(self, documents) -> None:
        self.bin.close()
        entries = 0
        with open(f"{self.prefix}.documents.part", "w+b") as part:
            for chunk in documents:
                part.write(chunk.astype(np.int64).tobytes())
                entries += len(chunk)
            with open(f"{self.prefix}.idx", "wb") as index:
                index.write(HEADER)
                index.write(struct.pack("<QBQQ", 1, CODES[self.facts.dtype], self.count, entries))
                for name in ("lengths", "pointers"):
                    self.parts[name].seek(0)
                    shutil.copyfileobj(self.parts[name], index)
                part.seek(0)
                shutil.copyfileobj(part, index)
                if self.facts.modes:
                    self.parts["modes"].seek(0)
                    shutil.copyfileobj(self.parts["modes"], index)
        for name, file in self.parts.items():
            file.close()
            Path(f"{self.prefix}.{name}.part").unlink()
        Path(f"{self.prefix}.documents.part").unlink()
