"""The image reader: layouts, list files, skipping, symlinks, pickling for workers."""

from __future__ import annotations

import os
import pickle

import pytest
from conftest import findings, image_bytes, write

import scrub
from scrub.errors import UnusableDataset
from scrub.readers.base import ReadOptions, open_reader
from scrub.readers.images import ImageReader, parse_label, split_list_line
from scrub.records import Record


def records_of(path, **options):
    reader = open_reader(path, ReadOptions(**options))
    info, partitions = reader.open(3)
    records = [r for p in partitions for r in reader.read(p)]
    return info, records


def test_class_folders_label_by_sorted_folder_index(tmp_path):
    for name in ["zebra", "ant", "moose"]:
        write(tmp_path / name / "x.jpg", image_bytes(len(name)))
    write(tmp_path / "ant" / "nested" / "deep.jpg", image_bytes(7))
    info, records = records_of(tmp_path)
    assert info.layout == "class-folders" and info.classes == ["ant", "moose", "zebra"]
    assert {r.key: r.label for r in records} == {
        "ant/nested/deep.jpg": 0,
        "ant/x.jpg": 0,
        "moose/x.jpg": 1,
        "zebra/x.jpg": 2,
    }
    assert [r.index for r in records] == [0, 1, 2, 3]
    assert all(r.source == r.key for r in records)


def test_flat_folder_has_no_labels_and_skips_label_checks(tmp_path):
    for i in range(3):
        write(tmp_path / f"{i}.png", image_bytes(i, fmt="PNG"))
    info, records = records_of(tmp_path)
    assert info.layout == "flat" and not info.labelled
    result = scrub.scan(tmp_path)
    assert "missing-label" not in result.summary.checks
    assert findings(result) == set()


def test_non_images_and_hidden_folders_are_skipped_and_counted(tmp_path):
    write(tmp_path / "a" / "1.jpg", image_bytes(1))
    write(tmp_path / "a" / "notes.txt", b"hello")
    write(tmp_path / ".DS_Store", b"\x00")
    write(tmp_path / ".ipynb_checkpoints" / "1.jpg", image_bytes(1))
    info, records = records_of(tmp_path)
    assert [r.key for r in records] == ["a/1.jpg"]
    assert info.skipped == {"non-image file": 2, "hidden folder": 1}
    assert info.classes == ["a"]


def test_list_file_lines(tmp_path):
    write(tmp_path / "img" / "a b.jpg", image_bytes(1))
    write(tmp_path / "img" / "c.jpg", image_bytes(2))
    write(tmp_path / "list.txt", b"img/a b.jpg 3\n\n./img/c.jpg\t1\nimg/c.jpg\n")
    info, records = records_of(tmp_path / "list.txt")
    assert info.layout == "list-file" and info.labelled
    assert [(r.key, r.label, r.index) for r in records] == [
        ("img/a b.jpg", 3, 0),
        ("img/c.jpg", 1, 1),
        ("img/c.jpg", None, 2),
    ]
    assert all(r.source == "list.txt" and r.payload for r in records)


def test_list_file_paths_relative_to_root_option(tmp_path):
    write(tmp_path / "data" / "x.jpg", image_bytes(1))
    write(tmp_path / "lists" / "train.txt", b"x.jpg 0\n")
    _, records = records_of(tmp_path / "lists" / "train.txt", root=tmp_path / "data")
    assert records[0].payload == (tmp_path / "data" / "x.jpg").read_bytes()


@pytest.mark.parametrize(
    "line, expected",
    [
        ("a.jpg 3", ("a.jpg", "3")),
        ("dir with space/a.jpg 3", ("dir with space/a.jpg", "3")),
        ("a.jpg", ("a.jpg", None)),
        ("my cat.jpg", ("my cat.jpg", None)),
        ("a.jpg   12  ", ("a.jpg", "12")),
    ],
)
def test_split_list_line_on_last_space(line, expected):
    assert split_list_line(line) == expected


def test_parse_label():
    assert parse_label("3") == 3 and parse_label("-1") == -1
    assert parse_label("3.5") == 3.5 and parse_label("cat") == "cat" and parse_label(None) is None


def test_symlinks_inside_are_followed_outside_are_unsafe_and_never_read(tmp_path):
    root = tmp_path / "data"
    write(root / "a" / "real.jpg", image_bytes(1))
    write(tmp_path / "secret.jpg", image_bytes(2))
    os.symlink("real.jpg", root / "a" / "inside.jpg")
    os.symlink("../../secret.jpg", root / "a" / "outside.jpg")
    os.symlink(str(tmp_path), root / "a" / "escape")
    _, records = records_of(root)
    by_key = {r.key: r for r in records}
    assert by_key["a/inside.jpg"].payload == (root / "a" / "real.jpg").read_bytes()
    assert by_key["a/outside.jpg"].payload is None
    assert [p.check for p in by_key["a/outside.jpg"].problems] == ["unsafe-path"]
    assert by_key["a/escape"].payload is None and by_key["a/escape"].problems[0].check == "unsafe-path"


def test_read_ahead_once_reading_is_slow_reads_the_same_and_never_a_link(tmp_path, monkeypatch):
    """With every read taken for a disk read, the files ahead are announced to the kernel: the
    records are the same bytes as without, a missing file is still missing-file, and a link (read
    only after it is checked) is never opened ahead, inside the root or not."""
    import scrub.readers.base as base

    root = tmp_path / "data"
    for number in range(40):
        write(root / "a" / f"{number:02d}.jpg", image_bytes(number))
    write(tmp_path / "secret.jpg", image_bytes(99))
    os.symlink("../../secret.jpg", root / "a" / "20-outside.jpg")
    os.symlink("00.jpg", root / "a" / "21-inside.jpg")
    _, before = records_of(root)
    announced: list[str] = []
    blocks = iter(range(10**6))
    monkeypatch.setattr(base, "blocks_read", lambda: next(blocks))  # each read from the disk
    monkeypatch.setattr(base, "will_need", lambda path, keep=False: announced.append(os.path.basename(path)))
    (root / "a" / "05.jpg").unlink()  # listed, then gone: read ahead and read alike
    reader = open_reader(root, ReadOptions())
    _, partitions = reader.open(1000)
    (root / "a" / "07.jpg").unlink()
    after = [r for p in partitions for r in reader.read(p)]
    assert len(partitions) == 2  # tasks of at least 25 records: each starts reading ahead
    assert [r.key for r in after] == [r.key for r in before if r.key != "a/05.jpg"]
    expected = {r.key: r.payload for r in before if r.key not in ("a/05.jpg", "a/07.jpg")}
    assert {r.key: r.payload for r in after if r.key != "a/07.jpg"} == expected
    assert [p.check for p in next(r for r in after if r.key == "a/07.jpg").problems] == ["missing-file"]
    assert "20-outside.jpg" not in announced and "21-inside.jpg" not in announced
    assert len(announced) > 30


@pytest.mark.parametrize(
    "blocks, seconds, first_announced",
    [
        ([5] * 21, [0.0] * 20, None),  # warm: no block read from the disk
        ([5] * 21, [1.0] * 20, None),  # ...however slow a read was (it lost its core)
        ([5, 5, 5, 9] + [9] * 17, [0.0] * 20, 3),  # the third read came from the disk
        ([None] * 21, [0.0, 0.0, 1.0] + [0.0] * 17, 3),  # no block counts: the first slow read
    ],
)
def test_read_ahead_starts_at_the_first_read_from_the_disk(
    tmp_path, monkeypatch, blocks, seconds, first_announced
):
    import types

    import scrub.readers.base as base

    paths = []
    for number in range(len(seconds)):
        write(tmp_path / f"{number:02d}.jpg", image_bytes(number))
        paths.append(str(tmp_path / f"{number:02d}.jpg"))
    counts = iter(blocks)
    monkeypatch.setattr(base, "blocks_read", lambda: next(counts))
    clock = iter(moment for took in seconds for moment in (0.0, took))
    monkeypatch.setattr(base, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    announced: list[str] = []
    monkeypatch.setattr(base, "will_need", lambda path, keep=False: announced.append(path))
    reading = base.ReadAhead(paths)
    for number, path in enumerate(paths):
        assert reading.read(number, Record("s", str(number), number, None), path) == image_bytes(number)
    assert announced == ([] if first_announced is None else paths[first_announced:])


def test_cold_reads_use_the_descriptors_they_were_announced_with(tmp_path, monkeypatch):
    """Read ahead, a file is read through the descriptor that announced it (an open and a close
    less): the same bytes and versions as a read by its path; a folder where a file was is read
    by its path, as before, and fails the same way; and the descriptors of files a partition
    cut short never read are closed once the reading is collected."""
    import gc

    import scrub.readers.base as base
    from scrub.storage import read_file_version

    paths = []
    for number in range(30):
        write(tmp_path / f"{number:02d}.jpg", image_bytes(number))
        paths.append(str(tmp_path / f"{number:02d}.jpg"))
    os.unlink(paths[4])
    os.mkdir(paths[4])  # listed as a file, a folder by the time it is read
    blocks = iter(range(10**6))
    monkeypatch.setattr(base, "blocks_read", lambda: next(blocks))  # every read from the disk
    free = base._HELD._value  # the descriptors the process may still keep
    reading = base.ReadAhead(paths)
    for number in range(10):
        if number == 4:
            with pytest.raises(IsADirectoryError):
                reading.read_or_raise(number)
            continue
        data = reading.read_or_raise(number)
        assert (data, *reading.version) == read_file_version(paths[number])
        assert data == image_bytes(number)
    held = list(reading.held.values())
    if not hasattr(os, "posix_fadvise"):
        assert not held  # nothing announced, nothing held
        return
    assert sorted(reading.held) == list(range(10, 10 + base.READ_AHEAD_FILES))
    assert base._HELD._value == free - len(held)
    for descriptor in held:
        os.fstat(descriptor)  # open
    del reading
    gc.collect()
    for descriptor in held:
        with pytest.raises(OSError):
            os.fstat(descriptor)
    assert base._HELD._value == free


def test_read_ahead_keeps_no_more_descriptors_than_the_process_may(tmp_path, monkeypatch):
    """Many threads reading ahead at once must not run the process out of descriptors: past
    its share (`_HELD`), an announced file is closed at once and read by its path, as before."""
    import threading

    import scrub.readers.base as base

    if not hasattr(os, "posix_fadvise"):
        pytest.skip("nothing is announced without posix_fadvise")
    monkeypatch.setattr(base, "_HELD", threading.BoundedSemaphore(3))
    paths = []
    for number in range(30):
        write(tmp_path / f"{number:02d}.jpg", image_bytes(number))
        paths.append(str(tmp_path / f"{number:02d}.jpg"))
    blocks = iter(range(10**6))
    monkeypatch.setattr(base, "blocks_read", lambda: next(blocks))
    reading = base.ReadAhead(paths)
    assert reading.read_or_raise(0) == image_bytes(0)
    assert sorted(reading.held) == [1, 2, 3]  # the first three announced, the rest closed
    assert [reading.read_or_raise(number) for number in range(1, 30)] == [
        image_bytes(n) for n in range(1, 30)
    ]
    assert not reading.held and base._HELD._value == 3


def test_a_scan_read_ahead_where_the_system_has_no_posix_fadvise(tmp_path, monkeypatch):
    """macOS and others have no ``os.posix_fadvise``: reading ahead announces nothing there (it
    raised AttributeError on the first slow read), and the scan finds what it finds elsewhere."""
    import scrub.readers.base as base

    for number in range(30):
        write(tmp_path / "a" / f"{number:02d}.jpg", image_bytes(number))
    write(tmp_path / "a" / "cut.jpg", image_bytes(40)[:-200])
    before = findings(scrub.scan(tmp_path, scheduler="sync"))
    blocks = iter(range(10**6))
    monkeypatch.setattr(base, "blocks_read", lambda: next(blocks))  # every read from the disk
    monkeypatch.delattr(os, "posix_fadvise", raising=False)
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k))
    assert findings(scrub.scan(tmp_path, scheduler="sync")) == before == {("a/cut.jpg", "corrupt-image")}
    images = [path for path in map(str, opened) if path.startswith(str(tmp_path / "a"))]
    assert len(images) == 31  # each file opened once, to be read: none opened to be announced


def test_list_entries_outside_root_or_missing(tmp_path):
    write(tmp_path / "outside.jpg", image_bytes(1))
    write(tmp_path / "ds" / "list.txt", b"../outside.jpg 0\n/etc/passwd 1\nmissing.jpg 2\n")
    result = scrub.scan(tmp_path / "ds" / "list.txt")
    assert findings(result) == {
        ("../outside.jpg", "unsafe-path"),
        ("/etc/passwd", "unsafe-path"),
        ("missing.jpg", "missing-file"),
    }


def test_reader_and_partitions_pickle_for_workers(tmp_path):
    write(tmp_path / "a" / "1.jpg", image_bytes(1))
    reader = ImageReader(tmp_path, ReadOptions())
    _, partitions = reader.open(10)
    clone, parts = pickle.loads(pickle.dumps((reader, partitions)))
    assert [r.key for r in clone.read(parts[0])] == ["a/1.jpg"]


def test_sniffing_and_unusable_inputs(tmp_path):
    write(tmp_path / "list.txt", b"a.jpg 1\nb.png 2\n")
    write(tmp_path / "prose.txt", b"This is a README, not a list.\nIt has words.\n")
    write(tmp_path / "empty.txt", b"")
    assert ImageReader.sniff(tmp_path / "list.txt")
    assert not ImageReader.sniff(tmp_path / "prose.txt")
    with pytest.raises(UnusableDataset):
        open_reader(tmp_path / "prose.txt", ReadOptions())
    with pytest.raises(UnusableDataset, match="empty"):
        open_reader(tmp_path / "empty.txt", ReadOptions(format="images")).open(10)


@pytest.mark.parametrize("scheduler", ["sync", "processes"])
def test_a_scans_fingerprint_from_its_reads_equals_one_from_stats(tmp_path, scheduler):
    """A folder's records carry the (size, mtime) their read's fstat gave, and the scan's
    fingerprint is taken from them after the reads: it must equal the fingerprint of the same
    files stat-ed (what `fix --manifest` compares), links, a file outside the root and a
    truncated one included."""
    from scrub.scanning.fingerprint import fingerprint
    from scrub.scanning.opening import open_dataset

    root = tmp_path / "d"
    for i in range(30):
        write(root / f"c{i % 2}" / f"{i}.jpg", image_bytes(i))
    write(root / "c0" / "cut.jpg", image_bytes(40)[:200])
    (root / "c1" / "link.jpg").symlink_to(root / "c0" / "3.jpg")
    write(tmp_path / "outside.jpg", image_bytes(41))
    (root / "c1" / "away.jpg").symlink_to(tmp_path / "outside.jpg")
    result = scrub.scan(root, scheduler=scheduler, workers=2, partition_size=8)
    opened = open_dataset(root)  # not scanned: its fingerprint is stat-ed at once
    assert opened.reader.records_carry_versions
    assert result.summary.fingerprint == opened.fingerprint
    assert opened.fingerprint == fingerprint(opened.reader, opened.partitions, opened.info.root)
    assert findings(result) >= {("c0/cut.jpg", "corrupt-image"), ("c1/away.jpg", "unsafe-path")}
