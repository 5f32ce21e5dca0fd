"""Baselines: which of tonight's issues are new, and which of last night's are gone.

A nightly job should fail only when something new is wrong. ``scrub scan --baseline OLD``
classes every issue it finds against the manifest ``OLD`` of an earlier scan:

* ``persisting``: the baseline holds the same issue;
* ``reappeared``: the baseline holds it as ``resolved`` (it was gone, and is back);
* ``new``: anything else;

and writes each baseline issue no longer found as a ``resolved`` line, so that the new manifest
can serve as the next night's baseline and a problem that comes back is told apart from one
never seen (`prune` drops those lines once they are not wanted any more).

Identity: an issue is the same issue when its source, check and record are the same. The record
is its key (a file's path, an LMDB key) wherever keys are names, so reordering a list file or
appending records changes nothing. Where keys are positions (HDF5 rows, whose key is the row
number), the record is the hash of its content (`Issue.content`), so rows shifting in a
regenerated file keep their identity, and a row that changed is a new record. Matching is one to
one: two identical bad rows are two issues, and a new issue never hides behind a fixed one of
the same check in the same file (counting per file, as ESLint's suppressions do, would).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from scrub.checks.drift import NOT_RECORDS
from scrub.errors import ScrubError
from scrub.fixing.outputs import new_file_mode, temporary_file
from scrub.manifest import dumps, read_manifest
from scrub.records import Issue, Severity

STATUSES = ("new", "persisting", "reappeared", "resolved")


def identity(issue: Issue) -> tuple[str, str, str]:
    """What makes two issues the same across scans (see the module's docstring)."""
    source = issue.source if issue.dataset is None else f"{issue.dataset}:{issue.source}"
    return (source, issue.content or f"key:{issue.key}", issue.check)


class Baseline:
    """The issues of an earlier manifest, matched one by one as tonight's arrive."""

    def __init__(self, issues: list[Issue], path: Path | None = None) -> None:
        self.path = path
        self._open: dict[tuple, list[Issue]] = defaultdict(list)  # found then, not yet found now
        self._gone: dict[tuple, list[Issue]] = defaultdict(list)  # resolved then, not yet back
        for issue in issues:
            if issue.check in NOT_RECORDS:  # a drift was measured against that scan's own baseline
                continue
            (self._gone if issue.status == "resolved" else self._open)[identity(issue)].append(issue)
        self.counts_by_status: Counter[str] = Counter({status: 0 for status in STATUSES})
        self.new_errors = 0

    @classmethod
    def load(cls, path: str | Path) -> "Baseline":
        path = Path(path)
        if not path.is_file():
            raise ScrubError(f"--baseline {path}: no such manifest")
        return cls(list(read_manifest(path)), path)

    def classify(self, issue: Issue) -> None:
        """Set ``issue.status`` (new, persisting or reappeared) and count it. A drift from the
        baseline (`scrub.checks.drift`) is measured against it, so it is always new: matching it
        with the baseline's own drift (from the scan before) would compare two comparisons."""
        key = identity(issue)
        if issue.check in NOT_RECORDS:
            issue.status = "new"
        elif self._open.get(key):
            self._open[key].pop()
            issue.status = "persisting"
        elif self._gone.get(key):
            self._gone[key].pop()
            issue.status = "reappeared"
        else:
            issue.status = "new"
        self.counts_by_status[issue.status] += 1
        if issue.status != "persisting" and issue.severity is Severity.ERROR:
            self.new_errors += 1

    def resolved(self) -> Iterator[Issue]:
        """The baseline's issues not found tonight (counted ``resolved``), then those it held
        as resolved already and still are (carried, so that a comeback is ``reappeared``)."""
        for issues in self._open.values():
            for issue in issues:
                self.counts_by_status["resolved"] += 1
                yield replace(issue, status="resolved")
        for issues in self._gone.values():
            yield from issues

    def counts(self) -> dict[str, int]:
        """The four counts, and ``new_errors`` (what ``--fail-on new`` fails on)."""
        return {**{s: self.counts_by_status[s] for s in STATUSES}, "new_errors": self.new_errors}


def prune(manifest: str | Path, out: str | Path | None = None) -> tuple[int, int]:
    """Drop the ``resolved`` lines of a manifest (in place, atomically, or to ``out``);
    returns (lines kept, lines dropped). The scan record beside it is left as it is."""
    manifest = Path(manifest)
    if not manifest.is_file():
        raise ScrubError(f"{manifest}: no such manifest")
    target = Path(out) if out is not None else manifest
    kept = dropped = 0
    handle, temporary = temporary_file(target)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            for issue in read_manifest(manifest):
                if issue.status == "resolved":
                    dropped += 1
                    continue
                file.write(dumps(issue) + "\n")
                kept += 1
        os.chmod(temporary, new_file_mode())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return kept, dropped
