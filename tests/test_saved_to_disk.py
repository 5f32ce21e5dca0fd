"""A Hugging Face ``save_to_disk`` folder whose description files are damaged or whose data file
is gone: written by the real ``datasets``, damaged, scanned and fixed through the command line;
``datasets.load_from_disk`` fails on the damaged source and loads what fix wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import one_line_error

from scrub.manifest import read_manifest

datasets = pytest.importorskip("datasets")

TEXTS = [f"record number {n}" for n in range(50)]


def saved(folder: Path) -> Path:
    datasets.Dataset.from_dict({"text": TEXTS}).save_to_disk(str(folder))
    return folder


def scrub_cli(*arguments: object, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrub", *map(str, arguments)], capture_output=True, text=True, cwd=cwd
    )


def cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:10])  # an interrupted write: not JSON


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damaged", "damage"),
    [("state.json", cut), ("dataset_info.json", cut), ("dataset_info.json", Path.unlink)],
)
def test_a_damaged_description_is_unreadable_file_and_fix_writes_one_that_loads(tmp_path, damaged, damage):
    source = saved(tmp_path / "chat")
    damage(source / damaged)
    with pytest.raises((ValueError, FileNotFoundError)):  # JSONDecodeError is a ValueError
        datasets.load_from_disk(str(source))  # the user's loader fails on the whole folder
    manifest = tmp_path / "chat.scrub.jsonl"
    done = scrub_cli("scan", source, "--manifest", manifest, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    issues = list(read_manifest(manifest))
    assert [(issue.source, issue.key, issue.check) for issue in issues] == [(damaged, "*", "unreadable-file")]
    assert "load_from_disk fails" in issues[0].message
    done = scrub_cli("fix", source, "--quarantine", cwd=tmp_path)
    assert done.returncode == 0 and "verified" in done.stdout, done.stdout + done.stderr
    assert f"{damaged} could not be read" in done.stdout
    clean = datasets.load_from_disk(str(tmp_path / "chat.clean"))
    assert clean["text"] == TEXTS and clean.features == datasets.Features({"text": datasets.Value("string")})
    assert len(datasets.load_from_disk(str(tmp_path / "chat.quarantine" / "chat"))) == 0


@pytest.mark.slow
def test_a_damaged_dataset_dict_is_written_anew_from_its_splits(tmp_path):
    source = tmp_path / "splits"
    splits = {"train": TEXTS[:40], "test": TEXTS[40:]}
    datasets.DatasetDict(
        {name: datasets.Dataset.from_dict({"text": texts}) for name, texts in splits.items()}
    ).save_to_disk(str(source))
    cut(source / "dataset_dict.json")
    with pytest.raises(ValueError):
        datasets.load_from_disk(str(source))
    done = scrub_cli("fix", source, cwd=tmp_path)
    assert done.returncode == 0 and "verified" in done.stdout, done.stdout + done.stderr
    assert json.loads((tmp_path / "splits.clean" / "dataset_dict.json").read_text()) == {
        "splits": ["test", "train"]
    }
    clean = datasets.load_from_disk(str(tmp_path / "splits.clean"))
    assert {name: clean[name]["text"] for name in clean} == splits


def test_a_missing_data_file_is_one_line_naming_it(tmp_path):
    source = saved(tmp_path / "chat")
    (source / "data-00000-of-00001.arrow").unlink()
    error = one_line_error("scan", source)
    assert "state.json names the data file data-00000-of-00001.arrow, which is missing" in error
    assert "no images found" not in error
