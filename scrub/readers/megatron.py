"""Megatron-LM indexed datasets: a ``PREFIX.bin`` of token ids end to end and a ``PREFIX.idx``
that says where each sequence lies (megatron/core/datasets/indexed_dataset.py: ``MMIDIDX\\0\\0``,
``<Q`` version 1, ``<B`` dtype code, ``<Q`` sequence count, ``<Q`` document-index count, then
int32 sequence lengths, int64 byte pointers into the ``.bin``, int64 document indices and, for a
multimodal dataset, int8 sequence modes). Named as Megatron names it, by the prefix
(``data/my_text_document``, which is no file), or by either file.

A record is a **sequence**, keyed by its number: ``IndexedDataset[i]``, the unit GPTDataset
samples from and calls a document. ``preprocess_data.py`` writes one sequence per document, so
the two agree unless it split sentences (``--split-sentences``: then a record is a sentence, and
a document the run of sequences the document indices bound; the summary says so). Judging
sequences names exactly the item a loader fetches, and a cleaned copy that drops one keeps the
rest of its document.

Nothing is loaded whole: the index arrays are memory maps, read in chunks where the driver needs
all of them (validating the document indices, sizing partitions); each worker maps the ``.bin``
and hands its checks views of it (`TokenRows`: many sequences end to end, no copy), so a scan
reads each page once and its memory does not grow with the file.

What is wrong with the index as a whole (its header, version or dtype, arrays the file is too
short for, document indices that do not run from 0 to the sequence count) is one line and exit 2:
Megatron refuses such an index too, and nothing in it can be located. What is wrong with one
sequence (a negative length, a pointer outside the ``.bin`` or not on a token boundary: a
truncated ``.bin``) is `malformed-record` on that sequence, and the scan goes on.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scrub.checks.base import problem
from scrub.checks.tokens import PACKED
from scrub.errors import UnusableDataset
from scrub.readers.base import DatasetInfo, Reader
from scrub.readers.hdf5 import PLAIN_BYTES_PER_SECOND
from scrub.records import Batch, Carries, Record, TokenRows
from scrub.wording import counted

HEADER = b"MMIDIDX\x00\x00"
#: header, version, dtype code, sequence count, document-index count
HEADER_BYTES = len(HEADER) + 8 + 1 + 8 + 8
#: Megatron's dtype codes (``DType``); 6 and 7 (float64, float32) hold no token ids
DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64", 7: "float32", 8: "uint16"}
CODES = {name: code for code, name in DTYPES.items()}
ENDINGS = (".bin", ".idx")
#: tokens per partition (bytes: a few blocks of a worker's time) and per block checked at once
PARTITION_BYTES = 128 << 20
BLOCK_BYTES = 16 << 20
#: sequences per block at most, and per chunk of the index the driver reads at once
BLOCK_SEQUENCES = 1 << 16
INDEX_CHUNK = 1 << 20


def pair_of(path: Path) -> Path:
    """The prefix a path names a pair by: itself, or a ``.bin``/``.idx`` without its ending."""
    return path.with_suffix("") if path.suffix in ENDINGS else path


@dataclass(frozen=True)
class IndexFacts:
    """What a ``.idx`` says, checked against its ``.bin`` (small: every partition holds it)."""

    idx: str
    bin: str
    dtype: str
    sequences: int
    document_entries: int  # document indices: documents + 1, from 0 to ``sequences``
    modes: bool  # a multimodal index: one int8 mode per sequence after the document indices
    bin_bytes: int

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """(lengths, pointers, document indices, modes or None), memory-mapped."""
        n, d = self.sequences, self.document_entries
        if os.path.getsize(self.idx) <= HEADER_BYTES:  # np.memmap cannot map nothing
            empty = np.zeros(0, np.int64)
            return empty.astype(np.int32), empty, np.zeros(d, np.int64), None
        whole = np.memmap(self.idx, dtype=np.uint8, mode="r")
        lengths = whole[HEADER_BYTES : HEADER_BYTES + 4 * n].view(np.int32)
        pointers = whole[HEADER_BYTES + 4 * n : HEADER_BYTES + 12 * n].view(np.int64)
        documents = whole[HEADER_BYTES + 12 * n : HEADER_BYTES + 12 * n + 8 * d].view(np.int64)
        start = HEADER_BYTES + 12 * n + 8 * d
        modes = whole[start : start + n].view(np.int8) if self.modes else None
        return lengths, pointers, documents, modes

    def tokens(self) -> np.ndarray:
        """The ``.bin`` as one array of tokens, memory-mapped (whole tokens only)."""
        count = self.bin_bytes // self.itemsize
        if count == 0:
            return np.zeros(0, self.dtype)
        return np.memmap(self.bin, dtype=self.dtype, mode="r", shape=(count,))


def read_index(prefix: Path) -> IndexFacts:
    """The facts of the pair at ``prefix``; `UnusableDataset` with one line when the index as a
    whole cannot be used."""
    idx, bin_path = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    missing = [str(p) for p in (bin_path, idx) if not p.is_file()]
    if missing:
        raise UnusableDataset(
            f"{prefix}: a Megatron dataset is a .bin and an .idx of one prefix; {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing"
        )
    size = idx.stat().st_size
    with open(idx, "rb") as file:
        head = file.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES or head[: len(HEADER)] != HEADER:
        raise UnusableDataset(f"{idx}: not a Megatron index (no MMIDIDX header)")
    version, code, sequences, entries = struct.unpack("<QBQQ", head[len(HEADER) :])
    if version != 1:
        raise UnusableDataset(f"{idx}: Megatron index version {version}; version 1 is the one Megatron reads")
    if code not in DTYPES:
        raise UnusableDataset(f"{idx}: unknown dtype code {code} (Megatron's are 1-8)")
    if DTYPES[code].startswith("float"):
        raise UnusableDataset(f"{idx}: holds {DTYPES[code]} values, not token ids")
    arrays = HEADER_BYTES + 12 * sequences + 8 * entries
    if size < arrays:
        raise UnusableDataset(
            f"{idx}: declares {counted(sequences, 'sequence')} and {counted(entries, 'document index')}, "
            "which need "
            f"{arrays:,} bytes; the file has {size:,} (truncated?)"
        )
    facts = IndexFacts(
        str(idx.resolve()),
        str(bin_path.resolve()),
        DTYPES[code],
        sequences,
        entries,
        size == arrays + sequences and sequences > 0,
        bin_path.stat().st_size,
    )
    _check_documents(facts)
    return facts


def _check_documents(facts: IndexFacts) -> None:
    """Document indices run from 0 to the sequence count without going back (Megatron asserts
    the last), read a chunk at a time."""
    documents = facts.arrays()[2]
    where = facts.idx
    if facts.document_entries == 0 or documents[0] != 0:
        raise UnusableDataset(f"{where}: its document indices do not start at 0: not an index Megatron wrote")
    if documents[-1] != facts.sequences:
        raise UnusableDataset(
            f"{where}: its document indices end at {int(documents[-1]):,}, not at its {facts.sequences:,} "
            "sequences (Megatron refuses it)"
        )
    for first in range(0, facts.document_entries, INDEX_CHUNK):
        chunk = np.asarray(documents[max(0, first - 1) : first + INDEX_CHUNK])
        if (np.diff(chunk) < 0).any():
            raise UnusableDataset(f"{where}: its document indices go back: not an index Megatron wrote")


@dataclass(frozen=True)
class Sequences:
    """A partition: sequences ``start:stop`` of a pair."""

    facts: IndexFacts
    source: str
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


def sequence_problems(facts: IndexFacts, lengths: np.ndarray, pointers: np.ndarray) -> np.ndarray:
    """Which of these sequences cannot be read as the index says (a bool per sequence)."""
    size = facts.itemsize
    lengths = lengths.astype(np.int64)
    with np.errstate(over="ignore"):
        ends = pointers + lengths * size
    return (
        (lengths < 0) | (pointers < 0) | (pointers % size != 0) | (ends > facts.bin_bytes) | (ends < pointers)
    )


def why_unreadable(facts: IndexFacts, source: str, length: int, pointer: int) -> str:
    if length < 0:
        return f"the index gives it a negative length ({length})"
    if pointer < 0 or pointer % facts.itemsize:
        return f"the index points it at byte {pointer:,}, not a {facts.dtype} token's start"
    return (
        f"its {length:,} tokens at byte {pointer:,} run past the end of {source} ({facts.bin_bytes:,} bytes: "
        "truncated?)"
    )


def readable_span(facts: IndexFacts, length: int, pointer: int) -> tuple[int, int]:
    """(first token, token count) of what the ``.bin`` holds of a sequence: all of it, or what of
    it lies inside the file (nothing for a negative length): what `fix` copies of it."""
    if length <= 0 or pointer < 0 or pointer % facts.itemsize:
        return 0, 0
    first = pointer // facts.itemsize
    available = max(0, facts.bin_bytes // facts.itemsize - first)
    return first, min(length, available)


class MegatronReader(Reader[Sequences]):
    format = "megatron"
    file_suffixes = (".idx",)
    prefix_files = ENDINGS
    preferred_scheduler = "threads"  # NumPy's reductions over mapped pages release the GIL
    records_per_task = 0  # partitions are sized in tokens
    provides = frozenset({Carries.TOKENS})
    positional_keys = True

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_dir() or (path.exists() and path.suffix not in ENDINGS):
            return False
        prefix = pair_of(path)
        idx, bin_path = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
        # the pair is the signature: an index damaged down to its header is opened, and said so
        return idx.is_file() and bin_path.is_file()

    @classmethod
    def holds_dataset(cls, path: Path) -> bool:
        """In a folder, a pair is a dataset once: by its ``.idx``."""
        return path.suffix == ".idx" and cls.sniff(path)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[Sequences]]:
        prefix = pair_of(self.path)
        facts = read_index(prefix)
        source = Path(facts.bin).name
        self.root = str(Path(facts.bin).parent)
        partitions = self._partitions(facts, source, partition_size)
        info = DatasetInfo(
            format=self.format, layout="indexed", root=self.root, labelled=False, records=facts.sequences
        )
        info.token_dtypes[source] = facts.dtype
        documents = facts.document_entries - 1
        info.files[source] = {
            "dtype": facts.dtype,
            "sequences": facts.sequences,
            "documents": documents,
            "multimodal": facts.modes,
            "index": Path(facts.idx).name,
        }
        if documents != facts.sequences:
            info.notes.append(
                f"{source}: {counted(facts.sequences, 'sequence')} in {counted(documents, 'document')} "
                "(sentences split): "
                "a record is a sequence, as IndexedDataset[i] fetches it"
            )
        info.notes.append(PACKED)
        self.work_seconds = facts.bin_bytes / PLAIN_BYTES_PER_SECOND
        return info, partitions

    def _partitions(self, facts: IndexFacts, source: str, most: int) -> list[Sequences]:
        """Sequence ranges of about `PARTITION_BYTES` of tokens (``most`` sequences each when
        given: ``--partition-size``), found a chunk of the index at a time."""
        if most:
            starts = list(range(0, facts.sequences, most))
        else:
            lengths = facts.arrays()[0]
            per_partition = max(1, PARTITION_BYTES // facts.itemsize)
            starts, carried = [0], 0  # tokens since the last start, before this chunk
            for first in range(0, facts.sequences, INDEX_CHUNK):
                chunk = np.maximum(np.asarray(lengths[first : first + INDEX_CHUNK], dtype=np.int64), 0)
                totals = carried + np.cumsum(chunk)
                base = 0
                while (at := int(np.searchsorted(totals, base + per_partition, side="left"))) < len(chunk):
                    starts.append(first + at + 1)
                    base = int(totals[at])
                carried = int(totals[-1]) - base
        bounds = [s for s in starts if s < facts.sequences] + [facts.sequences]
        return [Sequences(facts, source, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]

    def read(self, partition: Sequences, start: int = 0, stop: int | None = None) -> Iterator[Batch | Record]:
        facts = partition.facts
        lengths, pointers, _, _ = facts.arrays()
        tokens = facts.tokens()
        size = facts.itemsize
        first = partition.start + start
        last = partition.stop if stop is None else partition.start + stop
        while first < last:
            end = min(last, first + BLOCK_SEQUENCES)
            block_lengths = np.asarray(lengths[first:end], dtype=np.int64)
            block_pointers = np.asarray(pointers[first:end])
            # a block of about BLOCK_BYTES of tokens (at least one sequence)
            within = np.cumsum(np.maximum(block_lengths, 0)) * size
            count = max(1, int(np.searchsorted(within, BLOCK_BYTES, side="right")))
            block_lengths, block_pointers = block_lengths[:count], block_pointers[:count]
            yield from self._runs(partition, first, block_lengths, block_pointers, tokens)
            first += count

    def _runs(
        self, partition: Sequences, first: int, lengths: np.ndarray, pointers: np.ndarray, tokens: np.ndarray
    ) -> Iterator[Batch | Record]:
        """A block of sequences as batches of consecutive readable sequences that lie end to end
        in the ``.bin`` (views of its map), and a record with a problem for each unreadable one."""
        facts = partition.facts
        size = facts.itemsize
        bad = sequence_problems(facts, lengths, pointers)
        follows = pointers[1:] == pointers[:-1] + lengths[:-1] * size
        breaks = np.flatnonzero(bad[1:] | bad[:-1] | ~follows) + 1
        for begin, end in zip([0, *breaks.tolist()], [*breaks.tolist(), len(lengths)]):
            index = first + begin
            if bad[begin]:
                record = Record(partition.source, str(index), index, None, meta={"kind": "tokens"})
                why = why_unreadable(facts, partition.source, int(lengths[begin]), int(pointers[begin]))
                record.problems.append(problem(record, "malformed-record", f"sequence {index:,}: {why}"))
                yield record
                continue
            bounds = np.zeros(end - begin + 1, np.int64)
            np.cumsum(lengths[begin:end], out=bounds[1:])
            at = int(pointers[begin]) // size
            yield Batch(
                partition.source,
                index,
                index - partition.start,
                TokenRows(tokens[at : at + int(bounds[-1])], bounds),
            )

    def members(self, partitions: Sequence[Sequences]) -> Iterator[str]:
        prefix = pair_of(self.path)
        yield f"{prefix}.idx"
        yield f"{prefix}.bin"

    def locate(self, partition: Sequences, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        return [(partition.source, str(partition.start + o), partition.start + o) for o in offsets]
