"""A format of scrub's that is not scrub's: the worked example of docs/internals.md's recipe for a
format, registered through the ``scrub.formats`` entry point group (see ``toyrows-0.1.dist-info``).

A toyrows dataset is two files named by one prefix, as a Megatron dataset is: ``PREFIX.rows``
(the magic ``TOYROWS1``, then little-endian uint32 rows and width, then float32 values) and
``PREFIX.labels`` (``TOYLABS1``, uint32 count, int32 class ids; -1 for none). ``scrub scan data/train`` names
it by its prefix, although no file bears that name; its cleaned copy is a pair too,
``train.clean.rows`` and ``train.clean.labels``, and so is its quarantine.

It declares its own reader check, ``toyrows-unlabelled`` (a row labelled -1, or past the end of
the labels file), beside its reader: a format's checks need not live in scrub's ``checks/``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from scrub.checks.base import problem, reader_check
from scrub.errors import UnusableDataset
from scrub.fixing.ledger import Ledger, identity_seed, row_digests, row_values
from scrub.formats import Format
from scrub.readers.base import DatasetInfo, Reader
from scrub.records import Carries, Record, Severity
from scrub.writers.base import Tally, Verdicts, Writer

ROWS, LABELS = ".rows", ".labels"
ROWS_MAGIC, LABELS_MAGIC = b"TOYROWS1", b"TOYLABS1"
HEADER = struct.Struct("<8sII")  # magic, rows, width (a labels file: magic, count, 0)
NO_LABEL = -1

UNLABELLED = reader_check(
    "toyrows-unlabelled",
    Severity.ERROR,
    """A toyrows row with no label: its label is -1, or the labels file ends before it.

    What it finds:
        Rows of ``PREFIX.rows`` labelled -1 in ``PREFIX.labels``, or past its last entry.
    Why it breaks training:
        A loader that zips the two files drops the row, or pairs it with garbage where it
        indexes the labels by the row's position.
    Example:
        ``train.rows`` holds 12 rows, ``train.labels`` 11 labels: row 11 has none.
    What fix does:
        Moves the row to the quarantine.
    """,
)


def write_pair(prefix: Path | str, rows: np.ndarray, labels: np.ndarray) -> None:
    """Write a toyrows dataset: ``rows`` (N, W) as float32, ``labels`` as int32."""
    rows = np.ascontiguousarray(rows, dtype="<f4")
    with open(f"{prefix}{ROWS}", "wb") as file:
        file.write(HEADER.pack(ROWS_MAGIC, *rows.shape) + rows.tobytes())
    with open(f"{prefix}{LABELS}", "wb") as file:
        file.write(HEADER.pack(LABELS_MAGIC, len(labels), 0) + np.asarray(labels, "<i4").tobytes())


def read_pair(prefix: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, labels) of a toyrows dataset, mapped from its files."""
    magic, count, width = HEADER.unpack(Path(f"{prefix}{ROWS}").read_bytes()[: HEADER.size])
    label_magic, labels, _ = HEADER.unpack(Path(f"{prefix}{LABELS}").read_bytes()[: HEADER.size])
    if magic != ROWS_MAGIC or label_magic != LABELS_MAGIC:
        raise UnusableDataset(f"{prefix}: not a toyrows pair (bad magic)")
    data = (
        np.memmap(f"{prefix}{ROWS}", "<f4", "r", HEADER.size, (count, width))
        if count
        else np.empty((0, width))
    )
    ids = np.memmap(f"{prefix}{LABELS}", "<i4", "r", HEADER.size, (labels,)) if labels else np.empty(0, "<i4")
    return data, ids


def prefix_of(path: Path) -> Path:
    """The pair's prefix, named by itself or by either file."""
    return path.with_suffix("") if path.suffix in (ROWS, LABELS) else path


class ToyReader(Reader[range]):
    format = "toyrows"
    prefix_files = (ROWS, LABELS)  # the hook: ``data/train`` names the pair
    provides = frozenset({Carries.ARRAY, Carries.LABEL})
    positional_keys = True
    forks_cleanly = True

    @classmethod
    def sniff(cls, path: Path) -> bool:
        prefix = prefix_of(path)
        rows = Path(f"{prefix}{ROWS}")
        if not (rows.is_file() and Path(f"{prefix}{LABELS}").is_file()):
            return False
        with open(rows, "rb") as file:
            return file.read(len(ROWS_MAGIC)) == ROWS_MAGIC

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[range]]:
        self.prefix = prefix_of(self.path)
        rows, labels = read_pair(self.prefix)
        self.root = str(self.prefix.parent)
        info = DatasetInfo(self.format, "pair", self.root, labelled=True, records=len(rows))
        if len(labels) < len(rows):
            info.notes.append(
                f"{len(rows) - len(labels)} rows lie past the end of {self.prefix.name}{LABELS}"
            )
        step = max(1, partition_size)
        return info, [range(begin, min(begin + step, len(rows))) for begin in range(0, len(rows), step)]

    def read(self, partition: range, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        rows, labels = read_pair(self.prefix)
        source = f"{self.prefix.name}{ROWS}"
        for index in partition[start:stop]:
            label = int(labels[index]) if index < len(labels) else NO_LABEL
            labelled = label != NO_LABEL
            record = Record(
                source,
                str(index),
                index,
                np.array(rows[index]),
                label if labelled else None,
                {"kind": "array", "shape": str(rows.shape[1]), "label_known": labelled},
            )
            if not labelled:  # its own check says so (label_known: not also missing-label)
                record.problems.append(problem(record, UNLABELLED.id, f"row {index} has no label"))
            yield record

    def members(self, partitions: Sequence[range]) -> Iterator[str]:
        yield f"{self.prefix}{ROWS}"
        yield f"{self.prefix}{LABELS}"

    def locate(self, partition: range, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        source = f"{self.prefix.name}{ROWS}"
        return [(source, str(partition[o]), partition[o]) for o in offsets]


class ToyWriter(Writer[ToyReader]):
    format = "toyrows"
    output_suffixes = (ROWS, LABELS)  # the hook: the cleaned copy is a pair named by a prefix

    def _set_aside(self, verdicts: Verdicts, rows: int) -> np.ndarray:
        source = f"{self.prefix.name}{ROWS}"
        bad = np.zeros(rows, bool)
        if source in verdicts.files:
            bad[:] = True
        for name, index in verdicts.records:
            if name == source and index < rows:
                bad[index] = True
        return bad

    def _values(self, indices: np.ndarray, rows: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """The ledger's value of each row: its source index, values and label."""
        seed = identity_seed(f"{self.prefix.name}{ROWS}")
        return row_values(seed, indices, [row_digests(np.asarray(rows)), row_digests(labels.reshape(-1, 1))])

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        rows, labels = read_pair(self.prefix)
        padded = np.full(len(rows), NO_LABEL, "<i4")
        padded[: min(len(rows), len(labels))] = labels[: len(rows)]
        bad = self._set_aside(verdicts, len(rows))
        tally = Tally()
        for side, target, chosen in ((False, clean, ~bad), (True, quarantine, bad)):
            taken = np.flatnonzero(chosen)
            if target is not None:
                write_pair(target, rows[taken], padded[taken])
            (tally.quarantined if side else tally.kept).add_values(
                self._values(taken, rows[taken], padded[taken])
            )
        tally.records_kept, tally.records_quarantined = int((~bad).sum()), int(bad.sum())
        return tally

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not Path(f"{target}{ROWS}").exists():
            return ledger
        source_rows, _ = read_pair(self.prefix)
        bad = self._set_aside(verdicts, len(source_rows))
        origin = np.flatnonzero(bad if side == "quarantine" else ~bad)
        rows, labels = read_pair(target)
        if len(rows) != len(origin) or len(labels) != len(origin):  # a row lost or added: no match
            ledger.add_values(np.zeros(1, np.uint64))
            return ledger
        ledger.add_values(self._values(origin, rows, np.asarray(labels)))
        return ledger


#: the format's row, which the entry point names
TOYROWS = Format(
    "toyrows",
    "toyrows:ToyReader",
    "toyrows:ToyWriter",
    "toyrows",
    holds="a toyrows pair (PREFIX.rows + PREFIX.labels, named by PREFIX or either file)",
    checks="toyrows",  # where its reader check is declared: `scrub checks` lists it
)
