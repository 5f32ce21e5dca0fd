"""JSON Lines: each source file becomes a file of the same name (a folder stays a folder,
sub-folders kept) holding the source's lines but the set-aside ones, byte for byte and in order
(blank lines, which are no records, stay where they were); the quarantine holds files of the
set-aside lines, byte for byte, in order. A compressed source is written compressed the same way
(gzip or Zstandard: the lines are the same, the compressed bytes need not be). A file set aside
whole (a damaged compressed stream) is copied byte for byte into the quarantine, as a damaged
WebDataset shard is. Other files of a folder (a README) are copied into the cleaned copy.

Nothing more is needed to put a line back where it was: the manifest names each set-aside line by
its number, and `scrub restore` writes the cleaned copy again from the source. Each record is
checksummed over its source, its line number and its bytes; reading an output back, the line
numbers are recovered from the verdicts (the cleaned copy's lines are the source's in order, with
the set-aside ones left out), so a lost, doubled or altered line changes the sums.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

from scrub.fixing.ledger import Ledger, identity_seed, record_hash
from scrub.readers.jsonl import (
    SUFFIXES,
    JsonLinesReader,
    compression_of,
    is_blank,
    stream_lines,
    zstandard_module,
)
from scrub.writers.base import FileSetWriter, Tally, Verdicts

#: lines are gathered into writes of about this many bytes
WRITE_BYTES = 1 << 20
#: gzip's own default level (`gzip` on the command line); Python's (9) is several times slower
GZIP_LEVEL = 6


def split_name(name: str) -> tuple[str, str]:
    """(name without its JSON Lines suffix, the suffix): ``train.jsonl.gz`` -> (``train``,
    ``.jsonl.gz``); another name splits at its last dot, as `pathlib` does."""
    lower = name.lower()
    suffix = next((s for s in sorted(SUFFIXES, key=len, reverse=True) if lower.endswith(s)), "")
    if not suffix:
        path = Path(name)
        return path.stem, path.suffix
    return name[: len(name) - len(suffix)], name[len(name) - len(suffix) :]


def line_value(source: str, number: int, line: bytes) -> int:
    """A record's ledger value: its source, its 0-based line number and its bytes."""
    return record_hash(identity_seed(source, number), line)


class JsonLinesWriter(FileSetWriter[JsonLinesReader]):
    format = "jsonl"
    reads_objects = True

    split_name = staticmethod(split_name)

    def source_files(self) -> list[Any]:
        return self.reader.files()[0]

    def file_name(self, file: Any) -> str:
        return self.reader.source_of(file)  # its path in the folder: files of sub-folders too

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        tally = Tally()
        quarantines = self.make_outputs(clean, quarantine)
        for path, target in self.file_targets(clean):
            source = self.file_name(path)
            compression = compression_of(path)
            if source in verdicts.files:  # set aside whole (damaged): copied byte for byte
                self._set_aside_whole(path, source, compression, target, quarantines.get(path), tally)
                continue
            with (
                _Output(target, compression, always=True) as kept,
                _Output(quarantines.get(path), compression) as held,
            ):
                for number, line in enumerate(stream_lines(path, compression)):
                    if is_blank(line):
                        kept.write(line)
                        continue
                    value = line_value(source, number, line)
                    if verdicts.quarantined(source, number):
                        tally.quarantined.add(value)
                        tally.records_quarantined += 1
                        held.write(line)
                    else:
                        tally.kept.add(value)
                        tally.records_kept += 1
                        kept.write(line)
        if self.source.is_dir():
            tally.other_files += self._copy_other_files(clean)
        return tally

    def _set_aside_whole(
        self, path: Path, source: str, compression: str | None, clean: Path, held: Path | None, tally: Tally
    ) -> None:
        """A file set aside whole (a damaged compressed stream) goes into the quarantine as it is;
        its records, the lines read before the damage, are tallied there. A single file's cleaned
        copy is then an empty file."""
        if held is not None:
            held.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, held)
        if not self.source.is_dir():
            clean.touch(exist_ok=False)
        for number, line in enumerate(stream_lines(path, compression)):
            if not is_blank(line):
                tally.quarantined.add(line_value(source, number, line))
                tally.records_quarantined += 1

    def _copy_other_files(self, clean: Path) -> int:
        """A folder's files that are not JSON Lines (a README), copied into the cleaned copy."""
        others = self.reader.files()[1]
        for path in others:
            target = clean / path.relative_to(self.source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        return len(others)

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not target.exists():
            return ledger
        for path, output in self.file_targets(target):
            source = self.file_name(path)
            if not output.exists():
                continue
            lines = stream_lines(str(output), compression_of(output))
            if side == "clean":
                _tally_clean(ledger, verdicts, source, lines)
            else:
                _tally_quarantine(ledger, verdicts, source, lines, path)
        return ledger


def _tally_clean(ledger: Ledger, verdicts: Verdicts, source: str, lines: Iterator[bytes]) -> None:
    """The cleaned copy's records: its lines are the source's with the set-aside ones left out, so
    each line's number in the source is the next one not set aside."""
    if source in verdicts.files:  # set aside whole: nothing of it belongs here
        for line in lines:
            if not is_blank(line):
                ledger.add(0)  # the sums cannot match
        return
    number = 0
    for line in lines:
        while verdicts.quarantined(source, number):  # a set-aside line is never blank
            number += 1
        if not is_blank(line):
            ledger.add(line_value(source, number, line))
        number += 1


def _tally_quarantine(
    ledger: Ledger, verdicts: Verdicts, source: str, lines: Iterator[bytes], path: Path
) -> None:
    """The quarantine's records: the set-aside lines in source order (every record of a source set
    aside whole, whose numbers are read from the source)."""
    if source in verdicts.files:
        numbers: Iterator[int] = (
            number
            for number, line in enumerate(stream_lines(path, compression_of(path)))
            if not is_blank(line)
        )
    else:
        numbers = iter(sorted(index for name, index in verdicts.records if name == source))
    for line in lines:
        if is_blank(line):
            continue
        number = next(numbers, None)
        ledger.add(line_value(source, number, line) if number is not None else 0)


class _Output:
    """An output file, created on the first line written (none for a side that gets no line, but
    for the cleaned copy, which always exists), compressed as its source; lines are gathered into
    larger writes."""

    def __init__(self, path: Path | None, compression: str | None, always: bool = False) -> None:
        self.path = path
        self.compression = compression
        self.always = always
        self.pending: list[bytes] = []
        self.size = 0
        self.file: IO[bytes] | None = None
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> _Output:
        return self

    def write(self, line: bytes) -> None:
        if self.path is None:
            return
        self.pending.append(line)
        self.size += len(line)
        if self.size >= WRITE_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.path is None:
            return
        if self.file is None:
            self.file = self._open(self.path)
        if self.pending:
            self.file.write(b"".join(self.pending))
        self.pending, self.size = [], 0

    def _open(self, path: Path) -> IO[bytes]:
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = self.stack.enter_context(open(path, "xb"))  # noqa: SIM115  # closed by the stack
        if self.compression == "gzip":
            packed = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0)
            return cast(IO[bytes], self.stack.enter_context(packed))
        if self.compression == "zstd":
            writer = zstandard_module().ZstdCompressor().stream_writer(raw, closefd=False)
            return cast(IO[bytes], self.stack.enter_context(writer))
        return raw

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        try:
            if error is None and (self.pending or self.always):
                self.flush()
        finally:
            self.stack.close()
