"""`scrub fix`: every format's cleaned copy and quarantine, the guarantees, the error paths.

The contents are compared with plain h5py / lmdb / file reads written here, independently of
scrub's writers and of its own verification.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import lmdb
import numpy as np
import pytest
from conftest import SAMPLES, image_bytes, one_line_error, write

import scrub
from scrub.errors import ScrubError, UsageError
from scrub.fixing.cleaning import _verify
from scrub.manifest import read_manifest
from scrub.records import Severity
from scrub.writers.base import Verdicts, writer_for


def tree_digest(path: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file below ``path`` (or of the file itself)."""
    if path.is_file():
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    digests = {}
    for file in sorted(path.rglob("*")):
        if file.is_file() and not file.is_symlink():
            digests[file.relative_to(path).as_posix()] = hashlib.sha256(file.read_bytes()).hexdigest()
    return digests


def files_of(path: Path) -> dict[str, bytes]:
    return {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def lmdb_items(path: Path) -> dict[bytes, bytes]:
    environment = lmdb.open(str(path), subdir=path.is_dir(), readonly=True, lock=False)
    with environment.begin() as transaction:
        items = {bytes(k): bytes(v) for k, v in transaction.cursor()}
    environment.close()
    return items


def copy_sample(tmp_path: Path, name: str) -> Path:
    target = tmp_path / "src" / name
    if (SAMPLES / name).is_dir():
        shutil.copytree(SAMPLES / name, target, symlinks=True)
    else:
        target.parent.mkdir(parents=True)
        shutil.copy2(SAMPLES / name, target)
    return target


def error_records(manifest: Path, threshold: str = "error") -> set[tuple[str, str]]:
    rank = {"warning": 1, "error": 2}
    lines = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    return {(d["source"], d["key"]) for d in lines if rank[d["severity"]] >= rank[threshold]}


# -- images ---------------------------------------------------------------------------------


def test_image_folder_split_is_exact_and_the_source_untouched(tmp_path):
    source = copy_sample(tmp_path, "images")
    before = tree_digest(source)
    result = scrub.fix(source, quarantine=True, scheduler="sync")
    assert tree_digest(source) == before
    assert result.clean == source.parent / "images.clean"
    assert result.quarantine == source.parent / "images.quarantine"
    assert result.verified and result.report["kept"] == 28 and result.report["quarantined"] == 7

    clean = files_of(result.clean)
    held = files_of(result.quarantine / "images")
    original = files_of(source)
    bad = {key for _, key in error_records(result.manifest)}
    images = {k for k in original if k.endswith((".jpg", ".png"))}
    assert set(held) == bad - {"bird/outside.jpg"}  # a symlink out of the root: recreated, never read
    assert os.path.islink(result.quarantine / "images" / "bird" / "outside.jpg")
    assert set(clean) == (images - bad) | {"README.txt"}
    assert all(clean[k] == original[k] for k in clean) and all(held[k] == original[k] for k in held)
    assert sorted(p.name for p in result.clean.iterdir() if p.is_dir()) == ["bird", "cat", "dog"]

    rescan = scrub.scan(result.dataset, scheduler="sync")
    assert rescan.summary.records_with_errors == 0 and rescan.summary.records == 28
    quarantined = scrub.scan(result.quarantine / "images", scheduler="sync")
    assert quarantined.summary.records == 7


def test_an_emptied_class_folder_is_kept_so_labels_do_not_shift(tmp_path):
    root = tmp_path / "data"
    write(root / "a" / "bad.jpg", image_bytes(1)[:300])
    for i in range(3):
        write(root / "b" / f"{i}.jpg", image_bytes(10 + i))
    result = scrub.fix(root, scheduler="sync")
    assert (result.clean / "a").is_dir() and not any((result.clean / "a").iterdir())
    rescan = scrub.scan(result.clean, scheduler="sync", num_classes=2)
    assert rescan.summary.dataset.classes == ["a", "b"] and rescan.summary.records == 3
    opened = scrub.api.open_dataset(result.clean)
    labels = {r.label for p in opened.partitions for r in opened.reader.read(p)}
    assert labels == {1}  # still class b, not shifted to class 0


def test_image_list_rewrites_paths_and_keeps_unreadable_lines_in_the_quarantine(tmp_path):
    root = tmp_path / "list"
    for i in range(4):
        write(root / "img" / f"{i}.jpg", image_bytes(i))
    write(root / "img" / "bad.jpg", image_bytes(9)[:200])
    (root / "train.txt").write_text(
        f"img/0.jpg 0\n./img/1.jpg 1\n{root}/img/2.jpg 0\nimg/gone.jpg 1\n\nimg/bad.jpg 1\n../escape.jpg "
        "0\nimg/3.jpg 7\n"
    )
    result = scrub.fix(root / "train.txt", quarantine=True, num_classes=2, scheduler="sync")
    assert result.dataset == tmp_path / "list" / "train.clean" / "train.txt"
    assert result.dataset.read_text().splitlines() == ["img/0.jpg 0", "img/1.jpg 1", "img/2.jpg 0"]
    held = result.quarantine / "train"
    assert (held / "train.txt").read_text().splitlines() == [
        "img/gone.jpg 1",
        "img/bad.jpg 1",
        "../escape.jpg 0",
        "img/3.jpg 7",
    ]
    assert sorted(files_of(held)) == ["img/3.jpg", "img/bad.jpg", "train.txt"]
    assert files_of(result.clean)["img/2.jpg"] == (root / "img" / "2.jpg").read_bytes()
    rescan = scrub.scan(result.dataset, num_classes=2, scheduler="sync")
    assert rescan.summary.records_with_errors == 0 and rescan.summary.records == 3


def test_link_hard_links_kept_files(tmp_path):
    source = copy_sample(tmp_path, "images")
    result = scrub.fix(source, link=True, scheduler="sync")
    kept = result.clean / "cat" / "cat_000.jpg"
    assert kept.stat().st_ino == (source / "cat" / "cat_000.jpg").stat().st_ino
    assert result.verified


def test_severity_warning_also_quarantines_warnings(tmp_path):
    source = copy_sample(tmp_path, "images")
    result = scrub.fix(source, severity="warning", quarantine=True, scheduler="sync")
    assert result.report["quarantined"] == 11
    assert "dog/copy_of_cat_001.jpg" in files_of(result.quarantine / "images")
    rescan = scrub.scan(result.dataset, scheduler="sync")
    assert rescan.summary.issues == 0


# -- HDF5 -----------------------------------------------------------------------------------


def write_rich_h5(path: Path) -> Path:
    """Chunked, compressed data with attributes, a row-aligned weight, and unrelated datasets."""
    rng = np.random.default_rng(0)
    data = rng.normal(size=(100, 3, 4)).astype(np.float32)
    data[7, 1, 2] = np.nan
    data[64, 0, 0] = np.inf
    label = np.arange(100, dtype=np.int64) % 5
    label[90] = 99
    with h5py.File(path, "w") as file:
        file.attrs["version"] = 3
        d = file.create_dataset(
            "data",
            data=data,
            chunks=(16, 3, 4),
            compression="gzip",
            compression_opts=5,
            shuffle=True,
            fletcher32=True,
            fillvalue=-1.0,
            maxshape=(100, 3, 4),
        )
        d.attrs["mean"] = np.float32(0.5)
        d.attrs["note"] = "pixels"
        file.create_dataset("label", data=label, chunks=(32,), compression="lzf")
        file.create_dataset("meta/weight", data=np.linspace(0, 1, 100))
        file.create_dataset("meta/classes", data=np.array([b"a", b"b", b"c", b"d", b"e"]))
        file.create_dataset("mean_image", data=np.ones((3, 4)))
        file["alias"] = h5py.SoftLink("/mean_image")
    return path


def test_hdf5_keeps_structure_filters_and_attributes(tmp_path):
    source = write_rich_h5(tmp_path / "train.h5")
    before = tree_digest(source)
    result = scrub.fix(source, quarantine=True, num_classes=5, scheduler="sync")
    assert tree_digest(source) == before
    assert result.clean == tmp_path / "train.clean.h5"
    bad = [7, 64, 90]
    keep = [i for i in range(100) if i not in bad]
    with h5py.File(source) as s, h5py.File(result.clean) as c, h5py.File(result.quarantine / "train.h5") as q:
        for name in ("data", "label", "meta/weight"):
            np.testing.assert_array_equal(c[name][:], s[name][:][keep])
            np.testing.assert_array_equal(q[name][:], s[name][:][bad])
            assert (c[name].dtype, c[name].chunks, c[name].compression) == (
                s[name].dtype,
                s[name].chunks,
                s[name].compression,
            )
        d = c["data"]
        assert (d.compression_opts, d.shuffle, d.fletcher32, d.fillvalue) == (5, True, True, -1.0)
        assert d.maxshape == (97, 3, 4)
        assert dict(d.attrs) == dict(s["data"].attrs) and c.attrs["version"] == 3
        np.testing.assert_array_equal(c["meta/classes"][:], s["meta/classes"][:])
        np.testing.assert_array_equal(c["mean_image"][:], s["mean_image"][:])
        assert c.get("alias", getlink=True).path == "/mean_image"
        assert q["scrub_source_row"][:].tolist() == bad
        assert "mean_image" not in q
    rescan = scrub.scan(result.dataset, num_classes=5, scheduler="sync")
    assert rescan.summary.records == 97 and rescan.summary.records_with_errors == 0


@pytest.mark.parametrize("fill", [None, 7.0])
def test_hdf5_plain_chunks_over_many_blocks_are_read_and_written_as_bytes(tmp_path, fill):
    """An uncompressed file chunked in whole rows, larger than one block: its rows are read by
    pread and its outputs' whole chunks written as raw bytes, block after block, with carried
    rows between: by pwrite into chunks allocated at creation, or, where allocating would write
    the source's own fill value, by `write_direct_chunk`. Both outputs hold exactly h5py's rows,
    chunked alike, with the source's fill value."""
    from scrub.writers.hdf5 import _takes_raw_chunks

    rng = np.random.default_rng(3)
    data = rng.normal(size=(203, 128, 128)).astype(np.float32)  # 64 KiB rows: 64 rows a block
    bad = [3, 70, 71, 150, 202]
    data[bad, 0, 0] = np.nan
    source = tmp_path / "wide.h5"
    with h5py.File(source, "w") as file:
        file.create_dataset("data", data=data, chunks=(8, 128, 128), fillvalue=fill)
        file.create_dataset("label", data=np.arange(203) % 4, chunks=(16,))
    result = scrub.fix(source, quarantine=True, scheduler="sync")
    keep = [i for i in range(203) if i not in bad]
    with h5py.File(result.clean) as clean, h5py.File(result.quarantine / "wide.h5") as held:
        assert _takes_raw_chunks(clean["data"]) and clean["data"].chunks == (8, 128, 128)
        allocated = clean["data"].id.get_create_plist().get_alloc_time() == h5py.h5d.ALLOC_TIME_EARLY
        assert allocated == (fill is None)  # by pwrite, or by HDF5 where it would write the fill
        assert clean["data"].fillvalue == (fill or 0.0)
        assert clean["data"][:].tobytes() == data[keep].tobytes()
        assert held["data"][:].tobytes() == data[bad].tobytes()
        assert clean["label"][:].tolist() == [i % 4 for i in keep]
        assert held["scrub_source_row"][:].tolist() == bad


def test_hdf5_list_and_folder(tmp_path):
    for layout in ("hdf5", "hdf5/train_list.txt"):
        source = copy_sample(tmp_path / layout.replace("/", "_"), "hdf5")
        path = source / "train_list.txt" if layout.endswith(".txt") else source
        scanned = scrub.scan(path, scheduler="sync")
        result = scrub.fix(path, quarantine=True, scheduler="sync")
        assert result.report["kept"] + result.report["quarantined"] == scanned.summary.records == 249
        # val.h5's data and label disagree on their row count: its 49 rows go to the quarantine whole
        assert result.report["quarantined"] == 5 + 49
        assert scanned.summary.issues_by_check["row-count-mismatch"] == 1
        assert scrub.scan(result.dataset, scheduler="sync").summary.records_with_errors == 0


def test_a_file_with_a_row_count_mismatch_goes_to_the_quarantine_whole(tmp_path):
    folder = tmp_path / "h5"
    folder.mkdir()
    with h5py.File(folder / "good.h5", "w") as file:
        file["data"], file["label"] = np.ones((10, 2)), np.zeros(10)
    with h5py.File(folder / "odd.h5", "w") as file:
        file["data"], file["label"] = np.ones((10, 2)), np.zeros(9)
    result = scrub.fix(folder, quarantine=True, scheduler="sync")
    assert sorted(p.name for p in result.clean.iterdir()) == ["good.h5"]
    assert (result.quarantine / "h5" / "odd.h5").read_bytes() == (folder / "odd.h5").read_bytes()
    assert result.report["kept"] == 10 and result.report["quarantined"] == 9


def test_list_lines_outside_the_root_are_never_read_or_copied(tmp_path):
    root = tmp_path / "project" / "lists"
    root.mkdir(parents=True)
    for name in ("good.h5", "../outside.h5"):
        with h5py.File(root / name, "w") as file:
            file["data"], file["label"] = np.ones((4, 2)), np.zeros(4)
    (root / "train.txt").write_text(f"good.h5\n../outside.h5\n{tmp_path}/project/outside.h5\n./missing.h5\n")
    result = scrub.fix(root / "train.txt", quarantine=True, scheduler="sync")
    held = result.quarantine / "train"
    assert (held / "train.txt").read_text().splitlines() == [
        "../outside.h5",
        f"{tmp_path}/project/outside.h5",
        "missing.h5",
    ]
    assert sorted(p.name for p in held.rglob("*")) == ["train.txt"]  # nothing outside was copied
    assert not (result.quarantine / "outside.h5").exists()
    assert result.dataset.read_text().splitlines() == ["good.h5"]
    assert result.report["kept"] == 4 and result.verified


def test_fewer_rows_than_a_chunk_and_nothing_left(tmp_path):
    path = tmp_path / "all_bad.h5"
    data = np.full((5, 2), np.nan)
    data[4] = 1.0  # every row bad, not all for one reason (that fix refuses: test_fix_one_cause.py)
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data, chunks=(4, 2), maxshape=(5, 2))
        file["label"] = np.array([0, 0, 0, 0, np.nan])
    # nonfinite-data alone sets 4 of the 5 rows aside: more than half, refused without the option
    result = scrub.fix(path, quarantine=True, scheduler="sync", allow_majority=True)
    with h5py.File(result.clean) as clean:
        assert clean["data"].shape == (0, 2) and clean["data"].chunks == (4, 2)
    assert result.report["quarantined"] == 5


# -- LMDB -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lmdb/datum_lmdb", "lmdb/npy.lmdb", "lmdb/lsun_lmdb"])
def test_lmdb_same_keys_and_byte_identical_values(tmp_path, name):
    source = copy_sample(tmp_path, name)
    before = tree_digest(source)
    result = scrub.fix(source, quarantine=True, scheduler="sync")
    assert tree_digest(source) == before
    original, clean = lmdb_items(source), lmdb_items(result.clean)
    held = lmdb_items(result.quarantine / source.name)
    # metadata keys are each output's own: __len__ (text, in datum_lmdb) counts what it holds
    metadata = {
        key: side.pop(key) for side in (original, clean, held) for key in list(side) if key.startswith(b"__")
    }
    if b"__len__" in metadata:
        assert lmdb_items(result.clean)[b"__len__"] == str(len(clean)).encode()
        assert lmdb_items(result.quarantine / source.name)[b"__len__"] == str(len(held)).encode()
    bad = {key for _, key in error_records(result.manifest)}
    assert set(clean).isdisjoint(held) and {**clean, **held} == original
    assert {k.decode() for k in held} == bad
    assert result.clean.is_dir() == source.is_dir()
    assert scrub.scan(result.dataset, scheduler="sync").summary.records_with_errors == 0


def test_lmdb_metadata_count_as_text_is_rewritten(tmp_path):
    """datum_lmdb's __len__ is its count as text (b"22"): each output gets its own count, no
    pickle involved (loaders: tests/test_lmdb_loaders.py)."""
    source = copy_sample(tmp_path, "lmdb/datum_lmdb")
    result = scrub.fix(source, scheduler="sync")
    assert lmdb_items(source)[b"__len__"] == b"22"
    assert lmdb_items(result.clean)[b"__len__"] == str(result.report["kept"]).encode() == b"17"
    assert not any("__len__" in note for note in result.report["notes"])


# -- reuse of a manifest, outputs, errors ---------------------------------------------------


def test_reusing_a_manifest_skips_the_scan(tmp_path):
    source = copy_sample(tmp_path, "hdf5/train.h5")
    manifest = tmp_path / "m.jsonl"
    scanned = scrub.scan(source, manifest=manifest, num_classes=10, scheduler="sync")
    result = scrub.fix(source, manifest=manifest, quarantine=True)
    assert result.scan is None and result.report["reused_manifest"] == str(manifest)
    assert result.report["quarantined"] == scanned.summary.records_with_errors == 7
    assert (result.quarantine / "manifest.jsonl").read_bytes() == manifest.read_bytes()


def test_a_manifest_of_a_changed_dataset_is_refused(tmp_path):
    source = copy_sample(tmp_path, "images")
    manifest = tmp_path / "m.jsonl"
    scrub.scan(source, manifest=manifest, scheduler="sync")
    (source / "cat" / "cat_000.jpg").write_bytes(image_bytes(99))
    with pytest.raises(ScrubError, match="does not describe"):
        scrub.fix(source, manifest=manifest)
    assert not (tmp_path / "src" / "images.clean").exists()


def test_a_manifest_without_its_scan_record_is_refused(tmp_path):
    source = copy_sample(tmp_path, "images")
    manifest = tmp_path / "m.jsonl"
    scrub.scan(source, manifest=manifest, scheduler="sync")
    (tmp_path / "m.scan.json").unlink()
    with pytest.raises(ScrubError, match="scan record m.scan.json is missing"):
        scrub.fix(source, manifest=manifest)


def test_existing_outputs_need_force(tmp_path):
    source = copy_sample(tmp_path, "lmdb/npy.lmdb")
    first = scrub.fix(source, quarantine=True, scheduler="sync")
    with pytest.raises(UsageError, match="already exists"):
        scrub.fix(source, quarantine=True, scheduler="sync")
    second = scrub.fix(source, quarantine=True, force=True, scheduler="sync")
    assert second.clean == first.clean and lmdb_items(second.clean) == lmdb_items(first.clean)
    assert not [p for p in source.parent.iterdir() if ".scrub-" in p.name]


@pytest.mark.parametrize("where", ["same", "inside", "parent"])
def test_outputs_never_overlap_the_source(tmp_path, where):
    source = copy_sample(tmp_path, "images")
    out = {"same": source, "inside": source / "clean", "parent": tmp_path}[where]
    before = tree_digest(source)
    with pytest.raises(UsageError, match="overlaps the source"):
        scrub.fix(source, out=out, force=True, scheduler="sync")
    assert tree_digest(source) == before


def test_an_output_holding_listed_files_is_refused(tmp_path):
    source = copy_sample(tmp_path, "imagelist")
    with pytest.raises(UsageError, match="holds files of the source"):
        scrub.fix(source / "train.txt", out=source / "img", force=True, scheduler="sync")
    assert (source / "img" / "a_000.jpg").exists()


def test_verification_catches_an_altered_record(tmp_path):
    """Write the outputs, alter one byte of one kept record, and verify: the real check fails."""
    source = copy_sample(tmp_path, "lmdb/npy.lmdb")
    manifest = tmp_path / "m.jsonl"
    scrub.scan(source, manifest=manifest, scheduler="sync")
    dataset = scrub.api.open_dataset(source)
    writer = writer_for(dataset)
    verdicts = Verdicts.from_issues(read_manifest(manifest), Severity.ERROR)
    clean = tmp_path / "out.lmdb"
    tally = writer.write(verdicts, clean, None)
    assert _verify(writer, verdicts, tally, clean, None, 8)["verified"]
    environment = lmdb.open(str(clean), subdir=False, lock=False)
    with environment.begin(write=True) as transaction:
        key, value = next(iter(transaction.cursor()))
        transaction.put(key, bytes(value)[:-1] + bytes([value[-1] ^ 1]))
    environment.close()
    outcome = _verify(writer, verdicts, tally, clean, None, 8)
    assert not outcome["verified"] and "cleaned copy does not match" in outcome["reason"]


# -- the command line -----------------------------------------------------------------------


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "scrub", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


def test_cli_fix_prints_the_split_and_writes_json(tmp_path):
    source = copy_sample(tmp_path, "images")
    done = run_cli(
        "fix", source, "--quarantine-dir", tmp_path / "held", "--json", tmp_path / "fix.json", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "kept        28 records" in done.stdout and "verified: 28 + 7 = 35 records" in done.stdout
    document = json.loads((tmp_path / "fix.json").read_text())
    assert document["fix"]["verification"]["verified"] and document["fix"]["quarantine"] == str(
        tmp_path / "held"
    )
    assert document["records"] == 35 and document["fingerprint"]["files"] == 35
    assert (tmp_path / "held" / "fix.json").is_file() and (tmp_path / "held" / "manifest.jsonl").is_file()


@pytest.mark.slow
def test_cli_fix_errors_are_one_line_exit_2(tmp_path):
    source = copy_sample(tmp_path, "images")
    assert run_cli("fix", source, "-q", cwd=tmp_path).returncode == 0
    assert (tmp_path / "images.scrub.jsonl").is_file()  # without --quarantine, as `scan` writes it
    for args, message in [
        (("fix", source), "already exists (use --force to replace it)"),
        (("fix", tmp_path / "nope"), "no such file or directory"),
        (("fix", source, "--manifest", tmp_path / "none.jsonl", "--out", tmp_path / "x"), "no such manifest"),
        (("fix", source, "--out", source / "x"), "overlaps the source dataset"),
    ]:
        done = run_cli(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.slow
def test_default_outputs_are_named_after_the_dataset_and_fix_dot_works(tmp_path):
    images, h5 = copy_sample(tmp_path, "images"), copy_sample(tmp_path, "hdf5")
    work = tmp_path / "work"
    work.mkdir()
    assert run_cli("scan", images, "-q", cwd=work).returncode == 1
    assert run_cli("scan", h5 / "train.h5", "-q", cwd=work).returncode == 1
    assert sorted(p.name for p in work.iterdir()) == [
        "images.scrub.jsonl",
        "images.scrub.scan.json",
        "train.h5.scrub.jsonl",
        "train.h5.scrub.scan.json",
    ]
    done = run_cli("fix", ".", "-q", cwd=images)  # from inside the dataset: outputs beside it
    assert done.returncode == 0, done.stderr
    assert (images.parent / "images.clean").is_dir() and (images.parent / "images.scrub.jsonl").is_file()
    assert not list(images.rglob("*.scrub*"))  # nothing written into the dataset
    assert (images.parent / "images.clean" / "cat" / "cat_001.jpg").is_file()
    assert run_cli("scan", ".", "-q", "--json", tmp_path / "s.json", cwd=images).returncode == 1
    assert json.loads((tmp_path / "s.json").read_text())["path"] == str(images)


def test_link_on_a_dataset_that_is_rewritten_is_an_error(tmp_path):
    """--link hard-links image files; a format whose records are rewritten says so, in one line,
    rather than ignoring it."""
    path = tmp_path / "rows.npy"
    np.save(path, np.arange(12, dtype=np.float32).reshape(4, 3))
    assert "--link" in one_line_error("fix", path, "--link")
    assert not (tmp_path / "rows.clean.npy").exists()


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["folder", "list"])
def test_fix_copies_images_on_worker_processes_in_order(tmp_path, layout):
    """Images are copied by worker processes, partition by partition: from the command line with
    a reused manifest (no scan started the worker server first) and from the API, the outputs
    hold every file once and a list file's lines keep the source's order on both sides."""
    root = tmp_path / "data"
    lines = []
    for number in range(90):
        name = f"{'ab'[number % 2]}/{number:03d}.jpg"
        write(root / name, image_bytes(number) if number % 17 else image_bytes(number)[:150])
        lines.append(f"{name} {number % 2}")
    source = root if layout == "folder" else root / "train.txt"
    if layout == "list":
        source.write_text("\n".join(lines) + "\n")
    manifest = tmp_path / "scan.jsonl"
    assert run_cli("scan", source, "--manifest", manifest, "--partition-size", 30).returncode == 1
    out, held = tmp_path / "out", tmp_path / "held"
    done = run_cli(
        "fix", source, "--manifest", manifest, "--out", out, "--quarantine-dir", held, "--partition-size", 30
    )
    assert done.returncode == 0, done.stderr
    bad = [name for number, name in enumerate(n.split()[0] for n in lines) if number % 17 == 0]
    good = [name for name in (n.split()[0] for n in lines) if name not in bad]
    kept = {k: v for k, v in files_of(out).items() if k.endswith(".jpg")}
    assert sorted(kept) == sorted(good) and all(kept[k] == (root / k).read_bytes() for k in kept)
    if layout == "list":
        assert (out / "train.txt").read_text().splitlines() == [n for n in lines if n.split()[0] in good]
        assert (held / "train" / "train.txt").read_text().splitlines() == [
            n for n in lines if n.split()[0] in bad
        ]
    else:
        assert sorted(k for k in files_of(held / "data") if k.endswith(".jpg")) == sorted(bad)
    result = scrub.fix(source, out=tmp_path / "api", scheduler="processes", workers=2, partition_size=30)
    assert sorted(k for k in files_of(result.clean) if k.endswith(".jpg")) == sorted(good)


def test_fix_on_threads_from_a_script_without_the_main_guard(tmp_path):
    """A script without ``if __name__ == '__main__':`` cannot start worker processes, which is why
    it asks for threads: the copy and the verification then run on threads too."""
    root = tmp_path / "data"
    for number in range(60):
        write(root / f"{number:02d}.jpg", image_bytes(number) if number % 20 else b"not a jpeg")
    script = tmp_path / "clean.py"
    script.write_text(
        "import scrub\n"
        f"result = scrub.fix({str(root)!r}, quarantine=True, scheduler='threads', partition_size=25)\n"
        "report = result.report\n"
        "print(report['kept'], report['quarantined'], report['verification']['verified'])\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["57", "3", "True"]


def test_scrub_restore_puts_one_record_back_then_refuses_a_changed_source(tmp_path):
    """Through the command line: one key restored into the cleaned copy; a key the quarantine
    does not hold, a folder that is not a quarantine, and a source changed since the fix are
    each one line and exit 2."""
    from typer.testing import CliRunner

    from scrub.cli import app

    run = CliRunner().invoke
    source = tmp_path / "images"
    shutil.copytree(SAMPLES / "images", source, symlinks=True)
    quarantine = str(tmp_path / "images.quarantine")
    assert run(app, ["fix", str(source), "--quarantine", "-q"]).exit_code == 0
    back = run(app, ["restore", quarantine, "--key", "dog/empty.jpg"])
    assert back.exit_code == 0, back.output
    assert "kept        29 records -> " in back.output and "note: restored 1 record from " in back.output
    assert (tmp_path / "images.clean" / "dog" / "empty.jpg").exists()
    assert not (tmp_path / "images.quarantine" / "images" / "dog" / "empty.jpg").exists()
    unknown = run(app, ["restore", quarantine, "--key", "no/such.jpg"])
    assert unknown.exit_code == 2 and "holds no such record" in unknown.output
    not_one = run(app, ["restore", str(source)])
    assert not_one.exit_code == 2 and "not a quarantine" in not_one.output
    (source / "cat" / "cat_000.jpg").write_bytes(b"changed")
    changed = run(app, ["restore", quarantine])
    assert changed.exit_code == 2 and "changed since the fix" in changed.output, changed.output


def test_a_record_keyed_star_is_a_record_not_its_whole_file(tmp_path):
    """`*` is the key of a finding about a file as a whole (index None); an LMDB record may be
    keyed `*` too: its finding sets that record aside, not every record (found by Hypothesis)."""
    import io

    nan = io.BytesIO()
    np.save(nan, np.array([1.0, np.nan]))
    path = tmp_path / "db.lmdb"
    environment = lmdb.open(str(path), subdir=False, map_size=1 << 24)
    with environment.begin(write=True) as transaction:
        transaction.put(b"\x00", image_bytes(1, fmt="PNG", size=16))
        transaction.put(b"*", nan.getvalue())
    environment.close()
    result = scrub.fix(path, quarantine=True, scheduler="sync")
    assert result.report["kept"] == 1 and result.report["quarantined"] == 1
