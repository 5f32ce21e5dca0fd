"""JSON Lines: one JSON object a line (``.jsonl``, ``.ndjson``, a ``.json`` whose lines are each an
object), compressed with gzip (``.jsonl.gz``) or Zstandard (``.jsonl.zst``, needs ``zstandard``),
or a folder of such files (sub-folders too), each file a source. The language-model datasets
people train on are mostly this: a `text`, a chat's `messages`, a `prompt` and its `completion`,
or already tokenized `input_ids` with their `labels` and `attention_mask`
(`scrub.readers.tokenfields` reads the object).

A record is a line, named by its line number counted from 1, as editors and ``sed -n 12p`` number
them (key ``"12"``; its index is the line's 0-based position, 11). Lines end at ``\\n`` only (a
``\\r`` before it is part of the line's ending, as JSON parsers read it). A blank line (nothing
but spaces, tabs, ``\\r``) is no record, as ``datasets.load_dataset("json")`` and
``pandas.read_json(lines=True)`` skip it: it keeps its number (the lines after it are numbered as
an editor shows them) and is counted in the summary's ``skipped``. A line that is not JSON, or
not an object, is a `malformed-record` on that line, never the end of the scan.

Partitions are byte ranges of whole lines: `open` finds the line starts with a vectorized pass
over blocks of the file (a newline search in NumPy, never a Python object a line), keeping the
offset of every `MIN_RECORDS_PER_TASK`-th record only, and each worker reads its range itself. A
compressed file cannot be entered in the middle: it is one partition, decompressed as a stream
by one worker (a folder of compressed files is scanned a file per worker), after `open` has
counted its lines in the same streaming way.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from scrub.checks.base import Finding, make_issue, problem
from scrub.checks.images import IMAGE_EXTENSIONS
from scrub.errors import UnusableDataset, UsageError, first_line
from scrub.fixing.outputs import is_output_name
from scrub.manifest import MANIFEST_SUFFIX
from scrub.readers.base import (
    MIN_RECORDS_PER_TASK,
    CacheEntry,
    DatasetInfo,
    Reader,
    entries_by_place,
    partition_size_for,
)
from scrub.readers.tokenfields import fill_record
from scrub.records import Carries, Record
from scrub.storage import (
    Location,
    location,
    open_range,
    read_range,
    storage_of,
)
from scrub.storage.memo import current_memo
from scrub.storage.spool import Spool, copy_carried, current_spool, read_from, read_once
from scrub.wording import counted

#: what a JSON Lines file's name ends with (a ``.json`` is one by its content: `is_json_lines`)
PLAIN_SUFFIXES = (".jsonl", ".ndjson")
COMPRESSED_SUFFIXES = tuple(f"{plain}{packed}" for plain in PLAIN_SUFFIXES for packed in (".gz", ".zst"))
SUFFIXES = PLAIN_SUFFIXES + COMPRESSED_SUFFIXES
#: Hugging Face's ImageFolder and AudioFolder keep their labels in a ``metadata.jsonl`` among their
#: files: a folder holding one is theirs, not a JSON Lines dataset
METADATA_NAMES = frozenset(f"metadata{suffix}" for suffix in SUFFIXES)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: how much of a ``.json`` file the sniff reads to find its first two lines
SNIFF_BYTES = 1 << 20
#: the blocks `open` scans and workers read
BLOCK_BYTES = 4 << 20
#: a partition holds at most about this many bytes of lines, however few records that is
PARTITION_BYTES = 8 << 20
#: what JSON counts as whitespace: a line of only these is blank
WHITESPACE = b" \t\r\n"
#: one core's throughput parsing and checking lines of a typical chat or text dataset, for
#: `Reader.work_seconds` (see docs/benchmarks.md)
BYTES_PER_SECOND = 50e6


def compression_of(path: Location) -> str | None:
    """ "gzip" or "zstd" by the file's first bytes (its name may not say), else None (what this
    version of the file was, from the memo: `scrub.storage.memo`). An object opened is copied
    first where the opening keeps copies (`scrub.storage.spool`): its survey reads it whole next."""

    return current_memo().remembered(
        "compression", path, lambda: _compression_of(read_once(path, current_spool()))
    )


def _compression_of(path: Location) -> str | None:
    try:
        head = read_range(path, 0, 4)
    except OSError:
        return None
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head == ZSTD_MAGIC:
        return "zstd"
    return None


def zstandard_module() -> Any:
    """The ``zstandard`` module, or a one-line error saying how to install it."""
    try:
        import zstandard
    except ImportError:
        raise UsageError(
            "reading Zstandard-compressed JSON Lines needs zstandard: pip install 'scrub[zstd]' "
            "(or pip install zstandard)"
        ) from None
    return zstandard


class Decompressed:
    """A compressed file's bytes as they decompress; damage (a download cut short, a flipped bit)
    ends them and is remembered in `damage` rather than raised: the lines before it are read,
    the same ones by every reader of the file (the scan's count, a worker, the writer). Read a
    piece at a time (``read1``), so that what decompressed before the damage is kept."""

    def __init__(self, path: Location, compression: str) -> None:
        self.damage: str | None = None
        self.stream: Any
        self.raw = open_range(path)  # an object: read by ranges with read-ahead
        if compression == "gzip":
            self.stream = gzip.open(self.raw, "rb")  # noqa: SIM115  # closed by __exit__
            self.errors: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error)
        else:
            zstandard = zstandard_module()
            self.stream = ZstdFrames(self.raw, zstandard)
            self.errors = (EOFError, OSError, zstandard.ZstdError)

    def readinto(self, view: memoryview) -> int:
        filled = 0
        while filled < len(view) and self.damage is None:
            try:
                piece = self.stream.read1(len(view) - filled)
            except self.errors as error:
                self.damage = first_line(error) or type(error).__name__
                break
            if not piece:
                break
            view[filled : filled + len(piece)] = piece
            filled += len(piece)
        return filled

    def __enter__(self) -> Decompressed:
        return self

    def __exit__(self, *exception: object) -> None:
        self.stream.close()
        if self.raw is not None:
            self.raw.close()


class ZstdFrames:
    """A Zstandard file's frames, one after another, decompressed; a file that ends inside a
    frame raises EOFError (zstandard's stream reader ends there without a word)."""

    def __init__(self, path: Location | IO[bytes], zstandard: Any) -> None:
        self.raw: Any = path if hasattr(path, "read") else open(path, "rb")  # type: ignore[arg-type]  # noqa: SIM115
        self.context = zstandard.ZstdDecompressor()
        self.frame = self.context.decompressobj()
        self.fed = False  # the current frame has had input
        self.pending = b""

    def read1(self, size: int) -> bytes:
        while not self.pending:
            chunk = self.raw.read(1 << 17)
            if not chunk:
                if self.fed and not self.frame.eof:
                    raise EOFError("the file ends inside a Zstandard frame")
                return b""
            out = [self.frame.decompress(chunk)]
            self.fed = True
            while self.frame.eof and self.frame.unused_data:
                rest = self.frame.unused_data
                self.frame = self.context.decompressobj()
                out.append(self.frame.decompress(rest))
            self.pending = b"".join(out)
        piece, self.pending = self.pending[:size], self.pending[size:]
        return piece

    def close(self) -> None:
        self.raw.close()


def open_lines(path: Location, compression: str | None, start: int = 0, end: int | None = None) -> Any:
    """The file's bytes as a stream (``readinto``, ``seek`` for a plain file), decompressed; an
    object is read by ranges with read-ahead (`scrub.storage.open_range`), within ``[start,
    end)`` when it is not compressed (a partition's lines)."""
    if compression is None:
        return open_range(path, start, end)
    return Decompressed(path, compression)


def blocks(stream: Any, limit: int | None = None) -> Iterator[memoryview]:
    """The stream's bytes (at most ``limit`` of them) in blocks of whole lines, each ending with
    a newline but the last, which ends where the stream does; a line longer than a block makes
    the block grow. Read into one reused buffer (fresh blocks cost more in page faults than the
    newline search itself): a block is valid until the next is asked for."""
    buffer = bytearray(BLOCK_BYTES)
    filled = 0  # the start of a line carried over from the last block
    left = limit
    while True:
        want = len(buffer) - filled if left is None else min(len(buffer) - filled, left)
        got = stream.readinto(memoryview(buffer)[filled : filled + want]) or 0 if want else 0
        if left is not None:
            left -= got
        end = filled + got
        if not got:
            if filled:
                yield memoryview(buffer)[:filled]
            return
        cut = buffer.rfind(b"\n", filled, end) + 1
        if not cut:  # no line ends in the buffer: a longer one
            filled = end
            if filled == len(buffer):
                buffer = buffer + bytearray(len(buffer))
            continue
        yield memoryview(buffer)[:cut]
        buffer[: end - cut] = buffer[cut:end]
        filled = end - cut


def lines_of(chunk: memoryview | bytes) -> Iterator[bytes]:
    """The lines of a block of whole lines, each with its ``\\n`` (the last may have none)."""
    parts = bytes(chunk).split(b"\n")
    for part in parts[:-1]:
        yield part + b"\n"
    if parts[-1]:
        yield parts[-1]


def is_blank(line: bytes) -> bool:
    return not line.strip(WHITESPACE)


def line_layout(
    data: np.ndarray, begin: int, end: int, line_start: int, final: bool
) -> tuple[np.ndarray, np.ndarray, int]:
    """(start of each line that ends in ``data[begin:end]``, whether it is blank, the start of the
    line still open at ``end``), vectorized: only lines that begin with whitespace (a record
    begins with ``{``) are looked at one by one. ``line_start`` is where the line open at
    ``begin`` started; ``final``: the data ends at ``end`` (its last line may have no newline)."""
    ends = np.flatnonzero(data[begin:end] == 10) + (begin + 1)
    if final and (ends[-1] if len(ends) else line_start) < end:
        ends = np.append(ends, end)
    starts = np.empty_like(ends)
    if len(ends):
        starts[0] = line_start
        starts[1:] = ends[:-1]
    first = data[starts]
    blank = first == 10  # an empty line
    for line in np.flatnonzero((first == 32) | (first == 9) | (first == 13)).tolist():
        blank[line] = is_blank(data[starts[line] : ends[line]].tobytes())
    return starts, blank, int(ends[-1]) if len(ends) else line_start


@dataclass(frozen=True)
class Lines:
    """A partition: the lines of ``path`` from byte ``start`` (the start of line ``first_line``,
    counted from 0) to ``stop`` (None: the end), holding ``records`` records (its non-blank
    lines); in the decompressed stream for a compressed file."""

    path: str
    source: str
    start: int
    stop: int | None
    first_line: int
    records: int
    compression: str | None
    #: only these records (offsets in the partition): what the result cache left to read
    only: tuple[int, ...] | None = None
    #: the local copy its survey made of a file in a bucket (`scrub.storage.spool`): what the
    #: worker reads instead of fetching the object again
    copy: str | None = None

    def __len__(self) -> int:
        return self.records if self.only is None else len(self.only)


@dataclass
class Layout:
    """What `survey` learned of a file: its lines, records and blank lines (and which lines
    those are: a record's line number follows from them), and the (byte offset, line) of every
    ``stride``-th record."""

    lines: int = 0
    records: int = 0
    blank: int = 0
    size: int = 0  # bytes (decompressed)
    ends_open: bool = False  # the last line has no newline
    damage: str | None = None  # why a compressed file's stream ends early
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    numbers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    blank_lines: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # 0-based, sorted

    def dump(self) -> dict[str, Any]:
        """As msgpack holds it (`scrub.storage.memo`): the arrays as their bytes."""
        return self.__dict__ | {name: getattr(self, name).astype(np.int64).tobytes() for name in _ARRAYS}

    @classmethod
    def load(cls, held: dict[str, Any]) -> Layout:
        return cls(**(held | {name: np.frombuffer(held[name], np.int64).copy() for name in _ARRAYS}))

    def line_numbers(self, first_line: int, offsets: Sequence[int]) -> list[int]:
        """The 0-based line numbers of the records at ``offsets`` counted from the record on line
        ``first_line`` (a partition's): the non-blank lines, counted, without reading the file."""
        blank, found = self.blank_lines, []
        before = int(np.searchsorted(blank, first_line))  # blank lines before the partition
        for offset in offsets:  # the first line x with offset + 1 records in [first_line, x]
            low, high = first_line + offset, first_line + offset + len(blank) - before
            while low < high:
                middle = (low + high) // 2
                records = middle - first_line + 1 - (int(np.searchsorted(blank, middle, "right")) - before)
                low, high = (middle + 1, high) if records < offset + 1 else (low, middle)
            found.append(low)
        return found


#: the arrays of a `Layout`
_ARRAYS = ("offsets", "numbers", "blank_lines")


def remembered_survey(
    path: Location, compression: str | None, stride: int, spool: Spool | None = None
) -> Layout:
    """`survey` of this version of the file, from the memo where an earlier run with ``--cache``
    surveyed it (`scrub.storage.memo`): an unchanged file is not read to be opened. An object
    surveyed is copied by ``spool`` first, where there is one (read once)."""

    return current_memo().remembered(
        "jsonl-layout",
        path,
        lambda: survey(read_once(path, spool), compression, stride),
        f"{compression}|{stride}",
        Layout.dump,
        Layout.load,
    )


def survey(path: Location, compression: str | None, stride: int) -> Layout:
    """Count a file's lines and records, a block at a time as it streams (decompressed), and
    note where every ``stride``-th record starts."""
    layout = Layout()
    offsets: list[np.ndarray] = []
    numbers: list[np.ndarray] = []
    blank_lines: list[np.ndarray] = []
    with open_lines(path, compression) as stream:
        for chunk in blocks(stream):
            data = np.frombuffer(chunk, dtype=np.uint8)
            starts, blank, _ = line_layout(data, 0, len(data), 0, True)
            records = np.flatnonzero(~blank)
            first = -layout.records % stride
            offsets.append(layout.size + starts[records[first::stride]])
            numbers.append(layout.lines + records[first::stride])
            blank_lines.append(layout.lines + np.flatnonzero(blank))
            layout.lines += len(starts)
            layout.records += len(records)
            layout.blank += int(blank.sum())
            layout.size += len(data)
            layout.ends_open = bool(data[-1] != 10)
            del data  # the buffer is reused for the next block
        layout.damage = getattr(stream, "damage", None)
    if offsets:
        layout.offsets, layout.numbers = np.concatenate(offsets), np.concatenate(numbers)
        layout.blank_lines = np.concatenate(blank_lines).astype(np.int64)
    return layout


def is_json_lines(path: Location) -> bool:
    """Whether a ``.json`` file holds JSON Lines: its first line that is not blank is an object
    on its own, and a second such line follows. A COCO file or any single JSON document is not
    (pretty-printed, its first line is ``{`` alone; on one line, no second line follows)."""
    try:
        head = read_range(path, 0, SNIFF_BYTES)
    except OSError:
        return False
    found = [line for line in head.split(b"\n")[:-1] if not is_blank(line)][:2]
    if len(found) < 2 or not found[1].lstrip(WHITESPACE).startswith(b"{"):
        return False
    try:
        return isinstance(orjson.loads(found[0]), dict)
    except orjson.JSONDecodeError:
        try:
            return isinstance(json.loads(found[0]), dict)
        except (ValueError, RecursionError):
            return False


def has_json_lines_name(name: str) -> bool:
    return name.lower().endswith(SUFFIXES)


def _scrubs_own(name: str) -> bool:
    """scrub's own outputs, which a folder may hold: a scan's manifest (JSON Lines itself), a
    cleaned copy, a quarantine."""
    return name.endswith(MANIFEST_SUFFIX) or is_output_name(name)


def _not_data(name: str) -> bool:
    """A name a walk for JSON Lines files leaves out: hidden, or scrub's own outputs."""
    return name.startswith(".") or _scrubs_own(name)


def _first_json_lines_file(folder: Location) -> bool:
    """Whether a JSON Lines file (by its name) lies in ``folder`` or below, found without listing
    the whole tree (a prefix of a bucket: from one listing), a folder before those below it; one
    beside images is theirs (Hugging Face ImageFolder's ``metadata.jsonl``, a detection
    dataset's annotations), not a dataset of its own."""
    storage = storage_of(folder)
    with storage.errors_as_one_line(folder):
        for _, folders, files in storage.walk(folder):
            folders[:] = [name for name in folders if not _not_data(name)]
            names = [name.lower() for name in files if not _not_data(name)]
            if any(os.path.splitext(name)[1] in IMAGE_EXTENSIONS or name in METADATA_NAMES for name in names):
                return False
            if any(has_json_lines_name(name) for name in names):
                return True
    return False


def parse(line: bytes) -> tuple[Any, str | None]:
    """(the line's value, None), or (None, why it is not JSON). orjson first; Python's ``json``
    for what orjson refuses and Python (so a ``json.loads`` loader) reads: NaN, integers beyond
    64 bits; but not a lone surrogate, which Python alone reads (`_not_text`)."""
    try:
        return orjson.loads(line), None
    except orjson.JSONDecodeError:
        pass
    try:
        value = json.loads(line)
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as error:
        return None, f"{error.msg.removesuffix(' at')} at column {error.colno}"
    except (ValueError, RecursionError) as error:
        return None, first_line(error) or type(error).__name__
    why = _not_text(line, value)
    return (None, why) if why is not None else (value, None)


def _not_text(line: bytes, value: Any) -> str | None:
    """Why a line that orjson refuses and Python's ``json`` reads is not text, or None: Python
    decodes a line's bytes with ``surrogatepass`` and its ``\\ud800`` escapes alone, so a lone
    surrogate (encoded as bytes ``ED A0 80``, or escaped) passes ``json.loads`` and then breaks
    whatever encodes the text again (a tokenizer, orjson, Arrow) mid-epoch."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not UTF-8 text: byte {error.start}: {error.reason} (a surrogate or a damaged character)"
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate escaped (\\ud800 to \\udfff): no character (orjson and tokenizers refuse it)"
    except (ValueError, RecursionError):
        pass
    return None


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


class JsonLinesReader(Reader[Lines]):
    format = "jsonl"
    reads_objects = True  # through fsspec (`scrub.storage`)
    forks_cleanly = True  # its scan holds line offsets, no handle
    file_suffixes = SUFFIXES
    records_per_task = 20_000
    provides = frozenset({Carries.TOKENS, Carries.SEQUENCES})
    options_used = frozenset({"data_key", "label_key"})
    worker_imports = ("orjson", "scrub.readers.tokenfields")

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if path.is_file():
            name = path.name.lower()
            return has_json_lines_name(name) or (name.endswith(".json") and is_json_lines(path))
        if path.is_dir():
            try:
                return _first_json_lines_file(path)
            except OSError:
                return False
        return False

    @classmethod
    def holds_dataset(cls, path: Path) -> bool:
        return not _scrubs_own(path.name) and cls.sniff(path)

    def files(self) -> tuple[list[Path], list[Path]]:
        """(the JSON Lines files, in path order; the other files of a folder)."""
        if self.path.is_file():
            return [self.path], []
        found: list[Path] = []
        others: list[Path] = []
        storage = storage_of(self.path)
        with storage.errors_as_one_line(self.path):
            keys = list(storage.files_below(self.path, skip=_not_data))
        for key in sorted(keys, key=lambda key: key.split("/")):  # the order of their sources
            path = self.path.joinpath(*key.split("/"))
            name = key.rsplit("/", 1)[-1].lower()
            chosen = has_json_lines_name(name) or (name.endswith(".json") and is_json_lines(path))
            (found if chosen else others).append(path)
        return found, others

    def place(self, path: str) -> Any:
        """A partition's file as a path or an object (a worker opens it itself)."""
        return location(path, self.options.storage)

    def source_of(self, path: Any) -> str:
        if self.path.is_file():
            return path.name
        return storage_of(self.path).relative(path, self.path)

    def open(self, partition_size: int) -> tuple[DatasetInfo, list[Lines]]:
        files, others = self.files()
        if not files:
            raise UnusableDataset(f"{self.path}: no JSON Lines files (.jsonl, .jsonl.gz, .jsonl.zst) here")
        self.root = str(self.path.parent if self.path.is_file() else self.path)
        info = DatasetInfo(format=self.format, layout="lines", root=self.root, labelled=False, records=0)
        stride = max(1, min(MIN_RECORDS_PER_TASK, partition_size))
        layouts: list[tuple[Path, str, str | None, Layout]] = []
        spool = current_spool()
        copies: dict[str, str | None] = {}  # file -> the copy its survey made (`scrub.storage.spool`)
        for path in files:
            compression = compression_of(path)
            what = {"gzip": "gzip file", "zstd": "Zstandard file"}.get(compression or "", "file")
            try:
                layout = remembered_survey(path, compression, stride, spool)
            except OSError as error:
                raise UnusableDataset(f"{path}: cannot read ({error.strerror or error})") from None
            if layout.damage is not None and not layout.lines and self.path.is_file():
                raise UnusableDataset(f"{path}: not a readable {what} ({layout.damage})")
            source = self.source_of(path)
            layouts.append((path, source, compression, layout))
            copies[str(path)] = copy_carried(path, spool)
            info.records += layout.records
            info.files[source] = {
                "lines": layout.lines,
                "records": layout.records,
                "blank_lines": layout.blank,
                "compression": compression or "none",
                "bytes": layout.size,
            }
            if layout.damage is not None:
                info.files[source]["damaged_after_line"] = layout.lines
                info.issues.append(
                    make_issue(
                        "malformed-record",
                        source,
                        "*",
                        None,
                        Finding(
                            f"the {what} is damaged after line {layout.lines} ({layout.damage}): the "
                            "lines before are scanned; fix sets the whole file aside",
                            {"lines_read": layout.lines},
                        ),
                    )
                )
        #: each file's survey, on the driver: `locate` numbers records from its blank lines
        self._layouts = {str(path): layout for path, _, _, layout in layouts}
        size = partition_size_for(info.records, partition_size)
        partitions = [
            replace(partition, copy=copies.get(partition.path))
            for path, source, compression, layout in layouts
            for partition in _partitions(str(path), source, compression, layout, stride, size)
        ]
        blank = sum(layout.blank for *_, layout in layouts)
        if blank:
            info.skipped["blank line"] = blank
        if others:
            info.skipped["not a JSON Lines file"] = len(others)
        info.notes.append(
            "records are lines, keyed by their line number counted from 1 (as editors number them)"
            + (
                f"; {counted(blank, 'blank line')} skipped (datasets and pandas skip them too)"
                if blank
                else ""
            )
        )
        if not info.records:
            raise UnusableDataset(f"{self.path}: no JSON lines in it (empty, or every line is blank)")
        self.work_seconds = sum(layout.size for *_, layout in layouts) / BYTES_PER_SECOND
        return info, partitions

    def __getstate__(self) -> dict[str, Any]:
        """A worker gets no surveys: it reads the lines it names."""
        return {key: value for key, value in self.__dict__.items() if key != "_layouts"}

    def _read_from(self, partition: Lines) -> Location:
        """Where the partition's lines are read: its file's local copy, else the file."""
        return read_from(partition.path, partition.copy, self.options.storage)

    def read(self, partition: Lines, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        data_key, label_key = self.options.data_key, self.options.label_key
        chosen: set[int] | None = None
        if partition.only is not None:
            wanted = partition.only[start:stop]
            chosen, start, stop = set(wanted), min(wanted, default=0), max(wanted, default=-1) + 1
        for offset, number, line in _records(self._read_from(partition), partition, stop):
            if offset < start or (chosen is not None and offset not in chosen):
                continue
            record = Record(partition.source, str(number + 1), number, None, None)
            value, why = parse(line[:-1] if line.endswith(b"\n") else line)
            if why is not None:
                if not line.endswith(b"\n"):
                    why += "; the file ends inside this line, with no newline (cut short?)"
                record.problems.append(problem(record, "malformed-record", f"not JSON: {why}"))
            elif not isinstance(value, dict):
                record.problems.append(
                    problem(record, "malformed-record", f"{_json_kind(value)}, not a JSON object")
                )
            else:
                fill_record(record, value, data_key, label_key)
            yield record

    def cache_entries(self, partition: Lines) -> list[CacheEntry | None]:
        """A line's verdict depends on its bytes, named without reading them by its file's
        version and its place in the file (`scrub.readers.base.entries_by_place`)."""
        source = partition.source
        numbers = range(partition.records)
        return entries_by_place(
            self, partition.path, source, partition.start, numbers, "", lambda offset: f"{source}\0{offset}"
        )

    def subset(self, partition: Lines, offsets: Sequence[int]) -> Lines:
        return replace(partition, only=tuple(offsets))

    def members(self, partitions: Sequence[Lines]) -> Iterator[str]:
        for path in self.files()[0]:
            yield str(path)

    def locate(self, partition: Lines, offsets: Sequence[int]) -> list[tuple[str, str, int]]:
        if not offsets:
            return []
        layout = self.__dict__.get("_layouts", {}).get(partition.path)
        if layout is not None:  # opening's survey (or its memo): the file is not read
            lines = layout.line_numbers(partition.first_line, offsets)
            return [(partition.source, str(number + 1), number) for number in lines]
        numbers = {
            offset: number
            for offset, number, _ in _records(self._read_from(partition), partition, max(offsets) + 1)
        }
        return [(partition.source, str(numbers[o] + 1), numbers[o]) for o in offsets]


def _partitions(
    path: str, source: str, compression: str | None, layout: Layout, stride: int, size: int
) -> list[Lines]:
    """A file's partitions: runs of about ``size`` records and at most about `PARTITION_BYTES`,
    cut at the recorded record starts; a compressed file's one."""
    if not layout.records:
        return []
    if compression is not None:
        return [Lines(path, source, 0, None, 0, layout.records, compression)]
    ordinals = np.arange(len(layout.offsets), dtype=np.int64) * stride
    cut = np.ones(len(ordinals), dtype=bool)
    cut[1:] = (ordinals[1:] // size != ordinals[:-1] // size) | (
        layout.offsets[1:] // PARTITION_BYTES != layout.offsets[:-1] // PARTITION_BYTES
    )
    firsts = np.flatnonzero(cut).tolist()
    partitions = []
    for number, first in enumerate(firsts):
        end = firsts[number + 1] if number + 1 < len(firsts) else None
        records = (int(ordinals[end]) if end is not None else layout.records) - int(ordinals[first])
        stop = int(layout.offsets[end]) if end is not None else None
        partitions.append(
            Lines(path, source, int(layout.offsets[first]), stop, int(layout.numbers[first]), records, None)
        )
    return partitions


def _records(place: Location, partition: Lines, stop: int | None = None) -> Iterator[tuple[int, int, bytes]]:
    """(offset in the partition, 0-based line number, the line with its newline) of the
    partition's records, up to offset ``stop``."""
    offset, number = 0, partition.first_line
    if stop is not None and stop <= 0:
        return
    with open_lines(place, partition.compression, partition.start, partition.stop) as stream:
        if partition.start:
            stream.seek(partition.start)
        limit = None if partition.stop is None else partition.stop - partition.start
        for chunk in blocks(stream, limit):
            for line in lines_of(chunk):
                if not is_blank(line):
                    yield offset, number, line
                    offset += 1
                    if stop is not None and offset >= stop:
                        return
                number += 1


def stream_lines(path: Location, compression: str | None) -> Iterator[bytes]:
    """Every line of a file, blank ones too, each with its newline (the last may have none):
    what the writer copies."""
    with open_lines(path, compression) as stream:
        for chunk in blocks(stream):
            yield from lines_of(chunk)
