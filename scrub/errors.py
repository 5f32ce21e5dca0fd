"""The errors scrub reports as one line with exit code 2, and the exit codes themselves."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of every scrub command (documented in the README)."""

    CLEAN = 0  # no issue at or above --fail-on
    ISSUES = 1  # issues at or above --fail-on were found
    ERROR = 2  # unusable input, bad options, or an internal error
    INCOMPLETE = 3  # the scan started but did not cover every record: never to be read as clean


class ScrubError(Exception):
    """An error the user can act on; the CLI prints it as one line and exits with 2."""


class UnusableDataset(ScrubError):
    """The dataset cannot be read at all: missing path, unknown format, truncated container."""


class UnopenedDataset(UnusableDataset):
    """The dataset could not be opened (no reader takes it, or its reader refused it): in a run
    of several datasets, an `unreadable-dataset` finding while the others are scanned."""

    def __init__(self, message: str, format: str | None = None) -> None:
        super().__init__(message)
        #: the format whose reader refused it, where one took it
        self.format = format


class UsageError(ScrubError):
    """Options that contradict each other or make no sense."""


class IncompleteScan(ScrubError):
    """A scan that started and stopped before covering every record (the dataset broke or
    vanished under it, the cluster went away, the disk filled): exit code 3, not 2, so that a
    job can tell "could not check" from "could not start"."""


def first_line(error: BaseException) -> str:
    """An exception's message, first line only (library errors can run to many lines)."""
    return (str(error).splitlines() or [type(error).__name__])[0]


class OutputError(ScrubError):
    """An output (the manifest, a report, the cleaned copy, the quarantine) could not be
    written: a full disk, a read-only or forbidden destination. Exit 2 with nothing left
    half-written; never read as an incomplete scan (the dataset was fine).

    ``exit_at_once``: a library's state is broken beyond a clean shutdown (HDF5 segfaults when
    it closes a file whose writes failed, at the latest when the interpreter exits): the command
    line exits right after printing the line, without running exit handlers."""

    def __init__(self, message: str, *, exit_at_once: bool = False) -> None:
        super().__init__(message)
        self.exit_at_once = exit_at_once
