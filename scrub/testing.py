"""The conformance suite every format passes, shipped so that a format of another package runs it
against its own data (fsspec's ``tests/abstract`` is the model). Needs pytest.

Subclass `FormatSuite` in a test module and give it a ``subject`` fixture: a small dataset of the
format with planted defects (at least one record with an error), written into ``tmp_path``::

    from scrub.testing import FormatSuite, Subject

    class TestMyFormat(FormatSuite):
        @pytest.fixture
        def subject(self, tmp_path):
            write_my_dataset(tmp_path / "train")  # with a NaN row, say
            return Subject("myformat", tmp_path / "train", {"num_classes": 3})

Every test then runs on it: its partitions cover every record exactly once and `locate` names
them; the reader and its partitions pickle (workers receive them); `members` are the files records
come from; `fix` round-trips (the cleaned copy and the quarantine hold every record once,
verified, and the cleaned copy rescans without an error); `restore` puts back one record, then
every one; and a scan on worker processes finds what one process finds (marked ``slow``: register
the marker, or run pytest without ``--strict-markers``). scrub's own formats run it in
``tests/conformance/test_formats.py``; the worked example of a format of another package is
``examples/toy_format`` (docs/internals.md, "Recipe: a format of your own package").
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import scrub
from scrub.fixing.restoring import restore
from scrub.manifest import read_manifest
from scrub.options.model import ScanOptions
from scrub.readers.base import Reader, reader_class
from scrub.records import Batch, Issue
from scrub.scanning.opening import OpenedDataset, open_dataset
from scrub.storage import location, on_this_machine


@dataclass(frozen=True)
class Subject:
    """A dataset of the format under test: its format's name, its path (what ``scrub scan`` is
    given: a local path, or a URL with ``storage_options`` among the options), and the options
    it is scanned with (API keywords: ``{"num_classes": 10}``)."""

    format: str
    path: Path | str
    options: dict[str, Any] = field(default_factory=dict)


def records_read(reader: Reader, partition: Any) -> list[tuple[str, str, int]]:
    """(source, key, index) of every record ``read`` gives of a partition, in order."""
    found = []
    for item in reader.read(partition):
        if isinstance(item, Batch):
            found += [(item.source, item.key(row), item.start + row) for row in range(len(item))]
        else:
            found.append((item.source, item.key, item.index))
    return found


def verdicts_in(quarantine: Any) -> list[Issue]:
    """The verdicts of a quarantine's manifest, on this machine or in object storage."""
    manifest = quarantine / "manifest.jsonl"
    if on_this_machine(manifest):
        return list(read_manifest(manifest))
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "manifest.jsonl"
        copy.write_bytes(manifest.read_bytes())
        return list(read_manifest(copy))


class FormatSuite:
    """The tests every format passes; a subclass provides the ``subject`` fixture."""

    @pytest.fixture
    def subject(self) -> Subject:
        raise NotImplementedError("a FormatSuite subclass provides the subject fixture: see scrub.testing")

    @staticmethod
    @contextmanager
    def opened(subject: Subject) -> Iterator[OpenedDataset]:
        """The subject opened, closed after (a local copy of one in object storage removed)."""
        dataset = open_dataset(subject.path, ScanOptions.build(**subject.options))
        try:
            assert dataset.reader.format == subject.format
            yield dataset
        finally:
            dataset.close()

    def test_partitions_cover_every_record_exactly_once_and_locate_names_them(self, subject: Subject) -> None:
        with self.opened(subject) as dataset:
            reader, partitions = dataset.reader, dataset.partitions
            assert sum(len(partition) for partition in partitions) == dataset.info.records > 0
            read = []
            for partition in partitions:
                found = records_read(reader, partition)
                assert len(found) == len(partition)
                assert [tuple(i) for i in reader.locate(partition, range(len(partition)))] == found
                read += found
            assert len(set(read)) == len(read) == dataset.info.records  # each record once

    def test_the_reader_and_its_partitions_pickle_and_read_the_same(self, subject: Subject) -> None:
        with self.opened(subject) as dataset:
            reader, partitions = dataset.reader, dataset.partitions
            copy, copied = pickle.loads(pickle.dumps((reader, partitions)))
            try:
                assert [records_read(copy, p) for p in copied] == [
                    records_read(reader, p) for p in partitions
                ]
            finally:
                copy.close()

    def test_members_are_the_files_records_come_from(self, subject: Subject) -> None:
        with self.opened(subject) as dataset:
            members = list(dataset.reader.members(dataset.partitions))
            assert members and len(set(members)) == len(members)
            storage = dataset.reader.options.storage
            present = [
                m
                for m in members
                if (os.path.lexists(m) if on_this_machine(m) else location(m, storage).exists())
            ]
            assert (
                len(present) >= len(members) - len(dataset.info.issues) - 2
            )  # a planted missing file or two

    def test_fix_round_trips_every_record_once_and_the_copy_rescans_clean(self, subject: Subject) -> None:
        options = {**subject.options, "scheduler": "sync"}
        scanned = scrub.scan(subject.path, **options)
        errors = scanned.summary.records_with_errors
        fixed = scrub.fix(
            subject.path, quarantine=True, **options
        )  # default outputs, as the format names them
        assert fixed.verified
        report = fixed.report
        assert report["kept"] + report["quarantined"] == scanned.summary.records
        assert report["quarantined"] >= 1 and errors >= 1  # the planted defects: not vacuous
        rescan = scrub.scan(fixed.dataset, **options)
        assert rescan.summary.records == report["kept"]
        assert rescan.summary.issues_by_severity.get("error", 0) == 0, [
            (i.key, i.check, i.message) for i in rescan.issues() if i.severity.value == "error"
        ]

    def test_restore_puts_back_one_record_then_every_one(self, subject: Subject) -> None:
        """`fix` then `restore` of every record gives back the source's records, verified record
        by record as fix verifies (but those fix sets aside whatever the verdicts: a link leaving
        the dataset, a damaged shard); one restored alone leaves the others in the quarantine."""
        options = {**subject.options, "scheduler": "sync"}
        fixed = scrub.fix(subject.path, quarantine=True, **options)
        assert fixed.quarantine is not None
        quarantined = fixed.report["quarantined"]
        errors = [i for i in verdicts_in(fixed.quarantine) if i.severity.value == "error"]
        one = next(i for i in errors if i.key != "*")
        running = {k: v for k, v in options.items() if k in ("scheduler", "storage_options")}
        partly = restore(fixed.quarantine, keys=[f"{one.source}:{one.key}"], **running)
        assert partly.verified and partly.report["quarantined"] < quarantined
        assert partly.report["kept"] + partly.report["quarantined"] == fixed.report["records"]
        assert partly.quarantine is not None
        assert (one.source, one.key) not in {(i.source, i.key) for i in verdicts_in(partly.quarantine)}
        whole = restore(fixed.quarantine, **running)
        assert whole.verified and whole.quarantine is not None
        assert not verdicts_in(whole.quarantine)  # no verdict left
        # what is still set aside is what fix sets aside whatever the verdicts, and says so
        assert whole.report["quarantined"] == 0 or whole.report["forced"], whole.report
        assert whole.report["kept"] + whole.report["quarantined"] == fixed.report["records"]
        assert scrub.scan(whole.dataset, **options).summary.records == whole.report["kept"]

    @pytest.mark.slow
    def test_worker_processes_find_what_one_process_finds(self, subject: Subject, tmp_path: Path) -> None:
        """The same scan in this process and on two worker processes, from the command line (a
        new process, given this one's import path: its workers are forked from it where the
        format's reader `forks_cleanly`, else they come from the worker server; a reader that
        only one process may hold, on threads): the same manifest lines."""
        options = [
            f"--{name.replace('_', '-')}={json.dumps(value) if isinstance(value, dict) else value}"
            for name, value in subject.options.items()
        ]
        pool = "threads" if reader_class(subject.format).in_one_process else "processes"
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(entry for entry in sys.path if entry)}
        manifests = []
        for scheduler in ("sync", pool):
            manifest = tmp_path / f"{scheduler}.jsonl"
            command = [
                sys.executable,
                "-m",
                "scrub",
                "scan",
                str(subject.path),
                "-q",
                "--manifest",
                str(manifest),
            ]
            command += ["--scheduler", scheduler, "--workers", "2", "--partition-size", "4", *options]
            done = subprocess.run(command, capture_output=True, text=True, env=environment)
            assert done.returncode in (0, 1), done.stderr
            manifests.append(sorted(manifest.read_text().splitlines()))
        assert manifests[0] == manifests[1] and manifests[0]
