"""Baselines: only new problems fail the nightly job, and identity survives what nightly data
goes through (reordered lists, appended records, shifted HDF5 rows)."""

from __future__ import annotations

import h5py
import numpy as np
from conftest import image_bytes, manifest_lines, write
from typer.testing import CliRunner

import scrub
from scrub.cli import app
from scrub.scanning.baseline import prune

runner = CliRunner()
#: these tests add and remove records on purpose: the drift of their count (record-count-change,
#: tests/test_drift_scan.py) is not what they look at
COUNT_CHANGES = {"ignore": ["record-count-change"]}


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def image_list(root, lines):
    for name in ("good0.jpg", "good1.jpg", "good2.jpg"):
        write(root / name, image_bytes(int(name[4])))
    write(root / "trunc.jpg", image_bytes(7)[:300])
    write(root / "trunc2.jpg", image_bytes(8)[:420])
    listing = root / "list.txt"
    listing.write_text("".join(f"{line}\n" for line in lines))
    return listing


def statuses(manifest):
    return sorted((line["key"], line["check"], line.get("status")) for line in manifest_lines(manifest))


def test_reordering_and_appending_keep_identities(tmp_path):
    listing = image_list(tmp_path / "d", ["good0.jpg 0", "trunc.jpg 1", "good1.jpg 7", "good2.jpg 1"])
    old = tmp_path / "old.jsonl"
    first = scrub.scan(listing, num_classes=2, manifest=old)
    assert first.summary.baseline is None and first.exit_code() == 1
    listing.write_text("good2.jpg 1\ngood1.jpg 7\ntrunc.jpg 1\ngood0.jpg 0\n")  # reordered
    again = scrub.scan(listing, num_classes=2, manifest=tmp_path / "new.jsonl", baseline=old)
    assert again.summary.baseline == {
        "path": str(old),
        "new": 0,
        "persisting": 2,
        "reappeared": 0,
        "resolved": 0,
        "new_errors": 0,
    }
    assert again.exit_code("new") == 0 and again.exit_code("error") == 1  # still listed, still errors
    assert {s for _, _, s in statuses(tmp_path / "new.jsonl")} == {"persisting"}
    listing.write_text(listing.read_text() + "trunc2.jpg 0\n")  # a bad record appended
    appended = scrub.scan(
        listing, num_classes=2, manifest=tmp_path / "app.jsonl", baseline=old, **COUNT_CHANGES
    )
    assert ("trunc2.jpg", "corrupt-image", "new") in statuses(tmp_path / "app.jsonl")
    assert appended.summary.baseline["new"] == 1 and appended.exit_code("new") == 1


def test_a_new_issue_never_hides_behind_a_fixed_one(tmp_path):
    """ESLint counts suppressions per file and check: one fixed + one new would pass. Not here."""
    listing = image_list(tmp_path / "d", ["good0.jpg 0", "trunc.jpg 1"])
    old = tmp_path / "old.jsonl"
    scrub.scan(listing, manifest=old)
    listing.write_text("good0.jpg 0\ntrunc2.jpg 1\n")  # trunc fixed (gone), trunc2 broken
    result = scrub.scan(listing, manifest=tmp_path / "new.jsonl", baseline=old)
    assert (result.summary.baseline["new"], result.summary.baseline["resolved"]) == (1, 1)
    assert result.exit_code("new") == 1
    lines = statuses(tmp_path / "new.jsonl")
    assert ("trunc.jpg", "corrupt-image", "resolved") in lines and (
        "trunc2.jpg",
        "corrupt-image",
        "new",
    ) in lines


def test_resolved_then_reappeared_and_prune(tmp_path):
    listing = image_list(tmp_path / "d", ["good0.jpg 0", "trunc.jpg 1"])
    night1, night2, night3 = (tmp_path / f"n{i}.jsonl" for i in (1, 2, 3))
    scrub.scan(listing, manifest=night1)
    listing.write_text("good0.jpg 0\n")
    second = scrub.scan(listing, manifest=night2, baseline=night1, **COUNT_CHANGES)
    assert second.summary.baseline["resolved"] == 1 and second.exit_code("new") == 0
    assert second.summary.issues == 0  # a resolved line is not an issue of tonight's
    listing.write_text("good0.jpg 0\ntrunc.jpg 1\n")
    third = scrub.scan(listing, manifest=night3, baseline=night2, **COUNT_CHANGES)
    assert third.summary.baseline["reappeared"] == 1 and third.exit_code("new") == 1
    assert statuses(night3) == [("trunc.jpg", "corrupt-image", "reappeared")]
    assert prune(night2) == (0, 1) and manifest_lines(night2) == []
    fourth = scrub.scan(listing, manifest=tmp_path / "n4.jsonl", baseline=night2, **COUNT_CHANGES)
    assert fourth.summary.baseline["new"] == 1  # forgotten: new, not reappeared


def test_fix_ignores_resolved_lines(tmp_path):
    listing = image_list(tmp_path / "d", ["good0.jpg 0", "trunc.jpg 1"])
    old = tmp_path / "old.jsonl"
    scrub.scan(listing, manifest=old)
    listing.write_text("good0.jpg 0\ngood1.jpg 1\n")
    new = tmp_path / "new.jsonl"
    scrub.scan(listing, manifest=new, baseline=old)
    result = scrub.fix(listing, manifest=new, out=tmp_path / "clean")
    assert (result.report["kept"], result.report["quarantined"]) == (2, 0)


def test_shifted_hdf5_rows_keep_their_identity_by_content(tmp_path):
    data = np.arange(60, dtype=np.float32).reshape(20, 3)
    data[5, 1] = np.nan
    data[12, 0] = np.inf
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data)
    old = tmp_path / "old.jsonl"
    scrub.scan(path, manifest=old)
    assert all(line["content"].startswith("xxh3:") for line in manifest_lines(old))
    shifted = np.concatenate(
        [np.arange(109, 118, dtype=np.float32).reshape(3, 3), data]
    )  # regenerated: 3 new rows on top
    shifted[0, 0] = np.nan  # and one new bad row
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=shifted)
    result = scrub.scan(path, manifest=tmp_path / "new.jsonl", baseline=old, **COUNT_CHANGES)
    counts = result.summary.baseline
    assert (counts["persisting"], counts["new"], counts["resolved"]) == (2, 1, 0)
    by_key = {line["key"]: line["status"] for line in manifest_lines(tmp_path / "new.jsonl")}
    assert by_key == {"0": "new", "8": "persisting", "15": "persisting"}


def test_cli_prints_the_counts_and_fail_on_new(tmp_path):
    listing = image_list(tmp_path / "d", ["good0.jpg 0", "trunc.jpg 1"])
    old = tmp_path / "old.jsonl"
    assert run("scan", listing, "--manifest", old).exit_code == 1
    result = run("scan", listing, "--manifest", tmp_path / "new.jsonl", "--baseline", old, "--fail-on", "new")
    assert result.exit_code == 0, result.output
    assert "0 new, 1 persisting, 0 reappeared, 0 resolved" in result.output
    assert run("scan", listing, "--fail-on", "new").exit_code == 2
    missing = run("scan", listing, "--baseline", tmp_path / "nope.jsonl")
    assert missing.exit_code == 2 and "no such manifest" in missing.output
    pruned = run("baseline", "prune", tmp_path / "new.jsonl")
    assert pruned.exit_code == 0 and "kept 1 issue, dropped 0 resolved" in pruned.output
