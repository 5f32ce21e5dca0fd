"""Several datasets per run: paths, glob patterns and folders of datasets; one manifest, one
summary with a part per dataset; `fix` writes each one's outputs; one shared pool."""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

import h5py
import jsonschema
import lmdb
import numpy as np
import pytest
from conftest import SAMPLES, manifest_lines
from typer.testing import CliRunner

import scrub
from scrub.cli import app
from scrub.errors import UnusableDataset, UsageError
from scrub.readers.base import ReadOptions, expand_datasets

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def shard(path: Path, rows: int = 20, bad: tuple[int, ...] = (), label: bool = True) -> Path:
    data = np.random.default_rng(rows).normal(size=(rows, 4)).astype(np.float32)
    for row in bad:
        data[row, 1] = np.nan
    with h5py.File(path, "w") as f:
        f["data"] = data
        if label:
            f["label"] = np.arange(rows) % 3
    return path


def environment(path: Path, values: dict[bytes, bytes]) -> Path:
    with lmdb.open(str(path), map_size=16 << 20) as env, env.begin(write=True) as txn:
        for key, value in values.items():
            txn.put(key, value)
    return path


def npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_sample_lmdb_folder_scans_as_its_three_environments(tmp_path):
    manifest = tmp_path / "m.jsonl"
    result = run("scan", SAMPLES / "lmdb", "--manifest", manifest, "--json", tmp_path / "s.json")
    assert result.exit_code == 1, result.output  # issues, not an unusable dataset
    summary = json.loads((tmp_path / "s.json").read_text())
    jsonschema.validate(
        summary, json.loads(resources.files("scrub.schemas").joinpath("summary.schema.json").read_text())
    )
    parts = {Path(part["path"]).name: part for part in summary["parts"]}
    assert set(parts) == {"datum_lmdb", "lsun_lmdb", "npy.lmdb"}
    assert summary["records"] == sum(part["records"] for part in parts.values())
    assert summary["issues"]["total"] == sum(part["issues"]["total"] for part in parts.values())
    lines = manifest_lines(manifest)
    assert {Path(line["dataset"]).name for line in lines} == set(parts)
    for name, part in parts.items():  # each part counts exactly its own manifest lines
        assert part["issues"]["total"] == sum(Path(line["dataset"]).name == name for line in lines)
    assert "datum_lmdb" in result.output and "3 datasets" in result.output


def test_several_paths_and_a_quoted_glob_name_the_same_datasets(tmp_path):
    for number in range(3):
        shard(tmp_path / f"train-{number}.h5", bad=(number,))
    explicit = scrub.scan([tmp_path / f"train-{n}.h5" for n in range(3)])
    pattern = scrub.scan([str(tmp_path / "train-*.h5")])
    for result in (explicit, pattern):
        assert [Path(p.path).name for p in result.summary.parts] == ["train-0.h5", "train-1.h5", "train-2.h5"]
        assert result.summary.records == 60
        found = sorted((Path(i.dataset).name, i.key) for i in result.issues() if i.check == "nonfinite-data")
        assert found == [("train-0.h5", "0"), ("train-1.h5", "1"), ("train-2.h5", "2")]


def test_many_one_partition_shards_share_one_pool(tmp_path):
    """Each shard alone would run in-process (one partition); together they use every core."""
    paths = [shard(tmp_path / f"s{n}.h5") for n in range(4)]
    alone = scrub.scan(paths[0], workers=2)
    together = scrub.scan(paths, workers=2)
    assert alone.summary.scheduler == "sync"
    assert together.summary.scheduler == "threads" and together.summary.workers == 2  # HDF5's pool


def test_a_glob_that_matches_nothing_and_a_folder_of_nothing_say_what_they_found(tmp_path):
    with pytest.raises(UnusableDataset, match="no file or folder matches"):
        expand_datasets([str(tmp_path / "nothing-*.h5")], ReadOptions())
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a").mkdir()
    (tmp_path / "notes" / "readme.md").write_text("hi")
    result = run("scan", tmp_path / "notes", "--manifest", tmp_path / "m.jsonl")
    assert result.exit_code == 2
    assert "no images found" in result.output and "a/" in result.output and "readme.md" in result.output


def test_a_folder_of_datasets_says_what_it_did_not_scan(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    environment(folder / "a.lmdb", {b"k1": npy(np.array([1.0, 2.0])), b"k2": npy(np.array([np.inf, 1.0]))})
    shard(folder / "b.h5")
    (folder / "README.md").write_text("not a dataset")
    result = scrub.scan([folder])
    assert [Path(p.path).name for p in result.summary.parts] == ["a.lmdb", "b.h5"]
    assert any("README.md" in note and "not datasets" in note for note in result.summary.notes)
    assert [(Path(i.dataset).name, i.key) for i in result.issues()] == [("a.lmdb", "k2")]


def test_config_sections_apply_to_each_dataset_of_a_run(tmp_path):
    shard(tmp_path / "three.h5")
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["data"] = np.ones((6, 2), np.float32)
        f["label"] = np.array([0, 1, 2, 0, 1, 2])
    (tmp_path / "scrub.toml").write_text(
        '[paths."*two.h5"]\nnum-classes = 2\n\n[paths."*three.h5"]\nnum-classes = 3\n'
    )
    manifest = tmp_path / "m.jsonl"
    result = run("scan", tmp_path / "three.h5", tmp_path / "two.h5", "--manifest", manifest)
    assert result.exit_code == 1, result.output
    flagged = [
        (Path(line["dataset"]).name, line["key"])
        for line in manifest_lines(manifest)
        if line["check"] == "label-out-of-range"
    ]
    assert flagged == [("two.h5", "2"), ("two.h5", "5")]


def test_baselines_tell_the_datasets_apart(tmp_path):
    """The same key and check in two datasets are two issues, not one persisting one."""
    first = environment(tmp_path / "a.lmdb", {b"k": npy(np.array([np.nan]))})
    second = environment(tmp_path / "b.lmdb", {b"k": npy(np.array([np.nan]))})
    old = scrub.scan([first, second], manifest=tmp_path / "old.jsonl")
    assert old.summary.issues == 2
    again = scrub.scan([first, second], manifest=tmp_path / "new.jsonl", baseline=tmp_path / "old.jsonl")
    assert again.summary.baseline["persisting"] == 2 and again.summary.baseline["new"] == 0
    third = environment(tmp_path / "c.lmdb", {b"k": npy(np.array([np.nan]))})
    changed = scrub.scan([second, third], manifest=tmp_path / "n2.jsonl", baseline=tmp_path / "old.jsonl")
    assert {k: changed.summary.baseline[k] for k in ("new", "persisting", "resolved")} == {
        "new": 1,
        "persisting": 1,
        "resolved": 1,
    }


def test_fix_of_a_folder_of_environments_writes_each_beside_it(tmp_path):
    folder = tmp_path / "lmdb"
    shutil.copytree(SAMPLES / "lmdb", folder)
    result = run("fix", folder, "--quarantine", "--json", tmp_path / "fix.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "fix.json").read_text())
    assert len(report["fixes"]) == 3
    for fixed in report["fixes"]:
        assert fixed["fix"]["verification"]["verified"]
        assert fixed["fix"]["kept"] + fixed["fix"]["quarantined"] == fixed["records"]
        written = Path(fixed["fix"]["dataset"])
        with lmdb.open(
            str(written), readonly=True, lock=False, subdir=written.is_dir()
        ) as env:  # LMDB reads what fix wrote
            assert env.stat()["entries"] >= fixed["fix"]["kept"]
    names = sorted(p.name for p in folder.iterdir())
    assert "datum_lmdb.clean" in names and "npy.quarantine" in names
    # a second run scans the datasets, not the first run's outputs, and says so
    again = run("scan", folder, "--manifest", tmp_path / "m.jsonl")
    assert "scrub's own outputs" in again.output and "3 datasets" in again.output


def test_fix_of_several_datasets_under_out_and_refusals(tmp_path):
    paths = [shard(tmp_path / f"s{n}.h5", bad=(n,)) for n in range(2)]
    out = tmp_path / "out"
    result = run("fix", *paths, "--out", out, "--quarantine")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "s0.clean.h5",
        "s0.quarantine",
        "s1.clean.h5",
        "s1.quarantine",
    ]
    with h5py.File(out / "s1.clean.h5") as f:
        assert len(f["data"]) == 19 and np.isfinite(f["data"][:]).all()
    refused = run("fix", *paths, "--manifest", tmp_path / "m.jsonl")
    assert refused.exit_code == 2 and "several datasets" in refused.output
    (tmp_path / "other").mkdir()
    twin = shard(tmp_path / "other" / "s0.h5")
    clash = run("fix", paths[0], twin, "--out", tmp_path / "out2")
    assert clash.exit_code == 2 and "same name" in clash.output
    assert not (tmp_path / "out2").exists()


def test_api_rejects_an_empty_list():
    with pytest.raises((UnusableDataset, UsageError)):
        scrub.scan([])


@pytest.fixture
def mixed_folder(tmp_path) -> Path:
    """Nine HDF5 and .npy datasets in one folder, one HDF5 without a `data` dataset (a user's
    nightly folder): 4 x 20 HDF5 rows (one NaN) and 4 x 30 .npy rows."""
    folder = tmp_path / "data"
    folder.mkdir()
    for number in range(4):
        shard(folder / f"part{number}.h5", bad=(3,) if number == 2 else ())
        np.save(folder / f"arr{number}.npy", np.ones((30, 4), np.float32))
    with h5py.File(folder / "named.h5", "w") as file:
        file["features"] = np.ones((5, 4), np.float32)
        file["targets"] = np.zeros(5, np.int64)
    return folder


def test_a_dataset_that_cannot_be_opened_is_a_finding_and_the_others_are_scanned(mixed_folder, tmp_path):
    outputs = {name: tmp_path / name for name in ("m.jsonl", "s.json", "j.xml", "s.md", "r.html")}
    result = run(
        "scan", mixed_folder, "--manifest", outputs["m.jsonl"], "--json", outputs["s.json"],
        "--junit", outputs["j.xml"], "--summary-md", outputs["s.md"], "--html", outputs["r.html"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output  # issues found, not an unusable input
    message = "named.h5: no dataset 'data' (datasets: features, targets)"
    assert f"unreadable-dataset  {message}" in result.output
    lines = manifest_lines(outputs["m.jsonl"])
    unreadable = [line for line in lines if line["check"] == "unreadable-dataset"]
    assert len(unreadable) == 1 and unreadable[0]["message"].startswith(message)
    assert unreadable[0]["key"] == "*" and unreadable[0]["dataset"].endswith("named.h5")
    assert unreadable[0]["details"] == {"format": "hdf5"}
    assert sum(line["check"] == "nonfinite-data" for line in lines) == 1  # the others were scanned
    summary = json.loads(outputs["s.json"].read_text())
    assert summary["records"] == 4 * 20 + 4 * 30 and len(summary["parts"]) == 9
    assert summary["issues"]["by_check"]["unreadable-dataset"] == 1
    named = next(part for part in summary["parts"] if part["path"].endswith("named.h5"))
    assert named["dataset"]["layout"] == "unreadable" and named["records"] == 0
    schema = json.loads((resources.files("scrub") / "schemas/summary.schema.json").read_text())
    jsonschema.validate(summary, schema)
    junit = outputs["j.xml"].read_text()
    assert 'name="unreadable-dataset"' in junit and '<failure message="unreadable-dataset' in junit
    assert "unreadable-dataset" in outputs["s.md"].read_text() and message in outputs["s.md"].read_text()
    assert "unreadable-dataset" in outputs["r.html"].read_text()


@pytest.mark.slow  # over half a second: out of the quick subset
def test_an_unreadable_dataset_alone_or_every_one_is_one_line_and_exit_2(mixed_folder, tmp_path):
    from conftest import one_line_error

    alone = one_line_error("scan", mixed_folder / "named.h5", "--manifest", tmp_path / "m.jsonl")
    assert "named.h5: no dataset 'data'" in alone
    (tmp_path / "bad").mkdir()
    for name in ("a.h5", "b.h5"):
        shutil.copy(mixed_folder / "named.h5", tmp_path / "bad" / name)
    every = one_line_error("scan", tmp_path / "bad" / "a.h5", tmp_path / "bad" / "b.h5")
    assert "none of the 2 datasets can be read; the first: a.h5: no dataset 'data'" in every
    # a folder of HDF5 files is one dataset: unusable when none of its files opens
    folder = one_line_error("scan", tmp_path / "bad")
    assert "none of its 2 HDF5 files can be read (a.h5: no dataset 'data'" in folder


def test_an_unreadable_dataset_persists_against_a_baseline(mixed_folder, tmp_path):
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    assert run("scan", mixed_folder, "--manifest", first, "-q").exit_code == 1
    again = run("scan", mixed_folder, "--manifest", second, "--baseline", first, "--fail-on", "new", "-q")
    assert again.exit_code == 0, again.output  # known: nothing new
    statuses = {line["check"]: line["status"] for line in manifest_lines(second)}
    assert statuses["unreadable-dataset"] == "persisting"
    ignored = run("scan", mixed_folder, "--ignore", "unreadable-dataset", "--manifest", second)
    assert "not scanned: it cannot be read (named.h5: no dataset 'data'" in ignored.output


def test_fix_of_a_folder_fixes_the_datasets_that_open_and_names_the_one_that_does_not(mixed_folder):
    result = run("fix", mixed_folder, "-q")
    assert result.exit_code == 2
    assert "1 of the 9 datasets cannot be opened and was not fixed (the other 8 were fixed)" in result.output
    assert "named.h5 (named.h5: no dataset 'data'" in result.output
    assert len(list(mixed_folder.glob("*.clean.*"))) == 8
    assert np.load(mixed_folder / "arr0.clean.npy").shape == (30, 4)
    with h5py.File(mixed_folder / "part2.clean.h5") as file:
        assert file["data"].shape == (19, 4)  # the NaN row set aside
