"""One options model: built from flags, config files or API keywords, validated once; options
that cannot apply are errors that say what does apply."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from conftest import SAMPLES, image_bytes, manifest_lines, write
from typer.testing import CliRunner

import scrub
from scrub.cli import app
from scrub.errors import UsageError
from scrub.options.keys import KEYS, SCAN_ONLY
from scrub.options.model import FixOptions, ReplayOptions, ScanOptions, given_values

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def jpeg_folder(root):
    for i in range(4):
        write(root / ("cat" if i % 2 else "dog") / f"{i}.jpg", image_bytes(i))
    return root


def h5(path, rows=20, labels=None):
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=np.ones((rows, 3), np.float32))
        if labels is not None:
            file.create_dataset("label", data=np.asarray(labels))
    return path


def test_keywords_flags_and_objects_build_the_same_options():
    from_keywords = ScanOptions.build(
        num_classes=10, precision="float16", select=["nonfinite-data"], dummy_loss=ReplayOptions(lr=0.1)
    )
    assert from_keywords.checks.num_classes == 10 and from_keywords.checks.precision == "float16"
    assert from_keywords.selection.select == ("nonfinite-data",)
    assert from_keywords.replay == ReplayOptions(lr=0.1)
    assert ScanOptions.build(select="a-b, c-d").selection.select == ("a-b", "c-d")  # the flag's form
    assert ScanOptions.build(label_range=(2, 5)).checks.label_range == (2, 5)
    assert ScanOptions.build(label_range="2:5") == ScanOptions.build(label_range=(2, 5))
    fix = FixOptions.build(out="x", quarantine_dir="q", num_classes=3)
    assert fix.quarantine and fix.scan.checks.num_classes == 3


@pytest.mark.parametrize(
    "keywords, message",
    [
        ({"num_classes": 0}, "--num-classes: must be at least 1"),
        ({"num_classes": "ten"}, "--num-classes: expected an integer"),
        ({"precision": "float8"}, "--precision: 'float8' is not one of"),
        ({"label_range": "5:2"}, "--label-range: '5:2': expected LO:HI"),
        ({"lr": 0.5}, "--lr: need --dummy-loss"),
        ({"fail_on": "new"}, "--fail-on new: needs a baseline"),
        (
            {"check_severity": {"duplicate": "fatal"}},
            "duplicate = 'fatal': choose one of error, warning, ignore",
        ),
        ({"colour": "red"}, "unknown option 'colour'"),
        ({"out": "x"}, "--out: only `scrub fix` takes it"),
    ],
)
def test_bad_options_are_one_line_usage_errors(keywords, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("[", r"\[")):
        ScanOptions.build(**keywords)


def test_every_key_lands_in_the_model(tmp_path):
    """A key the model cannot hold would be accepted and ignored: build each with a valid value."""
    model_config = tmp_path / "config.json"
    model_config.write_text('{"vocab_size": 100}')
    samples = {
        "int": 3,
        "float": 2.0,
        "str": "x",
        "bool": True,
        "path": "p",
        "ids": ["nonfinite-data"],
        "paths": ["m"],
        "severities": {"duplicate": "ignore"},
        "thresholds": {"label": 0.2},
        "range": "0:3",
        "index": 254,
        "palette": "voc",
        "mapping": {"endpoint_url": "http://127.0.0.1:9"},
    }
    for name, key in KEYS.items():
        value = (
            key.choices[-1]
            if key.choices
            else (name not in ("normalize", "profile"))  # the switches that default to on
            if key.kind == "bool"
            else samples[key.kind]
        )
        extra = {"dummy_loss": True} if key.group == "replay" else {}
        extra |= {"baseline": "b"} if name in ("fail-on", "drift-threshold") else {}
        extra |= {"scheduler": "tcp://127.0.0.1:8786"} if name == "cluster-wait" else {}
        value = str(model_config) if name == "tokenizer" else value  # read when the options are built
        value = min(value, key.maximum) if key.maximum is not None else value
        if name == "contract":  # read when the options are built too
            value = tmp_path / "scrub.contract.toml"
            value.write_text("[records]\nmin = 1\n")
        cls = ScanOptions if name in SCAN_ONLY else FixOptions
        options = cls.build(**{name.replace("-", "_"): value, **extra})

        assert name in given_values(options), name


def test_api_keywords_keep_working(tmp_path):
    folder = jpeg_folder(tmp_path / "d")
    result = scrub.scan(folder, num_classes=2, select=["corrupt-image", "label-out-of-range"])
    assert result.summary.checks == ["corrupt-image", "label-out-of-range"]
    assert result.summary.options["num_classes"] == 2
    same = scrub.scan(folder, ScanOptions.build(num_classes=2), select=["corrupt-image"])
    assert same.summary.checks == ["corrupt-image"] and same.summary.options["num_classes"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--data-key", "x"],
            "--data-key: does not apply to .* \\(images\\); the images reader's options are: --root",
        ),
        (["--lmdb-codec", "datum"], "--lmdb-codec: does not apply"),
        (["--root", "."], "--root: applies to list files"),
        (
            ["--select", "nonfinite-data"],
            "--select: nonfinite-data cannot run on .* \\(it has no numeric values\\); "
            "the checks that apply: constant-image, corrupt-image, ",
        ),
    ],
)
def test_options_that_cannot_apply_to_an_image_folder_exit_2(tmp_path, args, message):
    folder = jpeg_folder(tmp_path / "d")
    result = run("scan", folder, "--manifest", tmp_path / "m.jsonl", *args)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1
    import re

    assert re.search(message, result.output), result.output


def test_jpeg_folders_do_not_list_the_numeric_checks(tmp_path):
    result = scrub.scan(jpeg_folder(tmp_path / "d"))
    assert "nonfinite-data" not in result.summary.checks and "corrupt-image" in result.summary.checks
    tiff = tmp_path / "t"
    write(tiff / "a.tif", image_bytes(1, fmt="TIFF"))
    assert "nonfinite-data" in scrub.scan(tiff).summary.checks  # a TIFF may hold float pixels


def test_reader_options_of_another_format_exit_2_on_hdf5(tmp_path):
    path = h5(tmp_path / "d.h5")
    for args, flag in (
        (["--lmdb-codec", "npy"], "--lmdb-codec"),
        (["--allow-pickle"], "--allow-pickle"),
        (["--select", "corrupt-image"], "--select"),
    ):
        result = run("scan", path, "--manifest", tmp_path / "m.jsonl", *args)
        assert result.exit_code == 2 and result.output.startswith(f"scrub: error: {flag}:"), result.output
    assert run("scan", path, "--manifest", tmp_path / "m.jsonl", "--data-key", "data").exit_code == 0


def test_check_severity_overrides_and_ignores(tmp_path):
    data = np.ones((10, 3), np.float32)
    data[4, 0] = 7e4  # overflows float16: a warning at float32
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data)

    def fp16(result):
        return [i.severity.value for i in result.issues() if i.check == "fp16-overflow"]

    plain = scrub.scan(path)
    assert fp16(plain) == ["warning"] and plain.exit_code() == 0
    raised = scrub.scan(path, check_severity={"fp16-overflow": "error"})
    assert fp16(raised) == ["error"]
    assert raised.exit_code() == 1 and raised.summary.options["check_severity"] == {"fp16-overflow": "error"}
    dropped = scrub.scan(path, check_severity=["fp16-overflow=ignore"])
    assert "fp16-overflow" not in dropped.summary.checks and fp16(dropped) == []
    result = run("scan", path, "--manifest", tmp_path / "m.jsonl", "--check-severity", "fp16-overflow=error")
    lines = [line for line in manifest_lines(tmp_path / "m.jsonl") if line["check"] == "fp16-overflow"]
    assert result.exit_code == 1 and lines[0]["severity"] == "error"
    bad = run("scan", path, "--check-severity", "no-such-check=error")
    assert bad.exit_code == 2 and "unknown check id: no-such-check" in bad.output


def test_fix_refuses_a_manifest_scanned_with_other_checking_options(tmp_path):
    folder = jpeg_folder(tmp_path / "d")
    manifest = tmp_path / "m.jsonl"
    assert run("scan", folder, "--manifest", manifest).exit_code == 0
    refused = run("fix", folder, "--manifest", manifest, "--num-classes", "10", "--out", tmp_path / "c")
    assert refused.exit_code == 2
    assert (
        "--num-classes: " in refused.output
        and "was scanned with num-classes = not set, not 10" in refused.output
    )
    assert not (tmp_path / "c").exists()
    refused = run("fix", folder, "--manifest", manifest, "--ignore", "duplicate", "--out", tmp_path / "c")
    assert refused.exit_code == 2 and "--ignore: " in refused.output
    # the options it was scanned with, or none given: accepted
    assert run("scan", folder, "--manifest", manifest, "--num-classes", "2").exit_code == 0
    assert (
        run("fix", folder, "--manifest", manifest, "--num-classes", "2", "--out", tmp_path / "c").exit_code
        == 0
    )
    assert run("fix", folder, "--manifest", manifest, "--out", tmp_path / "c2").exit_code == 0


def test_samples_still_scan_through_the_cli(tmp_path):
    result = run("scan", SAMPLES / "images", "--num-classes", "3", "--manifest", tmp_path / "m.jsonl", "-q")
    assert result.exit_code == 1 and result.output == ""
