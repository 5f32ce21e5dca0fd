"""What the console's tables say of several files and datasets: findings listed in dataset order
where a format numbers its records per file (a folder of Parquet files: every finding of
``part-00000.parquet`` before those of ``part-00001.parquet``), and the "warnings" column of a
run of several datasets counting records with a warning, not records with any issue."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES
from typer.testing import CliRunner

from scrub.cli import app

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
runner = CliRunner()

#: the NaN rows planted in each file: interleaved by row number across the two files
BAD_ROWS = {0: (869, 1030, 1500), 1: (880, 1037, 1501)}


def run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def parquet_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "pq"
    folder.mkdir()
    for number, rows in BAD_ROWS.items():
        data = np.ones((2000, 4), np.float32)
        data[list(rows), 0] = np.nan
        table = pa.table({"data": list(data), "label": np.arange(2000) % 3})
        pq.write_table(table, folder / f"part-{number:05d}.parquet", row_group_size=500)
    return folder


def listed(output: str) -> list[str]:
    """The records the console names under "records with errors", in its order."""
    lines = output.splitlines()
    start = lines.index("records with errors:") + 1
    return [line.split()[0] for line in lines[start:] if line.startswith(" ")]


expected = [f"part-{n:05d}.parquet:{row}" for n, rows in BAD_ROWS.items() for row in rows]


@pytest.mark.parametrize("partition_size", [None, 300])
def test_findings_of_a_parquet_folder_are_listed_in_dataset_order(parquet_folder, partition_size):
    sizes = [] if partition_size is None else ["--partition-size", partition_size]
    scanned = run("scan", parquet_folder, "--scheduler", "sync", *sizes, "--manifest", "m.jsonl")
    assert scanned.exit_code == 1, scanned.output
    assert listed(scanned.output) == expected
    # through the driver's own collector (a baseline classes each issue there), the same order
    again = run("scan", parquet_folder, "--scheduler", "sync", *sizes, "--baseline", "m.jsonl")
    assert listed(again.output) == expected


@pytest.mark.slow
def test_the_order_holds_with_worker_processes(parquet_folder):
    scanned = run("scan", parquet_folder, "--scheduler", "processes", "--workers", 2, "--partition-size", 300)
    assert listed(scanned.output) == expected


def test_the_warnings_column_counts_records_with_a_warning():
    scanned = run("scan", SAMPLES / "lmdb", "--scheduler", "sync", "--manifest", "lmdb.jsonl")
    assert scanned.exit_code == 1, scanned.output
    warned: dict[str, set] = defaultdict(set)
    errored: dict[str, set] = defaultdict(set)
    for line in Path("lmdb.jsonl").read_text().splitlines():
        issue = json.loads(line)
        (warned if issue["severity"] == "warning" else errored)[issue["dataset"]].add(issue["key"])
    # the table names each dataset relative to the folder in the heading, whatever its depth
    rows = {
        str(SAMPLES / "lmdb" / line.split()[0]): line.split()[-2:]
        for line in scanned.output.splitlines()
        if line.startswith(" ") and "lmdb" in line.split()[0] and ":" not in line.split()[0]
    }
    assert len(rows) == 3
    for dataset, (errors, warnings) in rows.items():
        assert int(errors) == len(errored[dataset]) and int(warnings) == len(warned[dataset]), dataset
    assert sum(int(w) for _, w in rows.values()) < sum(
        len(errored[d] | warned[d]) for d in rows
    )  # not records with any issue (what the column said before)
