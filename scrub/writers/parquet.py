"""Parquet files: each source file becomes a file of the same name (a folder stays a folder,
sub-folders kept) holding its kept rows, in order, with the source's schema and its metadata
(Hugging Face's ``features`` included), compression codec and row groups (each source row group
becomes one, minus its set-aside rows); the quarantine holds files of the set-aside rows.
`pyarrow` (and so ``datasets``, pandas, Spark) reads every output. Rows are checksummed over
every column (`scrub.ledger.row_digests`: numbers by their bytes, other values by their text),
whatever columns the scan checked."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from scrub.ledger import Ledger, identity_seed, row_digests, row_values
from scrub.readers.parquet import ParquetReader, ParquetStorage, pyarrow_modules
from scrub.writers.base import Tally, Verdicts, Writer


class ParquetWriter(Writer[ParquetReader]):
    format = "parquet"

    def _targets(self, output: Path) -> list[tuple[Path, str, Path]]:
        """(source file, its source name, its output) for every file."""
        if not self.source.is_dir():
            return [(self.source, self.source.name, output)]
        return [
            (path, self.reader.source_of(path), output / self.reader.source_of(path))
            for path in self.reader.files()
        ]

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        pyarrow_modules()
        tally = Tally()
        storage = self.reader.storage
        quarantines = {path: target for path, _, target in self._targets(quarantine)} if quarantine else {}
        for path, source, target in self._targets(clean):
            schema, sizes, described = storage.facts(path)
            outputs = {False: target}
            if path in quarantines:
                outputs[True] = quarantines[path]
            writers: dict[bool, Any] = {}
            try:
                for side, output in outputs.items():
                    output.parent.mkdir(parents=True, exist_ok=True)
                    writers[side] = self._new_file(output, path, schema, described)
                first = 0
                for _, table in storage.groups(str(path), range(len(sizes)), None):
                    rows = np.arange(first, first + table.num_rows)
                    set_aside = np.fromiter(
                        (verdicts.quarantined(source, int(row)) for row in rows),
                        dtype=bool,
                        count=len(rows),
                    )
                    values = _row_values(source, rows, table)
                    tally.kept.add_values(values[~set_aside])
                    tally.quarantined.add_values(values[set_aside])
                    tally.records_quarantined += int(set_aside.sum())
                    tally.records_kept += int((~set_aside).sum())
                    for side, writer in writers.items():
                        part = table.filter(set_aside if side else ~set_aside)
                        if part.num_rows:  # one row group (record batch) per source one
                            writer.write_table(part, part.num_rows)
                    first += table.num_rows
            finally:
                for writer in writers.values():
                    writer.close()
        if self.source.is_dir():
            tally.other_files += self._copy_other_files(clean)
        return tally

    def _new_file(self, output: Path, source: Path, schema: Any, described: dict[str, Any]) -> Any:
        """A writer of a new file like ``source``: its schema (and metadata), codec, and for
        Arrow its IPC form (file or stream)."""
        import pyarrow as pa

        _, parquet = pyarrow_modules()
        if self.reader.storage is ParquetStorage:
            with parquet.ParquetFile(source) as opened:
                codec = _codec(opened.metadata)
            return parquet.ParquetWriter(output, schema, compression=codec)
        if described.get("ipc") == "file":
            return pa.ipc.new_file(str(output), schema)
        return pa.ipc.new_stream(str(output), schema)

    def _copy_other_files(self, clean: Path) -> int:
        """Files of a dataset folder that are not Parquet (a Hugging Face README.md, its
        dataset_info.json), copied unchanged into the cleaned copy."""
        copied = 0
        for path in sorted(self.source.rglob("*")):
            relative = path.relative_to(self.source)
            if (
                path.is_file()
                and path.suffix != self.reader.storage.suffix
                and not any(p.startswith(".") for p in relative.parts)
            ):
                (clean / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, clean / relative)
                copied += 1
        return copied

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        pyarrow_modules()
        storage = self.reader.storage
        ledger = Ledger()
        if not target.exists():
            return ledger
        for path, source, output in self._targets(target):
            if not output.exists():
                continue
            rows = sum(storage.facts(path)[1])
            wanted = np.array(
                [row for row in range(rows) if verdicts.quarantined(source, row) == (side == "quarantine")],
                dtype=np.int64,
            )
            _, written, _ = storage.facts(output)
            if sum(written) != len(wanted):  # a row lost or added: the sums cannot match
                ledger.add_values(np.zeros(1, np.uint64))
            first = 0
            for _, table in storage.groups(str(output), range(len(written)), None):
                ledger.add_values(_row_values(source, wanted[first : first + table.num_rows], table))
                first += table.num_rows
        return ledger


def _row_values(source: str, rows: np.ndarray, table: Any) -> np.ndarray:
    """The ledger values of a table's rows (``rows``: their positions in the source file), over
    every column."""
    digests = []
    for column in table.columns:
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        if _fixed_width(array.type):  # by their bytes, and whether each is null (the same with or
            # without nulls elsewhere in the column: a filtered copy may have none)
            valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=np.uint8)
            values = (
                array.fill_null(0).to_numpy(zero_copy_only=False) if array.null_count else array.to_numpy()
            )
            digests.append(row_digests(np.asarray(values).reshape(len(array), 1)))
            digests.append(row_digests(valid.reshape(len(array), 1)))
        else:
            cells = np.empty(len(array), dtype=object)
            for row, cell in enumerate(array.to_pylist()):
                cells[row] = cell
            digests.append(row_digests(cells))
    return row_values(identity_seed(source), rows[: table.num_rows], digests)


def _codec(metadata: Any) -> str:
    """The source's compression codec, as ParquetWriter names it."""
    if not (metadata.num_row_groups and metadata.num_columns):
        return "snappy"
    codec = metadata.row_group(0).column(0).compression.lower()
    return {"uncompressed": "none", "lz4_raw": "lz4"}.get(codec, codec)


def _fixed_width(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


class ArrowWriter(ParquetWriter):
    format = "arrow"
