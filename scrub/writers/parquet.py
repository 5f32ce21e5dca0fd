"""Parquet files: each source file becomes a file of the same name (a folder stays a folder,
sub-folders kept) holding its kept rows, in order, with the source's schema and its metadata
(Hugging Face's ``features`` included), compression codec and row groups (each source row group
becomes one, minus its set-aside rows); the quarantine holds files of the set-aside rows.
`pyarrow` (and so ``datasets``, pandas, Spark) reads every output. Rows are checksummed over
every column (`scrub.fixing.ledger.row_digests`: numbers by their bytes, other values by their text),
whatever columns the scan checked.

A Hugging Face ``save_to_disk`` folder (``state.json``, ``dataset_info.json`` beside its
``data-0000x-of-0000N.arrow`` files; a ``DatasetDict``'s ``dataset_dict.json`` above its splits)
stays one that ``datasets.load_from_disk`` loads, in the cleaned copy and in the quarantine
alike: every data file is written (empty where no row is left), and each ``state.json`` gets a
fingerprint of its own (``datasets`` keys its caches by it: the source's would name other rows)
and its ``dataset_info.json`` the split's new ``num_examples`` and ``num_bytes``. A Hub dataset
card (``README.md`` whose YAML header's ``dataset_info`` lists the splits' sizes, which
``datasets.load_dataset`` verifies) gets the cleaned copy's sizes, each split's files found by
the card's ``configs`` patterns (else by the split's name in the file's path).

A Parquet file of a folder that pyarrow cannot open (``unreadable-file``) holds no row to keep:
it is copied byte for byte into the quarantine, and left out of the cleaned copy."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from scrub.fixing.ledger import Ledger, identity_seed, row_digests, row_values
from scrub.readers.parquet import (
    ArrowStorage,
    ParquetReader,
    ParquetStorage,
    pyarrow_modules,
)
from scrub.readers.savedtodisk import (
    DICTIONARY,
    INFO,
    damaged_descriptions,
    data_file_names,
    rebuilt_info,
    rebuilt_state,
    state_files,
)
from scrub.readers.tablecontents import huggingface_features
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
        #: per output file: (rows, bytes of Arrow data) written; per source: the rows set aside
        self.written: dict[Path, list[int]] = {}
        self.set_aside: dict[str, list[np.ndarray]] = {}
        quarantines = {path: target for path, _, target in self._targets(quarantine)} if quarantine else {}
        unreadable = self._unreadable()
        for path, source, target in self._targets(clean):
            if source in unreadable:  # no row to split: the file goes to the quarantine as it is
                tally.forced += [] if source in verdicts.files else [f"{source}: {unreadable[source]}"]
                _tally_file(tally.quarantined, source, path)
                if path in quarantines:
                    quarantines[path].parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, quarantines[path])
                continue
            schema, sizes, described, _ = storage.facts(path)
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
                    self.set_aside.setdefault(source, []).append(rows[set_aside])
                    for side, writer in writers.items():
                        part = table.filter(set_aside if side else ~set_aside)
                        if part.num_rows:  # one row group (record batch) per source one
                            writer.write_table(part, part.num_rows)
                            counted = self.written.setdefault(outputs[side], [0, 0])
                            counted[0] += part.num_rows
                            counted[1] += part.nbytes
                    first += table.num_rows
            finally:
                for writer in writers.values():
                    writer.close()
        if self.source.is_dir():
            tally.other_files += self._copy_other_files(clean)
            self._saved_to_disk(clean, "clean")
            tally.notes += [
                f"{name} could not be read (unreadable-file): the cleaned copy's is written from its "
                "data files, so that datasets.load_from_disk loads it"
                for name in damaged_descriptions(self.source)
            ]
            self._dataset_card(clean)
            if quarantine is not None:
                self._saved_to_disk(quarantine, "quarantine")
        return tally

    def _unreadable(self) -> dict[str, str]:
        """The files the reader could not open (`unreadable-file`), by source, with why: they
        are set aside whole, whatever the threshold (they hold no row to keep)."""
        return {issue.source: issue.message for issue in self.info.issues if issue.check == "unreadable-file"}

    def _saved_to_disk(self, output: Path, side: str) -> None:
        """Each ``save_to_disk`` folder's description in ``output``, as `datasets` would write it
        for the rows written there (see the module's docstring)."""
        damaged = damaged_descriptions(self.source)
        for state_path in state_files(self.source):
            relative = state_path.parent.relative_to(self.source)
            names = data_file_names(state_path)
            if names is not None:
                state = json.loads(state_path.read_text(encoding="utf-8"))
            elif self.reader.storage is ArrowStorage:  # damaged: written for the data files there
                names = sorted(path.name for path in state_path.parent.glob("*.arrow"))
                state = rebuilt_state(names, "")
            else:
                continue  # not datasets' state beside Parquet files: copied as it is
            folder = output / relative
            counts = [self.written.get(folder / name, [0, 0]) for name in names]
            seed = xxhash.xxh64(f"{state.get('_fingerprint')}:{side}".encode())
            for name in names:
                source = (relative / name).as_posix()
                for rows in self.set_aside.get(source, []):
                    seed.update(source.encode())
                    seed.update(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
            state["_fingerprint"] = seed.hexdigest()
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
            info_path = state_path.parent / INFO
            info: Any = None
            if info_path.relative_to(self.source).as_posix() in damaged:
                if names and self.reader.storage is ArrowStorage:  # from the data files' schema
                    schema, *_ = ArrowStorage.facts(state_path.parent / names[0])
                    info = rebuilt_info(huggingface_features(schema))
            elif info_path.is_file():
                info = json.loads(info_path.read_text(encoding="utf-8"))
            if isinstance(info, dict):
                _count_split(info, state.get("_split"), sum(c[0] for c in counts), sum(c[1] for c in counts))
                (folder / INFO).write_text(json.dumps(info, indent=2, sort_keys=True), encoding="utf-8")
        dictionary = self.source / DICTIONARY
        if DICTIONARY in damaged:  # a DatasetDict's list of splits, from its split folders
            splits = [path.parent.relative_to(self.source).as_posix() for path in state_files(self.source)]
            (output / DICTIONARY).write_text(json.dumps({"splits": splits}), encoding="utf-8")
        elif side == "quarantine" and dictionary.is_file():  # a DatasetDict: its splits' list
            shutil.copyfile(dictionary, output / DICTIONARY)

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

    def _dataset_card(self, clean: Path) -> None:
        """The cleaned copy's ``README.md`` with its splits' sizes (see the module's docstring)."""
        import yaml

        card = clean / "README.md"
        try:
            text = card.read_text(encoding="utf-8")
        except OSError:
            return
        match = re.match(r"---\r?\n(.*?\r?\n)---(\r?\n|$)", text, re.DOTALL)
        if match is None:
            return
        try:
            header = yaml.safe_load(match.group(1))
        except yaml.YAMLError:
            return
        if not isinstance(header, dict):
            return
        infos = header.get("dataset_info")
        configs: list[Any] = header["configs"] if isinstance(header.get("configs"), list) else []
        changed = False
        for info in infos if isinstance(infos, list) else [infos]:
            if not isinstance(info, dict) or not isinstance(info.get("splits"), list):
                continue
            name = info.get("config_name", "default")
            config = next((c for c in configs if isinstance(c, dict) and c.get("config_name") == name), None)
            splits = [entry for entry in info["splits"] if isinstance(entry, dict) and "name" in entry]
            for entry in splits:
                files = self._split_files(clean, str(entry["name"]), config, len(splits) == 1)
                rows = sum(self.written.get(path, [0, 0])[0] for path in files)
                size = sum(self.written.get(path, [0, 0])[1] for path in files)
                if entry.get("num_examples") != rows:
                    before = entry.get("num_bytes")
                    entry["num_examples"], entry["num_bytes"] = rows, size
                    if isinstance(before, int) and isinstance(info.get("dataset_size"), int):
                        info["dataset_size"] += size - before
                    changed = True
        if changed:
            dumped = yaml.safe_dump(header, sort_keys=False, allow_unicode=True)
            card.write_text(f"---\n{dumped}---\n{text[match.end() :]}", encoding="utf-8")

    def _split_files(self, clean: Path, split: str, config: Any, only: bool) -> list[Path]:
        """The cleaned copy's data files of a split: by its config's ``data_files`` patterns, else
        by the split's name in their path (``data/train-00000-of-00002.parquet``), else all of them
        where the card lists one split."""
        outputs = [
            (self.reader.source_of(path), clean / self.reader.source_of(path)) for path in self.reader.files()
        ]
        patterns: list[str] = []
        data_files = config.get("data_files") if isinstance(config, dict) else None
        for entry in data_files if isinstance(data_files, list) else [data_files] if data_files else []:
            if isinstance(entry, dict) and entry.get("split") == split:
                paths = entry.get("path")
                patterns += (
                    [paths] if isinstance(paths, str) else [p for p in paths or [] if isinstance(p, str)]
                )
            elif isinstance(entry, str) and split == "train":
                patterns.append(entry)
        if patterns:
            return [out for name, out in outputs if any(fnmatch.fnmatch(name, p) for p in patterns)]
        named = re.compile(rf"(^|[/_.-]){re.escape(split)}([/_.-]|$)")
        found = [out for name, out in outputs if named.search(name)]
        return found or ([out for _, out in outputs] if only else [])

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        pyarrow_modules()
        storage = self.reader.storage
        ledger = Ledger()
        if not target.exists():
            return ledger
        unreadable = self._unreadable()
        for path, source, output in self._targets(target):
            if not output.exists():
                continue
            if source in unreadable:  # set aside whole (`write`): its bytes, wherever it landed
                _tally_file(ledger, source, output)
                continue
            rows = sum(storage.facts(path)[1])
            wanted = np.array(
                [row for row in range(rows) if verdicts.quarantined(source, row) == (side == "quarantine")],
                dtype=np.int64,
            )
            _, written, *_ = storage.facts(output)
            if sum(written) != len(wanted):  # a row lost or added: the sums cannot match
                ledger.add_values(np.zeros(1, np.uint64))
            first = 0
            for _, table in storage.groups(str(output), range(len(written)), None):
                ledger.add_values(_row_values(source, wanted[first : first + table.num_rows], table))
                first += table.num_rows
        return ledger


def _tally_file(ledger: Ledger, source: str, path: Path) -> None:
    """A file set aside whole, by its bytes (as the HDF5 writer tallies one)."""
    ledger.add_file(identity_seed("file", source), str(path))


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


def _count_split(info: dict[str, Any], split: Any, rows: int, size: int) -> None:
    """Set ``split``'s rows and bytes in a ``dataset_info.json`` (and the totals that add them up)."""
    splits = info.get("splits")
    if not isinstance(splits, dict) or not isinstance(splits.get(split), dict):
        return
    entry = splits[split]
    before = entry.get("num_bytes")
    entry["num_examples"], entry["num_bytes"] = rows, size
    if isinstance(before, int):
        for total in ("dataset_size", "size_in_bytes"):
            if isinstance(info.get(total), int):
                info[total] += size - before


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
