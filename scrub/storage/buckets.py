"""Outputs in object storage (``fix --out s3://bucket/clean/``), which appear whole or not at all.

A bucket has no atomic rename, so the cleaned copy cannot be built beside its destination and
renamed into place as `scrub.fixing.outputs.StagedOutput` does on a disk. A commit marker written last
would not do either: the cleaned copy is read by the user's own loader (webdataset, pyarrow,
``datasets``), which lists the prefix and knows nothing of markers. So nothing is written under
the destination prefix until every object is written and verified:

1. the format's writer writes the output in a local scratch folder, exactly as for a local
   output, and `fix` verifies it there (read back and checksummed record by record);
2. `upload` puts each file under a staging prefix beside the destination
   (``s3://b/.clean.scrub-staging-ID/clean/...``) and checks each object's size and ETag (the
   MD5 of the local file's bytes, part by part for a multipart upload);
3. `commit` copies each staged object to the destination on the server (no bytes go through this
   machine), checks each copy the same way, and deletes the staging.

The staging prefix holds a lease (``.scrub-lease.json``: the pid, the host, a heartbeat renewed
while the run lives, and the phase). A later `fix` into the same destination removes the staging
of a run that is dead: on this host, its process is gone; on another, its heartbeat is older than
`LEASE_EXPIRY`. A run killed while copying (the lease's phase says so, with the objects it was
copying) has its copies under the destination deleted too: a killed `fix` leaves nothing there
once the next run has cleaned up.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scrub.errors import OutputError, UsageError
from scrub.fixing.outputs import PREFIX_MARK, process_alive, scratch_folder
from scrub.storage.base import Location
from scrub.storage.remote import remote_errors

#: the staging prefix of destination NAME: ``.NAME.scrub-staging-ID`` beside it
STAGING_MARK = f"{PREFIX_MARK}staging-"
#: the lease object inside a staging prefix
LEASE = ".scrub-lease.json"
#: how often a live run renews its lease's heartbeat (seconds)
LEASE_REFRESH = 30.0
#: a lease not renewed for this long belongs to a run that is gone (seconds; another host's run
#: cannot be asked whether its process lives)
LEASE_EXPIRY = 15 * 60.0
#: objects uploaded, copied or checked at once (over the store's asynchronous client where it
#: has one): each is a request of tens of ms on S3, one after the other a fix of thousands of
#: files would take minutes to publish
OBJECTS_AT_ONCE = 64
#: test-only: seconds to wait after each batch of objects is uploaded or copied, so that a test
#: can kill a run while it stages or copies (see tests/test_s3_fix.py)
PAUSE_VARIABLE = "SCRUB_TEST_UPLOAD_PAUSE"


class BucketOutput:
    """One destination in object storage (a prefix, or one object for a single-file output),
    staged locally and under a staging prefix until `commit`; the same interface as
    `scrub.fixing.outputs.StagedOutput`."""

    def __init__(
        self, destination: Location, *, force: bool, what: str, suffixes: tuple[str, ...] = ()
    ) -> None:
        self.destination = destination
        self.force = force
        self.what = what
        key = str(destination.path).rstrip("/")
        if "/" not in key:
            raise UsageError(
                f"{destination}: name a prefix inside the bucket for the {what} (like "
                f"{destination.protocol if isinstance(destination.protocol, str) else 's3'}://{key}/clean/)"
            )
        #: the endings of the objects a pair's output is (``NAME.bin``, ``NAME.idx``); () for one
        #: object or a prefix of them
        self.suffixes = suffixes
        self.fs = destination.fs
        self.key = key  # bucket/prefix
        self.parent, self.name = key.rsplit("/", 1)
        self.scratch: Path | None = None
        self.staging: str | None = None  # bucket/.NAME.scrub-staging-ID
        self.files: list[tuple[Path, str]] = []  # (local file, its key relative to the parent)
        self.etags: dict[str, str] = {}
        self._lease: dict[str, Any] = {}
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    uploads = True  # `scrub.storage.Publication`: the written files are sent to the bucket

    @property
    def written_in(self) -> Path | None:
        return self.scratch

    def exists(self) -> bool:
        """Whether an object is at the destination or under its prefix."""
        with remote_errors(self.destination):
            self.fs.invalidate_cache()
            if self.suffixes:
                return any(self.fs.isfile(self.key + suffix) for suffix in self.suffixes)
            if self.fs.isfile(self.key):
                return True
            try:
                return bool(self.fs.ls(self.key + "/", detail=False))
            except FileNotFoundError:
                return False

    def check(self) -> None:
        """Remove what dead runs left, then refuse an existing destination unless forced; the bucket
        must exist (a missing one, or missing credentials, is one line)."""
        bucket = self.key.split("/", 1)[0]
        with remote_errors(self.destination):
            self.fs.info(bucket)  # not `exists`, which answers False without credentials
        remove_abandoned(self.destination)
        if self.exists() and not self.force:
            raise UsageError(
                f"{self.destination}: the {self.what} already exists (use --force to replace it)"
            )

    def stage(self) -> Path:
        """The local path the writer writes the output at (a scratch folder of this run's)."""
        self.scratch = Path(scratch_folder("out"))
        return self.scratch / self.name

    def upload(self) -> None:
        """Put every file of the written output under the staging prefix, each checked by its size
        and ETag; nothing is under the destination yet."""
        assert self.scratch is not None
        local = self.scratch / self.name
        self.files = _files_of(local, self.destination, self.what, self.suffixes)
        self.staging = f"{self.parent}/.{self.name}{STAGING_MARK}{uuid.uuid4().hex[:12]}"
        self._write_lease("uploading")
        self._heartbeat = threading.Thread(target=self._renew, name="scrub-lease", daemon=True)
        self._heartbeat.start()
        with remote_errors(self.destination):
            for batch in _batches(self.files):
                staged = [self._staged(name) for _, name in batch]
                self.fs.put([str(path) for path, _ in batch], staged)
                infos = _infos(self.fs, staged)
                for (path, name), key in zip(batch, staged):
                    self.etags[name] = _check_object(infos[key], key, path, self.destination, self.what)
                _test_pause()

    def commit(self) -> None:
        """Copy the staged objects to the destination (replacing an old one with ``--force``),
        check each copy, then delete the staging."""
        assert self.staging is not None
        with remote_errors(self.destination):
            self._write_lease("copying", [name for _, name in self.files])
            if self.exists():  # --force: what it replaces goes first
                if self.suffixes:
                    self.fs.rm([self.key + e for e in self.suffixes if self.fs.isfile(self.key + e)])
                elif self.fs.isfile(self.key):
                    self.fs.rm_file(self.key)
                else:
                    self.fs.rm(self.key + "/", recursive=True)
            for batch in _batches(self.files):
                finals = [self._final(name) for _, name in batch]
                self.fs.copy([self._staged(name) for _, name in batch], finals)
                infos = _infos(self.fs, finals)
                for (path, name), key in zip(batch, finals):
                    _check_object(infos[key], key, path, self.destination, self.what, self.etags[name])
                _test_pause()
            self._write_lease("copied")
            self._stop_heartbeat()
            _remove_staging(self.fs, self.staging)
            self.fs.invalidate_cache()
        self.staging = None
        self._remove_scratch()

    def discard(self) -> None:
        """Remove what this run put in the bucket: the staging, and the copies of a failed copy phase."""
        self._stop_heartbeat()
        if self.staging is not None and self._lease.get("phase") == "copying":
            for _, name in self.files:
                with contextlib.suppress(Exception):
                    self.fs.rm_file(self._final(name))
        if self.staging is not None:
            with contextlib.suppress(Exception):  # the next run removes it by its lease
                _remove_staging(self.fs, self.staging)
            self.staging = None
        self._remove_scratch()

    def _staged(self, name: str) -> str:
        return f"{self.staging}/{name}"

    def _final(self, name: str) -> str:
        return f"{self.parent}/{name}"

    def _write_lease(self, phase: str, copying: list[str] | None = None) -> None:
        self._lease = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": self._lease.get("started", time.time()),
            "heartbeat": time.time(),
            "destination": self.key,
            "phase": phase,
            "relative_to": "parent",  # the keys in ``copying``: beside the destination
            "copying": copying if copying is not None else self._lease.get("copying", []),
        }
        self.fs.pipe_file(f"{self.staging}/{LEASE}", json.dumps(self._lease).encode())

    def _renew(self) -> None:
        while not self._stop.wait(LEASE_REFRESH):
            with contextlib.suppress(Exception):  # a missed beat: the next one renews it
                self._write_lease(self._lease["phase"])

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None

    def _remove_scratch(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def _batches(files: list[tuple[Path, str]]) -> Iterator[list[tuple[Path, str]]]:
    """``files`` in batches of `OBJECTS_AT_ONCE`, each uploaded or copied at once."""
    for start in range(0, len(files), OBJECTS_AT_ONCE):
        yield files[start : start + OBJECTS_AT_ONCE]


def _infos(fs: Any, keys: list[str]) -> dict[str, dict[str, Any]]:
    """What the store says of each of ``keys`` (size, ETag), requested at once where its client
    is asynchronous (s3fs, gcsfs, adlfs)."""
    fs.invalidate_cache()
    if getattr(fs, "async_impl", False) and len(keys) > 1:
        from fsspec.asyn import sync  # type: ignore[import-untyped]

        async def every() -> list[Any]:
            import asyncio

            return await asyncio.gather(*(fs._info(key) for key in keys))

        return dict(zip(keys, sync(fs.loop, every)))
    return {key: fs.info(key) for key in keys}


def _test_pause() -> None:
    """Wait `PAUSE_VARIABLE` seconds (tests only: to kill a run between two batches of uploads
    or copies)."""
    pause = float(os.environ.get(PAUSE_VARIABLE) or 0)
    if pause > 0:
        time.sleep(pause)


def remove_abandoned(destination: Location) -> list[str]:
    """Delete the staging prefixes beside ``destination`` whose run is dead (see the module's
    docstring), and the copies under the destination of a run killed while copying."""
    fs = destination.fs
    key = str(destination.path).rstrip("/")
    parent, name = key.rsplit("/", 1)
    mark = f".{name}{STAGING_MARK}"
    removed: list[str] = []
    with remote_errors(destination):
        fs.invalidate_cache()
        try:
            siblings = fs.ls(parent, detail=False)
        except FileNotFoundError:
            return removed
        for sibling in siblings:
            if not sibling.rstrip("/").rsplit("/", 1)[-1].startswith(mark):
                continue
            lease = _read_lease(fs, sibling)
            if not _abandoned(fs, sibling, lease):
                continue
            if lease is not None and lease.get("phase") == "copying":
                for copied in lease.get("copying", []):
                    with contextlib.suppress(FileNotFoundError):
                        if lease.get("relative_to") == "parent":
                            fs.rm_file(f"{parent}/{copied}")
                        else:  # a lease from before pairs: its keys are under the destination
                            fs.rm_file(key + (f"/{copied}" if copied else ""))
            _remove_staging(fs, sibling)
            removed.append(sibling)
        fs.invalidate_cache()
    return removed


def _read_lease(fs: Any, staging: str) -> dict[str, Any] | None:
    try:
        lease = json.loads(fs.cat_file(f"{staging.rstrip('/')}/{LEASE}"))
    except (FileNotFoundError, ValueError):
        return None
    return lease if isinstance(lease, dict) else None


def _abandoned(fs: Any, staging: str, lease: dict[str, Any] | None) -> bool:
    """Whether the run that owns ``staging`` is gone: its process (this host), else its lease's
    age; a staging without a lease (its run was killed deleting it) by its objects' age."""
    if lease is not None:
        if lease.get("host") == socket.gethostname() and isinstance(lease.get("pid"), int):
            return not process_alive(lease["pid"])
        return time.time() - float(lease.get("heartbeat") or 0) > LEASE_EXPIRY
    newest = 0.0
    for info in fs.find(staging, detail=True).values():
        modified = info.get("LastModified") or info.get("mtime") or info.get("last_modified")
        stamp = modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)
        newest = max(newest, stamp)
    return time.time() - newest > LEASE_EXPIRY


def _remove_staging(fs: Any, staging: str) -> None:
    """Every object of a staging prefix, its lease last (while objects remain, it says whose they are)."""
    staging = staging.rstrip("/")
    objects = [path for path in fs.find(staging) if not path.endswith(f"/{LEASE}")]
    if objects:
        fs.rm(objects)
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(f"{staging}/{LEASE}")


def _files_of(
    local: Path, destination: Location, what: str, suffixes: tuple[str, ...] = ()
) -> list[tuple[Path, str]]:
    """The files of a written output, with their keys relative to the destination's parent
    (``NAME``, ``NAME/a/b``, or a pair's ``NAME.bin``). An object store holds no links: an output
    that holds one (a link to an unreadable file, recreated as it was) cannot go there."""
    if suffixes:
        paths = [local.with_name(local.name + suffix) for suffix in suffixes]
    elif local.is_symlink() or not local.is_dir():
        paths = [local]
    else:
        paths = sorted(path for path in local.rglob("*") if path.is_symlink() or not path.is_dir())
    for path in paths:
        if path.is_symlink():
            raise OutputError(
                f"the {what} holds a symbolic link ({path.relative_to(local.parent)}), which object "
                f"storage cannot hold, writing {destination}; nothing was written"
            )
    return [(path, path.relative_to(local.parent).as_posix()) for path in paths]


def _check_object(
    info: dict[str, Any], key: str, local: Path, destination: Location, what: str, etag: str | None = None
) -> str:
    """Check an uploaded or copied object (``info``: what the store says of it) against the local
    file it holds: its size, and its ETag where the store makes it the MD5 of the bytes (S3: of
    each part, for a multipart upload), else the ETag the staged object had. Returns the object's
    ETag ("" where there is none)."""
    size = local.stat().st_size
    found = str(info.get("ETag") or info.get("etag") or "").strip('"')
    problem = None
    if int(info.get("size") or 0) != size:
        problem = f"{info.get('size')} bytes instead of {size}"
    elif found and found != etag and found != _expected_etag(local, size, found):
        problem = f"its ETag {found} does not match the bytes written"
    if problem is not None:
        raise OutputError(
            f"{key}: the object stored for the {what} {destination} is not what was written ({problem}); "
            "nothing was written; please report this"
        )
    return found


def _expected_etag(local: Path, size: int, found: str) -> str | None:
    """The S3 ETag of ``local``'s bytes in the form ``found`` has (plain MD5, or ``MD5-PARTS``
    for a multipart upload of s3fs's part size); None when it cannot be known (another store)."""
    parts = found.split("-")
    if len(parts) == 1 and len(found) == 32:
        return _md5s(local, max(size, 1))[0].hexdigest()
    if len(parts) == 2 and parts[1].isdigit():
        try:
            from s3fs.utils import calculate_chunksize  # type: ignore[import-untyped]
        except ImportError:
            return None
        digests = _md5s(local, calculate_chunksize(size))
        return f"{hashlib.md5(b''.join(d.digest() for d in digests)).hexdigest()}-{len(digests)}"
    return found  # not an MD5: the size was checked


def _md5s(local: Path, part: int) -> list[Any]:
    digests: list[Any] = []
    with open(local, "rb") as file:
        while True:
            chunk = file.read(part)
            if not chunk and digests:
                return digests
            digests.append(hashlib.md5(chunk))
            if not chunk:
                return digests
