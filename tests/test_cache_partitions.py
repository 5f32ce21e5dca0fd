"""Whole partitions' results reused by ``--cache`` (`scrub.scanning.wholes`): a Parquet table's
rows are checked in blocks, so a rerun reuses the partitions of unchanged files whole, and its
manifest and statistics are a full scan's; a rewritten file's partitions are scanned again."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import scrub
from scrub.scanning.wholes import _back, _plain, dumped, loaded

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def table_files(folder, files=3, rows=400):
    """``files`` Parquet files of float32 columns and a class label in row groups of 100 rows: a
    NaN and an Inf in each, a label out of range in the last, and the first file's rows again in
    the second (duplicates across files, which only the dataset as a whole shows)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(5)
    first = None
    for number in range(files):
        data = rng.normal(size=(rows, 4)).astype(np.float32)
        data[7 + number, 1], data[50, 2] = np.nan, np.inf
        if number == 1:
            data[:10] = first[:10]
        first = data if first is None else first
        labels = rng.integers(0, 5, rows)
        if number == files - 1:
            labels[3] = 9
        columns = {f"f{column}": data[:, column] for column in range(4)} | {"label": labels}
        pq.write_table(pa.table(columns), folder / f"part-{number}.parquet", row_group_size=100)
    return folder


def lines(result) -> list[str]:
    return sorted(json.dumps(issue.to_dict(), sort_keys=True) for issue in result.issues())


def judged(result) -> dict:
    """What a summary says of the data (not of the run, nor the profile's sketches, which a
    reused partition does not feed)."""
    summary = result.summary.to_dict()
    return {key: summary[key] for key in ("records", "issues", "records_with_issues", "stats", "datasets")}


def test_an_unchanged_table_is_not_read_again_and_says_the_same(tmp_path):
    folder = table_files(tmp_path / "t")
    cache = tmp_path / "cache"
    first = scrub.scan(folder, cache=cache, num_classes=5, partition_size=100)
    assert first.summary.cache["reused"] == 0 and first.summary.cache["scanned"] == 1200
    found = first.summary.issues_by_check
    assert (found["nonfinite-data"], found["label-out-of-range"], found["duplicate"]) == (6, 1, 10)
    again = scrub.scan(folder, cache=cache, num_classes=5, partition_size=100)
    assert again.summary.cache["reused"] == 1200 and again.summary.cache["scanned"] == 0
    assert lines(again) == lines(first) and judged(again) == judged(first)
    assert any("reused from the cache" in note for note in again.summary.notes)  # the profile's


def test_a_rewritten_file_is_scanned_again_and_judged_with_the_rest(tmp_path):
    folder = table_files(tmp_path / "t")
    cache = tmp_path / "cache"
    scrub.scan(folder, cache=cache, num_classes=5, partition_size=100)
    shutil.copy(folder / "part-0.parquet", folder / "part-2.parquet")  # every row a duplicate now
    changed = scrub.scan(folder, cache=cache, num_classes=5, partition_size=100)
    full = scrub.scan(folder, num_classes=5, partition_size=100)
    assert changed.summary.cache["scanned"] == 400 and changed.summary.cache["reused"] == 800
    assert lines(changed) == lines(full) and judged(changed) == judged(full)
    assert changed.summary.issues_by_check["duplicate"] >= 400


def test_another_option_or_another_partition_size_reuses_nothing(tmp_path):
    folder = table_files(tmp_path / "t")
    cache = tmp_path / "cache"
    scrub.scan(folder, cache=cache, num_classes=5, partition_size=100)
    other = scrub.scan(folder, cache=cache, num_classes=9, partition_size=100)
    assert other.summary.cache["reused"] == 0
    assert lines(other) == lines(scrub.scan(folder, num_classes=9, partition_size=100))
    regrouped = scrub.scan(folder, cache=cache, num_classes=5, partition_size=200)
    assert regrouped.summary.cache["reused"] == 0


@pytest.mark.slow
def test_worker_processes_and_the_replay(tmp_path):
    """Partitions scanned by worker processes are kept with their offsets; with --dummy-loss no
    kept result is reused (the replay reads every record), but results are kept."""
    folder = table_files(tmp_path / "t")
    cache = tmp_path / "cache"
    first = scrub.scan(folder, cache=cache, partition_size=100, scheduler="processes", workers=2)
    again = scrub.scan(folder, cache=cache, partition_size=100, scheduler="sync")
    assert again.summary.cache["reused"] == 1200 and lines(again) == lines(first)
    replayed = scrub.scan(folder, cache=cache, partition_size=100, scheduler="sync", dummy_loss=True)
    assert replayed.summary.cache["reused"] == 0
    assert any("--dummy-loss reads every record" in note for note in replayed.summary.notes)


def test_a_kept_result_comes_back_as_it_was():
    """Arrays keep their dtype and shape, tuples stay tuples, object arrays their items."""
    from collections import Counter

    from scrub.records import Issue, Severity
    from scrub.scanning.results import NumericStats, PartitionResult

    result = PartitionResult(3, records=5)
    result.issues = [Issue("a.parquet", "4", 4, "non-finite", Severity.ERROR, "NaN", {"count": 1})]
    result.offsets = [4]
    result.stats["labels"] = Counter({1: 3, (2, "x"): 2})
    result.numeric["4"] = NumericStats(10, 1, 2.5, -1.0, 3.0)
    identities = np.array([b"a" * 16, b"b" * 16], dtype="S16")
    histogram = (np.array([1.0, 2.0]), np.array([3, 4], np.int64))
    objects = np.empty(2, dtype=object)
    objects[0], objects[1] = ("a", 1), "b"
    result.columns = {
        "duplicate": (np.array([0, 1], np.int64), identities),
        "label-outlier": (np.array([2]), np.array([0.5]), histogram),
        "dominant-mode": ([0, 1], objects),
    }
    back = loaded(dumped(result), 7)
    assert back.partition == 7 and back.records == 5 and back.offsets == [4]
    assert [issue.to_dict() for issue in back.issues] == [issue.to_dict() for issue in result.issues]
    assert back.stats["labels"] == result.stats["labels"]
    assert back.numeric["4"].to_dict() == result.numeric["4"].to_dict()
    offsets, values = back.columns["duplicate"]
    assert values.dtype == identities.dtype and values.tolist() == identities.tolist()
    assert isinstance(back.columns["label-outlier"][2], tuple)
    assert back.columns["label-outlier"][2][1].dtype == np.int64
    assert back.columns["dominant-mode"][1].tolist() == [("a", 1), "b"]
    assert _back(_plain(np.zeros((2, 3), np.float16))).shape == (2, 3)
