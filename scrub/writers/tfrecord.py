"""TFRecord files: each source file becomes a file of the same name in the cleaned copy (a
folder stays a folder, one file stays one file) holding its kept records' frames byte for byte
(header, CRCs, data: nothing is re-encoded); the quarantine holds files of the set-aside frames
only. A GZIP-compressed file is written compressed. A record that ends the framing (a bad length
CRC, a file cut short: `scrub.readers.tfframes`) is the rest of the file, copied as it is.

Each record is tallied by its source file, its position there and its frame's bytes; an output
is read back frame by frame and its frames matched, in order, with the positions of the records
that went to that side.
"""

from __future__ import annotations

import contextlib
import gzip
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, cast

import xxhash

from scrub.fixing.ledger import Ledger, identity_seed
from scrub.readers.tfframes import (
    CHUNK,
    CUT,
    LENGTH_CRC,
    STREAM_ERRORS,
    Frame,
    first_bytes,
    open_raw,
    open_records,
    stored_size,
    walk_frames,
)
from scrub.readers.tfrecord import TFRecordReader
from scrub.writers.base import FileSetWriter, Tally, Verdicts

#: the part of a TFRecord file's name a cleaned copy's ``.clean`` goes before
_SUFFIX = re.compile(r"(\.tfrec(ord)?s?(\.gz)?|\.tfrecords?-\d+-of-\d+|-\d{5}-of-\d{5})$", re.IGNORECASE)


def split_name(name: str) -> tuple[str, str]:
    """(name without its TFRecord suffix, the suffix): ``train.tfrecord-00000-of-00002`` ->
    (``train``, ``.tfrecord-00000-of-00002``); another name splits at its last dot."""
    match = _SUFFIX.search(name)
    if match is None:
        stem, dot, suffix = name.rpartition(".")
        return (stem, dot + suffix) if stem else (name, "")
    return name[: match.start()], name[match.start() :]


class TFRecordWriter(FileSetWriter[TFRecordReader]):
    format = "tfrecord"
    reads_objects = True

    split_name = staticmethod(split_name)

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        tally = Tally()
        quarantines = self.make_outputs(clean, quarantine)
        index = 0
        for file, clean_file in self.file_targets(clean):
            source, gzipped = file.name, first_bytes(file)[1]
            if source in verdicts.files:  # set aside whole: copied as it is
                if file in quarantines:
                    with open_raw(file) as whole, open(quarantines[file], "wb") as copy:
                        shutil.copyfileobj(whole, copy, 1 << 20)
                for frame, contents in _frames(file, gzipped, lambda frame: None):
                    tally.quarantined.add_record(identity_seed(source, frame.position), *contents)
                    tally.records_quarantined += 1
                    index += 1
                continue
            index = _split_file(file, gzipped, verdicts, index, clean_file, quarantines.get(file), tally)
        return tally

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not target.exists():
            return ledger
        first = 0
        for file, output in self.file_targets(target):
            source = file.name
            records = int(self.info.files[source]["records"])
            positions = [
                position
                for position in range(records)
                if (source in verdicts.files or verdicts.quarantined(source, first + position))
                == (side == "quarantine")
            ]
            first += records
            if not output.exists():
                continue
            for number, (_, contents) in enumerate(
                _frames(output, first_bytes(str(output))[1], lambda f: None)
            ):
                position = positions[number] if number < len(positions) else f"extra {number}"
                ledger.add_record(identity_seed(source, position), *contents)
        return ledger


def _split_file(
    file: Path,
    gzipped: bool,
    verdicts: Verdicts,
    index: int,
    clean: Path,
    quarantine: Path | None,
    tally: Tally,
) -> int:
    """Write a file's kept frames to ``clean`` and its set-aside ones to ``quarantine`` (made
    when the first one comes; None: nowhere); the index of the record after its last."""
    source = file.name
    with _new_file(clean, gzipped) as kept, contextlib.ExitStack() as opened:
        set_aside: list[IO[bytes]] = []

        def target(frame: Frame) -> IO[bytes] | None:
            if not verdicts.quarantined(source, index):
                return kept
            if not set_aside and quarantine is not None:
                set_aside.append(opened.enter_context(_new_file(quarantine, gzipped)))
            return set_aside[0] if set_aside else None

        for frame, contents in _frames(file, gzipped, target):
            quarantined = verdicts.quarantined(source, index)
            index += 1
            (tally.quarantined if quarantined else tally.kept).add_record(
                identity_seed(source, frame.position), *contents
            )
            if quarantined:
                tally.records_quarantined += 1
            else:
                tally.records_kept += 1
    return index


@contextlib.contextmanager
def _new_file(path: Path, gzipped: bool) -> Iterator[IO[bytes]]:
    """A new output file (never one that exists), gzip-compressed when the source was."""
    with open(path, "xb") as file:
        if not gzipped:
            yield file
            return
        with gzip.GzipFile(filename="", mode="wb", fileobj=file, mtime=0) as compressed:
            yield cast(IO[bytes], compressed)


def _frames(
    path: Path, gzipped: bool, target: Callable[[Frame], IO[bytes] | None]
) -> Iterator[tuple[Frame, list[bytes]]]:
    """Every frame of a file with what the ledger tallies of it, each written to ``target(frame)``
    (None: nowhere) before the next is read: its bytes, or for a frame that ends the framing (the
    rest of the file, read and written in chunks) a digest of them."""
    size = None if gzipped else stored_size(path)
    with open_records(path, gzipped) as stream:
        for frame in walk_frames(stream, size=size):
            output = target(frame)
            if frame.problem not in (LENGTH_CRC, CUT):
                raw = frame.raw
                if output is not None:
                    output.write(raw)
                yield frame, [raw]
                continue
            digest = xxhash.xxh3_128()
            chunk = frame.raw
            while chunk:
                digest.update(chunk)
                if output is not None:
                    output.write(chunk)
                try:
                    chunk = stream.read(CHUNK)
                except STREAM_ERRORS:
                    break
            yield frame, [b"the rest of the file", digest.digest()]
