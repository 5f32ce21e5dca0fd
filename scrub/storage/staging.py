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

With ``--cache DIR`` the copy is kept for the next run, in ``DIR/copies/<digest of the URL>``,
with the (size, version) of each object it holds: a night when nothing changed fetches nothing
(the listing decides, as for the objects a reader reads in place), and one when an object was
rewritten fetches that object alone (written beside its old copy, then renamed over it: a run
reading the old one keeps it). Objects gone from the listing leave the copy. DIR keeps the
`KEPT_COPIES` most recently used copies.
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

import msgpack
import xxhash

from scrub.errors import UnusableDataset
from scrub.paths import beyond_most_recent
from scrub.storage import Location, remote_errors, version_of
from scrub.storage.memo import current_memo
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
#: copies a cache directory keeps (each a dataset's size: few)
KEPT_COPIES = 4


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
    #: where a copy kept in a cache directory records the version of each object it holds
    #: (None: a copy for this run only)
    kept: Path | None = None
    #: objects (and their bytes) fetched by this run: all of them, but for a kept copy's
    fetched: tuple[int, int] = (0, 0)

    @property
    def bytes(self) -> int:
        return sum(_size_of(info) for info in self.listing.values())

    def remove(self) -> None:
        """Delete the copy; a kept one stays for the next run (what it holds that was not
        fetched whole is not in its versions)."""
        if self.kept is None:
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
        held = f"{counted(len(self.listing), 'object')} ({byte_size(self.bytes)})"
        if self.kept is None:
            return f"{self.url}: {self.why}: {held} copied to local scratch for this run and removed after it"
        count, size = self.fetched
        return (
            f"{self.url}: {self.why}: {held} read from the copy kept in {self.folder.parent.parent}; "
            f"{counted(count, 'object')} ({byte_size(size)}) fetched now, the others unchanged since "
            "it was made"
        )

    def held_versions(self) -> dict[str, list]:
        """Key -> [size, version] of each object a kept copy holds whole (none for another)."""
        if self.kept is None:
            return {}
        try:
            held = msgpack.unpackb(self.kept.read_bytes(), raw=False)
        except (OSError, ValueError, msgpack.UnpackException):
            return {}
        return held if isinstance(held, dict) else {}

    def stale(self) -> list[str]:
        """The keys of the objects to fetch: all of them, but for a kept copy's unchanged ones."""
        held = self.held_versions()
        return [
            key
            for key, info in self.listing.items()
            if held.get(key) != list(version_of(info)) or not self.local(key).is_file()
        ]


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

    url = str(place).rstrip("/")
    key = str(place.path).rstrip("/")
    cache = current_memo().directory  # ``--cache DIR``: the copy is kept there
    kept = _kept_folder(cache, url) if cache is not None else None
    folder = kept.with_suffix("") if kept is not None else Path(scratch_folder("source"))
    copy = StagedCopy(url, key, folder / (url.rsplit("/", 1)[-1] or "dataset"), folder, listing, why, kept)
    if kept is None:
        # `StagedCopy.remove` removes it when the run ends; this is the net for a caller that drops
        # it unclosed (at the latest when this process exits), and the next run's for a killed one
        weakref.finalize(copy, shutil.rmtree, folder, True)
    return copy


def _kept_folder(cache: Path, url: str) -> Path:
    """The versions file of the copy of ``url`` kept in ``cache`` (the copy: beside it, without
    its suffix), marked used; the least recently used copies beyond `KEPT_COPIES` are removed."""
    copies = cache / "copies"
    versions = copies / f"{xxhash.xxh3_64_hexdigest(url.encode())}.versions"
    versions.with_suffix("").mkdir(parents=True, exist_ok=True)
    os.utime(versions.with_suffix(""))
    for stale in beyond_most_recent((p for p in copies.iterdir() if p.is_dir()), KEPT_COPIES):
        shutil.rmtree(stale, ignore_errors=True)
        stale.with_suffix(".versions").unlink(missing_ok=True)
    return versions


def fetch_heads(copy: StagedCopy, place: Location) -> StagedCopy:
    """Make ``copy`` a head mirror (see the module's docstring): what sniffing reads, no more (a
    kept copy's unchanged objects are there whole already)."""
    keys = copy.stale()
    if not keys:
        return copy
    if copy.kept is not None:  # a head is not the object: it is fetched whole before it is held
        _keep_versions(copy, {k: v for k, v in copy.held_versions().items() if k not in set(keys)})
    ends = [
        _size_of(copy.listing[key]) if _size_of(copy.listing[key]) <= SMALL_OBJECT else HEAD_BYTES
        for key in keys
    ]
    try:
        with remote_errors(place):
            heads = place.fs.cat_ranges(keys, [0] * len(keys), ends, on_error="return")
        for key, head in zip(keys, heads):
            info, local = copy.listing[key], copy.local(key)
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
    """Fetch every object of ``copy`` whole (a kept copy's changed ones), once the disk is known
    to hold them. Each is fetched beside its place, then renamed there."""
    remote = copy.stale()
    needed = sum(_size_of(copy.listing[key]) for key in remote)
    free = shutil.disk_usage(copy.folder).free
    if needed + SPARE_BYTES > free:
        copy.remove()
        where = copy.folder.parent.parent if copy.kept is not None else tempfile.gettempdir()
        raise UnusableDataset(
            f"{copy.url}: {copy.why}, and copying its "
            f"{byte_size(needed)} needs more than the {byte_size(free)} free in {where}: "
            "set TMPDIR (or --cache) to a larger disk, or copy the dataset down first"
        )
    local = [copy.local(key) for key in remote]
    fetched = [path.with_name(f".{path.name}.fetched") for path in local]
    try:
        for path in {path.parent for path in local}:
            path.mkdir(parents=True, exist_ok=True)
        with remote_errors(place):
            place.fs.get(remote, [str(path) for path in fetched])
        for key, path, part in zip(remote, local, fetched):
            _take_time(part, copy.listing[key])
            os.replace(part, path)
    except BaseException:
        for part in fetched:
            part.unlink(missing_ok=True)
        copy.remove()
        raise
    copy.fetched = (len(remote), needed)
    if copy.kept is not None:
        _leave_only_listed(copy)
        _keep_versions(copy, {key: list(version_of(info)) for key, info in copy.listing.items()})
    return copy


def _leave_only_listed(copy: StagedCopy) -> None:
    """Remove from a kept copy the files of objects no longer listed (an HDF5 file deleted from
    the prefix must not stay a file of the dataset)."""
    listed = {str(copy.local(key)) for key in copy.listing}
    for directory, _, files in os.walk(copy.folder):
        for name in files:
            if os.path.join(directory, name) not in listed:
                os.unlink(os.path.join(directory, name))


def _keep_versions(copy: StagedCopy, held: dict[str, list]) -> None:
    """Record what a kept copy holds whole (key -> [size, version])."""
    from scrub.fixing.outputs import write_atomically

    assert copy.kept is not None
    write_atomically(copy.kept, msgpack.packb(held, use_bin_type=True), "cache file")


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
