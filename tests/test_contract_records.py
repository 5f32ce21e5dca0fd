"""The contract's rules that records break, judged per record on real files: sequences outside
the length bounds named in JSON Lines of token ids (the record path) and in a Megatron pair (the
flat store's batch path), set aside by `fix`; `scrub contract DATA` with the options that decide
what a record is; the config key; the lines a finding names after the file was edited; and which
findings name no record (`names_no_record`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import image_bytes, manifest_lines, write
from test_megatron import write_pair
from typer.testing import CliRunner

import scrub
from scrub.checks.contract import names_no_record
from scrub.cli import app
from scrub.profile.contract import rule_lines

runner = CliRunner()

#: the records of tonight's data whose sequences are three times as long
LONGER = (3, 77, 150)


def run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def token_lines(path: Path, longer: tuple[int, ...] = ()) -> Path:
    """200 JSON Lines of 10 to 40 token ids (labels = ids); those at ``longer`` three times as long."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(200):
        ids = rng.integers(0, 500, int(rng.integers(10, 41))).tolist()
        if i in longer:
            ids = ids * 3
        lines.append(json.dumps({"input_ids": ids, "labels": ids}))
    path.write_text("\n".join(lines) + "\n")
    return path


def contract_findings(manifest: Path) -> list[dict]:
    return [line for line in manifest_lines(manifest) if line["check"].startswith("contract-")]


def named(manifest: Path) -> list[dict]:
    """The contract's findings that name a record (not the dataset as a whole, key ``*``)."""
    return [line for line in contract_findings(manifest) if line["key"] != "*"]


@pytest.mark.slow
def test_sequences_outside_the_length_bounds_are_named_and_fix_sets_only_them_aside(tmp_path):
    monday = token_lines(tmp_path / "monday.jsonl")
    target = tmp_path / "tokens.contract.toml"
    # a JSON Lines dataset, not a manifest: scanned with the options given
    made = run("contract", monday, "--max-length", 64, "--output", target)
    assert made.exit_code == 0, made.output
    assert "length = [10, 40]" in target.read_text()
    line = rule_lines(target.read_text())["tokens.length"]
    tonight = token_lines(tmp_path / "tonight.jsonl", longer=LONGER)
    manifest = tmp_path / "t.jsonl"
    result = scrub.scan(tonight, contract=target, max_length=64, manifest=manifest)
    found = named(manifest)
    assert sorted(f["index"] for f in found) == list(LONGER)
    assert {f["check"] for f in found} == {"contract-length"}
    first = min(found, key=lambda f: f["index"])
    assert first["key"] == "4" and first["details"]["expected"] == [10, 40]
    assert first["details"]["length"] > 40 and first["details"]["line"] == line
    assert first["message"].endswith(f"({target}:{line})")
    assert result.summary.records_with_errors == 3
    fixed = run("fix", tonight, "--contract", target, "--max-length", 64, "--out", tmp_path / "clean.jsonl")
    assert fixed.exit_code == 0, fixed.output
    kept = (tmp_path / "clean.jsonl").read_text().splitlines()
    assert len(kept) == 197 and all(len(json.loads(k)["input_ids"]) <= 40 for k in kept)


def test_a_flat_token_store_names_its_sequences_outside_the_bounds(tmp_path):
    rng = np.random.default_rng(3)
    documents = [[rng.integers(0, 1000, int(rng.integers(5, 31)))] for _ in range(60)]
    write_pair(tmp_path / "monday", documents)
    manifest = tmp_path / "monday.jsonl"
    scrub.scan(tmp_path / "monday", manifest=manifest)
    target = tmp_path / "c.toml"
    assert run("contract", manifest, "-o", target).exit_code == 0
    shortest = min(len(d[0]) for d in documents)
    longest = max(len(d[0]) for d in documents)
    assert f"length = [{shortest}, {longest}]" in target.read_text()
    documents[10] = [np.tile(documents[10][0], 4)]  # lengths quadrupled: past the bound
    documents[41] = [documents[41][0][:2]]  # cut short: below it
    write_pair(tmp_path / "tuesday", documents)
    tonight = tmp_path / "tuesday.jsonl"
    scrub.scan(tmp_path / "tuesday", contract=target, manifest=tonight)
    found = named(tonight)
    assert {(f["check"], f["index"]) for f in found} == {("contract-length", 10), ("contract-length", 41)}
    assert {f["details"]["length"] for f in found} == {len(documents[10][0]), 2}


def test_options_with_a_scan_record_are_one_line_and_exit_2(tmp_path):
    monday = token_lines(tmp_path / "monday.jsonl")
    manifest = tmp_path / "m.jsonl"
    scrub.scan(monday, manifest=manifest)
    result = run("contract", manifest, "--max-length", 64, "-o", tmp_path / "c.toml")
    assert result.exit_code == 2
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert "--max-length" in line and "scan record" in line
    assert not (tmp_path / "c.toml").exists()


def test_the_config_key_checks_the_contract_and_a_finding_follows_its_line(tmp_path):
    monday = token_lines(tmp_path / "monday.jsonl")
    target = tmp_path / "nightly.toml"
    assert run("contract", monday, "--max-length", 64, "-o", target).exit_code == 0
    # edited by hand: three comment lines on top move every rule down three lines
    target.write_text("# owned by the data team\n# review monthly\n\n" + target.read_text())
    line = rule_lines(target.read_text())["tokens.length"]
    assert target.read_text().splitlines()[line - 1].startswith("length = [10, 40]")
    (tmp_path / "scrub.toml").write_text(f'contract = "{target.as_posix()}"\nmax-length = 64\n')
    tonight = token_lines(tmp_path / "tonight.jsonl", longer=(5,))
    scanned = run("scan", tonight, "--manifest", tmp_path / "t.jsonl")
    assert scanned.exit_code == 1, scanned.output
    (finding,) = named(tmp_path / "t.jsonl")
    assert finding["details"]["line"] == line and finding["details"]["contract"] == f"{target}:{line}"


def test_the_contract_severity_table_sets_a_per_record_rule_s(tmp_path):
    monday = token_lines(tmp_path / "monday.jsonl")
    target = tmp_path / "c.toml"
    assert run("contract", monday, "--max-length", 64, "-o", target).exit_code == 0
    target.write_text(target.read_text().replace('contract-length = "error"', 'contract-length = "warning"'))
    tonight = token_lines(tmp_path / "tonight.jsonl", longer=LONGER)
    result = scrub.scan(tonight, contract=target, max_length=64, manifest=tmp_path / "t.jsonl")
    found = named(tmp_path / "t.jsonl")
    assert len(found) == 3 and {f["severity"] for f in found} == {"warning"}
    assert result.exit_code() == 0 and result.exit_code("warning") == 1


def test_only_a_contract_runs_its_checks_and_only_those_of_its_rules(tmp_path):
    data = token_lines(tmp_path / "d.jsonl")
    without = scrub.scan(data, max_length=64, manifest=tmp_path / "m.jsonl")
    assert not [check for check in without.summary.checks if check.startswith("contract-")]
    (tmp_path / "c.toml").write_text("[tokens]\nlength = [1, 100]\n")
    within = scrub.scan(data, max_length=64, contract=tmp_path / "c.toml", manifest=tmp_path / "n.jsonl")
    assert [check for check in within.summary.checks if check.startswith("contract-")] == ["contract-length"]
    assert not contract_findings(tmp_path / "n.jsonl")  # a contract the data keeps: nothing


@pytest.mark.parametrize(
    "check, key, names_none",
    [
        ("contract-record-count", "*", True),  # the dataset as a whole
        ("contract-classes", "*", True),  # a class with no record
        ("contract-classes", "12", False),  # a record outside the class set
        ("contract-length", "4", False),
        ("contract-image-size", "cat/000.png", False),
        ("label-drift", "*", True),  # a drift from the baseline
        ("unreadable-dataset", "*", False),  # a file: fix sets it aside whole
    ],
)
def test_which_findings_name_no_record(check, key, names_none):
    assert names_no_record(check, key) is names_none


def test_check_severity_wins_over_the_contract_s_table(tmp_path):
    target = tmp_path / "c.toml"
    target.write_text('[tokens]\nlength = [10, 40]\n\n[severity]\ncontract-length = "error"\n')
    tonight = token_lines(tmp_path / "tonight.jsonl", longer=LONGER)
    result = scrub.scan(
        tonight,
        contract=target,
        max_length=64,
        check_severity={"contract-length": "warning"},
        manifest=tmp_path / "t.jsonl",
    )
    found = named(tmp_path / "t.jsonl")
    assert len(found) == 3 and {f["severity"] for f in found} == {"warning"}
    assert result.exit_code() == 0


def test_images_a_class_folder_gone_and_a_new_mode_are_findings_on_the_whole(tmp_path):
    for name in ("cat", "dog", "fox"):
        for i in range(6):
            write(tmp_path / "monday" / name / f"{i}.png", image_bytes(seed=i, fmt="PNG", size=24))
    manifest = tmp_path / "monday.jsonl"
    scrub.scan(tmp_path / "monday", manifest=manifest)
    target = tmp_path / "c.toml"
    assert run("contract", manifest, "-o", target).exit_code == 0
    lines = rule_lines(target.read_text())
    # tonight: the fox folder kept (its class id stays 2) but emptied of images, two cats grayscale
    for name in ("cat", "dog"):
        for i in range(6):
            mode = "L" if name == "cat" and i < 2 else "RGB"
            write(
                tmp_path / "tuesday" / name / f"{i}.png", image_bytes(seed=i, mode=mode, fmt="PNG", size=24)
            )
    (tmp_path / "tuesday" / "fox").mkdir()
    tonight = tmp_path / "tuesday.jsonl"
    scrub.scan(tmp_path / "tuesday", contract=target, manifest=tonight)
    found = {f["check"]: f for f in contract_findings(tonight)}
    assert set(found) == {"contract-image-mode", "contract-record-count", "contract-classes"}
    assert found["contract-classes"]["key"] == "*" and "class 2" in found["contract-classes"]["message"]
    mode = found["contract-image-mode"]
    assert mode["key"] == "*" and mode["details"]["found"] == "L" and mode["details"]["expected"] == ["RGB"]
    assert mode["details"]["line"] == lines["images.modes"]
    count = found["contract-record-count"]
    assert count["details"]["found"] == 12 and count["details"]["expected"] == [14, 22]
    fixed = run("fix", tmp_path / "tuesday", "--contract", target, "--out", tmp_path / "clean")
    assert fixed.exit_code == 0, fixed.output  # nothing to set aside, no refusal
    assert len(list((tmp_path / "clean").rglob("*.png"))) == 12
