"""The quarantine manifest: JSON Lines, one issue per line.

Fields: ``source``, ``key``, ``index``, ``check``, ``severity``, ``message``, ``details``
(see docs/outputs.md). The file is written to a temporary sibling and renamed into place when the
scan completes, so a manifest on disk is always a whole one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from scrub.errors import ScrubError, first_line
from scrub.fixing.outputs import new_file_mode, temporary_file, write_atomically, write_failure
from scrub.paths import absolute_place, common_folder
from scrub.records import Issue
from scrub.storage import on_this_machine

MANIFEST_SUFFIX = ".scrub.jsonl"
#: the ``kind`` of the record beside a NaN guard's manifest (`scrub.guard`): its records are named,
#: not fingerprinted (a scan's record has no kind)
GUARD_KIND = "guard"


def default_manifest(dataset: str | Path | None, several: Sequence[str] = ()) -> tuple[Path, str | None]:
    """Where a scan's manifest goes when none is named, and a note when it is not the first choice.

    ``NAME.scrub.jsonl`` in the working directory, NAME the dataset's file or folder name (beside
    the dataset when the working directory is inside it: scrub never writes into a dataset); a run
    of ``several`` datasets (their paths) is named after ``dataset`` where one path names them (a
    folder of datasets), else (None) ``datasets``. A default manifest there that holds another
    dataset's scan (its scan record says which) is not replaced: the name takes the folders above
    the dataset, nearest first, until it is free or holds this dataset's scan
    (``nano100k-train.bin.scrub.jsonl`` where ``train.bin.scrub.jsonl`` is ``nano/train.bin``'s),
    and the note says so. A rescan of the same dataset replaces its own manifest quietly.
    """
    folder, parts, identity = _naming(dataset, several)
    first = folder / (parts[-1] + MANIFEST_SUFFIX)
    candidate = first
    for count in range(1, len(parts) + 1):
        candidate = folder / ("-".join(parts[-count:]) + MANIFEST_SUFFIX)
        if not candidate.exists() or _holds_scan_of(candidate, identity):
            if candidate == first:
                return candidate, None
            return candidate, (
                f"{first} holds the scan of {_scanned(first)}: this scan's manifest is {candidate} "
                "(--manifest names one)"
            )
    return candidate, f"{candidate} held the scan of {_scanned(candidate)}: replaced (--manifest names one)"


def _naming(dataset: str | Path | None, several: Sequence[str]) -> tuple[Path, list[str], str]:
    """(the folder a default manifest goes in, the names its name is made of, nearest last,
    the dataset's identity as a scan record holds it: ``absolute_path``, for several datasets
    their common folder's, as `scrub.scanning.summary.Summary.combine` records it)."""
    if several:
        common = common_folder([str(p) for p in several])
        folder, names, identity = _naming(common if dataset is None else dataset, ())
        return folder, [*names, "datasets"] if dataset is None else names, absolute_place(common)
    if dataset is None:  # a path that names no dataset yet: the scan says why, in one line
        return Path(), ["datasets"], ""
    if not on_this_machine(dataset):  # an object's: in the working directory, named after it
        names = [part for part in str(dataset).split("://", 1)[1].split("/") if part]
        return Path(), names or ["dataset"], str(dataset)
    dataset = Path(dataset)
    resolved = dataset.resolve()
    name = (resolved if dataset.name in ("", ".", "..") else dataset).name or "dataset"
    above = [part for part in resolved.parent.parts if part != resolved.anchor]
    cwd = Path.cwd().resolve()
    inside = resolved.is_dir() and (cwd == resolved or resolved in cwd.parents)
    return (resolved.parent if inside else Path()), [*above, name], absolute_place(str(dataset))


def _holds_scan_of(manifest: Path, identity: str) -> bool:
    """Whether ``manifest``'s scan record is of the dataset ``identity`` names."""
    try:
        record = json.loads(scan_record_path(manifest).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # no record: which dataset it holds cannot be told, so it is not replaced
    if not isinstance(record, dict):
        return False
    if "absolute_path" in record:
        return bool(record["absolute_path"] == identity)
    path = str(record.get("path", ""))  # a record from before absolute_path: the scan ran where it lies
    return (
        path == identity or absolute_place(os.path.join(os.path.abspath(manifest.parent), path)) == identity
    )


def _scanned(manifest: Path) -> str:
    """The dataset whose scan ``manifest`` holds, for a note."""
    try:
        record = json.loads(scan_record_path(manifest).read_text(encoding="utf-8"))
        return str(record.get("absolute_path") or record["path"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "a dataset it does not name (no scan record)"


FIELDS = ("source", "key", "index", "check", "severity", "message", "details")
#: fields a line carries only when they apply: ``content`` (rows keyed by position), ``status``
#: (a scan with a baseline), ``dataset`` (a scan of several datasets)
OPTIONAL_FIELDS = ("content", "status", "dataset")


def encode_key(key: str | bytes) -> str:
    """Keys as text: UTF-8 where valid, else ``hex:<hex>`` of the raw bytes.

    File names that are not valid UTF-8 reach Python as ``str`` with surrogate escapes; their
    bytes are recovered with ``os.fsencode``.
    """
    if isinstance(key, str):
        if key.isascii():
            return key
        try:
            key.encode("utf-8")
            return key
        except UnicodeEncodeError:
            key = os.fsencode(key)
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return "hex:" + key.hex()


def json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # NumPy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (bytes, bytearray)):
        return encode_key(bytes(value))
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def encode_line(issue: Issue) -> bytes:
    """One manifest line, newline included, as UTF-8 bytes. orjson: many times faster than the
    standard library's encoder (see docs/benchmarks.md, "Design measurements"), which a scan of
    ten million findings feels; a string it refuses (a lone surrogate from an undecodable file
    name) falls back to the standard library's ASCII escapes, which read back to the same text."""
    line = issue.to_dict()
    line["source"], line["key"] = encode_key(issue.source), encode_key(issue.key)
    try:
        return orjson.dumps(line, default=json_default, option=LINE_OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        return (json.dumps(line, default=json_default) + "\n").encode("ascii")


LINE_OPTIONS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def dumps(issue: Issue) -> str:
    """One manifest line as text, without its newline."""
    return encode_line(issue)[:-1].decode("utf-8")


class ManifestWriter:
    """Streams issues to a temporary file; `commit` moves it into place."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            handle, temporary = temporary_file(self.path)
        except OSError as error:
            raise write_failure(error, self.path, "manifest") or ScrubError(
                f"{self.path}: cannot write the manifest: {error.strerror}"
            ) from None
        self._temporary = Path(temporary)
        self._file = os.fdopen(handle, "wb", buffering=1 << 20)
        self.count = 0

    def write(self, issue: Issue) -> None:
        try:
            self._file.write(encode_line(issue))
        except OSError as error:
            raise self._failed(error) from None
        self.count += 1

    def write_lines(self, lines: Iterable[bytes], count: int) -> None:
        """``count`` lines a worker encoded already (see `scrub.scanning.results.PartitionResult.lines`)."""
        try:
            self._file.writelines(lines)
        except OSError as error:
            raise self._failed(error) from None
        self.count += count

    def commit(self) -> Path:
        try:
            self._file.close()
            os.chmod(self._temporary, new_file_mode())
            os.replace(self._temporary, self.path)
        except OSError as error:
            raise self._failed(error) from None
        return self.path

    def _failed(self, error: OSError) -> ScrubError:
        return write_failure(error, self.path, "manifest") or ScrubError(
            f"{self.path}: cannot write the manifest: {first_line(error)}"
        )

    def discard(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass  # a full disk fails the last flush too: the file goes anyway
        self._temporary.unlink(missing_ok=True)


def scan_record_path(manifest: Path) -> Path:
    """Where the scan record of a manifest lives: ``NAME.scan.json`` beside ``NAME.jsonl``."""
    manifest = Path(manifest)
    return manifest.with_name(manifest.stem + ".scan.json")


def write_scan_record(manifest: Path, summary: dict[str, Any]) -> Path:
    """Write the scan's summary (with the dataset fingerprint) beside its manifest, atomically."""
    path = scan_record_path(manifest)
    write_atomically(path, (json.dumps(summary, indent=2) + "\n").encode("utf-8"))
    return path


def read_scan_record(manifest: Path) -> dict[str, Any]:
    """The scan record written beside ``manifest``; a one-line error when it is missing."""
    path = scan_record_path(manifest)
    if not Path(manifest).is_file():
        raise ScrubError(f"{manifest}: no such manifest")
    missing = ScrubError(
        f"{manifest}: its scan record {path.name} is missing, so scrub cannot tell which dataset it "
        "describes; run the scan again (or run fix without --manifest)"
    )
    return read_json_record(path, "a scrub scan record", "fingerprint", missing)


def read_json_record(path: Path, what: str, needs: str, missing: ScrubError) -> dict[str, Any]:
    """A JSON object scrub wrote beside its outputs (a scan record, a fix record), or a one-line
    error: ``missing`` when there is no such file, else one saying it is not ``what``."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise missing from None
    except (OSError, ValueError) as error:
        raise ScrubError(f"{path}: not {what} ({first_line(error)})") from None
    if not isinstance(record, dict) or needs not in record:
        raise ScrubError(f"{path}: not {what} (no {needs})")
    return record


def read_manifest(path: Path) -> Iterator[Issue]:
    """The issues of a manifest, in file order."""
    with open(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield Issue.from_dict(orjson.loads(line))
            except (ValueError, KeyError, TypeError) as error:
                raise ScrubError(f"{path}:{number}: not a scrub manifest line ({error})") from None
