"""Where a path lies relative to a folder: the one test every reader, writer and output uses;
a key's extension, as every record's checks ask it; and the split a dataset's name makes it
(`split_of`), as a run of several datasets and a folder of splits ask it.

Both paths are compared as given, component by component (``/data/train`` is not inside
``/data/tr``); callers resolve symlinks first (``os.path.realpath``) where a link could lead
out of a dataset. Whether the folder itself counts as inside it is the caller's to say, never an
accident of string prefixes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePath
from typing import Any


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


def common_folder(paths: Sequence[str]) -> str:
    """The folder (or a bucket's prefix) that holds every one of ``paths``: relative where they
    all are, "." where nothing is shared."""
    if not paths:
        return "."
    urls = [p for p in paths if "://" in p]
    if urls:  # objects of buckets: their common prefix, by whole "/" parts
        if len(urls) < len(paths):
            return "."
        parts = [p.split("/") for p in urls]
        common = [part for part, *others in zip(*parts) if all(o == part for o in others)]
        return "/".join(common) if len(common) > 2 else "."
    if len({os.path.isabs(p) for p in paths}) == 1:  # as they were given: relative stays relative
        return os.path.commonpath(paths) or "."
    return os.path.commonpath([os.path.abspath(p) for p in paths])


def absolute_place(path: str) -> str:
    """A dataset's path made absolute from the working directory; a URL as it is."""
    return path if "://" in path else os.path.abspath(path)


TRAINING = "train"
EVALUATION = "evaluation"
#: the words of a dataset's name that make it a training split
TRAINING_WORDS = frozenset({"train", "training"})
#: ... and an evaluation split (validation and test alike: a leak into either falsifies its metric)
EVALUATION_WORDS = frozenset(
    {"val", "valid", "validation", "dev", "test", "testing", "eval", "evaluation", "holdout", "heldout"}
)


def split_of(path: Any) -> str | None:
    """`TRAINING` or `EVALUATION` from the last part of a dataset's path, split into words at
    ``. _ -`` and spaces (``train``, ``val.h5``, ``test-000001.tar``, ``imagenet_val``); None for a
    name with neither kind of word, or with both (``trainval``, ``train_val``: no telling)."""
    words = set(re.split(r"[._\-\s]+", PurePath(str(path).rstrip("/")).name.lower()))
    training, evaluation = bool(words & TRAINING_WORDS), bool(words & EVALUATION_WORDS)
    if training == evaluation:
        return None
    return TRAINING if training else EVALUATION


def split_roles(paths: Sequence[Any]) -> list[str | None]:
    """Each dataset's split, where the run holds both a training and an evaluation split (else
    none: there is nothing to compare)."""
    roles = [split_of(path) for path in paths]
    if TRAINING not in roles or EVALUATION not in roles:
        return [None] * len(roles)
    return roles


def modified(path: Path) -> float:
    """When ``path`` was last modified (or marked used), 0 where it cannot be stat-ed."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def beyond_most_recent(paths: Iterable[Path], keep: int) -> list[Path]:
    """The paths beyond the ``keep`` most recently modified: what a directory of caches, which
    marks a file used by touching it, removes."""
    return sorted(paths, key=modified, reverse=True)[keep:]
