"""WebDataset tar shards: shards written by webdataset's own TarWriter, scanned and fixed; webdataset
reads what fix wrote (same member names, order and bytes); truncated and damaged shards, gzip
shards, brace patterns, labels from .cls or .txt."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import image_bytes, one_line_error

import scrub

wds = pytest.importorskip("webdataset")


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def write_shards(
    folder: Path, shards: int = 2, per_shard: int = 6, compress: bool = False
) -> dict[str, dict]:
    """Shards of JPEG + .cls + .json samples with one fault of each kind; returns every sample."""
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, dict] = {}
    for shard in range(shards):
        suffix = ".tar.gz" if compress else ".tar"
        with wds.TarWriter(str(folder / f"train-{shard:06d}{suffix}"), compress=compress) as writer:
            for i in range(per_shard):
                n = shard * per_shard + i
                sample = {
                    "__key__": f"{n:06d}",
                    "jpg": image_bytes(n),
                    "cls": str(n % 3).encode(),
                    "json": b"{}",
                }
                if n == 1:
                    sample["cls"] = b"8000"  # label-out-of-range with --num-classes 3
                if n == 2:
                    sample["jpg"] = sample["jpg"][:60]  # corrupt-image
                if n == 3:
                    del sample["cls"]  # missing-label
                if n == 7:
                    sample["json"] = b"{not json"  # malformed-sample
                if n == 8:
                    sample["npy"] = npy(np.array([1.0, np.nan], np.float32))  # nonfinite-data
                writer.write(sample)
                written[sample["__key__"]] = sample
    return written


def read_back(pattern: str) -> dict[str, dict]:
    """Samples as webdataset itself reads them (no decoding: the bytes)."""
    return {
        sample["__key__"]: {k: v for k, v in sample.items() if not k.startswith("__")}
        for sample in wds.WebDataset(pattern, shardshuffle=False)
    }


BAD = {"000001": "label-out-of-range", "000002": "corrupt-image", "000003": "missing-label",
       "000007": "malformed-sample", "000008": "nonfinite-data"}  # fmt: skip


def test_scan_and_fix_a_folder_of_shards(tmp_path):
    source = tmp_path / "shards"
    samples = write_shards(source)
    result = scrub.scan(source, num_classes=3, scheduler="sync")
    found = {(issue.key, issue.check) for issue in result.issues() if issue.severity.value == "error"}
    assert found == set(BAD.items())
    assert result.summary.records == 12 and result.summary.dataset.format == "webdataset"
    fixed = scrub.fix(source, quarantine=True, num_classes=3)
    assert fixed.verified and fixed.report["kept"] == 7 and fixed.report["quarantined"] == 5
    clean = read_back(str(fixed.clean / "train-{000000..000001}.tar"))
    held = read_back(str(fixed.quarantine / "shards" / "train-{000000..000001}.tar"))
    assert set(held) == set(BAD) and set(clean) == set(samples) - set(BAD)
    for key, members in {**clean, **held}.items():  # every member, byte for byte
        assert members == {k: v for k, v in samples[key].items() if k != "__key__"}
    with (
        tarfile.open(source / "train-000000.tar") as original,
        tarfile.open(fixed.clean / "train-000000.tar") as kept,
    ):
        names = [name for name in original.getnames() if name.split(".")[0] not in BAD]
        assert kept.getnames() == names  # same member names, same order
    assert scrub.scan(fixed.clean, num_classes=3, scheduler="sync").summary.records_with_errors == 0


def test_one_gzip_shard_stays_gzip(tmp_path):
    write_shards(tmp_path, shards=1, compress=True)
    shard = tmp_path / "train-000000.tar.gz"
    fixed = scrub.fix(shard, quarantine=True, num_classes=3, scheduler="sync")
    assert fixed.clean.name == "train-000000.clean.tar.gz" and fixed.verified
    assert fixed.clean.read_bytes()[:2] == b"\x1f\x8b"  # gzip
    assert set(read_back(str(fixed.clean))) == {"000000", "000004", "000005"}


def cut_inside(shard: Path, member: str, keep: int) -> None:
    """Cut the shard ``keep`` bytes into ``member``'s data (a download that stopped)."""
    with tarfile.open(shard) as tar:
        info = tar.getmember(member)
    data = shard.read_bytes()
    shard.write_bytes(data[: info.offset_data + keep])


def test_a_shard_cut_short_flags_the_sample_it_cuts_and_keeps_its_bytes(tmp_path):
    write_shards(tmp_path, shards=1)
    shard = tmp_path / "train-000000.tar"
    cut_inside(shard, "000004.jpg", 100)
    result = scrub.scan(shard, scheduler="sync")
    assert result.summary.records == 5
    cut = [issue for issue in result.issues() if issue.check == "malformed-sample"]
    assert [(issue.key, issue.details["bytes"]) for issue in cut] == [("000004", 100)]
    assert any("cut short" in note for note in result.summary.notes)
    fixed = scrub.fix(shard, quarantine=True, scheduler="sync")
    assert fixed.verified
    with tarfile.open(fixed.quarantine / "train-000000.tar") as held:
        assert held.extractfile("000004.jpg").read() == image_bytes(4)[:100]


def damage_header(shard: Path, member: str) -> None:
    with tarfile.open(shard) as tar:
        info = tar.getmember(member)
    data = bytearray(shard.read_bytes())
    data[info.offset + 148 : info.offset + 156] = b"garbage!"  # the header's checksum field
    shard.write_bytes(bytes(data))


def test_a_damaged_header_sets_the_shard_aside_byte_for_byte(tmp_path):
    source = tmp_path / "shards"
    write_shards(source)
    damaged = source / "train-000001.tar"
    damage_header(damaged, "000009.cls")
    assert len(read_back(str(damaged))) == 3  # webdataset stops at the damage without a word
    result = scrub.scan(source, scheduler="sync")
    shard_issues = [issue for issue in result.issues() if issue.check == "damaged-shard"]
    assert [(issue.source, issue.key) for issue in shard_issues] == [("train-000001.tar", "*")]
    fixed = scrub.fix(source, quarantine=True, scheduler="sync")
    assert fixed.verified
    assert (fixed.quarantine / "shards" / "train-000001.tar").read_bytes() == damaged.read_bytes()
    assert not (fixed.clean / "train-000001.tar").exists()


def test_text_labels_captions_and_chosen_members(tmp_path):
    numbers, captions = tmp_path / "numbers.tar", tmp_path / "captions.tar"
    with wds.TarWriter(str(numbers)) as writer:
        for i in range(4):
            writer.write(
                {"__key__": f"{i:03d}", "png": image_bytes(i, fmt="PNG"), "txt": str(i * 3).encode()}
            )
    with wds.TarWriter(str(captions)) as writer:
        for i in range(4):
            writer.write({"__key__": f"{i:03d}", "jpg": image_bytes(i), "txt": b"a cat on a mat",
                          "seg.png": image_bytes(i, fmt="PNG")})  # fmt: skip
    result = scrub.scan(numbers, num_classes=4, scheduler="sync")
    assert result.summary.dataset.labelled
    assert {issue.key for issue in result.issues() if issue.check == "label-out-of-range"} == {"002", "003"}
    result = scrub.scan(captions, scheduler="sync")
    assert not result.summary.dataset.labelled
    notes = " ".join(result.summary.notes)
    assert "captions" in notes and "more than one image" in notes
    result = scrub.scan(captions, data_key="seg.png", label_key="txt", scheduler="sync")
    assert {issue.check for issue in result.issues()} == {"non-integer-label"}
    assert "no sample of" in one_line_error("scan", captions, "--data-key", "depth.png")


def test_samples_without_data_and_members_outside_samples(tmp_path):
    shard = tmp_path / "mixed.tar"
    with tarfile.open(shard, "w") as tar:
        for name, data in [("__meta__", b"{}"), ("000.jpg", image_bytes(0)), ("000.cls", b"1"),
                           ("001.cls", b"2"), ("README", b"no extension")]:  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    result = scrub.scan(shard, scheduler="sync")
    assert result.summary.records == 2
    assert {(issue.key, issue.check) for issue in result.issues()} == {("001", "malformed-sample")}
    fixed = scrub.fix(shard, quarantine=True, scheduler="sync")
    assert fixed.verified
    with tarfile.open(fixed.clean) as tar:
        assert tar.getnames() == ["__meta__", "000.jpg", "000.cls", "README"]


def test_brace_patterns_name_shards(tmp_path):
    write_shards(tmp_path, shards=3, per_shard=2)
    result = scrub.scan(
        [str(tmp_path / "train-{000000..000002}.tar")], scheduler="sync"
    )  # as the CLI passes it
    assert result.summary.records == 6
    assert "train-000003.tar does not exist" in one_line_error(
        "scan", tmp_path / "train-{000000..000003}.tar"
    )


from hypothesis import HealthCheck, given, settings  # noqa: E402 - the property tests' own imports
from hypothesis import strategies as st  # noqa: E402

NAMES = st.text(alphabet=st.sampled_from("ab._/é-0"), min_size=1, max_size=120).filter(
    lambda name: not name.startswith("/") and "//" not in name and name.strip("./")
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    members=st.lists(
        st.tuples(NAMES, st.sampled_from(["file", "dir", "symlink"]), st.binary(max_size=700)),
        min_size=1,
        max_size=6,
    ),
    form=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    float_times=st.booleans(),
)
def test_the_header_walk_agrees_with_tarfile(tmp_path_factory, members, form, float_times):
    """walk_shard parses common headers itself and leaves the rest to tarfile: on tars tarfile
    writes in each format (long and non-ASCII names, folders, links, pax times as TarWriter
    writes them), it finds what tarfile finds, and fix copies every member byte for byte."""
    from scrub.readers.base import ReadOptions, open_reader
    from scrub.readers.tarwalk import Walk, open_shard, walk_shard
    from scrub.writers.base import Verdicts
    from scrub.writers.webdataset import WebDatasetWriter

    path = tmp_path_factory.mktemp("walk") / "shard.tar"
    buffer = io.BytesIO()
    try:
        with tarfile.open(fileobj=buffer, mode="w", format=form) as tar:
            for name, kind, data in members:
                info = tarfile.TarInfo(name)
                info.mtime = 1_700_000_000.5 if float_times else 1_700_000_000
                if kind == "file":
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    info.type = tarfile.DIRTYPE if kind == "dir" else tarfile.SYMTYPE
                    info.linkname = "target" if kind == "symlink" else ""
                    tar.addfile(info)
    except ValueError:  # a name this format cannot hold (ustar: too long, or not ASCII)
        return
    path.write_bytes(buffer.getvalue())
    with tarfile.open(path) as tar:
        expected = [(m.name, m.offset, m.offset_data, m.size, m.isreg()) for m in tar.getmembers()]
    walk = Walk()
    with open_shard(str(path)) as file:
        found = [(m.name, m.offset, m.offset_data, m.size, m.regular) for m in walk_shard(file, walk=walk)]
    assert found == expected
    assert not (walk.cut or walk.damaged or walk.unterminated)
    reader = open_reader(path, ReadOptions())
    info, _ = reader.open(100)
    writer = WebDatasetWriter(SimpleNamespace(reader=reader, info=info, path=path))
    tally = writer.write(Verdicts(), path.with_name("clean.tar"), None)  # nothing set aside
    assert path.with_name("clean.tar").read_bytes() == path.read_bytes()  # every block as it was
    assert (
        tally.kept.to_dict()
        == writer.tally_output(Verdicts(), path.with_name("clean.tar"), "clean").to_dict()
    )


def scrub_cli(*arguments: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrub", *map(str, arguments)], capture_output=True, text=True, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("member", "keep", "flagged"),
    [
        ("000020.cls", 300, "000019"),  # inside the header of a sample's first member
        ("000020.jpg", 300, "000020"),  # inside the header of its second member (it lacks it)
        ("000020.jpg", -100, "000020"),  # inside the data of its second member
    ],
)
def test_a_cut_shard_names_its_last_sample_and_fix_keeps_the_whole_ones(tmp_path, member, keep, flagged):
    """A shard cut inside a tar header is silently shorter for tarfile and WebDataset: the samples
    after it are lost, reported on the last sample read; fix keeps the whole ones before it."""
    shard = tmp_path / "train.tar"
    with wds.TarWriter(str(shard)) as writer:
        for n in range(60):
            writer.write({"__key__": f"{n:06d}", "jpg": image_bytes(n), "cls": str(n % 3).encode()})
    with tarfile.open(shard) as tar:
        info = tar.getmember(member)
    cut_at = info.offset + keep if keep > 0 else info.offset_data - keep
    shard.write_bytes(shard.read_bytes()[:cut_at])
    if keep > 0:  # a cut header: webdataset stops there without a word (a cut member raises)
        assert len(read_back(str(shard))) in (20, 21)
    manifest = tmp_path / "train.scrub.jsonl"
    done = scrub_cli("scan", shard, "--manifest", manifest, "--scheduler", "sync")
    assert done.returncode == 1, done.stderr
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    cut = [line for line in lines if "cut short" in line.get("message", "")]
    assert [(line["source"], line["key"], line["check"]) for line in cut] == [
        ("train.tar", flagged, "malformed-sample")
    ]
    assert "lost" in cut[0]["message"] and f"{int(flagged) - 1:06d}" in cut[0]["message"]
    done = scrub_cli("fix", shard, "--scheduler", "sync")
    assert done.returncode == 0 and "verified" in done.stdout, done.stdout + done.stderr
    kept = read_back(str(tmp_path / "train.clean.tar"))
    assert sorted(kept) == [f"{n:06d}" for n in range(int(flagged))]
    assert all(kept[key]["jpg"] == image_bytes(int(key)) for key in kept)
