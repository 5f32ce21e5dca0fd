"""Flat token files: the cleaned copy is a token file of the same kind without the set-aside
windows (a raw ``.bin`` stays raw; an llm.c shard gets a header of its version with the new
token count), the kept windows end to end in source order; the quarantine holds a file of the
set-aside windows, named as the source (the manifest names each by its window number). Read
with the same ``--max-length``, the cleaned copy's windows are the kept ones: only the source's
last window may be shorter, and it stays last on either side.

Windows are checksummed by their tokens' bytes and their number (`scrub.fixing.ledger.row_digests`,
vectorized), a block of windows at a time through the memory map: memory does not grow with
the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from scrub.fixing.ledger import Ledger, identity_seed, row_digests, row_values
from scrub.readers.tokenbin import (
    BLOCK_BYTES,
    HEADER_INTS,
    MAGIC,
    TokenBinReader,
    TokenFile,
    token_file,
)
from scrub.writers.base import Tally, Verdicts, Writer


class TokenBinWriter(Writer[TokenBinReader]):
    format = "tokenbin"

    @property
    def window(self) -> int:
        window = self.reader.options.max_length
        assert window is not None  # the reader refuses to open without it
        return window

    def _bad(self, verdicts: Verdicts, windows: int) -> np.ndarray:
        source = self.source.name
        if source in verdicts.files:
            return np.arange(windows, dtype=np.int64)
        bad = np.array(sorted({i for name, i in verdicts.records if name == source}), dtype=np.int64)
        return bad[(bad >= 0) & (bad < windows)]

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        found = token_file(self.source)
        window = self.window
        windows = -(-found.count // window)
        bad = self._bad(verdicts, windows)
        set_aside = np.zeros(windows, dtype=bool)
        set_aside[bad] = True
        outputs = {False: clean} | ({True: quarantine} if quarantine is not None else {})
        files = {side: _start(path, found) for side, path in outputs.items()}
        counts = {False: 0, True: 0}
        seed = identity_seed(self.source.name)
        tally = Tally()
        tokens = found.tokens()
        for begin, data in _blocks(tokens, window):
            numbers = np.arange(begin, begin + -(-len(data) // window))
            values = row_values(seed, numbers, [_digests(data, window)])
            aside = set_aside[numbers]
            tally.kept.add_values(values[~aside])
            tally.quarantined.add_values(values[aside])
            per_token = np.repeat(aside, window)[: len(data)]
            for side, chosen in ((False, ~per_token), (True, per_token)):
                taken = data[chosen]
                counts[side] += len(taken)
                if side in files:
                    files[side].write(taken.tobytes())
        for side, file in files.items():
            _finish(file, found, counts[side])
        tally.records_quarantined = len(bad)
        tally.records_kept = windows - len(bad)
        return tally

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not target.exists():
            return ledger
        found = token_file(self.source)
        window = self.window
        windows = -(-found.count // window)
        bad = self._bad(verdicts, windows)
        origin = bad if side == "quarantine" else np.setdiff1d(np.arange(windows), bad)
        written = token_file(target)
        if -(-written.count // window) != len(origin):  # a window lost or added: no match
            ledger.add_values(np.zeros(1, np.uint64))
            return ledger
        seed = identity_seed(self.source.name)
        for begin, data in _blocks(written.tokens(), window):
            numbers = origin[begin : begin + -(-len(data) // window)]
            ledger.add_values(row_values(seed, numbers, [_digests(data, window)]))
        return ledger


def _start(path: Path, found: TokenFile) -> BinaryIO:
    """A new token file of the source's kind, its header (if any) to be completed by `_finish`."""
    file = open(path, "wb")  # noqa: SIM115 - written block by block, closed by _finish
    if found.version is not None:
        file.write(np.zeros(HEADER_INTS, "<i4").tobytes())
    return file


def _finish(file: BinaryIO, found: TokenFile, count: int) -> None:
    """llm.c's header, now that the token count is known; then close."""
    if found.version is not None:
        header = np.zeros(HEADER_INTS, "<i4")
        header[:3] = (MAGIC, found.version, count)
        file.seek(0)
        file.write(header.tobytes())
    file.close()


def _blocks(tokens: np.ndarray, window: int) -> Iterator[tuple[int, np.ndarray]]:
    """(first window number, its tokens) of blocks of whole windows (the last may end short)."""
    step = max(1, BLOCK_BYTES // (window * tokens.dtype.itemsize)) * window
    for begin in range(0, len(tokens), step):
        yield begin // window, np.asarray(tokens[begin : begin + step])


def _digests(data: np.ndarray, window: int) -> np.ndarray:
    """One digest per window of ``data`` (the last may be shorter)."""
    whole = len(data) // window
    digests = [row_digests(data[: whole * window].reshape(whole, window))]
    if len(data) % window:
        digests.append(row_digests(data[whole * window :][None]))
    return np.concatenate(digests)
