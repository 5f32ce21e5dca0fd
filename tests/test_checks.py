"""Record and dataset checks on hand-made records: each positive and negative case."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import findings, image_bytes, write
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import scrub
from scrub.checks.base import CheckOptions, Column, in_sorted, sorted_unique, value_counts
from scrub.checks.dataset import far_labels, label_outlier, shape_mismatch
from scrub.checks.labels import label_out_of_range, missing_label, non_integer_label
from scrub.manifest import encode_key
from scrub.records import Record
from scrub.scanning.columnstores import ColumnStore


def record(label) -> Record:
    return Record("s", "k", 0, b"x", label)


@pytest.mark.parametrize("label, flagged", [(None, True), (0, False), ("cat", False), (3.5, False)])
def test_missing_label(label, flagged):
    assert (missing_label(record(label), CheckOptions()) is not None) == flagged


@pytest.mark.parametrize(
    "label, flagged",
    [(3, False), (3.0, False), (-1, False), (3.5, True), ("cat", True), (None, False), (float("nan"), False)],
)
def test_non_integer_label(label, flagged):
    assert (non_integer_label(record(label), CheckOptions()) is not None) == flagged


@pytest.mark.parametrize(
    "label, options, flagged",
    [
        (9, CheckOptions(num_classes=10), False),
        (10, CheckOptions(num_classes=10), True),
        (-1, CheckOptions(num_classes=10), True),
        (8000.0, CheckOptions(num_classes=10), True),
        (5, CheckOptions(label_range=(5, 8)), False),
        (4, CheckOptions(label_range=(5, 8)), True),
        (8000, CheckOptions(), False),  # no declared range: label-outlier's business
        ("cat", CheckOptions(num_classes=10), False),
    ],
)
def test_label_out_of_range(label, options, flagged):
    assert (label_out_of_range(record(label), options) is not None) == flagged


def test_nonfinite_label_in_a_list_file(tmp_path):
    write(tmp_path / "a.jpg", image_bytes(1))
    write(tmp_path / "list.txt", b"a.jpg nan\na.jpg inf\na.jpg 1\n")
    result = scrub.scan(tmp_path / "list.txt", ignore=["duplicate"])
    assert sorted((i.index, i.check) for i in result.issues()) == [
        (0, "nonfinite-label"),
        (1, "nonfinite-label"),
    ]


def outliers(labels, options: CheckOptions | None = None) -> list[int]:
    options = options if options is not None else CheckOptions()
    values = np.asarray(labels, dtype=float)
    positions = np.stack([np.zeros(len(values), int), np.arange(len(values))], axis=1)
    judged = label_outlier(Column(positions, values), options, lambda ps: [("s", str(o), o) for _, o in ps])
    return sorted(int(values[offset]) for (_, offset), _ in judged)


def test_label_outlier_rule():
    assert outliers([*range(10)] * 5 + [8000]) == [8000]
    assert outliers([*range(10)] * 5 + [-1]) == [-1]
    assert outliers([*range(10)] * 5 + [10]) == []  # just past the end: needs --num-classes
    assert outliers(list(range(1000))) == []  # dense long tail
    assert outliers([0, 5, 17, 150, 400, 980] * 10) == []  # sparse class ids, not rare
    assert outliers([*range(10)] * 5 + [8000] * 40) == []  # a real (if odd) class
    assert outliers([*range(10)] * 5 + [8000], CheckOptions(num_classes=10)) == []  # exact check instead
    assert list(far_labels(np.array([0.0]), np.array([2]))) == []


def test_rare_value_store_keeps_only_rare_positions_but_every_count():
    from scrub.scanning.columnstores import RareValueStore

    store = RareValueStore(cap=5)
    store.add(0, list(range(10)), [1.0] * 10)  # common at once
    store.add(1, [0, 1, 2], [8000.0, -1.0, 2.0])
    store.add(2, list(range(8)), [-1.0] * 8)  # negatives: every position kept
    column = store.column()
    assert dict(zip(*column.histogram)) == {-1.0: 9, 1.0: 10, 2.0: 1, 8000.0: 1}
    kept = sorted(zip(column.values.tolist(), map(tuple, column.positions.tolist())))
    assert kept == sorted(
        [(8000.0, (1, 0)), (-1.0, (1, 1)), (2.0, (1, 2))] + [(-1.0, (2, i)) for i in range(8)]
    )


def test_merged_histograms_are_the_sum_of_the_counts():
    """`merge_histograms` (the rare-value store's NumPy histogram) against a Counter, over many
    random partitions of overlapping, negative, fractional and huge values."""
    from collections import Counter

    from scrub.scanning.columnstores import merge_histograms

    rng = np.random.default_rng(7)
    distinct, counts, expected = np.empty(0), np.empty(0, np.int64), Counter()
    for _ in range(60):
        values = rng.choice(np.r_[np.arange(-3, 40), 0.5, 2.25, 1e12, 8000], size=rng.integers(0, 50))
        more, more_counts = np.unique(values, return_counts=True)
        distinct, counts = merge_histograms(distinct, counts, more, more_counts)
        expected.update(values.tolist())
        assert distinct.tolist() == sorted(expected)
        assert counts.tolist() == [expected[v] for v in sorted(expected)]


@pytest.mark.parametrize(
    "labels, kept_here",
    [
        (np.r_[np.arange(3003) % 3, 8000, -1, -1], 3),  # class indices: counted by np.bincount
        (np.r_[np.arange(3000) % 3, 8000], 3001),  # 1,000 of each: rare in this partition still
        (np.r_[np.arange(3003) % 3, 1e12, -5], 2),  # beyond bincount's range: by np.unique
        (np.r_[np.arange(3003) % 3 + 0.5, 7.25], 1),  # not integers (the store takes any numbers)
        (np.empty(0), 0),
    ],
)
def test_a_partition_counts_its_rare_column_and_the_store_ends_as_without_it(labels, kept_here):
    """The worker's histogram (`rare_only`) must leave the store exactly as the driver's own
    counting did: the same histogram, the same positions kept."""
    from scrub.scanning.columnstores import RareValueStore
    from scrub.scanning.runner import rare_only

    offsets = np.arange(len(labels))
    by_worker, by_driver = RareValueStore(), RareValueStore()
    for partition in range(3):  # three partitions: common values become common across them
        by_worker.add(partition, *rare_only(offsets, labels, "rare"))
        by_driver.add(partition, offsets, labels)
    worker, driver = by_worker.column(), by_driver.column()
    assert [a.tolist() for a in worker.histogram] == [a.tolist() for a in driver.histogram]
    assert sorted(map(tuple, worker.positions.tolist())) == sorted(map(tuple, driver.positions.tolist()))
    assert sorted(worker.values.tolist()) == sorted(driver.values.tolist())
    _, kept, (distinct, counts) = rare_only(offsets, labels, "rare")
    values, each = np.unique(labels, return_counts=True)
    common = values[(each > 1000) & (values >= 0)]
    assert counts.sum() == len(labels) and len(kept) == kept_here
    assert sorted(kept.tolist()) == sorted(labels[~np.isin(labels, common)].tolist())


def test_label_outlier_across_partitions_with_bounded_memory(tmp_path):
    import h5py

    labels = np.arange(5000) % 10
    labels[4321] = 8000
    with h5py.File(tmp_path / "d.h5", "w") as file:
        rows = (
            np.ones((5000, 2), dtype=np.float32) * [1, 2] + np.arange(5000, dtype=np.float32)[:, None] / 5000
        )
        file.create_dataset("data", data=rows)  # neither constant rows nor rows repeated
        file.create_dataset("label", data=labels.astype(np.float32))
    result = scrub.scan(tmp_path / "d.h5", partition_size=700, scheduler="sync")
    assert findings(result) == {("4321", "label-outlier")}


def test_duplicates_name_the_first_copy_across_partitions(tmp_path):
    data = image_bytes(5)
    for name in ["a/1.jpg", "b/2.jpg", "c/3.jpg"]:
        write(tmp_path / name, data)
    write(tmp_path / "a" / "0.jpg", image_bytes(6))
    result = scrub.scan(tmp_path, partition_size=1, scheduler="threads", workers=2)
    duplicates = sorted((i.key, i.details["first"]["key"]) for i in result.issues() if i.check == "duplicate")
    assert duplicates == [("b/2.jpg", "a/1.jpg"), ("c/3.jpg", "a/1.jpg")]


def test_shape_mismatch_against_the_dominant_mode(tmp_path):
    for i in range(3):
        write(tmp_path / f"{i}.jpg", image_bytes(i, mode="L"))
    write(tmp_path / "rgb.jpg", image_bytes(9))
    assert findings(scrub.scan(tmp_path)) == {("rgb.jpg", "shape-mismatch")}


def _shape_mismatch_by_rows(values: list[str]) -> list[tuple[int, str, str, float]]:
    """The rule spelled out per row (what `shape_mismatch` computed before it worked per distinct
    value): per kind, the most frequent value (ties: the first in sorted order) is dominant."""
    expected = []
    for kind in sorted({value.partition("|")[0] for value in values}):
        members = [i for i, value in enumerate(values) if value.partition("|")[0] == kind]
        names, counts = np.unique([values[i].partition("|")[2] for i in members], return_counts=True)
        dominant = str(names[int(np.argmax(counts))])
        share = round(float(counts.max() / counts.sum()), 4)
        expected += [
            (i, values[i].partition("|")[2], dominant, share)
            for i in members
            if not values[i].endswith("|" + dominant)
        ]
    return expected


@given(
    st.lists(
        st.sampled_from(["image|RGB", "image|L", "image|CMYK", "array|3x4|<f4", "array|2|<f4"]), max_size=40
    )
)
def test_shape_mismatch_matches_the_rule_per_row(values):
    store = ColumnStore("category")
    for partition, start in enumerate(range(0, len(values), 7)):
        piece = values[start : start + 7]
        store.add(partition, list(range(len(piece))), piece)
    stored = store.column()
    plain = Column(stored.positions, stored.values)  # no codes: factorized from the values
    for column in (stored, plain):
        judged = [
            (7 * partition + offset, found.details.get("mode") or found.details["shape"], found.details)
            for (partition, offset), found in shape_mismatch(column, CheckOptions(), lambda positions: [])
        ]
        found = [
            (row, value, details["dominant"], details["dominant_share"]) for row, value, details in judged
        ]
        assert found == _shape_mismatch_by_rows(values)


def test_format_mismatch_and_empty_and_bomb(tmp_path):
    write(tmp_path / "png.jpg", image_bytes(1, fmt="PNG"))
    write(tmp_path / "ok.png", image_bytes(2, fmt="PNG"))
    write(tmp_path / "gif.gif", image_bytes(3, mode="P", fmt="GIF"))
    write(tmp_path / "empty.png", b"")
    result = scrub.scan(tmp_path, max_pixels=48 * 48 - 1, ignore=["shape-mismatch"])
    assert findings(result) == {
        ("png.jpg", "format-mismatch"),
        ("empty.png", "empty-record"),
        ("png.jpg", "decompression-bomb"),
        ("ok.png", "decompression-bomb"),
        ("gif.gif", "decompression-bomb"),
    }
    assert findings(scrub.scan(tmp_path, ignore=["shape-mismatch"])) == {
        ("png.jpg", "format-mismatch"),
        ("empty.png", "empty-record"),
    }


def test_format_mismatch_names_the_extension_as_the_file_does(tmp_path):
    write(tmp_path / "photo.JPEG", image_bytes(1, fmt="PNG"))
    write(tmp_path / "other.jpg", image_bytes(2))
    (issue,) = [i for i in scrub.scan(tmp_path, scheduler="sync").issues() if i.check == "format-mismatch"]
    assert (
        issue.message == "content is PNG but the name ends in .JPEG" and issue.details["extension"] == ".JPEG"
    )


def test_keys_that_are_not_utf8_are_written_as_hex(tmp_path):
    raw = os.fsencode(tmp_path) + b"/caf\xe9.jpg"
    with open(raw, "wb") as file:
        file.write(b"")
    lines = list(scrub.scan(tmp_path).issues())
    assert [(i.key, i.check) for i in lines] == [("hex:" + b"caf\xe9.jpg".hex(), "empty-record")]
    assert encode_key(b"ok") == "ok" and encode_key("ok") == "ok"


@given(
    values=hnp.arrays(
        st.sampled_from([np.uint8, np.uint16, np.int32, np.int64, np.bool_]),
        hnp.array_shapes(max_dims=3, max_side=20),
    )
)
def test_value_counts_equals_numpy_unique(values):
    """The bincount fast path counts exactly what np.unique counts, for every integer dtype,
    negative and large values included (they take np.unique's path)."""
    distinct, counts = value_counts(values)
    flat = values.ravel().view(np.uint8) if values.dtype == bool else values.ravel()
    expected_distinct, expected_counts = np.unique(flat, return_counts=True)
    assert distinct.tolist() == expected_distinct.tolist()
    assert counts.tolist() == expected_counts.tolist()
    assert sorted_unique(flat).tolist() == expected_distinct.tolist()


@given(
    st.lists(
        st.lists(st.tuples(st.integers(-3, 70_000), st.integers(1, 5)), max_size=8, unique_by=lambda p: p[0]),
        min_size=1,
        max_size=5,
    )
)
def test_merged_label_histograms_equal_a_counter(pieces):
    """A partition's per-block label histograms merged (by bincount for class ids, else by
    np.unique) count what a Counter counts."""
    from collections import Counter

    from scrub.scanning.runner import _merge_counts

    arrays = [
        (np.array([v for v, _ in piece], dtype=np.int64), np.array([c for _, c in piece], dtype=np.int64))
        for piece in pieces
    ]
    expected: Counter = Counter()
    for piece in pieces:
        for value, count in piece:
            expected[value] += count
    assert _merge_counts(arrays) == dict(expected)


@given(
    values=hnp.arrays(np.float64, st.integers(0, 60), elements=st.floats(-5, 5).map(round)),
    members=hnp.arrays(np.float64, st.integers(0, 30), elements=st.floats(-6, 6).map(round)),
)
def test_in_sorted_equals_numpy_isin(values, members):
    """The driver's membership test (binary search in a sorted set) against np.isin."""
    members = np.unique(members)
    assert in_sorted(values, members).tolist() == np.isin(values, members).tolist()


def test_a_class_range_that_leaves_class_folders_out_is_questioned_once(tmp_path):
    """`--num-classes 5` on a 10-class folder: the findings, and one note naming the class folders
    outside the range with their counts, asking whether the option is right."""
    from typer.testing import CliRunner

    from scrub.cli import app

    for label in range(10):
        for number in range(3):
            write(
                tmp_path / "data" / f"c{label}" / f"{number}.jpg", image_bytes(10 * label + number, size=16)
            )
    result = CliRunner().invoke(
        app, ["scan", str(tmp_path / "data"), "--num-classes", "5", "--manifest", str(tmp_path / "m.jsonl")]
    )
    assert result.exit_code == 1
    notes = [line for line in result.output.splitlines() if line.startswith("note: --num-classes 5")]
    assert notes == [
        "note: --num-classes 5 leaves 5 label values outside [0, 5), 15 records in all "
        "(5 (class folder c5): 3, 6 (class folder c6): 3, 7 (class folder c7): 3, 8 (class folder c8): 3, "
        "9 (class folder c9): 3); the labels run from 0 to 9: is --num-classes 5 right?"
    ]


def test_stray_labels_outside_the_range_are_the_data_not_the_option():
    from scrub.checks.labels import range_note

    typical = {label: 40 for label in range(10)}
    assert range_note({**typical, 8000: 1, -1: 1}, (0, 10), "--num-classes 10") is None
    assert range_note(typical, (0, 10), "--num-classes 10") is None
    said = range_note(typical, (0, 8), "--num-classes 8", ["a"] * 10)
    assert said is not None and "8 (a): 40, 9 (a): 40" in said and "80 records in all" in said
