"""The per-partition chain: read → properties → checks → partial result.

`PartitionWork` is the picklable function the pipeline maps over partitions. It is plain
Python, testable on a list, and knows nothing of Dask.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from scrub import checks as _catalogue  # noqa: F401 - registers the built-in checks
from scrub.checks.base import (
    BINCOUNT_LIMIT,
    COLUMN_KINDS,
    RARE_KEPT,
    Check,
    CheckOptions,
    make_issue,
)
from scrub.checks.images import decoder_failure
from scrub.checks.masks import mask_pixel_counts
from scrub.checks.numeric import MAGNITUDE_KEPT_PER_BIN, SQUARE_OVERFLOW, label_stats, magnitude_bins, profile
from scrub.checks.properties import annotate, tally
from scrub.checks.tokens import tally_token_rows
from scrub.errors import ScrubError
from scrub.profile.collect import Collector, ProfileSettings
from scrub.readers.base import Reader
from scrub.records import LABEL_NEEDS, Batch, Carries, Issue, Record, TokenRows
from scrub.replay.standardize import PIXELS, Moments, typical_rows
from scrub.scanning.encoding import FLUSH_ISSUES, Encoder, Encoding
from scrub.scanning.results import (
    NOT_REUSABLE,
    Columns,
    LeftPart,
    NumericStats,
    Outcomes,
    PartitionResult,
    row_digest,
)

#: Rows checked at once: a block of a broken shard (65,536 narrow rows read as one chunk) would
#: otherwise hold a finding object per row, per check, before any is encoded, and a worker's
#: memory would grow several-fold on its first partition (see docs/benchmarks.md, "Design
#: measurements").
CHECK_ROWS = 4096


@dataclass(frozen=True)
class BatchHandling:
    """How the scan checks and profiles a batch whose payload (`Batch.data`) is of one type:
    ``check(work, rows, plan, columns, label_counts, result, encoder)`` runs the checks on
    `CHECK_ROWS` rows of it, ``profile(collector, batch)`` samples it for the profile."""

    check: Callable[..., None]
    profile: Callable[[Collector, Batch], None]


#: payload type -> its `BatchHandling`; a type registered nowhere in its bases is checked as rows
#: of numbers (`ROW_BATCHES`). A format whose batches carry a payload of its own registers its
#: handling here (`handles_batches`) rather than the runner testing types.
BATCH_HANDLERS: dict[type, BatchHandling] = {}


def handles_batches(payload: type, handling: BatchHandling) -> None:
    """Register how batches of ``payload`` are checked and profiled."""
    BATCH_HANDLERS[payload] = handling


def batch_handling(data: Any) -> BatchHandling:
    """The handling registered for ``data``'s type or its nearest base; else rows of numbers."""
    for kind in type(data).__mro__:
        if kind in BATCH_HANDLERS:
            return BATCH_HANDLERS[kind]
    return ROW_BATCHES


@dataclass(frozen=True)
class LeftColumns:
    """The `scrub.pipeline.Leaving` of a `PartitionWork` on a cluster: the columns of the checks
    ``names`` stay on the worker that collected them."""

    names: frozenset[str]

    def taken(self, result: PartitionResult) -> PartitionResult:
        """What of ``result`` comes back to the driver: the columns left counted, not sent. Runs
        on the worker beside `left`, so ``result`` itself is not changed."""
        columns = {
            name: LeftPart(None, len(column[0])) if name in self.names else column
            for name, column in result.columns.items()
        }
        return replace(result, columns=columns)

    def left(self, result: PartitionResult) -> dict[str, tuple[Any, ...]]:
        """What of ``result`` stays on the worker: the columns of ``names``."""
        return {name: column for name, column in result.columns.items() if name in self.names}

    def attach(self, result: PartitionResult, left: Any) -> PartitionResult:
        """The `taken` ``result``, in the driver, its left columns pointed at ``left`` (the
        future of `left`)."""
        result.columns = {
            name: LeftPart(left, column.count) if isinstance(column, LeftPart) else column
            for name, column in result.columns.items()
        }
        return result


class PartitionWork:
    """Runs every selected check on every record of a partition."""

    def __init__(
        self,
        reader: Reader,
        options: CheckOptions,
        checks: Sequence[Check],
        moments: bool = False,
        capture: bool = False,
        encoding: Encoding | None = None,
        profiling: ProfileSettings | None = None,
    ) -> None:
        self.reader = reader
        #: how to profile the dataset as it is read (`scrub.profile`); None: not at all
        self.profiling = profiling
        self.options = options
        #: hand issues back compactly (see `Encoding`)
        self.encoding = encoding
        #: also return each record's own result, for the cache (`scrub.scanning.cache`)
        self.capture = capture
        #: also gather the moments the dummy-loss replay standardizes with (a pass over the data)
        self.moments = moments
        # Check objects pickle by reference to their functions, so a worker imports the module
        # that defines a check (and registers it) even when the check is not a built-in one.
        self.checks = tuple(checks)
        #: the columns that stay on the cluster's workers, to be joined there
        #: (`scrub.scanning.joins`): set once the run's plan is known; None off a cluster
        self.leaving: LeftColumns | None = None

    def __call__(
        self,
        partition_no: int,
        partition: Sequence[Any],
        start: int = 0,
        stop: int | None = None,
        on_record: Callable[[int], None] | None = None,
    ) -> PartitionResult:
        plan = _Plan(self.checks)
        result = PartitionResult(partition_no)
        outcomes = Outcomes()  # per call (threads share this object): its memory stays a partition's
        columns: Columns = {c.id: ([], []) for c in plan.dataset}
        label_counts: list[tuple[np.ndarray, np.ndarray]] = []
        encoder = self.encoding.start(partition_no) if self.encoding is not None else None
        collector = Collector(self.profiling) if self.profiling is not None else None
        offset = start
        for item in self.reader.read(partition, start, stop):
            if on_record is not None:
                on_record(offset)
            if isinstance(item, Batch):
                handling = batch_handling(item.data)
                result.records += len(item)
                if collector is not None:  # once per block read: it samples a few rows of it
                    handling.profile(collector, item)
                for rows in item.slices(CHECK_ROWS):
                    handling.check(self, rows, plan, columns, label_counts, result, encoder)
                    if encoder is not None and len(result.issues) >= FLUSH_ISSUES:
                        encoder.flush(result)
                offset += len(item)
            else:
                result.records += 1
                if self.capture:
                    self._capture_record(item, offset, plan, columns, result, outcomes)
                else:
                    self._check_record(item, offset, plan, columns, label_counts, result)
                if collector is not None:
                    collector.record(item)
                offset += 1
            if encoder is not None and len(result.issues) >= FLUSH_ISSUES:
                encoder.flush(result)
        if collector is not None:
            result.profile = collector.finish(result.records)
        finish_columns(result, columns, plan.dataset)
        if label_counts:
            result.stats["labels"].update(_merge_counts(label_counts))
        if encoder is not None:
            encoder.finish(result)
        return result

    def _capture_record(
        self,
        record: Record,
        offset: int,
        plan: "_Plan",
        columns,
        result: PartitionResult,
        outcomes: "Outcomes",
    ) -> None:
        """`_check_record` into a result of its own, kept for the cache, then added to ``result``."""
        own = PartitionResult(result.partition)
        own_columns: Columns = {check_id: ([], []) for check_id in columns}
        self._check_record(record, offset, plan, own_columns, [], own)
        for check in plan.dataset:  # what the cache keeps is the column's own value
            if check.pack is not None and own_columns[check.id][1]:
                own_columns[check.id] = (own_columns[check.id][0], list(check.pack(own_columns[check.id][1])))
        if not any(issue.check in NOT_REUSABLE for issue in own.issues):
            # the digest of the bytes read (None for an array value: the driver hashed the value)
            values = [found[0] if found else None for _, found in own_columns.values()]
            result.captured.append((offset, record.meta.get("digest"), outcomes.get(own), values))
        result.issues.extend(own.issues)
        result.offsets.extend(own.offsets)
        result.file_versions.extend(own.file_versions)
        for name, counter in own.stats.items():
            into = result.stats[name]
            for value, count in counter.items():
                into[value] += count
        for group, stats in own.numeric.items():
            result.numeric.setdefault(group, NumericStats()).merge(stats)
        for check_id, (offsets, found) in own_columns.items():
            if found:
                columns[check_id][0].extend(offsets)
                columns[check_id][1].extend(found)

    def _check_record(
        self, record: Record, offset: int, plan: "_Plan", columns, label_counts, result
    ) -> None:
        """The per-record path: properties once, then every record check and collector."""
        version = record.meta.get("file_version")
        if version is not None:
            result.file_versions.append((offset, *version))
        for found in record.problems:
            if found.check in plan.ids:
                result.issues.append(found)
                result.offsets.append(offset)
        profiling = self.profiling
        annotate(
            record, self.options, levels=profiling is not None and profiling.samples_levels(record.index)
        )
        tally(record, result.stats, self.options)
        values, group = numeric_values(record)
        if values is not None:  # an array value or a float image's pixels: the numeric checks, as one row
            row = Batch(record.source, record.index, offset, values[None], keys=[record.key])
            self._check_batch(row, plan.numeric, [], columns, label_counts, result, group)
            magnitude = float(profile(row).magnitudes[0])
            record.meta["magnitude"] = magnitude if 0 < magnitude < float("inf") else None
        options = self.options
        for check, function in plan.record_functions:
            try:  # not through `_run_check`: a call less for each check of each record
                finding = function(record, options)
            except Exception as error:
                raise _internal_error(check, record, error) from error
            if finding is not None:
                result.issues.append(make_issue(check.id, record.source, record.key, record.index, finding))
                result.offsets.append(offset)
        for check in plan.dataset:
            assert check.collect is not None  # every dataset check collects
            value = check.collect(record)
            if value is not None:
                offsets, values = columns[check.id]
                offsets.append(offset)
                values.append(value)

    def _check_batch(
        self,
        batch: Batch,
        batch_checks,
        dataset_checks,
        columns,
        label_counts,
        result,
        group: str | None = None,
        encoder: Encoder | None = None,
    ) -> None:
        """The vectorized path: a whole block of rows at once, details only for flagged rows.
        ``group`` names the statistics the values go to (default: the batch's source); with an
        ``encoder``, findings become manifest lines at once (`Encoder.add_rows`)."""
        for check in batch_checks:
            if check.needs in LABEL_NEEDS and batch.labels is None:
                continue
            self._add_found(
                batch, check, _run_check(check, batch, self.options, check.batch), result, encoder
            )
        _collect_batch(dataset_checks, batch, columns)
        if batch.keys is None:  # rows of an array dataset (array values were tallied as records)
            result.stats["shapes"]["x".join(map(str, batch.data.shape[1:]))] += len(batch)
        if "masks" in batch.meta:  # the per-class pixel histogram of (N, H, W) masks
            result.stats["mask_pixels"].update(mask_pixel_counts(batch.meta["masks"]))
        found = profile(batch)
        stats = result.numeric.setdefault(group or batch.source, NumericStats())
        stats.add(found.finite_values, found.nonfinite_values, found.total, found.low, found.high)
        if self.moments and found.rows.size:  # (a row read in pieces has no moments: see replay)
            pixels = (group or "").startswith("pixels:")
            key = PIXELS if pixels else "x".join(map(str, batch.data.shape[1:]))
            limit = SQUARE_OVERFLOW / np.sqrt(found.rows.shape[1])
            typical = typical_rows(found.rows, found.magnitudes, limit)
            result.moments.setdefault(key, Moments()).add(typical, per_feature=not pixels)
        if batch.labels is not None and self.options.labelled and self.options.label_kind != "value":
            label_counts.append(label_stats(batch.labels))  # a histogram of class ids, not of values

    def _add_found(
        self, batch: Batch, check: Check, found, result: PartitionResult, encoder: Encoder | None
    ) -> None:
        """A batch check's findings as issues of its rows (or, with an ``encoder``, manifest lines)."""
        if encoder is not None:
            if found:
                encoder.add_rows(batch, check, found)
            return
        # issues built here, not by make_issue: a broken block flags every row, and each
        # finding's details are its own already (make_issue's copy is a large share of the time)
        for row, finding in found:
            issue = Issue(
                batch.source,
                batch.key(row),
                batch.start + row,
                check.id,
                finding.severity or check.severity,
                finding.message,
                finding.details,
            )
            if batch.keys is None:  # rows keyed by position: their content is their identity
                issue.content = row_digest(batch, row)
            result.issues.append(issue)
            result.offsets.append(batch.offset + row)

    def _check_tokens(
        self, batch: Batch, plan: "_Plan", columns: Columns, result: PartitionResult, encoder: Encoder | None
    ) -> None:
        """Token sequences of a flat store (`TokenRows`): the token checks' vectorized forms
        (`scrub.checks.tokenbatch`) over the whole batch; a token check with a record form only
        (a plugin's) runs on each sequence as a record of input ids. Checks of any record
        (`empty-record`) leave token sequences to the token checks, as their record forms do;
        the column checks that apply to token data collect their column of the sequences
        (`duplicate`, `split-leak`: their ids' identities)."""
        tally_token_rows(cast(TokenRows, batch.data).lengths, result.stats)
        _collect_batch(plan.dataset, batch, columns)
        for check in plan.tokens:
            self._add_found(
                batch, check, _run_check(check, batch, self.options, check.batch), result, encoder
            )
        if not plan.token_records:
            return
        rows = cast(TokenRows, batch.data)
        for row in range(len(batch)):
            record = Record(
                batch.source, batch.key(row), batch.start + row, rows[row], meta={"kind": "tokens"}
            )
            found = []
            for check, function in plan.token_records:
                finding = _run_check(check, record, self.options, function)
                if finding is not None:
                    found.append((check, finding))
            for check, finding in found:
                self._add_found(batch, check, [(row, finding)], result, encoder)

    def failure(
        self, partition_no: int, partition: Sequence[Any], offset: int, reason: str
    ) -> PartitionResult:
        """The partial result for a record that crashed or hung its worker."""
        source, key, index = self.reader.locate(partition, [offset])[0]
        result = PartitionResult(
            partition_no, records=1, issues=[decoder_failure(source, key, index, reason)], offsets=[offset]
        )
        if self.encoding is not None:
            self.encoding.apply(result)
        return result


#: what the checks that judge token sequences need
TOKEN_NEEDS = frozenset({Carries.TOKENS, Carries.SEQUENCES})


class _Plan:
    """The selected checks, sorted by the path that runs them."""

    def __init__(self, checks: Sequence[Check]) -> None:
        self.ids = {c.id for c in checks}
        #: each record check with its function (called directly: `_check_record`)
        self.record_functions = [(c, c.func) for c in checks if c.kind == "record" and c.func is not None]
        self.batch = [c for c in checks if c.batch is not None]
        # Array values of record datasets get the checks that exist only in batch form; the
        # others (labels, empty-record) already ran on the record.
        self.numeric = [c for c in self.batch if c.func is None and c.needs not in LABEL_NEEDS]
        self.dataset = [c for c in checks if c.kind in COLUMN_KINDS]
        #: on token sequences (`TokenRows`): the token checks' batch forms, and those with a
        #: record form only
        self.tokens = [c for c in self.batch if c.needs in TOKEN_NEEDS]
        self.token_records = [
            (c, c.func) for c in checks if c.needs in TOKEN_NEEDS and c.batch is None and c.func is not None
        ]


def numeric_values(record: Record) -> tuple[np.ndarray | None, str | None]:
    """The numbers a record holds, and the statistics group they belong to: an array value (its
    source), or the pixels of a float or 16/32-bit image (``pixels:MODE``); else (None, None)."""
    if record.meta.get("kind") == "array":
        return cast(np.ndarray, record.payload), record.source  # an array value's payload is its array
    facts = record.meta.get("image")
    if facts is not None and facts.pixels is not None:
        return facts.pixels, f"pixels:{facts.mode}"
    return None, None


def rare_only(
    offsets: Any, values: Any, dtype: str
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """A ``rare`` or ``magnitude`` column (see `scrub.scanning.columnstores.RareValueStore`) as
    (offsets, values) of the rows whose value (magnitude bin) this partition holds at most the
    store's cap of, plus
    the histogram of every row: a value common here is common in the dataset, so its rows'
    positions are never needed, and a partition of millions of rows sends back its tails only.
    Counted here, in the worker: the driver merging the histograms with `np.unique` took a core's
    time from the workers (see docs/benchmarks.md, "Design measurements")."""
    offsets, values = np.asarray(offsets, np.int64), np.asarray(values, np.float64)
    if dtype == "magnitude":
        keys, cap, always = magnitude_bins(values), MAGNITUDE_KEPT_PER_BIN, None
    else:
        keys, cap, always = values, RARE_KEPT, values < 0  # every negative value keeps its position
    distinct, counts, each = _counted(keys)
    rare = each <= cap
    if always is not None:
        rare |= always
    return offsets[rare], values[rare], (distinct, counts)


def _counted(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct keys as float64, their counts, each key's count): by `np.bincount` when the keys
    are small non-negative integers (class indices, magnitude bins: [1408, 18192]), which does not
    sort (`np.unique` does, and costs more), else by `np.unique`."""
    if keys.size and keys.min() >= 0 and keys.max() < BINCOUNT_LIMIT:
        integers = keys.astype(np.int64)
        if (integers == keys).all():
            per_key = np.bincount(integers)
            distinct = np.flatnonzero(per_key)
            return distinct.astype(np.float64), per_key[distinct], per_key[integers]
    distinct, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return distinct, counts, counts[inverse.reshape(-1)]


def _merge_counts(pieces: list[tuple[np.ndarray, np.ndarray]]) -> dict[int, int]:
    """One histogram from per-batch (values, counts), merged in NumPy, not per value in Python."""
    values = np.concatenate([v for v, _ in pieces])
    counts = np.concatenate([c for _, c in pieces])
    if values.size and values.dtype.kind in "ui" and values.min() >= 0 and values.max() < BINCOUNT_LIMIT:
        summed = np.bincount(values, weights=counts)  # class ids: no sort
        distinct = np.flatnonzero(summed)
        return dict(zip(distinct.tolist(), summed[distinct].astype(np.int64).tolist()))
    distinct, inverse = np.unique(values, return_inverse=True)
    return dict(zip(distinct.tolist(), np.bincount(inverse, weights=counts).astype(np.int64).tolist()))


def _run_check(check: Check, record: Record | Batch, options: CheckOptions, func=None):
    function = func or check.func
    assert function is not None  # record checks have a func; batch checks are run with theirs
    try:
        return function(record, options)
    except Exception as error:
        raise _internal_error(check, record, error) from error


def _internal_error(check: Check, record: Record | Batch, error: Exception) -> ScrubError:
    """A bug in a check is scrub's bug: say where, then stop."""
    key = getattr(record, "key", None) or getattr(record, "start", "?")
    where = record.source if record.source == key else f"{record.source}:{key}"  # a file is its own source
    return ScrubError(f"internal error: check {check.id} failed on {where}: {error!r}")


def _collect_batch(checks: Sequence[Check], batch: Batch, columns: Columns) -> None:
    """The column values of a batch's rows (`Check.collect_batch`) of each of ``checks`` that
    collects them, at the rows' offsets."""
    for check in checks:
        if check.collect_batch is None:
            continue
        rows, values = check.collect_batch(batch)
        offsets, collected = columns[check.id]
        offsets.append(batch.offset + rows)
        collected.append(values)


def finish_columns(result: PartitionResult, columns: Columns, dataset_checks) -> None:
    """Pack a partition's collected columns as the aggregate takes them."""
    result.columns = {name: _packed(offsets, values) for name, (offsets, values) in columns.items()}
    for check in dataset_checks:
        if check.pack is not None and isinstance(result.columns.get(check.id, (None, None))[1], list):
            offsets, values = result.columns[check.id]
            result.columns[check.id] = (offsets, check.pack(values))
        if check.column_dtype in ("rare", "magnitude") and check.id in result.columns:
            offsets, values = result.columns[check.id][:2]
            result.columns[check.id] = rare_only(offsets, values, check.column_dtype)


def _packed(offsets: list, values: list) -> tuple[Any, Any]:
    """A column's pieces as arrays: scalars from records, or arrays from batches."""
    if offsets and isinstance(offsets[0], np.ndarray):
        return np.concatenate(offsets), np.concatenate(values)
    return offsets, values


#: rows of numbers (array datasets; `Pieces` of big rows): the batch forms of the record checks
ROW_BATCHES = BatchHandling(
    check=lambda work, rows, plan, columns, label_counts, result, encoder: work._check_batch(
        rows, plan.batch, plan.dataset, columns, label_counts, result, encoder=encoder
    ),
    profile=Collector.rows,
)
handles_batches(
    TokenRows,  # a flat token store's sequences: the token checks' vectorized forms
    BatchHandling(
        check=lambda work, rows, plan, columns, label_counts, result, encoder: work._check_tokens(
            rows, plan, columns, result, encoder
        ),
        profile=Collector.tokens,
    ),
)
