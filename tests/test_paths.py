"""The one "is this path inside that folder" test (`scrub.paths`)."""

import pytest

from scrub.paths import is_within, overlaps


@pytest.mark.parametrize(
    ("path", "folder", "itself", "expected"),
    [
        ("/data/train/a.jpg", "/data/train", True, True),
        ("/data/train", "/data/train", True, True),
        ("/data/train", "/data/train", False, False),
        ("/data/train/", "/data/train", False, False),  # a trailing separator is the same folder
        ("/data/training/a.jpg", "/data/train", True, False),  # a shared prefix is not a parent
        ("/data", "/data/train", True, False),
        ("/x", "/", True, True),
        ("/", "/", False, False),
    ],
)
def test_is_within(path, folder, itself, expected):
    assert is_within(path, folder, itself=itself) is expected


def test_overlaps_resolves_links(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert overlaps(tmp_path / "link" / "x", tmp_path / "real")
    assert not overlaps(tmp_path / "realm", tmp_path / "real")
