"""LevelDB databases: new databases (cleaned copy, quarantine) with the same keys and byte-identical
values, written in key order in batches; their metadata keys are their own, as the LMDB writer
writes them (`scrub.writers.lmdb.rewritten`). `plyvel` (and so Caffe's LevelDB data layer)
reads both."""

from __future__ import annotations

from pathlib import Path

from scrub.fixing.ledger import Ledger, identity_seed
from scrub.readers.leveldb import LevelDBReader, open_database, plyvel_module
from scrub.readers.values import METADATA_KEYS
from scrub.writers.base import Tally, Verdicts, Writer
from scrub.writers.lmdb import each_outputs_metadata, split_records

BATCH_BYTES = 16 << 20


class LevelDBWriter(Writer[LevelDBReader]):
    format = "leveldb"

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        plyvel = plyvel_module()
        tally = Tally()
        source_name = self.source.resolve().name
        whole = source_name in verdicts.files
        outputs = {False: plyvel.DB(str(clean), create_if_missing=True, error_if_exists=True)}
        if quarantine is not None:
            outputs[True] = plyvel.DB(str(quarantine), create_if_missing=True, error_if_exists=True)
        _, snapshot = open_database(str(self.source.resolve()))  # the reader's own snapshot
        metadata: dict[bytes, bytes] = {}
        held: dict[bool, list[bytes]] = {side: [] for side in outputs}
        listed = snapshot.get(b"__keys__") is not None
        try:
            batches = {side: database.write_batch() for side, database in outputs.items()}
            pending = dict.fromkeys(outputs, 0)
            records = split_records(snapshot.iterator(), verdicts, source_name, whole, tally, metadata)
            for quarantined, key, value in records:
                if quarantined in outputs:
                    batches[quarantined].put(key, value)
                    pending[quarantined] += len(key) + len(value)
                    if listed:
                        held[quarantined].append(key)
                    if pending[quarantined] >= BATCH_BYTES:
                        batches[quarantined].write()
                        batches[quarantined] = outputs[quarantined].write_batch()
                        pending[quarantined] = 0
            if metadata:
                allow_pickle = self.reader.options.allow_pickle
                for side, items in each_outputs_metadata(metadata, held, tally, allow_pickle):
                    for key, value in items:
                        batches[side].put(key, value)
            for batch in batches.values():
                batch.write()
        finally:
            for database in outputs.values():
                database.close()
        return tally

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        plyvel = plyvel_module()
        ledger = Ledger()
        if not target.exists():
            return ledger
        database = plyvel.DB(str(target), create_if_missing=False)
        try:
            for key, value in database.iterator():
                seed = (
                    identity_seed("metadata", key.hex()) if key in METADATA_KEYS else identity_seed(key.hex())
                )
                ledger.add_record(seed, value)
        finally:
            database.close()
        return ledger
