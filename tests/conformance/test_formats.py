"""One suite every format passes (fsspec's abstract tests are the model): each format of the
reader table contributes a small dataset with planted defects (the bundled samples, copied), and
the same tests assert that its partitions cover every record exactly once, that its reader and
partitions pickle (workers receive them), that `locate` names the records `read` gives, that
`members` are files, and that `fix` round-trips: the cleaned copy and the quarantine hold every
record once, verified, and the cleaned copy rescans without an error. A format of the table with
no dataset here fails a test: a new format is a reader, a writer, a table row and a row below."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

import scrub
from scrub.api import open_dataset
from scrub.options.model import ScanOptions
from scrub.readers.base import REGISTRY, reader_class
from scrub.records import Batch
from scrub.writers.base import REGISTRY as WRITERS


@dataclass(frozen=True)
class Sample:
    """A format's conformance dataset: a sample to copy (``path`` inside it is the dataset), the
    options it is scanned with, and what it needs installed."""

    format: str
    copy: str
    path: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    needs: str | None = None

    @property
    def id(self) -> str:
        return f"{self.format}-{Path(self.path or self.copy).name}"


SAMPLES_BY_FORMAT = [
    Sample("images", "images"),
    Sample("images", "imagelist", "train.txt", {"num_classes": 10}),
    Sample("hdf5", "hdf5", "train_list.txt"),
    Sample("hdf5", "hdf5", "train.h5"),
    Sample("numpy", "numpy", "features.npy"),
    Sample("numpy", "numpy", "train.npz", {"num_classes": 5}),
    Sample("lmdb", "lmdb", "datum_lmdb"),
    Sample("leveldb", "leveldb", "datum_leveldb", needs="plyvel"),
    Sample("webdataset", "webdataset", "", {"num_classes": 10}),
    Sample("parquet", "parquet", "train.parquet", needs="pyarrow"),
    Sample("arrow", "parquet", "train.arrow", needs="pyarrow"),  # written from the Parquet sample
    Sample("arrow", "hf_tokens", "", {"vocab_size": 1000}, needs="pyarrow"),  # save_to_disk, tokens
    Sample("segmentation", "segmentation", "", {"num_classes": 5}),
    Sample("yolo", "yolo"),
    Sample("coco", "coco", "annotations/instances_val2017.json"),
    Sample("mds", "mds", "", {"vocab_size": 1000}),
    Sample("jsonl", "jsonl", "train.jsonl", {"vocab_size": 1000}),
    Sample("megatron", "megatron", "my_text_document", {"vocab_size": 1000, "max_length": 64}),  # a prefix
    Sample("tokenbin", "tokenbin", "train.bin", {"vocab_size": 1000, "max_length": 64}),
    Sample("tokenbin", "tokenbin", "fineweb_train_000001.bin", {"vocab_size": 1000, "max_length": 64}),
    Sample("tfrecord", "tfrecord", "", {"num_classes": 10}),  # TFDS shard names, one cut short
]


def dataset_of(sample: Sample, tmp_path: Path) -> Path:
    """The sample copied into ``tmp_path`` (links kept as links), and the dataset path in it."""
    if sample.needs:
        pytest.importorskip(sample.needs)
    folder = tmp_path / sample.copy
    shutil.copytree(SAMPLES / sample.copy, folder, symlinks=True)
    if sample.format == "arrow" and sample.copy == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(folder / "train.parquet")
        with (
            pa.OSFile(str(folder / "train.arrow"), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema) as out,
        ):
            for batch in table.to_batches(max_chunksize=7):
                out.write_batch(batch)
        for parquet in folder.glob("*.parquet"):
            parquet.unlink()
    return folder / sample.path if sample.path else folder


@pytest.fixture(params=SAMPLES_BY_FORMAT, ids=lambda sample: sample.id)
def sample(request) -> Sample:
    return request.param


def test_every_format_of_the_table_has_a_dataset_here_and_a_writer():
    assert set(REGISTRY) == {s.format for s in SAMPLES_BY_FORMAT}
    assert set(REGISTRY) == set(WRITERS)


def opened(sample: Sample, tmp_path: Path):
    path = dataset_of(sample, tmp_path)
    dataset = open_dataset(path, ScanOptions.build(**sample.options))
    assert dataset.reader.format == sample.format
    return dataset


def identities(reader, partition) -> list[tuple[str, str, int]]:
    """(source, key, index) of every record ``read`` gives of a partition, in order."""
    found = []
    for item in reader.read(partition):
        if isinstance(item, Batch):
            found += [(item.source, item.key(row), item.start + row) for row in range(len(item))]
        else:
            found.append((item.source, item.key, item.index))
    return found


def test_partitions_cover_every_record_exactly_once_and_locate_names_them(sample, tmp_path):
    dataset = opened(sample, tmp_path)
    reader, partitions = dataset.reader, dataset.partitions
    assert sum(len(partition) for partition in partitions) == dataset.info.records > 0
    read = []
    for partition in partitions:
        found = identities(reader, partition)
        assert len(found) == len(partition)
        assert [tuple(identity) for identity in reader.locate(partition, range(len(partition)))] == found
        read += found
    assert len(set(read)) == len(read) == dataset.info.records  # each record once
    reader.close()


def test_the_reader_and_its_partitions_pickle_and_read_the_same(sample, tmp_path):
    dataset = opened(sample, tmp_path)
    reader, partitions = dataset.reader, dataset.partitions
    copy, copied = pickle.loads(pickle.dumps((reader, partitions)))
    assert [identities(copy, p) for p in copied] == [identities(reader, p) for p in partitions]
    reader.close()
    copy.close()


def test_members_are_the_files_records_come_from(sample, tmp_path):
    dataset = opened(sample, tmp_path)
    members = list(dataset.reader.members(dataset.partitions))
    assert members and len(set(members)) == len(members)
    present = [m for m in members if os.path.lexists(m)]
    assert len(present) >= len(members) - len(dataset.info.issues) - 2  # a planted missing file or two
    dataset.reader.close()


def test_fix_round_trips_every_record_once_and_the_copy_rescans_clean(sample, tmp_path):
    path = dataset_of(sample, tmp_path)
    options = {**sample.options, "scheduler": "sync"}
    scanned = scrub.scan(path, **options)
    errors = scanned.summary.records_with_errors
    fixed = scrub.fix(path, quarantine=True, **options)  # default outputs, named as the format names them
    assert fixed.verified
    report = fixed.report
    assert report["kept"] + report["quarantined"] == scanned.summary.records
    assert report["quarantined"] >= 1 and errors >= 1  # the planted defects: not vacuous
    rescan = scrub.scan(fixed.dataset, **options)
    assert rescan.summary.records == report["kept"]
    assert rescan.summary.issues_by_severity.get("error", 0) == 0, [
        (i.key, i.check, i.message) for i in rescan.issues() if i.severity.value == "error"
    ]


#: the extra of pyproject.toml that installs what a format needs
EXTRAS = {"plyvel": "leveldb", "pyarrow": "parquet"}


@pytest.mark.parametrize("sample", [s for s in SAMPLES_BY_FORMAT if s.needs], ids=lambda s: s.id)
def test_a_format_whose_library_is_missing_says_which_extra_to_install(sample, tmp_path):
    """Run where its library cannot be imported: one line naming the extra, exit 2."""
    import subprocess
    import sys

    path = dataset_of(sample, tmp_path)
    blocked = f"import sys; sys.modules[{sample.needs!r}] = None; from scrub.__main__ import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", blocked, "scan", str(path), "--format", sample.format],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"pip install 'scrub[{EXTRAS[sample.needs]}]'" in done.stderr


def test_restore_puts_back_one_record_then_every_one(sample, tmp_path):
    """`fix` then `restore` of every record gives back the source's records, verified record by
    record as fix verifies (but those fix sets aside whatever the verdicts: a link leaving the
    dataset, a damaged shard); one restored alone leaves the others in the quarantine."""
    from scrub.fixing.restoring import restore
    from scrub.manifest import read_manifest

    path = dataset_of(sample, tmp_path)
    options = {**sample.options, "scheduler": "sync"}
    fixed = scrub.fix(path, quarantine=True, **options)
    quarantined = fixed.report["quarantined"]
    errors = [i for i in read_manifest(fixed.quarantine / "manifest.jsonl") if i.severity.value == "error"]
    one = next(i for i in errors if i.key != "*")
    partly = restore(fixed.quarantine, keys=[f"{one.source}:{one.key}"], scheduler="sync")
    assert partly.verified and partly.report["quarantined"] < quarantined
    assert partly.report["kept"] + partly.report["quarantined"] == fixed.report["records"]
    assert (one.source, one.key) not in {
        (i.source, i.key) for i in read_manifest(partly.quarantine / "manifest.jsonl")
    }
    whole = restore(fixed.quarantine, scheduler="sync")
    assert whole.verified
    assert not list(read_manifest(whole.quarantine / "manifest.jsonl"))  # no verdict left
    # what is still set aside is what fix sets aside whatever the verdicts, and says so
    assert whole.report["quarantined"] == 0 or whole.report["forced"], whole.report
    assert whole.report["kept"] + whole.report["quarantined"] == fixed.report["records"]
    assert scrub.scan(whole.dataset, **options).summary.records == whole.report["kept"]


@pytest.mark.slow
def test_worker_processes_find_what_one_process_finds(sample, tmp_path):
    """The same scan in this process and on two worker processes, from the command line (a new
    process: its workers are forked from it where the format's reader `forks_cleanly`, else
    they come from the worker server; LevelDB's on threads): the same manifest lines."""
    path = dataset_of(sample, tmp_path)
    options = [f"--{name.replace('_', '-')}={value}" for name, value in sample.options.items()]
    pool = "threads" if reader_class(sample.format).in_one_process else "processes"  # LevelDB: one handle
    manifests = []
    for scheduler in ("sync", pool):
        manifest = tmp_path / f"{scheduler}.jsonl"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "scrub",
                "scan",
                str(path),
                "-q",
                "--manifest",
                str(manifest),
                "--scheduler",
                scheduler,
                "--workers",
                "2",
                "--partition-size",
                "4",
                *options,
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode in (0, 1), done.stderr
        manifests.append(sorted(manifest.read_text().splitlines()))
    assert manifests[0] == manifests[1] and manifests[0]
