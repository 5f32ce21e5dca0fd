"""HDF5 datasets: new files with the same structure, the quarantined rows removed.

For each source file, the cleaned copy holds every object of the source. The *row-aligned*
datasets -- data, and every other dataset of the file with as many rows (label, sample
weights, ids: removing a data row without its weight would shift every later pairing) -- are
re-created with the same dtype, chunk shape, filters (compression, shuffle, fletcher32,
scale-offset, third-party filters: the whole creation property list is reused), fill value
and attributes, and receive the kept rows in order. Every other group, dataset and attribute
is copied unchanged (``H5Ocopy``). A fixed maximum row count becomes the new row count, or
unlimited when fewer rows remain than one chunk holds (HDF5 requires it). Attributes holding
object references (dimension scales) are not copied: they would point into the source file.

A record's checksum covers its row in every row-aligned dataset (see `scrub.fixing.ledger`). The
quarantine holds, per file with quarantined rows, a file with only the row-aligned datasets
(same creation properties) plus ``scrub_source_row``: each row's index in the source (a
single-file source always gets one, possibly with no rows). A file with a dataset-level
problem (a row-count mismatch, a link leaving the root, a file that does not open) cannot be
split row by row: it goes to the quarantine whole, copied byte for byte.

Rows are read in chunk-aligned blocks and written in whole chunks, so compressed chunks are
never rewritten and memory stays at a few blocks. Plain chunks (no filters, chunked in whole
rows) are written as their bytes: where the source has no fill value of its own, the output's
chunks are allocated when the dataset is created and never filled (HDF5's ``alloc_time`` early,
``fill_time`` never: the only creation properties that differ from the source's) and written by
``pwrite`` beside a helper thread reading the next block (much faster than h5py's chunk writes,
which hold the GIL: see docs/benchmarks.md, "Design measurements"); else by
``write_direct_chunk``. The outputs are then read back through HDF5's own chunk index to check
their ledger: a chunk at a wrong offset fails the fix.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections import defaultdict
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import xxhash

from scrub.fixing.ledger import Ledger, identity_seed, row_digests, row_values
from scrub.paths import is_within
from scrub.readers.hdf5 import (
    BLOCK_BYTES,
    PLAIN_KINDS,
    HDF5Reader,
    chunk_addresses,
    is_hdf5_file,
    piece_plan,
    plain_layout,
    read_rows,
    round_up,
    row_bytes_of,
    row_slabs,
    slab_shape,
)
from scrub.writers.base import Tally, Verdicts, Writer

SOURCE_ROW = "scrub_source_row"
#: dataset-level problems after which a file cannot be split row by row
WHOLE_FILE_CHECKS = frozenset({"unsafe-path", "missing-file", "row-count-mismatch", "unreadable-file"})


class HDF5Writer(Writer[HDF5Reader]):
    format = "hdf5"
    unsafe_after_write_failure = True  # HDF5 segfaults closing a file whose writes failed (measured)

    def __init__(self, dataset: Any, run: Any = None) -> None:
        super().__init__(dataset, run)
        self._aligned: dict[str, list[str]] = {}  # relative name -> row-aligned dataset paths

    @property
    def data_key(self) -> str:
        return self.reader.options.data_key or "data"

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        tally = Tally()
        whole = self._whole_sources(verdicts)
        reasons: dict[str, str] = {}  # the first reader issue of each file set aside without a verdict
        for issue in self.info.issues:
            if issue.check in WHOLE_FILE_CHECKS and issue.source not in verdicts.files:
                reasons.setdefault(issue.source, f"{issue.source}: {issue.message}")
        tally.forced += reasons.values()
        rows_by_source = self._rows_by_source()
        quarantined_rows = _group(verdicts.records)
        lists: dict[bool, TextIO] = {}  # the new list files (clean: False, quarantine: True)
        if self.output_is_folder:
            clean.mkdir()
            if quarantine is not None:
                quarantine.mkdir()
        with contextlib.ExitStack() as open_lists:
            if self.info.listed:
                lists[False] = open_lists.enter_context(open(clean / self.source.name, "w", encoding="utf-8"))
                if quarantine is not None:
                    lists[True] = open_lists.enter_context(
                        open(quarantine / self.source.name, "w", encoding="utf-8")
                    )
            for source, path in self.reader.listed:
                relative = self._relative(source)
                rows = rows_by_source.get(source, 0)
                if source in whole:
                    name, inside = self._whole_file_name(source, path)
                    tally.records_quarantined += rows
                    _tally_file(tally.quarantined, name, path, inside)
                    if quarantine is not None:
                        if inside and os.path.isfile(path):
                            shutil.copy2(path, self._output_file(quarantine, relative))
                        if True in lists:
                            lists[True].write(name + "\n")
                    continue
                bad = np.array(sorted(quarantined_rows.get(source, ())), dtype=np.int64)
                bad = bad[bad < rows]
                self._split(path, relative, rows, bad, clean, quarantine, tally)
                if lists:
                    lists[False].write(relative + "\n")
                    if len(bad) and True in lists:
                        lists[True].write(relative + "\n")
        return tally

    def _whole_sources(self, verdicts: Verdicts) -> set[str]:
        """Sources set aside whole: named by a dataset-level verdict, or that the reader could
        not split into rows (those whatever the threshold: `Tally.forced`)."""
        return set(verdicts.files) | {i.source for i in self.info.issues if i.check in WHOLE_FILE_CHECKS}

    def _rows_by_source(self) -> dict[str, int]:
        rows: dict[str, int] = defaultdict(int)
        for partition in self.dataset.partitions:
            rows[partition.source] = max(rows[partition.source], partition.stop)
        return rows

    def _relative(self, source: str) -> str:
        """A source's path relative to the root, as the outputs name it."""
        if not self.info.listed:
            return source
        root = self.reader.root
        return os.path.relpath(os.path.normpath(os.path.join(root, source)), root).replace(os.sep, "/")

    def _whole_file_name(self, source: str, path: str) -> tuple[str, bool]:
        """How a file set aside whole is named in the outputs, and whether it lies inside the
        root. One outside it (a list line ``../x.h5``) is never read or copied: its line is
        kept verbatim."""
        inside = is_within(os.path.realpath(path), os.path.realpath(self.reader.root))
        return (self._relative(source) if inside else source), inside

    def _output_file(self, target: Path, relative: str) -> Path:
        if not self.output_is_folder:
            return target
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _split(
        self,
        path: str,
        relative: str,
        rows: int,
        bad: np.ndarray,
        clean: Path,
        quarantine: Path | None,
        tally: Tally,
    ) -> None:
        import h5py

        with h5py.File(path, "r") as source:
            aligned = _row_aligned(source, source[self.data_key])
            self._aligned[relative] = [d.name for d in aligned]
            with h5py.File(self._output_file(clean, relative), "w", libver=source.libver) as out:
                _copy_tree(source, out, {d.name for d in aligned})
                kept = _Sinks(out, aligned, rows - len(bad))
                held_file = held = None
                if quarantine is not None and (len(bad) or not self.output_is_folder):
                    held_file = h5py.File(self._output_file(quarantine, relative), "w", libver=source.libver)
                try:
                    if held_file is not None:
                        held = _Sinks(held_file, aligned, len(bad), with_source_rows=True)
                    seed = identity_seed(relative)
                    if _has_big_rows(aligned):
                        _split_big_rows(aligned, rows, bad, seed, kept, held, tally)
                    else:
                        self._split_blocks(aligned, rows, bad, seed, kept, held, tally)
                    kept.close()
                    if held is not None:
                        held.close()
                finally:
                    if held_file is not None:
                        held_file.close()
        tally.records_kept += rows - len(bad)
        tally.records_quarantined += len(bad)

    @staticmethod
    def _split_blocks(
        aligned: list,
        rows: int,
        bad: np.ndarray,
        seed: int,
        kept: "_Sinks",
        held: "_Sinks | None",
        tally: Tally,
    ) -> None:
        with contextlib.closing(_blocks(aligned, rows)) as read:  # its helper thread ends here
            for begin, blocks, digests in read:
                mask = _keep_mask(begin, len(blocks[0]), bad)
                values = row_values(seed, np.arange(begin, begin + len(mask)), digests)
                tally.kept.add_values(values[mask])
                tally.quarantined.add_values(values[~mask])
                kept.add(blocks if mask.all() else [block[mask] for block in blocks])
                if held is not None and not mask.all():
                    held.add([block[~mask] for block in blocks], np.flatnonzero(~mask) + begin)

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        import h5py

        ledger = Ledger()
        whole = self._whole_sources(verdicts)
        listed = dict(self.reader.listed)
        whole_names = {self._whole_file_name(s, listed[s])[0] for s in whole if s in listed}
        quarantined_rows = {self._relative(s): rows for s, rows in _group(verdicts.records).items()}
        real_target = os.path.realpath(target)
        for relative, path in self._output_files(target):
            if (side == "quarantine" and relative in whole_names) or relative not in self._aligned:
                # (unexpected files fail the comparison)
                _tally_file(ledger, relative, path, is_within(os.path.realpath(path), real_target))
                continue
            with h5py.File(path, "r") as file:
                data = file[self.data_key]
                aligned = [file[name] for name in self._aligned[relative]]
                if side == "quarantine":
                    origin = file[SOURCE_ROW][:]
                else:  # clean row j is source row j + (quarantined rows at or before it)
                    bad = np.array(sorted(quarantined_rows.get(relative, ())), dtype=np.int64)
                    origin = np.arange(data.shape[0], dtype=np.int64)
                    origin += np.searchsorted(bad - np.arange(len(bad)), origin, side="right")
                seed = identity_seed(relative)
                if _has_big_rows(aligned):
                    for row in range(data.shape[0]):
                        ledger.add_values(
                            row_values(seed, origin[row : row + 1], _big_row_digests(aligned, row))
                        )
                    continue
                # nothing is written meanwhile: both cores read and digest
                with contextlib.closing(_blocks(aligned, data.shape[0], ahead=2)) as read:
                    for begin, blocks, digests in read:
                        indices = origin[begin : begin + len(blocks[0])]
                        ledger.add_values(row_values(seed, indices, digests))
        return ledger

    def _output_files(self, target: Path) -> Iterator[tuple[str, str]]:
        """(relative name, path) of each file an output holds, found the way a reader finds
        them: by the list file's lines, the folder's HDF5 files, or the file itself."""
        if not target.exists():
            return
        if self.info.listed:
            with open(target / self.source.name, encoding="utf-8") as lines:
                for line in lines:
                    if line.strip():
                        yield line.strip(), str(target / line.strip())
        elif self.output_is_folder:
            for path in sorted(target.iterdir()):
                if path.is_file() and is_hdf5_file(path):
                    yield path.name, str(path)
        else:
            yield self.source.name, str(target)


class _Sinks:
    """The row-aligned datasets of one output file, written in whole chunks."""

    def __init__(self, file, aligned: list, rows: int, with_source_rows: bool = False) -> None:
        self.sinks = [_RowSink(_like(file, dataset, rows)) for dataset in aligned]
        self.origin = (
            _RowSink(file.create_dataset(SOURCE_ROW, shape=(rows,), dtype=np.int64))
            if with_source_rows
            else None
        )

    def add(self, blocks: list[np.ndarray], origin: np.ndarray | None = None) -> None:
        for sink, block in zip(self.sinks, blocks):
            sink.add(block)
        if self.origin is not None:
            assert origin is not None  # the quarantine's sinks are always given the source rows
            self.origin.add(origin)

    def add_row(self, aligned: list, row: int) -> None:
        """Append source row ``row`` of each dataset: a row larger than a block slab by slab."""
        for sink, dataset in zip(self.sinks, aligned):
            if row_bytes_of(dataset) > BLOCK_BYTES:
                sink.add_in_slabs(dataset, row)
            else:
                sink.add(np.asarray(dataset[row : row + 1]))
        if self.origin is not None:
            self.origin.add(np.array([row], np.int64))

    def close(self) -> None:
        for sink in [*self.sinks, self.origin]:
            if sink is not None:
                sink.close()


class _RowSink:
    """Appends rows to a dataset in whole chunks. Rows that do not fill a chunk wait in a
    one-chunk carry buffer: each chunk (compressed or not) is written once, and at most a chunk's
    worth of each block is copied; the rest is written straight from the block."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset
        self.chunk_rows = dataset.chunks[0] if dataset.chunks else 1
        self.direct = _takes_raw_chunks(dataset)
        #: where each chunk lies in the file, when `_like` had them all allocated at creation:
        #: whole chunks are then written by `os.pwrite`, which releases the GIL (HDF5's chunk
        #: writes hold it, so a helper thread could not read the next block meanwhile)
        self.addresses = _allocated_chunks(dataset) if self.direct else None
        self.descriptor = dataset.file.id.get_vfd_handle() if self.addresses is not None else -1
        self.carry = np.empty((self.chunk_rows, *dataset.shape[1:]), dtype=dataset.dtype)
        self.carried = 0
        self.cursor = 0

    def add(self, rows: np.ndarray) -> None:
        """Append ``rows`` (which may be a reused buffer: nothing refers to it afterwards)."""
        if self.carried:
            take = min(self.chunk_rows - self.carried, len(rows))
            self.carry[self.carried : self.carried + take] = rows[:take]
            self.carried += take
            rows = rows[take:]
            if self.carried < self.chunk_rows:
                return
            self._write(self.carry)
            self.carried = 0
        whole = len(rows) - len(rows) % self.chunk_rows
        if whole:
            self._write(rows[:whole])
        rest = len(rows) - whole
        if rest:
            self.carry[:rest] = rows[whole:]
            self.carried = rest

    def _write(self, rows: np.ndarray) -> None:
        step = self.chunk_rows
        if (
            self.direct
            and rows.dtype == self.dataset.dtype
            and self.cursor % step == 0
            and len(rows) % step == 0
        ):
            rows = np.ascontiguousarray(rows)
            corner = (0,) * (rows.ndim - 1)
            for start in range(0, len(rows), step):
                chunk = rows[start : start + step]
                if self.addresses is not None:
                    _write_at(self.descriptor, int(self.addresses[(self.cursor + start) // step]), chunk)
                else:
                    self.dataset.id.write_direct_chunk((self.cursor + start, *corner), chunk.data)
        else:
            self.dataset[self.cursor : self.cursor + len(rows)] = rows
        self.cursor += len(rows)

    def add_in_slabs(self, source, row: int) -> None:
        """Append one row larger than a block, read and written a slab at a time (its dataset
        keeps no carry: a chunk of several such rows is rewritten row by row, correct if slow)."""
        assert not self.carried
        plan = piece_plan(source.shape, source.chunks, source.dtype.itemsize)
        buffer = np.empty(slab_shape(source.shape, plan), source.dtype)
        for where, slab in row_slabs(source, row, plan, buffer):
            index = (self.cursor, *where)
            self.dataset[index] = slab
        self.cursor += 1

    def close(self) -> None:
        if self.carried:
            self._write(self.carry[: self.carried])
            self.carried = 0
        if self.cursor != self.dataset.shape[0]:
            raise RuntimeError(f"{self.dataset.name}: wrote {self.cursor} of {self.dataset.shape[0]} rows")


def _takes_raw_chunks(dataset) -> bool:
    """Whether whole chunks of ``dataset`` can be written as their bytes (`write_direct_chunk`):
    chunked in whole rows, without filters, of plain numbers. HDF5's own write of the same
    chunks costs several times as much (see docs/benchmarks.md, "Design measurements")."""
    import h5py

    plist = dataset.id.get_create_plist()
    return (
        dataset.chunks is not None
        and tuple(dataset.chunks[1:]) == tuple(dataset.shape[1:])
        and plist.get_layout() == h5py.h5d.CHUNKED
        and plist.get_nfilters() == 0
        and dataset.dtype.kind in PLAIN_KINDS
        and dataset.dtype.fields is None
    )


def _allocated_chunks(dataset) -> np.ndarray | None:
    """Each chunk's file offset, when every chunk is allocated (`_like` asks HDF5 to allocate
    them at creation) and the file is a plain file (the default driver); else None."""
    import h5py

    if dataset.file.driver != "sec2" or dataset.file.userblock_size:
        return None
    if dataset.id.get_create_plist().get_alloc_time() != h5py.h5d.ALLOC_TIME_EARLY:
        return None
    addresses = chunk_addresses(dataset, row_bytes_of(dataset))
    return addresses if len(addresses) else None


def _write_at(descriptor: int, offset: int, rows: np.ndarray) -> None:
    """Write the C-contiguous ``rows`` at ``offset`` (all of them: a short write goes on)."""
    data = memoryview(rows.reshape(-1).view(np.uint8).data)
    done = 0
    while done < len(data):
        done += os.pwrite(descriptor, data[done:], offset + done)


def _like(file, source, rows: int):
    """A dataset at the source's path with ``rows`` rows and the source's creation properties."""
    import h5py

    plist = source.id.get_create_plist()
    options: dict[str, Any] = {}
    if (
        plist.get_layout() in (h5py.h5d.CONTIGUOUS, h5py.h5d.COMPACT, h5py.h5d.CHUNKED)
        and not source.external
    ):
        options["dcpl"] = plist.copy()  # virtual and external layouts become plain data
        if _takes_raw_chunks(source) and plist.fill_value_defined() == h5py.h5d.FILL_VALUE_DEFAULT:
            # Every chunk allocated now, unfilled (HDF5 would first write the dataset in zeros),
            # so that whole chunks can be written by pwrite (see `_RowSink`), each of them once.
            # Only where the source has no fill value of its own: the output's properties say
            # "allocated early, never filled", which every chunk being written makes true.
            options["dcpl"].set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            options["dcpl"].set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    if source.chunks:
        maxshape = list(source.maxshape)
        if maxshape[0] is not None:
            maxshape[0] = None if rows < source.chunks[0] else rows
        options.update(chunks=source.chunks, maxshape=tuple(maxshape))
    parent = file.require_group(source.parent.name)
    name = source.name.rsplit("/", 1)[-1]
    dataset = parent.create_dataset(
        name, shape=(rows, *source.shape[1:]), dtype=source.id.get_type(), **options
    )
    _copy_attrs(source, dataset)
    return dataset


def _copy_tree(source, target, replaced: set[str]) -> None:
    """Copy every object of group ``source`` into ``target``, except the datasets named in
    ``replaced`` (absolute paths), which are re-created row by row."""
    import h5py

    _copy_attrs(source, target)
    for name in source:
        link = source.get(name, getlink=True)
        path = f"{source.name.rstrip('/')}/{name}"
        if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
            target[name] = link
            continue
        if path in replaced:
            continue
        item = source[name]
        if isinstance(item, h5py.Group) and any(r.startswith(path + "/") for r in replaced):
            _copy_tree(item, target.create_group(name), replaced)
        else:
            source.copy(item, target, name=name)


def _copy_attrs(source, target) -> None:
    for name in source.attrs:
        attribute = source.attrs.get_id(name)
        if _has_references(attribute.dtype):
            continue
        target.attrs.create(name, source.attrs[name], shape=attribute.shape, dtype=attribute.dtype)


def _has_references(dtype) -> bool:
    import h5py

    if h5py.check_dtype(ref=dtype) is not None:
        return True
    vlen = h5py.check_dtype(vlen=dtype)
    if vlen is not None and vlen not in (str, bytes):
        return _has_references(np.dtype(vlen))
    return bool(dtype.fields) and any(_has_references(field[0]) for field in dtype.fields.values())


def _row_aligned(file, data) -> list:
    """The data dataset, then every other dataset of the file with as many rows, by path."""
    import h5py

    rows = data.shape[0]
    others: list = []

    def visit(name, item) -> None:
        if isinstance(item, h5py.Dataset) and item.name != data.name and item.shape and item.shape[0] == rows:
            others.append(item)

    file.visititems(visit)
    return [data, *sorted(others, key=lambda d: d.name)]


def _blocks(
    aligned: list, rows: int, ahead: int = 1
) -> Generator[tuple[int, list[np.ndarray], list[np.ndarray]], None, None]:
    """Chunk-aligned blocks of ~``BLOCK_BYTES`` of the first ``rows`` rows of each dataset, with
    their rows' digests (`row_digests`), read and digested on ``ahead`` helper threads while the
    caller works on the block before: `pread` and NumPy release the GIL (and the chunks are
    written by `os.pwrite`, which does too: see `_RowSink`). ``ahead`` + 1 sets of buffers,
    reused from block to block (fresh arrays cost a page fault per 4 KiB): a block is valid
    until the next is asked for. Close the iterator before the file (its helpers end then)."""
    data = aligned[0]
    chunk_rows = data.chunks[0] if data.chunks else 1
    block_rows = max(1, min(rows, round_up(max(1, BLOCK_BYTES // max(1, row_bytes_of(data))), chunk_rows)))
    layouts = [plain_layout(d.file, d) for d in aligned]
    starts = range(0, rows, block_rows)
    ahead = max(1, min(ahead, len(starts) - 1))
    buffer_sets = [
        [np.empty((block_rows, *d.shape[1:]), dtype=d.dtype) for d in aligned]
        for _ in range(min(ahead + 1, len(starts)))
    ]

    def load(number: int) -> tuple[int, list[np.ndarray], list[np.ndarray]]:
        begin = starts[number]
        count = min(block_rows, rows - begin)
        blocks = []
        for dataset, buffer, layout in zip(aligned, buffer_sets[number % len(buffer_sets)], layouts):
            if dataset.dtype.hasobject or buffer.size == 0:
                blocks.append(np.asarray(dataset[begin : begin + count]))
            else:
                read_rows(dataset, layout, begin, begin + count, buffer[:count])
                blocks.append(buffer[:count])
        return begin, blocks, [row_digests(block) for block in blocks]

    if len(starts) < 2:
        yield from map(load, range(len(starts)))
        return
    with ThreadPoolExecutor(ahead, thread_name_prefix="scrub-read-ahead") as helpers:
        pending = [helpers.submit(load, number) for number in range(ahead)]
        for number in range(len(starts)):
            block = pending.pop(0).result()
            if number + ahead < len(starts):  # into the buffers of the block before: done with
                pending.append(helpers.submit(load, number + ahead))
            yield block


def _has_big_rows(aligned: list) -> bool:
    return any(row_bytes_of(dataset) > BLOCK_BYTES for dataset in aligned)


def _split_big_rows(aligned: list, rows: int, bad: np.ndarray, seed: int, kept, held, tally: Tally) -> None:
    """`_split` for files with rows larger than a block: row by row, each read in slabs."""
    quarantined = set(bad.tolist())
    for row in range(rows):
        value = row_values(seed, np.array([row], np.int64), _big_row_digests(aligned, row))
        if row in quarantined:
            tally.quarantined.add_values(value)
            if held is not None:
                held.add_row(aligned, row)
        else:
            tally.kept.add_values(value)
            kept.add_row(aligned, row)


def _big_row_digests(aligned: list, row: int) -> list[np.ndarray]:
    """The digest of row ``row`` of each dataset, for the ledger: `row_digests` where the row
    fits a block, else XXH3 of its bytes streamed slab by slab (the same function on both sides
    of the comparison: source and outputs have the same shapes)."""
    digests = []
    for dataset in aligned:
        if row_bytes_of(dataset) <= BLOCK_BYTES or dataset.dtype.hasobject:
            digests.append(row_digests(np.asarray(dataset[row : row + 1])))
            continue
        plan = piece_plan(dataset.shape, dataset.chunks, dataset.dtype.itemsize)
        buffer = np.empty(slab_shape(dataset.shape, plan), dataset.dtype)
        digest = xxhash.xxh3_64()
        for _, slab in row_slabs(dataset, row, plan, buffer):
            digest.update(np.ascontiguousarray(slab).data)
        digests.append(np.array([digest.intdigest()], np.uint64))
    return digests


def _tally_file(ledger: Ledger, name: str, path: str, inside: bool) -> None:
    """A file set aside whole: its bytes, unless it lies outside the root (never read)."""
    seed = identity_seed("file", name)
    if inside:
        ledger.add_file(seed, path)
    else:
        ledger.add_record(seed, None)


def _keep_mask(begin: int, count: int, bad: np.ndarray) -> np.ndarray:
    mask = np.ones(count, dtype=bool)
    inside = bad[(bad >= begin) & (bad < begin + count)]
    mask[inside - begin] = False
    return mask


def _group(records: set[tuple[str, int]]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = defaultdict(list)
    for source, index in records:
        grouped[source].append(index)
    return grouped
