"""Checks on whether a record's bytes can be had at all."""

from __future__ import annotations

from scrub.checks.base import CheckOptions, Finding, reader_check, record_check
from scrub.records import Record, Severity

MISSING_FILE = reader_check(
    "missing-file",
    Severity.ERROR,
    """A list entry whose file does not exist.

    What it finds:
        A line of a Caffe ImageData list (or an HDF5Data source list) naming a file that is not
        there, or that is not a regular file.
    Why it breaks training:
        Caffe aborts the run when it reaches the entry; PyTorch loaders raise mid-epoch, hours in.
    Example:
        `train.txt` says `cats/0042.jpg 3` but `cats/0042.jpg` was never copied.
    What fix does:
        Leaves the line out of the cleaned list; the quarantine list keeps it.
    """,
)

UNSAFE_PATH = reader_check(
    "unsafe-path",
    Severity.ERROR,
    """A list entry or symlink that resolves outside the dataset root; scrub never reads it.

    What it finds:
        `../../etc/passwd`-style entries, absolute paths outside the root, and symlinks (to files
        or folders) whose target lies outside the dataset root.
    Why it breaks training:
        The dataset silently depends on files nobody copies with it, or reads data it should not;
        a copied dataset then trains on different data, or fails.
    Example:
        `train.txt` says `../other_project/img.jpg 1`.
    What fix does:
        Leaves the entry out of the cleaned copy; the quarantine keeps the entry (the list line,
        or the symlink), never the target. An HDF5 file with such a link is set aside whole.
    """,
)


UNDECODABLE_RECORD = reader_check(
    "undecodable-record",
    Severity.ERROR,
    """A value that no codec understands, a Datum that fails to parse, or a pickled value.

    What it finds:
        LMDB values that are neither a Caffe `Datum`, nor encoded image bytes, nor `.npy` bytes;
        Datums whose protobuf does not parse; `.npy` bytes that do not load; and pickled
        values, which scrub never unpickles unless `--allow-pickle` is given (unpickling
        untrusted data runs arbitrary code).
    Why it breaks training:
        The data loader raises on the record mid-epoch; a single undecodable Datum aborts a
        Caffe training run.
    Example:
        Key `00001234_cat/0042.jpg` holds 37 bytes of an interrupted write.
    What fix does:
        Moves the record to the quarantine.
    """,
    needs="values",
)


@record_check("empty-record", Severity.ERROR, needs="any")
def empty_record(record: Record, options: CheckOptions) -> Finding | None:
    """A record whose value is empty: a zero-byte file, an empty value, a zero-size row.

    What it finds:
        Files of size 0 (an interrupted download or copy), empty LMDB values, zero-size rows.
    Why it breaks training:
        Decoders fail on it, or a zero-length input reaches the model and yields an empty batch
        row, whose mean-reduced loss is 0/0 = NaN.
    Example:
        `dog/1234.jpg` has 0 bytes.
    What fix does:
        Moves the record to the quarantine.
    """
    payload = record.payload
    if payload is None:
        return None
    size = len(payload) if isinstance(payload, (bytes, bytearray, memoryview)) else payload.size
    if size == 0:
        return Finding("empty record (0 bytes)", {"size": 0})
    return None
