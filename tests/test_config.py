"""Config files: which one applies, what it may hold, errors that name the key, file and line,
and `scrub config` saying where every value came from."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import image_bytes, write
from typer.testing import CliRunner

from scrub.cli import app
from scrub.errors import UsageError
from scrub.options.config import find, resolve

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A labelled JPEG folder with a label 2 images would need --num-classes 3 for; cwd = tmp_path."""
    root = tmp_path / "data"
    for i in range(4):
        write(root / ("a" if i % 2 else "b") / f"{i}.jpg", image_bytes(i))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return root


def test_the_closest_file_wins_and_the_command_line_overrides_it(folder):
    work = Path.cwd()
    (work / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.scrub]\nnum-classes = 5\n')
    assert resolve("scan", folder, {}).options.checks.num_classes == 5
    (work / "scrub.toml").write_text("num-classes = 4\n")
    assert resolve("scan", folder, {}).options.checks.num_classes == 4
    (folder / "scrub.toml").write_text("num-classes = 3\n")
    resolved = resolve("scan", folder, {})
    assert resolved.options.checks.num_classes == 3 and resolved.config.path == folder / "scrub.toml"
    assert resolve("scan", folder, {"num-classes": 2}).options.checks.num_classes == 2
    explicit = work / "other.toml"
    explicit.write_text("num-classes = 9\n")
    assert resolve("scan", folder, {}, explicit).options.checks.num_classes == 9


def test_a_config_above_the_dataset_is_found(folder, tmp_path):
    (tmp_path / "scrub.toml").write_text("num-classes = 7\n")  # beside the data folder, not in it
    resolved = resolve("scan", folder, {})
    assert resolved.config.path == tmp_path / "scrub.toml" and resolved.options.checks.num_classes == 7
    (tmp_path / "data" / "pyproject.toml").write_text(
        '[project]\nname = "x"\n'
    )  # no [tool.scrub]: passed over
    assert resolve("scan", folder, {}).config.path == tmp_path / "scrub.toml"


def test_a_pyproject_without_tool_scrub_is_not_a_config(folder):
    Path("pyproject.toml").write_text('[project]\nname = "x"\n')
    assert find(folder) is None


def test_unknown_keys_and_bad_values_name_the_key_the_file_and_the_line(folder):
    config = Path("scrub.toml")
    config.write_text("# nightly\nnum-classes = 10\n\nnum-clases = 3\n")
    result = run("scan", folder)
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1
    assert f"scrub: error: {config.resolve()}:4: num-clases: not a scrub option (known: " in result.output
    config.write_text('num-classes = "ten"\n')
    assert "scrub.toml:1: num-classes: expected an integer, got 'ten'" in run("scan", folder).output
    config.write_text('[check-severity]\nduplicate = "off"\n')
    assert "scrub.toml:2: check-severity: duplicate = 'off': choose one of" in run("scan", folder).output
    config.write_text('[paths."data"]\nworkers = 2\n')
    output = run("scan", folder).output
    assert ":2: workers: not a dataset option a [paths] table may set" in output, output
    config.write_text("num-classes = [\n")
    assert "not valid TOML" in run("scan", folder).output


def test_line_numbers_point_at_the_key(folder):
    config = Path("scrub.toml")
    config.write_text('precision = "float16"\n\n[check-severity]\n"duplicate" = "nope"\n')
    output = run("scan", folder).output
    assert "scrub.toml:4: check-severity: duplicate = 'nope'" in output, output


def test_severity_table_and_per_path_settings_apply(folder, tmp_path):
    Path("scrub.toml").write_text(
        "num-classes = 1\n"  # label 1 is out of range everywhere ...
        '[check-severity]\nlabel-out-of-range = "warning"\n'
        '[paths."../data"]\nnum-classes = 2\n'  # ... but not in this dataset
    )
    result = run("scan", folder, "--manifest", tmp_path / "m.jsonl", "--json", tmp_path / "s.json")
    assert result.exit_code == 0, result.output
    import json

    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["options"]["num_classes"] == 2
    assert summary["options"]["check_severity"] == {"label-out-of-range": "warning"}


def test_relative_paths_are_relative_to_the_config_file(folder, tmp_path):
    (folder / "scrub.toml").write_text('manifest = "../out/m.jsonl"\n')
    (tmp_path / "out").mkdir()
    assert run("scan", folder).exit_code == 0
    assert (tmp_path / "out" / "m.jsonl").is_file()


def test_keys_of_the_other_command_are_kept_for_it(folder, tmp_path):
    Path("scrub.toml").write_text(
        f'quarantine = true\nout = "{tmp_path}/clean"\nmanifest = "{tmp_path}/m.jsonl"\n'
    )
    assert resolve("scan", folder, {}).options.manifest == tmp_path / "m.jsonl"
    fix = resolve("fix", folder, {}).options
    assert fix.quarantine and fix.out == tmp_path / "clean"
    assert fix.manifest == ()  # a config's manifest is where scans write; fix reuses one only when told


def test_scrub_config_prints_values_and_their_origins(folder):
    Path("scrub.toml").write_text('num-classes = 2\n[check-severity]\nfp16-overflow = "error"\n')
    result = run("config", folder, "--command", "scan")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(
        line.startswith("num-classes = 2  # ") and "scrub.toml:1: num-classes" in line for line in lines
    )
    assert any(
        line.startswith('check-severity = { "fp16-overflow" = "error" }')
        and "scrub.toml:2: check-severity" in line
        for line in lines
    ), result.output
    assert any(line.startswith('precision = "float32"  # default') for line in lines)
    assert not any(line.startswith("out =") or line.startswith("# out =") for line in lines)  # fix's
    fix = run("config", folder, "--command", "fix").output
    assert 'severity = "error"  # default' in fix


def test_hdf5_dataset_root_is_its_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sets").mkdir()
    path = tmp_path / "sets" / "d.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=np.ones((4, 2), np.float32))
    (tmp_path / "sets" / "scrub.toml").write_text('lmdb-codec = "npy"\n')
    result = run("scan", path)
    assert result.exit_code == 2 and "scrub.toml:1: lmdb-codec: does not apply" in result.output, (
        result.output
    )
    with pytest.raises(UsageError, match="no such file"):
        find(path, tmp_path / "missing.toml")


def test_fix_manifest_with_a_config_cache_reuses_the_manifest_and_says_so(tmp_path, monkeypatch):
    """The README's nightly config (a cache) and its scan -> fix steps: the config's cache cannot
    apply to a fix that reuses a manifest (it scans nothing): a note says so, never a crash."""
    import shutil

    from conftest import SAMPLES

    monkeypatch.chdir(tmp_path)
    shutil.copytree(SAMPLES / "images", tmp_path / "data", symlinks=True)
    Path("scrub.toml").write_text('num-classes = 3\ncache = ".scrub-cache"\n')
    assert run("scan", "data", "--manifest", "m.jsonl", "-q").exit_code == 1
    result = run("fix", "data", "--manifest", "m.jsonl", "--quarantine")
    assert result.exit_code == 0, result.output
    assert "reused the scan in m.jsonl" in result.output
    said = "scrub.toml:2: cache is not used: fix --manifest reuses m.jsonl instead of scanning"
    assert said in result.output
    assert (tmp_path / "data.clean").is_dir() and (tmp_path / "data.quarantine" / "fix.json").is_file()
    # as flags the two still conflict: one line, exit 2
    conflict = run("fix", "data", "--manifest", "m.jsonl", "--cache", ".c", "--out", "elsewhere")
    assert conflict.exit_code == 2 and "drop one of them" in conflict.output


def test_isolated_reads_no_config_file(folder):
    Path("scrub.toml").write_text("num-classes = 1\n")  # label 1 would be out of range
    assert run("scan", folder, "-q").exit_code == 1
    assert run("scan", folder, "-q", "--isolated").exit_code == 0
    shown = run("config", folder, "--isolated").output
    assert "# config file: none read (--isolated)" in shown and "# num-classes = (not set)" in shown
    # /dev/null, the other habit, is an empty config file
    assert run("scan", folder, "-q", "--config", "/dev/null").exit_code == 0
    both = run("scan", folder, "--isolated", "--config", "scrub.toml")
    assert both.exit_code == 2 and "--isolated reads no config file and --config names one" in both.output
