"""Local copies of datasets in object storage whose format's library opens local files only.

h5py, LMDB, LevelDB, NumPy's memory maps and Megatron's index reader take a file name, not a
stream: a dataset of theirs in a bucket is copied to this machine's scratch space, read there,
and removed when the run ends (or by the next run, when this one was killed: the scratch
folder is named after its process, `scrub.fixing.outputs.scratch_folder`). The copy keeps
each object's relative key and takes its modification time, as ``aws s3 sync`` and ``rsync -t``
do, so that the fingerprint, the result cache and ``fix --manifest`` see the same dataset on
every run while its objects are unchanged.

Which format a prefix holds is found before anything large is copied: a *head mirror* holds
every object of the listing as a sparse file of its true size whose first bytes (the whole
object when it is small) were fetched, which is all the formats' sniffs read (magic numbers,
``index.json``, ``CURRENT``, a pair's names). Only then is each object fetched whole, after
checking that the scratch disk has room for them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrub.errors import UnusableDataset
from scrub.storage import Location, remote_errors, version_of
from scrub.wording import byte_size, counted

#: bytes of each object the head mirror fetches: every format's signature lies in its first
#: kilobytes (HDF5 looks for its own at 0, 512, 1024... in case of a user block)
HEAD_BYTES = 64 << 10
#: objects up to this size are fetched whole into the head mirror (an ``index.json``, a list file)
SMALL_OBJECT = 1 << 20
#: a prefix of more objects than this is not mirrored to find its format: a dataset that needs a
#: local copy is a few files (an HDF5 file, an LMDB environment), not a folder of a million records
MOST_OBJECTS = 10_000
#: room left on the scratch disk after a copy, beyond its size
SPARE_BYTES = 256 << 20
#: why a copy is read: the format's reader opens files by name
LIBRARY_OPENS_FILES = "its format's library opens local files only"
#: why a copy is read: `fix` of a format whose writer copies from the source's files
WRITER_COPIES_FILES = "fix writes its cleaned copy from the source's files"


@dataclass
class StagedCopy:
    """A dataset of object storage copied to local scratch: where it came from, where its copy
    is, how big it is; `remove` deletes the copy (the process that made it calls it; a pickled
    copy of a reader carries this description, not the duty)."""

    url: str
    #: the object or prefix ``url`` names, as its store keys it (``bucket/data/train.h5``)
    key: str
    #: the local path a reader opens: the copy of what ``url`` names
    path: Path
    #: the scratch folder the copy is in (removed whole)
    folder: Path
    #: key -> what the store lists of it (size, modification time), in key order
    listing: dict[str, dict[str, Any]]
    #: why a copy is read rather than the objects (said in the note and in refusals)
    why: str = LIBRARY_OPENS_FILES

    @property
    def bytes(self) -> int:
        return sum(_size_of(info) for info in self.listing.values())

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def named(self, text: str) -> str:
        """``text`` (a reader's message or note) with the copy named by its URL, and the scratch
        folder it is in by the URL's prefix: what a person reads names the bucket, not scratch."""
        return text.replace(str(self.path), self.url).replace(str(self.folder), self.url.rsplit("/", 1)[0])

    def __getstate__(self) -> dict[str, Any]:
        """A pickled copy (a reader sent to a worker) leaves the listing behind: only the process
        that made the copy fingerprints it, and a listing may hold thousands of objects."""
        return self.__dict__ | {"listing": {}}

    def local(self, key: str) -> Path:
        """Where the object ``key`` is copied to: what ``url`` names is copied to ``path``; an
        object below it keeps its key relative to it, a pair's file its own name beside it."""
        if key == self.key:
            return self.path
        if key.startswith(self.key + "/"):
            return self.path / key[len(self.key) + 1 :]
        return self.folder / key.rsplit("/", 1)[-1]

    def versions(self) -> dict[str, tuple[int, int | str]]:
        """Local path -> (size, version) of each object, as `scrub.storage.stat_version` gives
        them in the store: the fingerprint of the copy is the fingerprint of the objects."""
        return {str(self.local(key)): version_of(info) for key, info in self.listing.items()}

    @property
    def note(self) -> str:
        return (
            f"{self.url}: {self.why}: {counted(len(self.listing), 'object')} ({byte_size(self.bytes)}) "
            "copied to local scratch for this run and removed after it"
        )


def local_copy(
    place: Location,
    prefix_endings: tuple[str, ...] = (),
    most: int | None = None,
    why: str = LIBRARY_OPENS_FILES,
) -> StagedCopy | None:
    """An empty local copy of what ``place`` names (an object, every object below a prefix, or the
    objects ``place`` + each of ``prefix_endings``: Megatron's ``name.bin`` and ``name.idx``), to
    be filled by `fetch_heads` or `fill`; None where it names no object, or more than ``most``."""
    listing = _listing(place, prefix_endings)
    if not listing or (most is not None and len(listing) > most):
        return None
    from scrub.fixing.outputs import scratch_folder

    folder = Path(scratch_folder("source"))
    url = str(place).rstrip("/")
    key = str(place.path).rstrip("/")
    copy = StagedCopy(url, key, folder / (url.rsplit("/", 1)[-1] or "dataset"), folder, listing, why)
    # `StagedCopy.remove` removes it when the run ends; this is the net for a caller that drops it
    # unclosed (at the latest when this process exits), and the next run's for a killed one
    weakref.finalize(copy, shutil.rmtree, folder, True)
    return copy


def fetch_heads(copy: StagedCopy, place: Location) -> StagedCopy:
    """Make ``copy`` a head mirror (see the module's docstring): what sniffing reads, no more."""
    keys = list(copy.listing)
    ends = [
        _size_of(info) if _size_of(info) <= SMALL_OBJECT else HEAD_BYTES for info in copy.listing.values()
    ]
    try:
        with remote_errors(place):
            heads = place.fs.cat_ranges(keys, [0] * len(keys), ends, on_error="return")
        for (key, info), head in zip(copy.listing.items(), heads):
            local = copy.local(key)
            local.parent.mkdir(parents=True, exist_ok=True)
            with open(local, "wb") as file:
                if not isinstance(head, BaseException):
                    file.write(head)
                file.truncate(_size_of(info))  # sparse past the head
            _take_time(local, info)
    except BaseException:
        copy.remove()
        raise
    return copy


def fill(copy: StagedCopy, place: Location) -> StagedCopy:
    """Fetch every object of ``copy`` whole, once the scratch disk is known to hold them."""
    free = shutil.disk_usage(copy.folder).free
    if copy.bytes + SPARE_BYTES > free:
        copy.remove()
        raise UnusableDataset(
            f"{copy.url}: {copy.why}, and copying its "
            f"{byte_size(copy.bytes)} needs more than the {byte_size(free)} free in {tempfile.gettempdir()}: "
            "set TMPDIR to a larger disk, or copy the dataset down first"
        )
    remote = list(copy.listing)
    local = [copy.local(key) for key in remote]
    try:
        for path in {path.parent for path in local}:
            path.mkdir(parents=True, exist_ok=True)
        with remote_errors(place):
            place.fs.get(remote, [str(path) for path in local])
        for key, path in zip(remote, local):
            _take_time(path, copy.listing[key])
    except BaseException:
        copy.remove()
        raise
    return copy


def _listing(place: Location, prefix_endings: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Key -> info of each object ``place`` names (see `head_mirror`), in key order."""
    fs = place.fs
    key = str(place.path).rstrip("/")
    with remote_errors(place):
        if fs.isfile(key):
            return {key: dict(fs.info(key))}
        found = fs.find(key, detail=True) if fs.isdir(key) else {}
        if not found and prefix_endings:
            parent = key.rsplit("/", 1)[0]
            named = {f"{key}{ending}" for ending in prefix_endings}
            found = {k: v for k, v in fs.find(parent, maxdepth=1, detail=True).items() if k in named}
    return {
        k: dict(found[k])
        for k in sorted(found)
        if found[k].get("type") != "directory" and not k.endswith("/")
    }


def _size_of(info: Mapping[str, Any]) -> int:
    return int(info.get("size") or 0)


def _take_time(path: Path, info: Mapping[str, Any]) -> None:
    """Give the copy the object's modification time (its version, for the fingerprint)."""
    modified: Any = (
        info.get("LastModified") or info.get("last_modified") or info.get("mtime") or info.get("created")
    )
    if hasattr(modified, "timestamp"):
        seconds = modified.timestamp()
    else:
        try:
            seconds = float(modified)
        except (TypeError, ValueError):
            return
    nanoseconds = int(seconds * 1e9)
    os.utime(path, ns=(nanoseconds, nanoseconds))
