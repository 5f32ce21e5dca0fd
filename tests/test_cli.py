"""The command line: exit codes, one-line errors, the JSON summary, the manifest schema, help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import SAMPLES, manifest_lines, write
from typer.testing import CliRunner

from scrub.checks import REGISTRY
from scrub.cli import app
from scrub.manifest import FIELDS

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_clean_dataset_exits_0_and_writes_an_empty_manifest(clean_folder, tmp_path):
    manifest = tmp_path / "m.jsonl"
    result = run("scan", clean_folder, "--manifest", manifest)
    assert result.exit_code == 0, result.output
    assert manifest.read_text() == ""
    assert "8 records scanned" in result.output


def test_issues_exit_1_and_table_shows_counts_and_manifest(tmp_path):
    manifest = tmp_path / "m.jsonl"
    result = run("scan", SAMPLES / "images", "--manifest", manifest)
    assert result.exit_code == 1
    assert "corrupt-image" in result.output and str(manifest) in result.output
    assert "records to quarantine" in result.output


def test_fail_on_thresholds(tmp_path):
    only_warnings = ["--select", "duplicate,shape-mismatch,format-mismatch"]
    common = ["scan", SAMPLES / "images", "--manifest", tmp_path / "m.jsonl", *only_warnings]
    assert run(*common).exit_code == 0  # default: fail on errors only
    assert run(*common, "--fail-on", "warning").exit_code == 1
    assert (
        run("scan", SAMPLES / "images", "--manifest", tmp_path / "n.jsonl", "--fail-on", "never").exit_code
        == 0
    )


def test_manifest_schema(tmp_path):
    manifest = tmp_path / "m.jsonl"
    run("scan", SAMPLES / "images", "--manifest", manifest)
    lines = manifest_lines(manifest)
    assert lines
    for line in lines:
        assert tuple(line) == FIELDS
        assert line["check"] in REGISTRY
        assert line["severity"] in ("error", "warning")
        assert isinstance(line["index"], int) and isinstance(line["details"], dict)


def test_json_summary_document(tmp_path):
    summary = tmp_path / "s.json"
    result = run("scan", SAMPLES / "images", "--manifest", tmp_path / "m.jsonl", "--json", summary)
    document = json.loads(summary.read_text())
    assert document["schema"] == 2
    assert document["records"] == 35
    assert document["exit_code"] == result.exit_code == 1
    assert document["issues"]["by_check"]["corrupt-image"] == 3
    assert document["issues"]["total"] == sum(document["issues"]["by_check"].values())
    assert document["quarantine"] == document["records_with_issues"]["error"] == 7
    assert document["dataset"]["classes"] == ["bird", "cat", "dog"]
    assert document["stats"]["labels"] == {"0": 12, "1": 10, "2": 12}
    assert document["stats"]["modes"] == {"CMYK": 1, "L": 1, "RGB": 27}  # the bomb is never decoded
    assert document["records_per_second"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["scan", "/no/such/dataset"], "no such file or directory"),
        (["scan", "{tmp}/notes.md"], "not a dataset scrub can read"),
        (["scan", SAMPLES / "images", "--label-range", "5:2"], "--label-range"),
        (["scan", SAMPLES / "images", "--select", "no-such-check"], "unknown check id"),
        (["scan", SAMPLES / "images", "--scheduler", "warp"], "unknown scheduler"),
        (["scan", SAMPLES / "images", "--format", "recordio"], "unknown format"),
        (["scan", SAMPLES / "images", "--format", "tfrecord"], "no TFRecord files"),
        (["scan", SAMPLES / "images", "--format", "parquet"], "no .parquet files"),
        pytest.param(  # dask retries the connection for 10 s
            ["scan", SAMPLES / "images", "--scheduler", "tcp://127.0.0.1:1"],
            "cannot reach the dask scheduler",
            marks=pytest.mark.slow,
        ),
        (["checks", "no-such-check"], "unknown check id"),
    ],
)
def test_unusable_input_is_one_line_and_exit_2(args, message, tmp_path):
    write(tmp_path / "notes.md", b"# not a dataset\n")
    args = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    result = subprocess.run(
        [sys.executable, "-m", "scrub", *args, "--manifest", str(tmp_path / "m.jsonl")]
        if args[0] == "scan"
        else [sys.executable, "-m", "scrub", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_checks_lists_catalogue_and_explains_one():
    listing = run("checks")
    assert listing.exit_code == 0
    for check_id in REGISTRY:
        assert check_id in listing.output
    explained = run("checks", "corrupt-image")
    assert explained.exit_code == 0
    assert "Why it breaks training" in explained.output and "jpeginfo" in explained.output


def test_every_command_has_help():
    for command in ["scan", "checks"]:
        result = run(command, "--help")
        assert result.exit_code == 0 and len(result.output) > 200


def test_no_progress_bar_when_not_a_tty(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrub",
            "scan",
            str(SAMPLES / "images"),
            "--manifest",
            str(tmp_path / "m.jsonl"),
        ],
        capture_output=True,
        text=True,
    )
    assert "scanning" not in result.stdout and "\r" not in result.stdout
    assert "35 records scanned" in result.stdout


def test_quiet_prints_nothing(tmp_path):
    result = run("scan", SAMPLES / "images", "--manifest", tmp_path / "m.jsonl", "--quiet")
    assert result.exit_code == 1 and result.output == ""


@pytest.mark.parametrize(
    ("count", "phrase", "said"),
    [
        (1, "record", "1 record"),
        (0, "record", "0 records"),
        (2, "non-image file", "2 non-image files"),
        (3, "symlinked folder (not followed)", "3 symlinked folders (not followed)"),
        (2, "member in no sample", "2 members in no sample"),
        (2, "batch", "2 batches"),
        (1_500, "issue", "1,500 issues"),
    ],
)
def test_counts_are_said_in_words(count, phrase, said):
    from scrub.wording import counted

    assert counted(count, phrase) == said


def test_one_quarantined_record_is_said_in_the_singular(tmp_path, clean_folder):
    (clean_folder / "a" / "notes.txt").write_text("not an image")
    (clean_folder / "b" / "0.jpg").write_bytes(b"")  # one record with an error
    scanned = runner.invoke(app, ["scan", str(clean_folder), "--manifest", str(tmp_path / "m.jsonl")])
    assert "skipped: 1 non-image file\n" in scanned.output
    assert "1 issue; 1 record to quarantine (errors), 1 with any issue" in scanned.output
    fixed = runner.invoke(app, ["fix", str(clean_folder), "--out", str(tmp_path / "c"), "--quarantine"])
    assert fixed.exit_code == 0, fixed.output
    assert "quarantined 1 record -> " in fixed.output and "kept        7 records -> " in fixed.output
