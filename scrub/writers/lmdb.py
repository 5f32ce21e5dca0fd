"""LMDB environments: a new environment with the same keys and byte-identical values.

The source is walked once in key order and each value is appended (``MDB_APPEND``: no page
splits, pages filled densely) to the cleaned environment or to the quarantine's, committed
every ``COMMIT_BYTES``. The new environment has the source's layout (a folder with
``data.mdb``, or a single file) and no lock file. Metadata keys (``__keys__``, ``__len__``,
``num-samples``) are not records: they are copied into the cleaned copy unchanged, and `fix`
warns that a loader trusting them will see the old count.
"""

from __future__ import annotations

import os
from pathlib import Path

from scrub.ledger import Ledger, identity_seed
from scrub.manifest import encode_key
from scrub.readers.lmdb import METADATA_KEYS, open_environment
from scrub.writers.base import Tally, Verdicts, Writer

COMMIT_BYTES = 64 << 20
MIN_MAP_SIZE = 64 << 20


class LMDBWriter(Writer):
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
        metadata: list[bytes] = []
        environment = open_environment(str(self.source.resolve()), self._subdir)  # the reader's own
        try:
            with environment.begin(buffers=True) as transaction:
                index = 0
                for key, value in transaction.cursor():
                    key = bytes(key)
                    if key in METADATA_KEYS:
                        metadata.append(key)
                        tally.kept.add_record(identity_seed("metadata", key.hex()), value)
                        outputs[False].put(key, value)
                        tally.other_files += 1
                        continue
                    quarantined = whole or verdicts.quarantined(source_name, index)
                    (tally.quarantined if quarantined else tally.kept).add_record(
                        identity_seed(key.hex()), value
                    )
                    if quarantined in outputs:
                        outputs[quarantined].put(key, value)
                    if quarantined:
                        tally.records_quarantined += 1
                    else:
                        tally.records_kept += 1
                    index += 1
        finally:
            for output in outputs.values():
                output.close()
        if metadata and tally.records_quarantined:
            names = ", ".join(encode_key(k) for k in metadata)
            tally.notes.append(
                f"metadata keys copied unchanged ({names}): a loader that trusts them will see the old "
                "record count"
            )
        return tally

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


class _Appender:
    """Appends key-ordered items to a new environment, committing every ``COMMIT_BYTES``."""

    def __init__(self, path: Path, subdir: bool, map_size: int) -> None:
        import lmdb

        self.environment = lmdb.open(
            str(path), subdir=subdir, map_size=map_size, lock=False, sync=False, metasync=False, max_dbs=0
        )
        self.transaction = self.environment.begin(write=True)
        self.pending = 0

    def put(self, key: bytes, value) -> None:
        self.transaction.put(key, value, append=True)
        self.pending += len(key) + len(value)
        if self.pending >= COMMIT_BYTES:
            self.transaction.commit()
            self.transaction = self.environment.begin(write=True)
            self.pending = 0

    def close(self) -> None:
        self.transaction.commit()
        self.environment.sync(True)
        self.environment.close()
