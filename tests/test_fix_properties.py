"""Property tests: over random small datasets of each format with random planted faults,
cleaned ∪ quarantine = source (byte for byte), the two are disjoint, and a rescan of the
cleaned copy finds no error-severity issue.

The contents are read back with plain file reads, h5py and lmdb here, not with scrub.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import h5py
import lmdb
import numpy as np
import pytest
from conftest import image_bytes, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scrub
from scrub.errors import UnusableDataset

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def image_payload(kind: str, seed: int) -> bytes:
    good = image_bytes(seed, fmt="PNG" if seed % 3 == 0 else "JPEG", size=16)
    return {"good": good, "truncated": good[: len(good) // 2], "empty": b"", "garbage": b"not an image"}[kind]


def rescan_errors(path: Path, **options) -> int:
    try:
        return scrub.scan(path, scheduler="sync", **options).summary.records_with_errors
    except UnusableDataset:  # nothing was kept: an empty folder or list is not a dataset
        return 0


def fixed(path: Path, **options):
    """`scrub.fix` with a quarantine, or None where it refused to empty the dataset for one
    cause: then a scan must show every record flagged by one check. Random small datasets are
    often more than half bad for one cause: allowed (--allow-majority), the writing is tested."""
    try:
        return scrub.fix(path, quarantine=True, scheduler="sync", allow_majority=True, **options)
    except UnusableDataset as error:
        if "would be set aside for" not in str(error):
            raise
        assert scrub.scan(path, scheduler="sync", **options).summary.sole_causes(), str(error)
        return None


kinds = st.sampled_from(["good", "good", "good", "truncated", "empty", "garbage"])


@pytest.mark.slow  # over half a second: out of the quick subset
@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["", "a", "b", "c/deep"]), kinds), min_size=1, max_size=12))
def test_image_folders(entries):
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "data"
        for number, (where, kind) in enumerate(entries):
            write(
                source / where / f"{number}.{'png' if number % 3 == 0 else 'jpg'}",
                image_payload(kind, number),
            )
        originals = _files(source)
        result = fixed(source)
        if result is None:
            return
        clean, held = _files(result.clean), _files(result.quarantine / "data")
        assert set(clean).isdisjoint(held)
        assert {**clean, **held} == originals
        assert result.report["kept"] == len(clean) and result.report["quarantined"] == len(held)
        assert _files(source) == originals
        assert rescan_errors(result.dataset) == 0


@pytest.mark.slow  # over half a second: out of the quick subset
@SETTINGS
@given(st.lists(st.tuples(kinds, st.integers(-2, 5), st.booleans()), min_size=1, max_size=12))
def test_image_lists(entries):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "list"
        lines = []
        for number, (kind, label, present) in enumerate(entries):
            name = f"img/{number % 7}.jpg"  # a list may name one file twice
            if present and not (root / name).exists():
                write(root / name, image_payload(kind, number))
            lines.append(f"{name} {label}")
        root.mkdir(exist_ok=True)
        (root / "train.txt").write_text("\n".join(lines) + "\n")
        result = fixed(root / "train.txt", num_classes=4)
        if result is None:
            return
        kept = result.dataset.read_text().splitlines()
        held = (result.quarantine / "train" / "train.txt").read_text().splitlines()
        assert sorted(kept + held) == sorted(lines)
        for side, side_lines in ((result.clean, kept), (result.quarantine / "train", held)):
            for line in side_lines:
                name = line.rsplit(" ", 1)[0]
                if (root / name).exists():
                    assert (side / name).read_bytes() == (root / name).read_bytes()
                else:
                    assert side == result.quarantine / "train" and not (side / name).exists()
        assert rescan_errors(result.dataset, num_classes=4) == 0


@SETTINGS
@given(
    rows=st.integers(1, 40),
    width=st.integers(1, 4),
    chunk=st.one_of(st.none(), st.integers(1, 16)),
    faults=st.lists(
        st.tuples(st.integers(0, 39), st.sampled_from(["nan", "inf", "label", "zero"])), max_size=8
    ),
)
@pytest.mark.slow
def test_hdf5_files(rows, width, chunk, faults):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.h5"
        rng = np.random.default_rng(rows * 31 + width)
        data = rng.normal(size=(rows, width)).astype(np.float32) + 3
        label = rng.integers(0, 3, rows)
        for row, fault in faults:
            if row < rows:
                if fault == "label":
                    label[row] = 7
                else:
                    data[row, 0] = {"nan": np.nan, "inf": np.inf, "zero": 0}[fault]
        with h5py.File(path, "w") as file:
            file.create_dataset(
                "data",
                data=data,
                chunks=(min(chunk, rows), width) if chunk else None,
                # odd chunks compressed (HDF5 writes them), even ones plain (written as raw chunks)
                compression="gzip" if chunk and chunk % 2 else None,
            )
            file["label"] = label
            file["classes"] = np.arange(41)  # never as many rows as the data: not row-aligned
        result = fixed(path, num_classes=3)
        if result is None:
            return
        with h5py.File(result.clean) as clean, h5py.File(result.quarantine / "train.h5") as held:
            origin = held["scrub_source_row"][:]
            kept = np.setdiff1d(np.arange(rows), origin)
            assert len(kept) + len(origin) == rows and len(np.unique(origin)) == len(origin)
            assert clean["data"][:].tobytes() == data[kept].tobytes()
            assert held["data"][:].tobytes() == data[origin].tobytes()
            assert np.array_equal(clean["label"][:], label[kept]) and np.array_equal(
                held["label"][:], label[origin]
            )
            assert np.array_equal(clean["classes"][:], np.arange(41))
        assert rescan_errors(result.dataset, num_classes=3) == 0


def _npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


lmdb_values = st.sampled_from(["png", "npy", "npy-nan", "garbage", "empty"])


@pytest.mark.slow  # over half a second: out of the quick subset
@SETTINGS
@given(
    items=st.dictionaries(st.binary(min_size=1, max_size=6), lmdb_values, min_size=1, max_size=15),
    subdir=st.booleans(),
)
def test_lmdb_environments(items, subdir):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("db" if subdir else "db.lmdb")
        values = {
            "png": image_bytes(1, fmt="PNG", size=16),  # not a tiny-image
            "npy": _npy(np.ones(4, dtype=np.float32)),
            "npy-nan": _npy(np.array([1.0, np.nan])),
            "garbage": b"\x01\x02garbage",
            "empty": b"",
        }
        source = {key: values[kind] for key, kind in items.items()}
        environment = lmdb.open(str(path), subdir=subdir, map_size=1 << 24)
        with environment.begin(write=True) as transaction:
            for key, value in source.items():
                transaction.put(key, value)
        environment.close()
        result = fixed(path)
        if result is None:
            return
        clean, held = _items(result.clean), _items(result.quarantine / path.name)
        assert set(clean).isdisjoint(held) and {**clean, **held} == source
        assert rescan_errors(result.dataset) == 0


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _items(path: Path) -> dict[bytes, bytes]:
    if not path.exists():
        return {}
    environment = lmdb.open(str(path), subdir=path.is_dir(), readonly=True, lock=False)
    with environment.begin() as transaction:
        items = {bytes(k): bytes(v) for k, v in transaction.cursor()}
    environment.close()
    return items
