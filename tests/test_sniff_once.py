"""A dataset found by listing a folder of datasets is sniffed once: the listing's sniff decides
its format, and opening it takes that format instead of sniffing the path again."""

from __future__ import annotations

import lmdb
import numpy as np
from conftest import image_bytes, write

import scrub
from scrub.readers.base import ReadOptions, expand_datasets, reader_class
from scrub.readers.hdf5 import HDF5Reader


def folder_of_datasets(tmp_path):
    """Two LMDB environments (a folder of databases is a folder of datasets) and an HDF5 file."""
    for name in ("a", "b"):
        with (
            lmdb.open(str(tmp_path / name), map_size=1 << 20) as environment,
            environment.begin(write=True) as txn,
        ):
            txn.put(b"0", image_bytes(1, size=24))
    import h5py

    with h5py.File(tmp_path / "c.h5", "w") as file:
        file["data"] = np.ones((4, 3), np.float32)
    write(tmp_path / "notes.txt", b"not a dataset")
    return tmp_path


def test_the_listing_carries_each_datasets_format(tmp_path):
    found = expand_datasets([folder_of_datasets(tmp_path)], ReadOptions())
    assert {p.name: found.formats[str(p)] for p in found.paths} == {"a": "lmdb", "b": "lmdb", "c.h5": "hdf5"}
    assert [p.name for p in found.skipped] == ["notes.txt"]
    assert found.sniffed_reading(found.paths[0], ReadOptions()).sniffed == "lmdb"
    forced = ReadOptions(format="lmdb")
    assert found.sniffed_reading(found.paths[0], forced) is forced  # a format given wins


def test_a_scan_of_the_folder_sniffs_each_dataset_once(tmp_path, monkeypatch):
    """The HDF5 reader's sniff, counted (the real one, called through): once for its file, by
    the listing; before, opening sniffed it again."""
    folder = folder_of_datasets(tmp_path)
    calls: list[str] = []
    real = HDF5Reader.sniff.__func__

    def counted(cls, path):
        calls.append(path.name)
        return real(cls, path)

    monkeypatch.setattr(HDF5Reader, "sniff", classmethod(counted))
    result = scrub.scan(folder, scheduler="sync")
    assert result.summary.records == 6  # 1 + 1 LMDB records, 4 HDF5 rows
    assert calls.count("c.h5") == 1
    assert reader_class("hdf5") is HDF5Reader
