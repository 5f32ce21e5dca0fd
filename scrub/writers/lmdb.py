"""LMDB environments: a new environment with the same keys and byte-identical values.

The source is walked once in key order and each value is appended (``MDB_APPEND``: no page
splits, pages filled densely) to the cleaned environment or to the quarantine's, committed
every ``COMMIT_BYTES``. The new environment has the source's layout (a folder with
``data.mdb``, or a single file) and no lock file. Metadata keys (``__keys__``, ``__len__``,
``num-samples``) are not records; loaders index the records through them (the common
``ImageFolderLMDB``: ``keys = pickle.loads(txn.get(b"__keys__"))``, then ``txn.get(keys[i])``),
so each output gets its own, written after its records: ``__keys__`` the pickled list of the
keys it holds (as the source's list held them: bytes or text, the same pickle protocol),
``__len__`` and ``num-samples`` their count (as text where the source's was text). Reading the
source's pickled metadata means unpickling it: only with ``--allow-pickle``; without it they are
copied unchanged and `fix` says which loader breaks. (Writing a pickle of a list of keys runs nothing.)
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from scrub.fixing.ledger import Ledger, identity_seed
from scrub.manifest import encode_key
from scrub.readers.lmdb import LMDBReader, open_environment
from scrub.readers.values import METADATA_KEYS
from scrub.writers.base import Tally, Verdicts, Writer

COMMIT_BYTES = 64 << 20
MIN_MAP_SIZE = 64 << 20


class LMDBWriter(Writer[LMDBReader]):
    format = "lmdb"

    @property
    def _subdir(self) -> bool:
        return self.source.is_dir()

    @property
    def _data_file(self) -> Path:
        return self.source / "data.mdb" if self._subdir else self.source

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        tally = Tally()
        source_name = self.source.resolve().name
        whole = source_name in verdicts.files
        outputs = {False: _Appender(clean, self._subdir, self._map_size())}
        if quarantine is not None:
            outputs[True] = _Appender(quarantine, self._subdir, self._map_size())
        metadata: dict[bytes, bytes] = {}
        held: dict[bool, list[bytes]] = {side: [] for side in outputs}  # each output's keys, for __keys__
        environment = open_environment(str(self.source.resolve()), self._subdir)  # the reader's own
        try:
            with environment.begin(buffers=True) as transaction:
                # each output's key list is kept only for a __keys__ to rewrite (~key size each)
                listed = transaction.get(b"__keys__") is not None
                records = split_records(transaction.cursor(), verdicts, source_name, whole, tally, metadata)
                for quarantined, key, value in records:
                    if quarantined in outputs:
                        outputs[quarantined].put(key, value)
                        if listed:
                            held[quarantined].append(key)
            if metadata:
                self._write_metadata(metadata, held, outputs, tally)
        finally:
            for output in outputs.values():
                output.close()
        return tally

    def _write_metadata(
        self, metadata: dict[bytes, bytes], held: dict[bool, list[bytes]], outputs: dict, tally: Tally
    ) -> None:
        for side, items in each_outputs_metadata(metadata, held, tally, self.reader.options.allow_pickle):
            for key, value in items:
                outputs[side].put(key, value, append=False)

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        import lmdb

        ledger = Ledger()
        if not target.exists():
            return ledger
        environment = lmdb.open(str(target), subdir=self._subdir, readonly=True, lock=False, max_dbs=0)
        try:
            with environment.begin(buffers=True) as transaction:
                for key_buffer, value in transaction.cursor():
                    key = bytes(key_buffer)
                    seed = (
                        identity_seed("metadata", key.hex())
                        if key in METADATA_KEYS
                        else identity_seed(key.hex())
                    )
                    ledger.add_record(seed, value)
        finally:
            environment.close()
        return ledger

    def _map_size(self) -> int:
        """Room for every value of the source: its data file is an upper bound (plus slack for a
        fuller last page per transaction); the file only grows as pages are used."""
        return max(MIN_MAP_SIZE, 2 * os.path.getsize(self._data_file))


def split_records(
    items: Iterable[tuple[Any, Any]],
    verdicts: Verdicts,
    source_name: str,
    whole: bool,
    tally: Tally,
    metadata: dict[bytes, bytes],
) -> Iterator[tuple[bool, bytes, Any]]:
    """(quarantined, key, value) of a key-value store's records, in key order, each tallied on
    its side; the metadata keys loaders use are collected into ``metadata`` instead (written
    after the records, rewritten: `each_outputs_metadata`). Shared by LMDB and LevelDB."""
    index = 0
    for key, value in items:
        key = bytes(key)
        if key in METADATA_KEYS:
            metadata[key] = bytes(value)
            continue
        quarantined = whole or verdicts.quarantined(source_name, index)
        (tally.quarantined if quarantined else tally.kept).add_record(identity_seed(key.hex()), value)
        if quarantined:
            tally.records_quarantined += 1
        else:
            tally.records_kept += 1
        index += 1
        yield quarantined, key, value


def each_outputs_metadata(
    metadata: dict[bytes, bytes], held: dict[bool, list[bytes]], tally: Tally, allow_pickle: bool | None
) -> list[tuple[bool, list[tuple[bytes, bytes]]]]:
    """Each output's own metadata keys (see the module's docstring): (side, [(key, value)]) for
    the sides ``held`` names, tallied as written, with a note in ``tally`` for what stays the
    source's. Shared by the key-value writers (LMDB, LevelDB)."""
    unchanged: set[bytes] = set()
    sides = []
    for side in held:
        count = tally.records_quarantined if side else tally.records_kept
        items = []
        for key, value in sorted(metadata.items()):
            written = rewritten(key, value, held[side], count, bool(allow_pickle))
            if written is None:
                written = value
                unchanged.add(key)
            items.append((key, written))
            (tally.quarantined if side else tally.kept).add_record(
                identity_seed("metadata", key.hex()), written
            )
            tally.other_files += not side
        sides.append((side, items))
    if unchanged and tally.records_quarantined:
        names = ", ".join(encode_key(k) for k in sorted(unchanged))
        reason = (
            "pickled, and not unpickled without --allow-pickle (rerun with it, for data you trust, "
            "to rewrite them)"
            if not allow_pickle
            else "not in a form scrub rewrites"
        )
        tally.notes.append(
            f"metadata keys copied unchanged ({names}): {reason}; a loader that indexes records "
            "through them (ImageFolderLMDB: keys = pickle.loads(txn.get(b'__keys__'))) sees the "
            "source's keys and count, and fails at the first quarantined key"
        )
    return sides


def rewritten(key: bytes, value: bytes, keys: list[bytes], count: int, allow_pickle: bool) -> bytes | None:
    """The metadata value ``key`` takes in an output holding ``count`` records (``keys``, when
    the source has a ``__keys__``); None to copy it as is."""
    if key in (b"num-samples", b"__len__") and value.strip().isdigit():  # a count as text
        return str(count).encode()
    if not allow_pickle or len(value) < 2 or value[:1] != b"\x80":
        return None
    protocol = value[1]
    try:
        original: Any = pickle.loads(value)  # --allow-pickle: the user trusts this data
    except Exception:
        return None
    if key == b"__len__" and isinstance(original, int):
        return pickle.dumps(count, protocol=protocol)
    if key == b"__keys__" and isinstance(original, list):
        as_text = bool(original) and all(isinstance(item, str) for item in original)
        listed = [k.decode("utf-8", "surrogateescape") for k in keys] if as_text else list(keys)
        return pickle.dumps(listed, protocol=protocol)
    return None


class _Appender:
    """Appends key-ordered items to a new environment, committing every ``COMMIT_BYTES``."""

    def __init__(self, path: Path, subdir: bool, map_size: int) -> None:
        import lmdb

        self.environment = lmdb.open(
            str(path), subdir=subdir, map_size=map_size, lock=False, sync=False, metasync=False, max_dbs=0
        )
        self.transaction = self.environment.begin(write=True)
        self.pending = 0

    def put(self, key: bytes, value, append: bool = True) -> None:
        self.transaction.put(key, value, append=append)
        self.pending += len(key) + len(value)
        if self.pending >= COMMIT_BYTES:
            self.transaction.commit()
            self.transaction = self.environment.begin(write=True)
            self.pending = 0

    def close(self) -> None:
        self.transaction.commit()
        self.environment.sync(True)
        self.environment.close()
