"""Checks on whether a record's bytes can be had at all."""

from __future__ import annotations

from scrub.checks.base import CheckOptions, Finding, reader_check, record_check
from scrub.records import Carries, Record, Severity

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
    needs=Carries.VALUES,
)


MALFORMED_SAMPLE = reader_check(
    "malformed-sample",
    Severity.ERROR,
    """A WebDataset sample that a loader cannot use whole.

    What it finds:
        A sample (the tar members sharing a key) with no image, `.npy`, text, `.json`, msgpack or
        `.ten` member to train on; a member the shard ends inside of (a truncated download or
        copy), or the last sample before a tar header the shard ends inside of (`tarfile` and
        WebDataset stop there without a word: the samples after it are lost); two members with
        the same extension (WebDataset raises "duplicate file name"); a `.json`, msgpack, `.ten`
        or second `.npy` member that does not load.
    Why it breaks training:
        WebDataset's decoder raises on the sample (a `KeyError` for the missing `jpg`, a
        `ReadError` for the cut member), which ends the epoch unless a handler skips it
        silently: either way the run does not train on what the shard claims.
    Example:
        `train-000007.tar` stops 6 KB into `000070031.jpg`.
    What fix does:
        Moves the sample to the quarantine shard (a cut member keeps the bytes there were).
    """,
    needs=Carries.SAMPLES,
)

DAMAGED_SHARD = reader_check(
    "damaged-shard",
    Severity.ERROR,
    """A tar shard whose member headers stop before its end.

    What it finds:
        A header that fails its checksum, or data that is not a header where one must be: the
        members after it cannot be found. Python's `tarfile` (and so WebDataset) stops there
        without a word, dropping the rest of the shard from every epoch.
    Why it breaks training:
        Each epoch silently trains on part of the shard; a partly overwritten shard may also
        hold half-written samples.
    Example:
        `train-000012.tar` has 48 MB after its member 1,204 that no header describes.
    What fix does:
        Sets the whole shard aside: it is copied byte for byte into the quarantine (rebuild it);
        the samples read before the damage are still scanned and reported.
    """,
    needs=Carries.SAMPLES,
)

RECORD_CRC_MISMATCH = reader_check(
    "record-crc-mismatch",
    Severity.ERROR,
    """A TFRecord record whose length or data fails its CRC32C: its bytes are not what was written.

    What it finds:
        A record whose data does not match the masked CRC32C stored after it (bit rot, a bad
        copy), or whose length does not match the CRC stored after the length. A bad length
        leaves nothing to find the next record by: the rest of the file is that one record,
        and the records before it are scanned (details: `part`, "data" or "length", `offset`).
    Why it breaks training:
        TensorFlow's reader raises `DataLossError` on it and ends the epoch (or, with
        `ignore_errors()`, drops the rest of the file without a word); readers that skip CRCs
        train on the damaged bytes.
    Example:
        Record 1,204 of `train.tfrecord-00003-of-00010` has one flipped bit in its JPEG.
    What fix does:
        Moves the record's frame to the quarantine byte for byte (for a bad length: the rest of
        the file); the cleaned file keeps every other frame byte for byte.
    """,
    needs=Carries.FRAMES,
)

TRUNCATED_RECORD = reader_check(
    "truncated-record",
    Severity.ERROR,
    """A TFRecord file that ends inside a record: the file was cut short.

    What it finds:
        A last record whose header or data runs past the end of the file (an interrupted write,
        download or copy), or where a GZIP file's compressed stream ends or breaks. The
        records before it are scanned; the cut one is keyed by the position it holds (details:
        `offset`, `length`).
    Why it breaks training:
        TensorFlow's reader raises `DataLossError` ("truncated record") when it reaches the
        end of the file, every epoch; a pipeline that ignores errors silently trains without
        it.
    Example:
        `train-00007-of-00010` stops 6 KB into record 811, which claims 48 KB.
    What fix does:
        Moves what there is of the record to the quarantine; the cleaned file ends cleanly after
        the record before it.
    """,
    needs=Carries.FRAMES,
)

UNREADABLE_FILE = reader_check(
    "unreadable-file",
    Severity.ERROR,
    """A file of a dataset of several files that its format's library cannot open; the others are read.

    What it finds:
        In a folder or list of HDF5 files, or a folder of Parquet files: a file that is not of
        the format at all, one cut short (its footer or superblock gone), or an HDF5 file
        without the data (or `--label-key`) dataset the others have; a Hugging Face
        `save_to_disk` folder's damaged `state.json`, `dataset_info.json` or
        `dataset_dict.json` (`datasets.load_from_disk` fails on it). Key `*`, source the file;
        the message is the library's reason. When no file of the dataset can be read, the
        dataset is unusable: one line and exit 2.
    Why it breaks training:
        A loader that opens the files in turn fails on it when it reaches it, hours into the
        run (h5py's "file signature not found", pyarrow's "Parquet magic bytes not found"), or
        a handler skips it without a word and the run trains on less data than intended.
    Example:
        `data/named.h5: no dataset 'data' (datasets: features, label)` among eight HDF5 files.
    What fix does:
        Sets the whole file aside: it is copied byte for byte into the quarantine, and the
        cleaned copy holds the other files (a list file's copy no longer names it). A damaged
        `save_to_disk` description is written anew in the cleaned copy from its data files.
    """,
    needs=Carries.SEVERAL_FILES,
)

UNREADABLE_DATASET = reader_check(
    "unreadable-dataset",
    Severity.ERROR,
    """One of several datasets of a run that cannot be opened at all; the others are scanned.

    What it finds:
        A dataset named among others (several paths, a glob pattern, a folder of datasets) that
        no reader can open: an HDF5 file without the data dataset the others have, a damaged
        container, a file no reader recognizes. Its message is the one the dataset gives when it
        is named alone (then it stays one line and exit 2, as any unusable input).
    Why it breaks training:
        A loader that globs the folder fails on it when it reaches it, hours into the run; or
        the training script skips it without a word and trains on less data than intended.
    Example:
        `data/named.h5: no dataset 'data' (datasets: features, targets)` among eight usable
        HDF5 and `.npy` files.
    What fix does:
        Nothing can be copied record by record from a dataset that does not open: `fix` of
        several datasets writes the others and says which one it could not open (exit 2).
    """,
    needs=Carries.SEVERAL_DATASETS,
)


@record_check("empty-record", Severity.ERROR, needs=Carries.ANY)
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
    if payload is None or record.meta.get("kind") in ("tokens", "text"):
        return None  # a language-model record's emptiness is `empty-sequence`'s
    size = len(payload) if isinstance(payload, (bytes, bytearray, memoryview)) else payload.size
    if size == 0:
        return Finding("empty record (0 bytes)", {"size": 0})
    return None
