"""Counts in words, for what people read: ``1 record``, ``2 records``, ``2 non-image files``,
``3.1 MB``."""

from __future__ import annotations

import re

#: where a noun phrase's head ends: before a parenthesis, or a preposition that follows it
_TAIL = re.compile(r"( \(.*| (?:in|of|on|to|with|without|from|for) .*)$")


#: the plurals English does not make with -s: those scrub's messages need
_IRREGULAR = {"index": "indices"}


def plural(phrase: str) -> str:
    """The plural of a noun phrase whose head is its last word before any tail (``member in no
    sample`` -> ``members in no sample``, ``symlinked folder (not followed)`` -> ``symlinked
    folders (not followed)``); English's regular plurals, and the few irregular ones scrub's nouns need."""
    match = _TAIL.search(phrase)
    head, tail = (phrase[: match.start()], match.group(1)) if match else (phrase, "")
    last = head.rsplit(" ", 1)[-1]
    if last in _IRREGULAR:
        return f"{head[: len(head) - len(last)]}{_IRREGULAR[last]}{tail}"
    if head.endswith(("s", "x", "ch", "sh")):
        return f"{head}es{tail}"
    if head.endswith("y") and head[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{head[:-1]}ies{tail}"
    return f"{head}s{tail}"


def counted(count: int, phrase: str) -> str:
    """``count`` and the phrase, singular or plural as the count asks (``1 record``, ``0 records``)."""
    return f"{count:,} {phrase if count == 1 else plural(phrase)}"


def agreeing(count: int, singular: str, plural: str) -> str:
    """The word that agrees with ``count``: ``agreeing(1, "holds", "hold")`` is ``holds``."""
    return singular if count == 1 else plural


def byte_size(count: int) -> str:
    """A number of bytes as people read it: ``512 bytes``, ``3.1 MB``, ``1.2 GB`` (powers of 1000,
    as object stores and disks count them)."""
    size = float(count)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{count} bytes" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1000
    return f"{size:,.1f} GB"  # not reached: GB is the last unit


def mebibytes(count: int) -> str:
    """A number of bytes in MiB (the unit of the space checks that name free disk space)."""
    return f"{count / (1 << 20):,.1f} MiB"
