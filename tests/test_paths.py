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


def test_a_keys_extension_is_exactly_splitexts():
    """Listings and record checks take extensions with string calls of their own, not
    `posixpath.splitext`: they must agree on every key, hidden files and names of dots included."""
    import itertools
    import posixpath

    from scrub.paths import extension

    parts = ["", ".", "..", "a", "A.JPG", ".jpg", "b.", "c.d", "x/", "x.y/", "/"]
    for pieces in itertools.product(parts, repeat=3):
        key = "".join(pieces)
        assert extension(key) == posixpath.splitext(key)[1], key
