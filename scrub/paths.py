"""Where a path lies relative to a folder: the one test every reader, writer and output uses;
and a key's extension, as every record's checks ask it.

Both paths are compared as given, component by component (``/data/train`` is not inside
``/data/tr``); callers resolve symlinks first (``os.path.realpath``) where a link could lead
out of a dataset. Whether the folder itself counts as inside it is the caller's to say, never an
accident of string prefixes.
"""

from __future__ import annotations

import os
from pathlib import PurePath


def is_within(path: str | PurePath, folder: str | PurePath, *, itself: bool = True) -> bool:
    """Whether ``path`` lies below ``folder`` (or is ``folder``, when ``itself``)."""
    path, folder = os.fspath(path), os.fspath(folder)
    trimmed = folder.rstrip(os.sep) or os.sep  # "/" stays "/"
    if path.rstrip(os.sep) == trimmed.rstrip(os.sep) or (trimmed == os.sep and path == os.sep):
        return itself
    prefix = trimmed if trimmed.endswith(os.sep) else trimmed + os.sep
    return path.startswith(prefix)


def overlaps(first: str | PurePath, second: str | PurePath) -> bool:
    """Whether one path is the other or lies inside it (after resolving symlinks)."""
    a, b = os.path.realpath(first), os.path.realpath(second)
    return is_within(a, b) or is_within(b, a)


def extension(key: str) -> str:
    """``posixpath.splitext(key)[1]``, as written, in C string calls: listings and record checks
    ask it of every file, and splitext's Python loop was a fifth of a folder's listing. The
    extension starts at the name's last dot, unless only dots come before that one (``.jpg`` is
    a hidden file with no extension)."""
    name = key.rpartition("/")[2]
    dot = name.rfind(".")
    if dot <= 0 or not name[:dot].strip("."):
        return ""
    return name[dot:]
