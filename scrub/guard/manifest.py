"""The guard's manifest, and how it names a dataset's records so that `scrub fix` finds them.

The manifest is scrub's own (JSON Lines, `scrub.manifest`), rewritten whole and renamed into
place after each finding: a run killed at any moment leaves every finding made before on disk.
Beside it goes a record of kind ``guard`` (``NAME.scan.json``, where a scan puts its own): it
tells `scrub fix --manifest` to find the records by their names, since no scan fingerprinted the
dataset. A manifest the guard wrote earlier is kept and added to (a run that restarts).
"""

from __future__ import annotations

import bisect
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrub.errors import ScrubError
from scrub.fixing.outputs import write_atomically
from scrub.manifest import GUARD_KIND, encode_line, read_manifest, scan_record_path, write_scan_record
from scrub.records import Issue, Severity

#: the longest the record beside the manifest goes without its step count brought up to date
RECORD_SECONDS = 10.0


class GuardManifest:
    """The findings of a guarded run, whole on disk after each one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[bytes] = []
        self.steps = self.skipped = 0  # the run's, as its record says them
        self.written = (-1, -1, 0.0)  # (steps, skipped, when) of the record on disk
        if path.exists():
            record = _record(path)
            if record.get("kind") != GUARD_KIND:
                raise ValueError(
                    f"{path} is a scan's manifest, not a guard's: choose another manifest for the guard"
                )
            self.lines = [encode_line(issue) for issue in read_manifest(path)]
        self.add([], 0, 0)  # an empty manifest says the guard ran, and found nothing yet

    def add(self, issues: Iterable[Issue], steps: int, skipped: int) -> None:
        """Findings of a step, written with the record: the manifest whole, then its record."""
        self.lines += [encode_line(issue) for issue in issues]
        self.steps, self.skipped = steps, skipped
        if not _rank_zero():
            return
        write_atomically(self.path, b"".join(self.lines), "guard manifest")
        self._write_record()

    def count(self, steps: int, skipped: int) -> None:
        """A step applied without a finding: the record's counts are rewritten at most every
        `RECORD_SECONDS` (a write a step would cost more than the guard's check)."""
        self.steps, self.skipped = steps, skipped
        if time.monotonic() - self.written[2] >= RECORD_SECONDS:
            self.close()

    def close(self) -> None:
        """Write the record if its counts changed since it was written (the guard is done)."""
        if (self.steps, self.skipped) == self.written[:2] or not _rank_zero():
            return
        try:
            self._write_record()
        except (OSError, ScrubError):  # at exit, its folder gone: the findings are on disk regardless
            pass

    def _write_record(self) -> None:
        from scrub import __version__

        write_scan_record(
            self.path,
            {
                "kind": GUARD_KIND,
                "schema": 1,
                "scrub_version": __version__,
                "fingerprint": None,
                "steps": self.steps,
                "skipped": self.skipped,
                "issues": len(self.lines),
            },
        )
        self.written = (self.steps, self.skipped, time.monotonic())


def _record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(scan_record_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _rank_zero() -> bool:
    """Whether this process writes (rank 0 of a distributed run, which gathers every rank's)."""
    try:
        import torch.distributed as dist

        return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    except ImportError:
        return True


@dataclass(frozen=True)
class Named:
    """A record as the guard names it: as scrub names it in that dataset where it can tell."""

    source: str
    key: str
    index: int | None  # the index in the training's dataset
    named_by: str  # key, record_key, samples, __key__, index

    def issue(self, check: str, severity: Severity, message: str, details: dict[str, Any]) -> Issue:
        return Issue(
            self.source,
            self.key,
            self.index,
            check,
            severity,
            message,
            {**details, "named_by": self.named_by},
        )


class RecordNames:
    """Names the records of a training dataset: by ``key(index)`` where given; by the
    dataset's own ``record_key(index)``; by the file of torchvision's ``ImageFolder`` /
    ``DatasetFolder`` (its ``samples``, relative to its ``root``: scrub's key of an image folder's
    record); else by the index. ``Subset`` and ``ConcatDataset`` are seen through."""

    def __init__(self, dataset: Any, key: Callable[[int], str | tuple[str, str]] | None) -> None:
        self.dataset = dataset
        self.key = key

    def of_index(self, index: int) -> Named:
        if self.key is not None:
            return _named(self.key(index), index, "key")
        dataset, inner = _innermost(self.dataset, index)
        if hasattr(dataset, "record_key"):
            return _named(dataset.record_key(inner), index, "record_key")
        samples, root = getattr(dataset, "samples", None), getattr(dataset, "root", None)
        if samples is not None and root is not None:
            relative = os.path.relpath(str(samples[inner][0]), str(root)).replace(os.sep, "/")
            return Named(relative, relative, index, "samples")
        return Named(str(index), str(index), index, "index")

    def of_key(self, key: str) -> Named:
        return Named(key, key, None, "__key__")


def record_names(dataset: Any, key: Callable[[int], str | tuple[str, str]] | None) -> RecordNames:
    return RecordNames(dataset, key)


def _named(value: str | tuple[str, str], index: int, how: str) -> Named:
    if isinstance(value, tuple):
        return Named(str(value[0]), str(value[1]), index, how)
    return Named(str(value), str(value), index, how)


def _innermost(dataset: Any, index: int) -> tuple[Any, int]:
    """The dataset that holds record ``index``, and its index there, through ``Subset`` and
    ``ConcatDataset`` (duck-typed: ``indices``; ``datasets`` with ``cumulative_sizes``)."""
    for _ in range(16):  # nested wrappers, bounded
        indices = getattr(dataset, "indices", None)
        inner = getattr(dataset, "dataset", None)
        if indices is not None and inner is not None:
            dataset, index = inner, int(indices[index])
            continue
        sizes = getattr(dataset, "cumulative_sizes", None)
        parts = getattr(dataset, "datasets", None)
        if sizes is not None and parts is not None:
            number = bisect.bisect_right(sizes, index)
            index -= sizes[number - 1] if number else 0
            dataset = parts[number]
            continue
        break
    return dataset, index
