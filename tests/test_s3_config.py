"""A bucket's endpoint set in a config file, in every form docs/configuration.md shows (a
``[storage-options]`` table, an inline table, a ``[storage-options.s3]`` table for one protocol, a
JSON string, ``[tool.scrub.storage-options.s3]`` in a pyproject.toml), through the real command
line against a real S3 server on loopback (moto's, `conftest.s3_server`); and `scrub config URL`
printing the URL as given and a storage-options table that reads back as TOML."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scrub.cli import app

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

pytest.importorskip("webdataset")

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"
runner = CliRunner()

#: each documented form of storage-options, as a function of the endpoint
FORMS = {
    "table": lambda url: f'[storage-options]\nendpoint_url = "{url}"\n',
    "inline": lambda url: f'storage-options = {{ endpoint_url = "{url}" }}\n',
    "protocol table": lambda url: f'num-classes = 10\n[storage-options.s3]\nendpoint_url = "{url}"\n',
    "json string": lambda url: "storage-options = '" + json.dumps({"endpoint_url": url}) + "'\n",
}


def run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def bucket(s3_server) -> str:
    """The bundled WebDataset sample in a bucket (the README's example)."""
    return s3_server.upload(SAMPLES / "webdataset", "scrub-config", "wds")


def scanned_checks(manifest: Path) -> list[tuple[str, str]]:
    return sorted(
        (entry["key"], entry["check"])
        for line in manifest.read_text().splitlines()
        for entry in [json.loads(line)]
        if "check" in entry
    )


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_documented_form_of_storage_options_reaches_the_bucket(s3_server, bucket, form):
    Path("scrub.toml").write_text(
        "num-classes = 10\n" * (form != "protocol table") + FORMS[form](s3_server.endpoint)
    )
    result = run("scan", bucket, "--scheduler", "sync", "--manifest", "found.jsonl", "--quiet")
    assert result.exit_code == 1, result.output  # issues found: the bucket was read
    found = scanned_checks(Path("found.jsonl"))
    assert len(found) == 8 and ("000005", "label-out-of-range") in found


def test_a_pyproject_protocol_table_reaches_the_bucket(s3_server, bucket):
    Path("pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.scrub]\nnum-classes = 10\n\n'
        f'[tool.scrub.storage-options.s3]\nendpoint_url = "{s3_server.endpoint}"\n'
    )
    result = run("scan", bucket, "--scheduler", "sync", "--manifest", "found.jsonl", "--quiet")
    assert result.exit_code == 1, result.output
    assert len(scanned_checks(Path("found.jsonl"))) == 8


@pytest.mark.parametrize("form", sorted(FORMS))
def test_scrub_config_prints_the_url_and_a_table_that_reads_back(s3_server, bucket, form):
    Path("scrub.toml").write_text(FORMS[form](s3_server.endpoint))
    shown = run("config", bucket)
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[0] == f"# scrub scan {bucket}"  # s3://, not s3:/
    printed = tomllib.loads(shown.output)  # the whole output is TOML
    expected = {"endpoint_url": s3_server.endpoint}
    assert printed["storage-options"] == ({"s3": expected} if form == "protocol table" else expected)
    line = next(line for line in shown.output.splitlines() if line.startswith("storage-options ="))
    assert "scrub.toml:1: storage-options" in line or "scrub.toml:2: storage-options" in line  # its line
    Path("again.toml").write_text(line.split("  # ")[0] + "\nnum-classes = 10\n")
    again = run(
        "scan", bucket, "--config", "again.toml", "--scheduler", "sync", "--manifest", "a.jsonl", "--quiet"
    )
    assert again.exit_code == 1, again.output
    assert len(scanned_checks(Path("a.jsonl"))) == 8


def test_unset_storage_options_is_not_an_empty_list(tmp_path):
    shown = run("config", tmp_path, "--isolated")
    assert "# storage-options = (not set)  # default" in shown.output
    assert "storage-options = []" not in shown.output


def test_a_bad_storage_options_value_is_one_line_naming_the_file(bucket):
    Path("scrub.toml").write_text("storage-options = 3\n")
    result = run("scan", bucket, "--quiet")
    assert result.exit_code == 2
    assert "scrub.toml:1: storage-options: expected a JSON object (a table in a config file), got 3" in (
        result.output
    )
