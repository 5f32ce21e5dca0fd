"""Outputs that appear whole or not at all.

Each output (the cleaned copy, the quarantine folder) is built inside a temporary sibling
folder ``.NAME.scrub-PID-XXXX`` on the same file system, and renamed into place only once it
is complete and verified: a rename is atomic, so a `fix` killed at any moment leaves either no
output or a whole one, never part of one. Temporary siblings left by a killed run (their
process is gone) are removed by the next run.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import stat
import tempfile
from pathlib import Path

from scrub.errors import OutputError, ScrubError, UsageError, first_line

PREFIX_MARK = ".scrub-"


class StagedOutput:
    """One destination path, staged in a temporary sibling until `commit`.

    With ``suffixes``, the output is the files ``destination + suffix`` (a Megatron pair named by
    its prefix: ``PREFIX.bin`` and ``PREFIX.idx``), renamed into place one after the other: each
    file appears whole, the pair in two steps."""

    def __init__(self, destination: Path, *, force: bool, what: str, suffixes: tuple[str, ...] = ()) -> None:
        self.destination = Path(destination)
        self.force = force
        self.what = what
        self.suffixes = suffixes
        self.staging: Path | None = None

    uploads = False  # `scrub.storage.Publication`: committing renames, nothing is sent

    @property
    def written_in(self) -> Path:
        return self.destination

    def upload(self) -> None:
        """Nothing to send: the staged output is one rename from its destination."""

    def _names(self) -> list[str]:
        """The names the output is, beside the destination's folder."""
        return [self.destination.name + suffix for suffix in self.suffixes] or [self.destination.name]

    def exists(self) -> bool:
        return any(os.path.lexists(self.destination.parent / name) for name in self._names())

    def check(self) -> None:
        """Refuse an existing destination unless forced; make its parent folder."""
        if self.exists() and not self.force:
            raise UsageError(
                f"{self.destination}: the {self.what} already exists (use --force to replace it)"
            )
        try:
            self.destination.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise write_failure(error, self.destination, self.what) or ScrubError(
                f"{self.destination.parent}: cannot create the folder: {error.strerror}"
            ) from None

    def stage(self) -> Path:
        """The path to write the output at (inside a fresh temporary sibling)."""
        remove_abandoned(self.destination)
        try:
            staging = tempfile.mkdtemp(
                prefix=f".{self.destination.name}{PREFIX_MARK}{os.getpid()}-",
                dir=self.destination.parent or ".",
            )
        except OSError as error:
            raise write_failure(error, self.destination, self.what) or ScrubError(
                f"{self.destination.parent}: cannot write the {self.what}: {error.strerror}"
            ) from None
        self.staging = Path(staging)
        return self.staging / self.destination.name

    def commit(self) -> None:
        """Move the finished output into place, replacing an old one (``--force``)."""
        assert self.staging is not None
        for name in self._names():
            final = self.destination.parent / name
            if os.path.lexists(final):
                os.rename(final, self.staging / f".replaced{name}")  # moved aside, then deleted
            os.rename(self.staging / name, final)
        shutil.rmtree(self.staging, ignore_errors=True)
        self.staging = None

    def discard(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None


def remove_abandoned(destination: Path) -> list[Path]:
    """Delete the temporary siblings of ``destination`` whose process no longer runs."""
    removed: list[Path] = []
    prefix = f".{destination.name}{PREFIX_MARK}"
    try:
        siblings = list(destination.parent.iterdir())
    except OSError:
        return removed
    for sibling in siblings:
        if not sibling.name.startswith(prefix):
            continue
        pid_text = sibling.name[len(prefix) :].split("-", 1)[0]
        if pid_text.isdigit() and not process_alive(int(pid_text)):
            if sibling.is_dir() and not sibling.is_symlink():
                shutil.rmtree(sibling, ignore_errors=True)
            else:
                sibling.unlink(missing_ok=True)
            removed.append(sibling)
    return removed


def write_atomically(destination: Path, data: bytes, what: str = "file") -> None:
    """Write ``data`` to a `temporary_file` and rename it over ``destination``: a reader never
    sees half a file, and a failure leaves nothing behind (a full or read-only destination is
    an `OutputError` naming it)."""
    try:
        handle, temporary = temporary_file(destination)
    except OSError as error:
        raise write_failure(error, destination, what) or error from None
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.chmod(temporary, new_file_mode())
        os.replace(temporary, destination)
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise write_failure(error, destination, what) or error from None
        raise


def temporary_file(destination: Path) -> tuple[int, str]:
    """A temporary sibling file to write ``destination`` in, then rename (``mkstemp``'s handle
    and path). Named after this process, so that the next run removes it if this one is killed
    (`remove_abandoned` runs first)."""
    remove_abandoned(destination)
    return tempfile.mkstemp(
        prefix=f".{destination.name}{PREFIX_MARK}{os.getpid()}-", suffix=".tmp", dir=destination.parent or "."
    )


@functools.cache
def new_file_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask (``mkstemp`` gives 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (this one included): a dead run's temporary files may go."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_output_name(name: str) -> bool:
    """Whether a file or folder name is one `fix` gives its outputs by default (``NAME.clean``,
    ``STEM.clean.EXT``, ``NAME.quarantine``): a folder of datasets is not scanned into them."""
    return name.endswith((".clean", ".quarantine")) or ".clean." in name


#: folders a run keeps in the system's temporary directory: ``scrub-run-PID-PURPOSE-XXXX``
SCRATCH_PREFIX = "scrub-run-"


def scratch_folder(purpose: str) -> str:
    """A new folder in the system's temporary directory, named after this process: the caller
    removes it when done, and the next run removes it if this one was killed first."""
    remove_abandoned_scratch()
    return tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-{purpose}-")


def scratch_directory(purpose: str) -> tempfile.TemporaryDirectory:
    """`scratch_folder` as a `tempfile.TemporaryDirectory`: removed when it is collected."""
    remove_abandoned_scratch()
    return tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-{purpose}-")


#: where Linux keeps named POSIX semaphores, as ``sem.NAME``
SEMAPHORES = Path("/dev/shm")


def semaphore_prefix(pid: int) -> str:
    """The start of the names of a run's named semaphores (see `scrub.pipeline`)."""
    return f"{SCRATCH_PREFIX}{pid}"


def remove_abandoned_scratch() -> list[Path]:
    """Delete the scratch folders, and the named semaphores, of runs that no longer run (this
    user's only)."""
    removed: list[Path] = []
    try:
        entries = list(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"))
        if SEMAPHORES.is_dir():
            entries += SEMAPHORES.glob(f"sem.{SCRATCH_PREFIX}*")
    except OSError:
        return removed
    for entry in entries:
        semaphore = entry.parent == SEMAPHORES and entry.name.startswith("sem.")
        name = entry.name[len("sem.") :] if semaphore else entry.name
        pid_text = name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        try:
            status = entry.lstat()
        except OSError:
            continue
        kind_ok = stat.S_ISREG(status.st_mode) if semaphore else stat.S_ISDIR(status.st_mode)
        if status.st_uid != os.getuid() or not kind_ok or not pid_text.isdigit():
            continue
        if not process_alive(int(pid_text)):
            if semaphore:
                with contextlib.suppress(OSError):
                    entry.unlink()
            else:
                shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


#: what a write failure's errno means, as the one line says it
_CAUSES = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EFBIG: "file too large for the file system",
}
#: less free space than this after a failed write: the disk filled (libraries that hide the
#: errno, LMDB's "Input/output error" among them)
_NEARLY_FULL = 1 << 20


def write_failure(
    error: BaseException, destination: Path, what: str, *, exit_at_once: bool = False
) -> OutputError | None:
    """The one line for an output that could not be written, with its cause and its path; None
    when nothing says the destination is at fault (the error is then scrub's or the source's)."""
    cause = failure_cause(error, destination)
    if (
        cause is None
        and isinstance(error, OSError)
        and error.filename is not None
        and os.path.realpath(error.filename).startswith(os.path.realpath(Path(destination).parent))
    ):
        cause = first_line(error)  # an OSError about a file of the output
    if cause is None:
        return None
    return OutputError(
        f"{cause} writing the {what} {destination}; nothing was written", exit_at_once=exit_at_once
    )


def failure_cause(error: BaseException, destination: Path) -> str | None:
    """Why a write failed, when the destination is to blame: from the errno, else from the
    destination's file system (a library may report a full disk as an I/O error); else None."""
    number = getattr(error, "errno", None)
    if number in _CAUSES:
        return _CAUSES[number]
    existing = Path(destination)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        space = os.statvfs(existing)
        if space.f_bavail * space.f_frsize < _NEARLY_FULL:
            return "no space left on device"
        if space.f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    if not os.access(existing, os.W_OK):
        return "permission denied"
    return None


def free_bytes(destination: Path) -> int | None:
    """The bytes an unprivileged writer may still use on ``destination``'s file system."""
    existing = Path(destination)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        space = os.statvfs(existing)
    except OSError:
        return None
    return space.f_bavail * space.f_frsize
