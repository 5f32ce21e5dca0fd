"""The quarantine manifest: JSON Lines, one issue per line.

Fields: ``source``, ``key``, ``index``, ``check``, ``severity``, ``message``, ``details``
(see docs/outputs.md). The file is written to a temporary sibling and renamed into place when the
scan completes, so a manifest on disk is always a whole one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from scrub.errors import ScrubError, first_line
from scrub.outputs import new_file_mode, temporary_file, write_atomically, write_failure
from scrub.records import Issue
from scrub.storage import is_url

MANIFEST_SUFFIX = ".scrub.jsonl"
#: the ``kind`` of the record beside a NaN guard's manifest (`scrub.guard`): its records are named,
#: not fingerprinted (a scan's record has no kind)
GUARD_KIND = "guard"


def default_manifest(dataset: str | Path) -> Path:
    """Where a scan's manifest goes when none is named: ``NAME.scrub.jsonl`` in the working
    directory, NAME the dataset's file or folder name, so that scans of different datasets
    from one folder do not overwrite each other's; beside the dataset when the working
    directory is inside it (scrub never writes into a dataset)."""
    if is_url(dataset):  # an object's: in the working directory, named after it
        return Path((PurePosixPath(str(dataset).split("://", 1)[1]).name or "dataset") + MANIFEST_SUFFIX)
    dataset = Path(dataset)
    resolved = dataset.resolve()
    name = (resolved if dataset.name in ("", ".", "..") else dataset).name or "dataset"
    cwd = Path.cwd().resolve()
    if resolved.is_dir() and (cwd == resolved or resolved in cwd.parents):
        return resolved.parent / (name + MANIFEST_SUFFIX)
    return Path(name + MANIFEST_SUFFIX)


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
        """``count`` lines a worker encoded already (see `scrub.results.PartitionResult.lines`)."""
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
