"""Loaders keep working after `fix`: the folder2lmdb / ImageFolderLMDB layout (pickled values,
``__keys__`` and ``__len__``) reads the cleaned copy and the quarantine as it read the source.
Before, the cleaned copy kept the source's ``__keys__``/``__len__`` and the loader failed with a
TypeError at the first dropped key."""

from __future__ import annotations

import io
import os
import pickle

import lmdb
import pytest
from conftest import image_bytes, one_line_error
from PIL import Image
from test_lmdb import write_db

import scrub


class ImageFolderLMDB:
    """The loader as people copy it (Efficient-PyTorch's folder2lmdb.py, pickle flavour),
    without torch: index -> (RGB image, label) through ``__keys__``."""

    def __init__(self, db_path: str) -> None:
        self.env = lmdb.open(db_path, subdir=os.path.isdir(db_path), readonly=True, lock=False)
        with self.env.begin(write=False) as txn:
            self.length = pickle.loads(txn.get(b"__len__"))
            self.keys = pickle.loads(txn.get(b"__keys__"))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        with self.env.begin(write=False) as txn:
            unpacked = pickle.loads(txn.get(self.keys[index]))
        image, target = (unpacked["img"], unpacked["label"]) if isinstance(unpacked, dict) else unpacked
        return Image.open(io.BytesIO(image)).convert("RGB"), target


def folder2lmdb(path, values, protocol=4):
    keys = [f"{i}".encode() for i in range(len(values))]  # unpadded: '10' sorts before '2'
    items = [(key, pickle.dumps(value, protocol=protocol)) for key, value in zip(keys, values)]
    meta = [(b"__keys__", pickle.dumps(keys, protocol=protocol)), (b"__len__", pickle.dumps(len(keys)))]
    return write_db(path, items + meta)


@pytest.mark.parametrize("as_dict", [False, True])
def test_the_loader_reads_the_cleaned_copy_and_the_quarantine(tmp_path, as_dict):
    values = []
    for i in range(12):
        data = image_bytes(i, fmt="PNG", size=16)
        if i in (3, 10):
            data = data[: len(data) // 2]  # truncated: quarantined
        values.append({"img": data, "label": i % 4} if as_dict else (data, i % 4))
    source = folder2lmdb(tmp_path / "train_lmdb", values)
    result = scrub.fix(source, quarantine=True, allow_pickle=True, scheduler="sync")
    assert result.verified and result.report["kept"] == 10 and result.report["quarantined"] == 2
    clean = ImageFolderLMDB(str(result.clean))
    assert len(clean) == len(clean.keys) == 10
    labels = [clean[i][1] for i in range(len(clean))]  # every index loads; no stale key
    assert sorted(labels) == sorted(i % 4 for i in range(12) if i not in (3, 10))
    held = ImageFolderLMDB(str(result.quarantine / "train_lmdb"))
    assert len(held) == 2 and sorted(held.keys) == [b"10", b"3"]
    assert not any("metadata keys copied unchanged" in note for note in result.report["notes"])


def test_without_allow_pickle_the_note_names_the_loader_that_breaks(tmp_path):
    """Raw PNG values, pickled metadata: the values need no unpickling, the metadata would."""
    keys = [f"{i:03d}".encode() for i in range(6)]
    values = [image_bytes(i, fmt="PNG", size=16) for i in range(6)]
    values[2] = b"not an image"
    meta = [(b"__keys__", pickle.dumps(keys)), (b"__len__", pickle.dumps(6))]
    source = write_db(tmp_path / "raw_lmdb", [*zip(keys, values), *meta])
    result = scrub.fix(source, scheduler="sync")
    assert result.report["kept"] == 5
    note = next(note for note in result.report["notes"] if "metadata keys copied unchanged" in note)
    assert "--allow-pickle" in note and "ImageFolderLMDB" in note
    with lmdb.open(str(result.clean), readonly=True, lock=False) as env, env.begin() as txn:
        assert pickle.loads(txn.get(b"__len__")) == 6  # unchanged, as the note says


def test_num_samples_is_rewritten_as_text(tmp_path):
    items = [(f"{i:03d}".encode(), image_bytes(i, fmt="PNG", size=16)) for i in range(5)]
    items[1] = (items[1][0], b"")
    source = write_db(tmp_path / "db", [*items, (b"num-samples", b"5")])
    result = scrub.fix(source, scheduler="sync")
    with lmdb.open(str(result.clean), readonly=True, lock=False) as env, env.begin() as txn:
        assert txn.get(b"num-samples") == b"4"


def test_dict_fields_can_be_named(tmp_path):
    values = [{"pixels": image_bytes(i, fmt="PNG", size=16), "fine": i % 5, "y": 0} for i in range(6)]
    values[4]["fine"] = 12  # out of range for 5 classes, in the named label field only
    source = folder2lmdb(tmp_path / "named_lmdb", values)
    usual = scrub.scan(source, allow_pickle=True, scheduler="sync")
    assert {issue.check for issue in usual.issues()} == {"undecodable-record"}  # no usual data field
    named = scrub.scan(
        source, allow_pickle=True, data_key="pixels", label_key="fine", num_classes=5, scheduler="sync"
    )
    assert {(issue.key, issue.check) for issue in named.issues()} == {("4", "label-out-of-range")}
    assert "--allow-pickle" in one_line_error("scan", source, "--data-key", "pixels")
