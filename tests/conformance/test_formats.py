"""One suite every format passes (`scrub.testing.FormatSuite`, which other packages' formats run
too): each format of the reader table contributes a small dataset with planted defects (the
bundled samples, copied), and the suite's tests run on each. A format of the table with no
dataset here fails a test: a new format is a reader, a writer, a table row and a row below."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

from scrub.readers.base import REGISTRY
from scrub.testing import FormatSuite, Subject
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
    #: why it is not read from a bucket (None: it is, `TestBuiltInFormatsInABucket`)
    local_only: str | None = None

    @property
    def id(self) -> str:
        return f"{self.format}-{Path(self.path or self.copy).name}"


SAMPLES_BY_FORMAT = [
    Sample("images", "images"),
    Sample("images", "imagelist", "train.txt", {"num_classes": 10}, local_only="a list file"),
    Sample("hdf5", "hdf5", "train_list.txt", local_only="a list file"),
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
    Sample("coco", "coco", "annotations/instances_val2017.json", local_only="images beside its JSON"),
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


def test_every_format_of_the_table_has_a_dataset_here_and_a_writer():
    assert set(REGISTRY) == {s.format for s in SAMPLES_BY_FORMAT}
    assert set(REGISTRY) == set(WRITERS)


class TestBuiltInFormats(FormatSuite):
    @pytest.fixture(params=SAMPLES_BY_FORMAT, ids=lambda sample: sample.id)
    def subject(self, request, tmp_path) -> Subject:
        sample = request.param
        return Subject(sample.format, dataset_of(sample, tmp_path), sample.options)


def without_links(sample: Sample, tmp_path: Path) -> tuple[Path, str]:
    """The sample's folder with its links removed (an object store holds none), and the dataset's
    path relative to it ("" for the folder itself)."""
    dataset = dataset_of(sample, tmp_path)
    folder = tmp_path / sample.copy
    for link in [path for path in folder.rglob("*") if path.is_symlink()]:
        link.unlink()
    relative = dataset.relative_to(folder).as_posix()
    return folder, "" if relative == "." else relative


IN_OBJECT_STORAGE = [s for s in SAMPLES_BY_FORMAT if not s.local_only]


class TestBuiltInFormatsInMemory(FormatSuite):
    """The same datasets in fsspec's memory file system (``memory://``, this process's own object
    store: no ETags, no asynchronous client), named by URL: read where they live or from a local
    copy (`scrub.storage.staging`), fixed and restored with their outputs beside them there."""

    @pytest.fixture(params=IN_OBJECT_STORAGE, ids=lambda sample: sample.id)
    def subject(self, request, tmp_path) -> Iterator[Subject]:
        import fsspec

        folder, path = without_links(request.param, tmp_path)
        store, prefix = fsspec.filesystem("memory"), f"/conformance/{tmp_path.name}"
        for file in [file for file in folder.rglob("*") if file.is_file()]:
            store.pipe_file(f"{prefix}/{file.relative_to(folder).as_posix()}", file.read_bytes())
        yield Subject(request.param.format, f"memory://{prefix}/{path}".rstrip("/"), request.param.options)
        store.rm(prefix, recursive=True)  # the outputs beside the dataset too

    def test_worker_processes_find_what_one_process_finds(self, subject: Subject, tmp_path: Path) -> None:
        pytest.skip("memory:// is this process's own: worker processes cannot see it (see the S3 class)")


#: the formats the suite runs for in a bucket of the test S3 server, not every one (the memory
#: file system runs them all): each test costs a second or more there (the server answers one
#: request at a time), and every format of a kind reaches a bucket through the same code: read
#: in place (WebDataset), from a local copy (HDF5), a pair of objects (Megatron). Parquet and
#: image folders fixed from a bucket into one: tests/test_s3_local_copies.py. Worker processes,
#: the dearest, run for fewer.
IN_A_BUCKET = {"webdataset", "hdf5", "megatron"}
FEWER_IN_A_BUCKET = {"test_worker_processes_find_what_one_process_finds": {"webdataset", "hdf5"}}


@pytest.mark.slow
class TestBuiltInFormatsInABucket(FormatSuite):
    """The same datasets in a bucket of a real S3 server on loopback (moto's), named by URL: read
    where they live or from a local copy, fixed and restored with their outputs beside them in
    the bucket, scanned by worker processes that open the bucket themselves."""

    @pytest.fixture(params=[s for s in IN_OBJECT_STORAGE if s.format in IN_A_BUCKET], ids=lambda s: s.id)
    def subject(self, request, tmp_path, s3_server) -> Subject:
        folder, path = without_links(request.param, tmp_path)
        url = s3_server.upload(folder, "scrub-conformance", tmp_path.name)
        storage = {**s3_server.storage_options, "key": "scrub-test", "secret": "scrub-test"}
        named = f"{url}/{path}".rstrip("/")
        return Subject(request.param.format, named, {**request.param.options, "storage_options": storage})

    @staticmethod
    def for_fewer(subject: Subject, test: str) -> None:
        if subject.format not in FEWER_IN_A_BUCKET[test]:
            pytest.skip(f"{test} in a bucket: run for {', '.join(sorted(FEWER_IN_A_BUCKET[test]))}")

    def test_worker_processes_find_what_one_process_finds(self, subject: Subject, tmp_path: Path) -> None:
        self.for_fewer(subject, "test_worker_processes_find_what_one_process_finds")
        super().test_worker_processes_find_what_one_process_finds(subject, tmp_path)


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
