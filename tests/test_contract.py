"""The contract: inferred from a real scan's profile, written as TOML people edit, read back with
the line of every rule, and checked by the real scan — each rule broken on real files (an image
folder, HDF5 rows) named with the contract's line, the expected and the found value, the records
named where records break it, and `fix` setting aside those records only."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import tomllib
from conftest import image_bytes, manifest_lines, write
from typer.testing import CliRunner

import scrub
from scrub.cli import app
from scrub.errors import UsageError
from scrub.profile.contract import load, rule_lines

runner = CliRunner()


def run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def hdf5(path: Path, data: np.ndarray, labels: np.ndarray) -> Path:
    with h5py.File(path, "w") as file:
        file["data"] = data
        file["label"] = labels
    return path


def rows(n: int = 600, seed: int = 0, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 6)).astype(dtype), rng.choice(3, size=n, p=[0.5, 0.3, 0.2]).astype(np.int64)


def images(root: Path, classes: dict[str, int], size: int = 24, small: int = 0) -> Path:
    """Class folders of PNGs; the first ``small`` of each class at half the size."""
    for name, count in classes.items():
        for i in range(count):
            side = size // 2 if i < small else size
            write(root / name / f"{i:03d}.png", image_bytes(seed=i, fmt="PNG", size=side))
    return root


def contract_of(tmp_path: Path, dataset: Path, name: str = "scrub.contract.toml") -> Path:
    manifest = tmp_path / "first.jsonl"
    scrub.scan(dataset, manifest=manifest)
    target = tmp_path / name
    result = run("contract", manifest, "--output", target)
    assert result.exit_code == 0, result.output
    return target


def contract_findings(manifest: Path) -> list[dict]:
    return [line for line in manifest_lines(manifest) if line["check"].startswith("contract-")]


def test_the_inferred_contract_is_toml_whose_rules_are_found_on_their_lines(tmp_path):
    data, labels = rows()
    target = contract_of(tmp_path, hdf5(tmp_path / "d.h5", data, labels))
    text = target.read_text()
    document = tomllib.loads(text)
    assert document["records"] == {"min": 480, "max": 720}
    assert document["labels"]["classes"] == [0, 1, 2]
    assert document["arrays"] == {"shapes": ["6"], "dtypes": ["float32"]}
    shares = document["labels"]["min-class-share"]
    assert set(shares) == {"0", "1", "2"} and all(0 < share < 0.5 for share in shares.values())
    lines = text.splitlines()
    for rule, line in rule_lines(text).items():
        table, key = rule.split(".", 1)
        assert lines[line - 1].lstrip().startswith(key), rule
    contract = load(target)
    assert contract.records == (480, 720) and contract.classes == (0, 1, 2)
    assert contract.where("records.max") == f"{target}:{rule_lines(text)['records.max']}"


def test_a_contract_the_data_keeps_gives_nothing(tmp_path):
    data, labels = rows()
    dataset = hdf5(tmp_path / "d.h5", data, labels)
    target = contract_of(tmp_path, dataset)
    result = scrub.scan(dataset, contract=target, manifest=tmp_path / "again.jsonl")
    assert contract_findings(tmp_path / "again.jsonl") == []
    assert result.exit_code() == 0


def test_rows_break_the_count_the_class_set_and_the_dtype_with_their_records_named(tmp_path):
    data, labels = rows()
    target = contract_of(tmp_path, hdf5(tmp_path / "d.h5", data, labels))
    # tonight: a third of the rows gone, class 2 gone, a new class 7 in three rows, float64 values
    keep = labels != 2
    data, labels = data[keep][:400].astype(np.float64), labels[keep][:400]
    labels[[5, 50, 300]] = 7
    tonight = hdf5(tmp_path / "tonight.h5", data, labels)
    manifest = tmp_path / "tonight.jsonl"
    scrub.scan(tonight, contract=target, manifest=manifest)
    found = contract_findings(manifest)
    by_check: dict[str, list[dict]] = {}
    for line in found:
        by_check.setdefault(line["check"], []).append(line)
    lines = rule_lines(target.read_text())
    # one id for the class rule: the records outside the set by index, the class missing as key *
    unknown = [line for line in by_check["contract-classes"] if line["key"] != "*"]
    assert sorted(line["index"] for line in unknown) == [5, 50, 300]
    assert unknown[0]["details"]["label"] == 7 and unknown[0]["details"]["expected"] == [0, 1, 2]
    (count,) = by_check["contract-record-count"]
    assert count["key"] == "*" and count["details"]["found"] == 400
    assert count["details"]["contract"] == f"{target}:{lines['records.min']}"
    (missing,) = [line for line in by_check["contract-classes"] if line["key"] == "*"]
    assert "class 2" in missing["message"] and missing["details"]["contract"].endswith(
        f":{lines['labels.classes']}"
    )
    (dtype,) = by_check["contract-dtype"]
    assert dtype["details"]["found"] == "float64" and dtype["details"]["expected"] == ["float32"]
    assert all(line["severity"] == "error" for line in found)


def test_images_outside_the_size_bounds_are_named_and_fix_sets_only_them_aside(tmp_path):
    target = contract_of(tmp_path, images(tmp_path / "monday", {"cat": 12, "dog": 12}))
    tonight = images(tmp_path / "tuesday", {"cat": 12, "dog": 12}, small=2)
    manifest = tmp_path / "tuesday.jsonl"
    result = scrub.scan(tonight, contract=target, manifest=manifest)
    sizes = [line for line in contract_findings(manifest) if line["check"] == "contract-image-size"]
    assert sorted(line["key"] for line in sizes) == [
        "cat/000.png",
        "cat/001.png",
        "dog/000.png",
        "dog/001.png",
    ]
    assert sizes[0]["details"]["width"] == 12 and sizes[0]["details"]["expected"] == [24, 24]
    assert result.summary.records_with_errors == 4
    fixed = run("fix", tonight, "--contract", target, "--out", tmp_path / "clean", "--quarantine")
    assert fixed.exit_code == 0, fixed.output
    kept = sorted(p.relative_to(tmp_path / "clean").as_posix() for p in (tmp_path / "clean").rglob("*.png"))
    assert len(kept) == 20 and "cat/000.png" not in kept and "cat/002.png" in kept


def test_a_rule_of_the_whole_dataset_sets_nothing_aside_and_fix_does_not_refuse(tmp_path):
    data, labels = rows()
    target = contract_of(tmp_path, hdf5(tmp_path / "d.h5", data, labels))
    tonight = hdf5(tmp_path / "tonight.h5", data[:200], labels[:200])  # a third of the rows: too few
    scanned = run("scan", tonight, "--contract", target, "--manifest", tmp_path / "t.jsonl")
    assert scanned.exit_code == 1 and "contract-record-count" in scanned.output
    assert "0 records to quarantine" in scanned.output
    fixed = run("fix", tonight, "--contract", target, "--out", tmp_path / "clean.h5")
    assert fixed.exit_code == 0, fixed.output
    with h5py.File(tmp_path / "clean.h5") as file:
        assert len(file["data"]) == 200


def test_a_missing_class_sets_nothing_aside_while_its_new_class_records_are_quarantined(tmp_path):
    """contract-classes is one id for both halves of the class rule: fix sets aside the records
    with a class outside the set and neither counts nor refuses because of the class missing."""
    data, labels = rows()
    target = contract_of(tmp_path, hdf5(tmp_path / "d.h5", data, labels))
    keep = labels != 2
    data, labels = data[keep], labels[keep]
    labels[[3, 30]] = 9
    tonight = hdf5(tmp_path / "tonight.h5", data, labels)
    scanned = run("scan", tonight, "--contract", target, "--manifest", tmp_path / "t.jsonl")
    assert scanned.exit_code == 1, scanned.output
    assert "2 records to quarantine" in scanned.output
    keys = sorted(line["key"] for line in contract_findings(tmp_path / "t.jsonl"))
    assert keys.count("*") == 1 and len(keys) == 3
    fixed = run("fix", tonight, "--contract", target, "--out", tmp_path / "clean.h5")
    assert fixed.exit_code == 0, fixed.output
    with h5py.File(tmp_path / "clean.h5") as file:
        assert len(file["data"]) == len(labels) - 2 and 9 not in set(file["label"][:].tolist())


def test_the_contract_sets_the_severity_of_its_rules(tmp_path):
    data, labels = rows()
    target = contract_of(tmp_path, hdf5(tmp_path / "d.h5", data, labels))
    text = target.read_text().replace('contract-record-count = "error"', 'contract-record-count = "warning"')
    target.write_text(text)
    tonight = hdf5(tmp_path / "tonight.h5", data[:200], labels[:200])
    result = scrub.scan(tonight, contract=target, manifest=tmp_path / "t.jsonl")
    (count,) = [
        line for line in contract_findings(tmp_path / "t.jsonl") if line["check"] == "contract-record-count"
    ]
    assert count["severity"] == "warning"
    assert result.exit_code() == 0 and result.exit_code("warning") == 1


def test_a_per_record_rule_takes_the_file_s_severity_and_check_severity_wins_over_it(tmp_path):
    data, labels = rows()
    target = contract_of(tmp_path, hdf5(tmp_path / "d.h5", data, labels))
    target.write_text(
        target.read_text().replace('contract-classes = "error"', 'contract-classes = "warning"')
    )
    labels = labels.copy()
    labels[[4, 40]] = 8
    tonight = hdf5(tmp_path / "tonight.h5", data, labels)
    scrub.scan(tonight, contract=target, manifest=tmp_path / "w.jsonl")
    named = [line for line in contract_findings(tmp_path / "w.jsonl") if line["check"] == "contract-classes"]
    assert sorted(line["index"] for line in named) == [4, 40]
    assert {line["severity"] for line in named} == {"warning"}
    scanned = run(
        "scan", tonight, "--contract", target, "--check-severity", "contract-classes=error",
        "--manifest", tmp_path / "e.jsonl",
    )  # fmt: skip
    assert scanned.exit_code == 1, scanned.output
    named = [line for line in contract_findings(tmp_path / "e.jsonl") if line["check"] == "contract-classes"]
    assert {line["severity"] for line in named} == {"error"} and len(named) == 2


@pytest.mark.parametrize(
    "text, where, message",
    [
        ("[records]\nmin = 10\nmax = 5\n", ":2", "above max"),
        ("[records]\nmin = 1\n\n[images]\nwidth = [64]\n", ":5", "[smallest, largest]"),
        ("[labels]\nclasses = [0, 'x']\n", ":2", "class ids"),
        ("[labels]\ncolours = [1]\n", ":2", "unknown rule"),
        ("[severity]\ncontract-record-count = 'fatal'\n", ":2", "error or warning"),
        ("[records\nmin = 1\n", "", "not a TOML contract"),
    ],
)
def test_a_bad_contract_is_one_line_naming_its_line_and_exit_2(tmp_path, text, where, message):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    with pytest.raises(UsageError, match="bad.toml"):
        load(bad)
    result = run("scan", tmp_path, "--contract", bad, "--manifest", tmp_path / "m.jsonl")
    assert result.exit_code == 2
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert f"bad.toml{where}" in line and message in line


def test_scrub_contract_keeps_an_edited_file_unless_forced(tmp_path):
    data, labels = rows()
    dataset = hdf5(tmp_path / "d.h5", data, labels)
    target = contract_of(tmp_path, dataset)
    target.write_text("# edited by hand\n" + target.read_text())
    again = run("contract", tmp_path / "first.scan.json", "--output", target)
    assert again.exit_code == 2 and "--force" in again.output
    assert target.read_text().startswith("# edited by hand")
    forced = run("contract", dataset, "--output", target, "--force")  # a dataset: scanned here
    assert forced.exit_code == 0, forced.output
    assert (
        not target.read_text().startswith("# edited")
        and tomllib.loads(target.read_text())["records"]["min"] == 480
    )


def test_the_scan_record_says_which_contract_was_checked(tmp_path):
    data, labels = rows()
    dataset = hdf5(tmp_path / "d.h5", data, labels)
    target = contract_of(tmp_path, dataset)
    scrub.scan(dataset, contract=target, manifest=tmp_path / "m.jsonl")
    record = json.loads((tmp_path / "m.scan.json").read_text())
    assert record["options"]["contract"]["path"] == str(target)
    assert len(record["options"]["contract"]["sha256"]) == 64


def token_lines(path: Path, lengths: list[int], seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    path.write_text(
        "".join(json.dumps({"input_ids": rng.integers(1, 500, n).tolist()}) + "\n" for n in lengths)
    )
    return path


def test_sequences_outside_the_length_bounds_are_named_and_fix_sets_only_them_aside(tmp_path):
    monday = token_lines(tmp_path / "monday.jsonl", [8 + i % 24 for i in range(200)])  # 8 .. 31 tokens
    target = contract_of(tmp_path, monday)
    assert load(target).length == (8, 31)
    lengths = [8 + i % 24 for i in range(200)]
    lengths[10], lengths[77] = 64, 2  # a doubled template, a truncated line
    tuesday = token_lines(tmp_path / "tuesday.jsonl", lengths, seed=1)
    manifest = tmp_path / "t.jsonl"
    scrub.scan(tuesday, contract=target, manifest=manifest)
    found = [line for line in contract_findings(manifest) if line["check"] == "contract-length"]
    named = sorted((line["index"], line["details"]["length"]) for line in found if line["key"] != "*")
    assert named == [(10, 64), (77, 2)]
    where = f"{target}:{rule_lines(target.read_text())['tokens.length']}"
    assert all(line["details"]["contract"] == where for line in found)
    (whole,) = [line for line in found if line["key"] == "*"]
    assert whole["details"]["expected"] == [8, 31] and whole["details"]["found"] == [2, 64]
    fixed = run("fix", tuesday, "--contract", target, "--out", tmp_path / "clean.jsonl")
    assert fixed.exit_code == 0, fixed.output
    kept = [
        len(json.loads(line)["input_ids"]) for line in (tmp_path / "clean.jsonl").read_text().splitlines()
    ]
    assert len(kept) == 198 and 64 not in kept and 2 not in kept


def test_a_megatron_document_outside_the_length_bounds_is_named_by_the_batch_form(tmp_path):
    """A Megatron store is judged a batch of documents at a time (`TokenRows`): its documents
    outside the bounds are named as a JSON Lines record is."""
    from test_megatron import write_pair

    rng = np.random.default_rng(3)
    documents = [[rng.integers(0, 900, 10 + i % 20)] for i in range(120)]  # 10 .. 29 tokens
    write_pair(tmp_path / "monday", documents)
    target = contract_of(tmp_path, tmp_path / "monday.bin")
    assert load(target).length == (10, 29)
    documents[7] = [rng.integers(0, 900, 60)]
    documents[90] = [rng.integers(0, 900, 3)]
    write_pair(tmp_path / "tuesday", documents)
    manifest = tmp_path / "t.jsonl"
    scrub.scan(tmp_path / "tuesday.bin", contract=target, manifest=manifest)
    found = [line for line in contract_findings(manifest) if line["check"] == "contract-length"]
    assert sorted((line["index"], line["details"]["length"]) for line in found if line["key"] != "*") == [
        (7, 60),
        (90, 3),
    ]


def test_scrub_contract_scans_a_dataset_with_the_scan_options_given(tmp_path):
    data, labels = rows()
    dataset = hdf5(tmp_path / "d.h5", data, labels)
    as_classes = run("contract", dataset, "-o", tmp_path / "classes.toml")
    assert as_classes.exit_code == 0, as_classes.output
    assert load(tmp_path / "classes.toml").classes == (0, 1, 2)
    # the same labels read as regression values: no class set to keep
    as_values = run("contract", dataset, "-o", tmp_path / "values.toml", "--label-kind", "value")
    assert as_values.exit_code == 0, as_values.output
    assert load(tmp_path / "values.toml").classes is None
    # a scan record was scanned already: an option given with it is refused, not ignored
    scrub.scan(dataset, manifest=tmp_path / "m.jsonl")
    refused = run("contract", tmp_path / "m.jsonl", "-o", tmp_path / "r.toml", "--label-kind", "value")
    assert refused.exit_code == 2 and "--label-kind" in refused.output
    assert len(refused.output.strip().splitlines()) == 1 and not (tmp_path / "r.toml").exists()
