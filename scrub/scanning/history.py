"""The training splits earlier runs kept (``--against STORE``): a nightly job compares tonight's
evaluation split with every training split kept before, without reading them again.

A store is a folder of one file per training split (`KeptSplit`): the split's `split-leak`
column (each record's content identity and perceptual hash, 24 bytes) in dataset order, and each
record's name (source, key, index) for the findings that name it. A run with ``--against``
compares its evaluation splits with its own training splits and with the kept ones (a kept split
that this run scans again is replaced by what this run read), then keeps its own training
splits, each file replaced whole (`scrub.fixing.outputs.write_atomically`): a night costs the records
it reads, and a comparison of sorted identities, not a second read of the history.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import xxhash

from scrub.checks.base import Column, Position
from scrub.errors import UsageError
from scrub.fixing.outputs import write_atomically
from scrub.paths import absolute_place

#: what a kept split's identities mean: a store written by another definition is not compared
#: (its file is replaced by the next run that reads the split)
IDENTITY_VERSION = 2
SUFFIX = ".split.npz"


@dataclass
class KeptSplit:
    """A training split as an earlier run kept it."""

    path: str  # the dataset, absolute, as that run read it
    kept: str  # when (UTC, ISO 8601)
    column: Column  # its `split-leak` column, positions (0, row) in dataset order
    file: Path

    @property
    def name(self) -> str:
        return PurePath(self.path.rstrip("/")).name

    def locate(self, positions: Sequence[Position]) -> list[tuple[str, str, int]]:
        """The (source, key, index) of the records at ``positions`` (their rows), read from the
        file only when a finding names them."""
        rows = np.array([row for _, row in positions], dtype=np.intp)
        with np.load(self.file, allow_pickle=False) as stored:
            sources, keys, indices = stored["sources"][rows], stored["keys"][rows], stored["indices"][rows]
        return [
            (source.decode(), key.decode(), int(index))
            for source, key, index in zip(sources.tolist(), keys.tolist(), indices.tolist())
        ]


class History:
    """A store of kept training splits, opened once a run starts (a bad ``--against`` is one
    line and exit 2 before anything is read)."""

    def __init__(self, folder: Path, given: str) -> None:
        self.folder, self.given = folder, given
        self.notes: list[str] = []

    @classmethod
    def open(cls, folder: Path, given: str = "--against") -> History:
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"{given} {folder}: not a folder (a store of the training splits runs kept)")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"{given} {folder}: cannot be made ({error.strerror or error})") from None
        return cls(folder, given)

    def kept(self, scanned: Sequence[str]) -> list[KeptSplit]:
        """The kept training splits, but those this run scans (``scanned``, as given): this
        run's reading of them is newer."""
        again = {_file_name(path) for path in scanned}
        splits = []
        for file in sorted(self.folder.glob(f"*{SUFFIX}")):
            if file.name in again:
                continue
            split = _read(file)
            if isinstance(split, str):
                self.notes.append(f"{self.given} {self.folder}: {file.name} {split}: skipped")
            else:
                splits.append(split)
        return splits

    def keep(
        self, path: str, column: Column, locate: Callable[[list[Position]], list[tuple[str, str, int]]]
    ) -> int:
        """Keep a training split's column and its records' names (replacing what was kept of
        it); returns how many records were kept."""
        order = column.in_dataset_order()
        positions = [(int(partition), int(offset)) for partition, offset in column.positions[order].tolist()]
        names = locate(positions) if positions else []
        buffer = io.BytesIO()
        np.savez(
            buffer,
            meta=np.array(
                json.dumps(
                    {
                        "dataset": absolute_place(path),
                        "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "identity_version": IDENTITY_VERSION,
                    }
                )
            ),
            values=column.values[order],
            sources=np.array([source.encode() for source, _, _ in names], dtype=bytes),
            keys=np.array([key.encode() for _, key, _ in names], dtype=bytes),
            indices=np.array([index for _, _, index in names], dtype=np.int64),
        )
        write_atomically(self.folder / _file_name(path), buffer.getvalue(), "store of kept splits")
        return len(names)


def _file_name(path: str) -> str:
    """A kept split's file: named by the digest of its absolute path, the same whichever way a
    run names the dataset."""
    return f"{xxhash.xxh3_64_hexdigest(absolute_place(str(path)).rstrip('/').encode())}{SUFFIX}"


def _read(file: Path) -> KeptSplit | str:
    """A kept split, or why it is none: a file this scrub did not write, or a split kept by
    another definition of the identities (`IDENTITY_VERSION`)."""
    try:
        with np.load(file, allow_pickle=False) as stored:
            meta: dict[str, Any] = json.loads(str(stored["meta"]))
            values = stored["values"]
    except (OSError, ValueError, KeyError):
        meta = {}
    if not isinstance(meta.get("dataset"), str):
        return "is no split kept by this scrub"
    if meta.get("identity_version") != IDENTITY_VERSION:
        return (
            f"keeps {meta['dataset']} by another version's content identities "
            "(scan that training split with --against again to keep it anew)"
        )
    positions = np.zeros((len(values), 2), np.int64)
    positions[:, 1] = np.arange(len(values))
    return KeptSplit(meta["dataset"], str(meta.get("saved", "")), Column(positions, values), file)
