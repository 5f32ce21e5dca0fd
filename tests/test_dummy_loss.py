"""`--dummy-loss` end to end: the replay inside a scan, on real files, on every scheduler.

The core (model, localization, reference comparison) is tested in `test_replay.py`; here: the
pipeline feeds it in record order whatever the scheduler, workers and partitions, the float64
reference agrees on a real HDF5 file, the CLI, and `fix --dummy-loss`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import REPO, timeless_replay
from test_replay import C as REFERENCE_CLASSES
from test_replay import reference_replay

import scrub

REPLAY_CHECKS = {"loss-nonfinite", "grad-nonfinite", "loss-outlier", "grad-outlier"}


def planted_h5(path: Path, rows: int = 300, width: int = 768) -> Path:
    """float64 rows with: NaN, a float64 1e39 (finite, Inf in float32), 1e5 (overflows only in
    float16), 1e30 (finite everywhere: a loss outlier), and one label out of range."""
    rng = np.random.default_rng(7)
    data = rng.normal(0, 1, (rows, width))
    label = rng.integers(0, REFERENCE_CLASSES, rows)
    data[5, 3] = np.nan
    data[70, 0] = 1e39
    data[140, :] = 1e5
    data[200, :] = 1e30 * np.sign(rng.normal(size=width))
    label[250] = 9
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data, chunks=(16, width))
        file["label"] = label
    return path


def replay_findings(result) -> set[tuple[str, str]]:
    return {(i.key, i.check) for i in result.issues() if i.check in REPLAY_CHECKS}


@pytest.mark.parametrize(
    ("scheduler", "workers", "partition_size"),
    [
        ("sync", 1, None),
        ("processes", 2, 37),
        ("threads", 2, 64),
        ("processes", 1, 300),
    ],
)
def test_the_replay_is_the_same_on_every_scheduler_and_partitioning(
    tmp_path, scheduler, workers, partition_size
):
    path = planted_h5(tmp_path / "data.h5")
    baseline = scrub.scan(path, dummy_loss=True, num_classes=REFERENCE_CLASSES, scheduler="sync")
    result = scrub.scan(
        path,
        dummy_loss=True,
        num_classes=REFERENCE_CLASSES,
        scheduler=scheduler,
        workers=workers,
        partition_size=partition_size,
    )
    assert replay_findings(result) == replay_findings(baseline)
    assert timeless_replay(result) == timeless_replay(baseline)


def test_a_scan_flags_exactly_what_the_float64_reference_flags(tmp_path):
    path = planted_h5(tmp_path / "data.h5")
    result = scrub.scan(
        path,
        dummy_loss=True,
        num_classes=REFERENCE_CLASSES,
        scheduler="processes",
        workers=2,
        partition_size=50,
    )
    with h5py.File(path) as file:
        stored = file["data"][:]
        y = file["label"][:]
    with np.errstate(over="ignore"):
        X = stored.astype(np.float32)  # as a float32 loader (and the replay) casts it
    # The standardization, as documented: per feature, over the finite rows whose squares do not
    # overflow and that are at most 1000x the median row magnitude (here: all but the plants).
    magnitudes = np.abs(stored).max(axis=1)
    typical = np.isfinite(magnitudes) & (magnitudes < 2.0**64 / np.sqrt(768))
    typical &= magnitudes <= 1000 * np.median(magnitudes[typical])
    assert set(np.flatnonzero(~typical).tolist()) == {5, 70, 140, 200}
    mean, std = stored[typical].mean(axis=0), stored[typical].std(axis=0)
    expected, _ = reference_replay(X, y, mean.astype(np.float32), std.astype(np.float32))
    assert expected[250] == ("label-out-of-range", "error")
    found = {(str(i), check) for i, (check, _) in expected.items() if check in REPLAY_CHECKS}
    assert found == replay_findings(result)
    assert ("70", "loss-nonfinite") in replay_findings(result)  # finite in the file, Inf in float32
    assert ("200", "loss-nonfinite") in replay_findings(result)  # 1e30: the L2 probe's Inf norm
    assert ("140", "grad-outlier") in replay_findings(result)  # 1e5 among N(0, 1): an absurd step
    assert ("250", "label-out-of-range") in {(i.key, i.check) for i in result.issues()}
    assert result.summary.replay["standardization"]["source"] == "features"


def test_float16_finds_the_row_that_overflows_only_there(tmp_path):
    path = planted_h5(tmp_path / "data.h5")
    single = scrub.scan(path, dummy_loss=True, num_classes=REFERENCE_CLASSES)
    half = scrub.scan(path, dummy_loss=True, precision="float16", num_classes=REFERENCE_CLASSES)
    assert ("140", "loss-nonfinite") in replay_findings(half)
    assert ("140", "loss-nonfinite") not in replay_findings(single)


def test_out_of_range_labels_are_reported_once(tmp_path):
    path = planted_h5(tmp_path / "data.h5")
    result = scrub.scan(path, dummy_loss=True, num_classes=REFERENCE_CLASSES)
    lines = [(i.key, i.check) for i in result.issues() if i.check == "label-out-of-range"]
    assert lines == [("250", "label-out-of-range")]
    unknown = scrub.scan(path, dummy_loss=True)  # C from the data: 9 is not far from 0..4
    assert unknown.summary.replay["classes"] == 10


def test_images_replay_and_skip_what_they_cannot_decode():
    result = scrub.scan(REPO / "sample_data" / "images", dummy_loss=True, scheduler="sync")
    replay = result.summary.replay
    assert replay["features"] == 768 and replay["classes"] == 3
    assert replay["records_replayed"] + sum(replay["skipped"].values()) == result.summary.records
    assert replay["skipped"] == {"image": 3, "payload": 2}


def run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "scrub", *map(str, args)], capture_output=True, text=True, env=env, cwd=REPO
    )


def test_cli_with_a_user_loss_from_examples(tmp_path):
    """Rows of probabilities through examples/infogain_loss.py: a 0 and a negative value NaN it."""
    rows = np.full((40, 4), 0.25)
    rows[11] = [0.5, 0.5, 0.0, 0.0]
    rows[23] = [0.7, 0.4, -0.1, 0.0]
    with h5py.File(tmp_path / "probs.h5", "w") as file:
        file["data"], file["label"] = rows, np.arange(40) % 4
    env = {**os.environ, "PYTHONPATH": str(REPO / "examples")}
    done = run_cli(
        "scan",
        tmp_path / "probs.h5",
        "--dummy-loss",
        "--model",
        "infogain_loss:infogain_loss",
        "--manifest",
        tmp_path / "m.jsonl",
        "--json",
        tmp_path / "s.json",
        env=env,
    )
    assert done.returncode == 1, done.stderr
    flagged = {
        (d["key"], d["check"])
        for d in map(json.loads, (tmp_path / "m.jsonl").read_text().splitlines())
        if d["check"] in REPLAY_CHECKS
    }
    assert flagged == {("11", "loss-nonfinite"), ("23", "loss-nonfinite")}
    assert "dummy-loss replay: 40 records" in done.stdout
    assert (
        json.loads((tmp_path / "s.json").read_text())["replay"]["options"]["model"]
        == "infogain_loss:infogain_loss"
    )


def test_cli_replay_flags_need_dummy_loss(tmp_path):
    path = planted_h5(tmp_path / "data.h5")
    done = run_cli("scan", path, "--lr", "0.5", "--manifest", tmp_path / "m.jsonl")
    assert done.returncode == 2 and "need --dummy-loss" in done.stderr
    done = run_cli("fix", path, "--dummy-loss", "--manifest", tmp_path / "m.jsonl")
    assert done.returncode == 2 and "--dummy-loss replays the data during the scan" in done.stderr


def test_fix_with_dummy_loss_quarantines_what_only_the_replay_finds(tmp_path):
    path = planted_h5(tmp_path / "data.h5")
    plain = scrub.fix(path, out=tmp_path / "plain.h5", num_classes=REFERENCE_CLASSES)
    replayed = scrub.fix(
        path, out=tmp_path / "replayed.h5", quarantine=True, num_classes=REFERENCE_CLASSES, dummy_loss=True
    )
    with h5py.File(replayed.quarantine / "data.h5") as held:
        rows = set(held["scrub_source_row"][:].tolist())
    # 70: float64 1e39 (float32-overflow), 200: 1e30 (square-overflow); 140, a row of 1e5 among
    # N(0, 1), is only a warning to the checks (magnitude-outlier, fp16-overflow): an absurd SGD
    # step to the replay (grad-outlier)
    assert rows == {5, 70, 140, 200, 250}
    assert replayed.report["kept"] == plain.report["kept"] - 1
    assert scrub.scan(replayed.dataset, num_classes=REFERENCE_CLASSES).summary.records_with_errors == 0


def test_float16_rounding_matches_numpy_bit_for_bit():
    from scrub.replay.model import round_to_float16

    rng = np.random.default_rng(3)
    patterns = rng.integers(0, 2**32, size=2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array(
        [
            0.0,
            -0.0,
            65504,
            65519.996,
            65520,
            -65520,
            2**-14,
            2**-24,
            3 * 2**-26,
            2**-25,
            1e-8,
            np.inf,
            -np.inf,
            np.nan,
            1e5,
            6.1e-5,
            1 + 2**-11,
            1 + 3 * 2**-11,
        ],
        dtype=np.float32,
    )
    for values in (patterns, edges):
        with np.errstate(all="ignore"):
            expected = values.astype(np.float16).astype(np.float32)
        got = round_to_float16(values)
        same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
        assert same.all(), values[~same][:5]


@pytest.mark.slow
def test_the_replay_on_a_real_distributed_cluster_matches_sync(tmp_path):
    distributed = pytest.importorskip("distributed")
    path = planted_h5(tmp_path / "data.h5")
    baseline = scrub.scan(path, dummy_loss=True, num_classes=REFERENCE_CLASSES, scheduler="sync")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        result = scrub.scan(
            path,
            dummy_loss=True,
            num_classes=REFERENCE_CLASSES,
            scheduler=cluster.scheduler_address,
            partition_size=40,
        )
    assert replay_findings(result) == replay_findings(baseline)
    assert timeless_replay(result) == timeless_replay(baseline)
