"""One dataset's share of a scan: its checks, its aggregate, its tasks (the cache's leftovers
where it has results), its dataset checks, replay and summary."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from scrub import pipeline
from scrub.checks.base import COLUMN_KINDS, Check, CheckOptions
from scrub.checks.contract import NAMES_NO_RECORD
from scrub.checks.labels import LABEL_SAMPLE, label_kind
from scrub.checks.masks import ignore_note
from scrub.checks.perceptual import COMPARES_IMAGES
from scrub.checks.splits import split_variant
from scrub.checks.tokens import dtype_overflows, token_notes
from scrub.errors import (
    UsageError,
)
from scrub.manifest import ManifestWriter
from scrub.options.model import ReplayOptions, ScanOptions
from scrub.paths import TRAINING
from scrub.profile import PartitionProfile
from scrub.profile.collect import ProfileSettings
from scrub.readers.base import Reader
from scrub.records import Batch, Carries, Issue, Severity
from scrub.reports import THUMBNAILS
from scrub.reports.findings import KEYS_PER_CHECK, Collector
from scrub.scanning.baseline import Baseline
from scrub.scanning.encoding import Encoding
from scrub.scanning.opening import OpenedDataset
from scrub.scanning.results import PartitionResult
from scrub.scanning.runner import PartitionWork
from scrub.scanning.selection import select_checks
from scrub.scanning.summary import Progress, ScanAggregate, Summary
from scrub.scanning.wholes import PartitionResults
from scrub.wording import counted

if TYPE_CHECKING:
    from scrub.scanning.cache import ResultCache


@dataclass
class Tasks:
    """What is left to run of one dataset's scan: ``work`` over ``items``, results to ``add``."""

    work: pipeline.Work
    items: list
    add: Callable[[Any], None]
    failure: Callable[..., Any]


class DatasetScan:
    """One dataset's share of a scan: its checks, its aggregate, its tasks and its summary.
    Several share one pool of workers and one manifest when several datasets are scanned."""

    def __init__(
        self,
        dataset: OpenedDataset,
        options: ScanOptions,
        writer: ManifestWriter,
        baseline: Baseline | None,
        progress: Callable[[Progress], None] | None,
        label: str | None = None,
        split: str | None = None,
    ) -> None:
        self.dataset, self.options = dataset, options
        #: the dataset's split in its run (`scrub.scanning.splits`), None outside a run of splits
        self.split = split
        self.replay = options.replay
        self.checking, kind = _checking(dataset, options, self.replay is not None)
        if self.replay is not None:
            self.replay.config(self.checking.precision)  # bad replay options fail before the scan
        self.checks = self._chosen_checks(_provided(dataset, options, kind, self.replay is not None, split))
        info, reader = dataset.info, dataset.reader
        self.cache: ResultCache | PartitionResults | None
        self.cache, cache_notes = (
            _open_cache(dataset, options, self.checking, self.checks)
            if options.cache is not None
            else (None, [])
        )
        limits = {
            "show": options.show,
            "per_check": KEYS_PER_CHECK,
            "images": THUMBNAILS if options.html is not None else 0,
        }
        self.aggregate = ScanAggregate(
            self.checks,
            self.checking,
            writer,
            progress,
            total=info.records,
            severities=options.selection.overrides,
            baseline=baseline,
            dataset=label,
            collector=Collector(**limits),
            profiling=options.profile,
        )
        self.aggregate.notes += cache_notes
        # issues leave the workers as manifest lines, unless the driver needs each one
        compact = baseline is None and self.replay is None and self.cache is None
        encoding = Encoding(self.aggregate.severities, label, **limits) if compact else None
        #: the label kind the profile counts labels as (None: the dataset has none)
        self.label_kind = kind if info.labelled else None
        profiling = (
            ProfileSettings.of(info.records, self.label_kind, Carries.BOXES in reader.provides)
            if options.profile
            else None
        )
        self.work = PartitionWork(
            reader,
            self.checking,
            self.checks,
            moments=self.replay is not None,
            capture=self.cache is not None and not isinstance(self.cache, PartitionResults),
            encoding=encoding,
            profiling=profiling,
        )
        self.replayed: dict[str, Any] | None = None
        #: with --baseline: the drift findings, for the summary (None: no baseline)
        self.drift: list[dict[str, Any]] | None = None
        #: partition -> (size, mtime_ns) of each of its records as read, -1 where not read
        self._versions: dict[int, np.ndarray] = {}

    def _chosen_checks(self, provides: set[Carries] | frozenset[Carries]) -> list[Check]:
        """The checks that run: those selected that the dataset's records can feed, a contract's
        only for the rules it holds, split checks in the variant the split needs; and, where an
        image check compares them, images hashed perceptually too (`self.checking`)."""
        options, reader = self.options, self.dataset.reader
        checks = select_checks(
            options.selection, self.checking, provides, options.origin, str(self.dataset.path)
        )
        # a contract's checks of rules it does not hold (or with no --contract) judge nothing; one
        # on token records needs Carries.TOKENS to run on the token path, not Carries.CONTRACT
        from scrub.profile.contract import CONTRACT_CHECKS

        contract = options.checks.contract
        held = contract.checks() if contract is not None else frozenset()
        checks = [c for c in checks if c.id not in CONTRACT_CHECKS or c.id in held]
        # a training split's images are hashed at their central crops too (a cropped copy in an
        # evaluation split is near one of them); texts are signed with --near-text
        crops = (
            self.split == TRAINING and bool(self.checking.near_distance) and Carries.IMAGE in reader.provides
        )
        texts = bool(self.checking.near_text) and Carries.TOKENS in reader.provides
        if crops or texts:
            checks = [split_variant(c, crops, texts) if c.kind == "split" else c for c in checks]
        if self.checking.near_distance and any(c.id in COMPARES_IMAGES for c in checks):
            # images are compared by their perceptual hashes as well as their bytes
            self.checking = replace(self.checking, perceptual_hashes=Carries.IMAGE in reader.provides)
        return checks

    def tasks(self) -> Tasks:
        """The dataset-wide issues the reader found, the results the cache holds, and the tasks
        for the rest."""
        self.aggregate.add_dataset_issues(self.dataset.info.issues)
        info = self.dataset.info
        self.aggregate.add_dataset_issues(dtype_overflows(info.token_dtypes, self.options.checks))
        if self.cache is None:
            return Tasks(self.work, list(self.dataset.partitions), self._add, self.work.failure)
        if isinstance(self.cache, PartitionResults):
            return self._whole_tasks(self.cache)
        return self._cached_tasks(self.cache)

    def _whole_tasks(self, kept: PartitionResults) -> Tasks:
        """Reuse the kept results of the partitions whose files are unchanged; return the tasks
        for the others, whose results are kept for the next scan (`scrub.scanning.wholes`)."""
        from scrub.scanning.reusing import Subset, SubsetWork

        reader, aggregate = self.dataset.reader, self.aggregate
        subsets = []
        for number, partition in enumerate(self.dataset.partitions):
            entry = reader.partition_entry(partition)
            reused = kept.lookup(number, partition, entry, usable=self.replay is None)
            if reused is None:  # the whole partition, its own number: a subset of all its records
                subsets.append(Subset(number, partition, tuple(range(len(partition)))))
                continue
            if self.options.profile:  # counted, but nothing of them is sketched: not read
                reused.profile = PartitionProfile(records=reused.records, reused=reused.records)
            aggregate.add(reused)
        work = SubsetWork(self.work)
        records = {subset.partition_no: len(subset) for subset in subsets}

        def add(result: PartitionResult) -> None:
            kept.keep(result, records[result.partition])  # before the aggregate takes its issues
            self._add(result)

        def failure(number: int, subset: Subset, offset: int, reason: str) -> PartitionResult:
            kept.failed(subset.partition_no)
            return work.failure(number, subset, offset, reason)

        self.task_count = len(subsets)
        return Tasks(work, subsets, add, failure)

    def _add(self, result: PartitionResult) -> None:
        """A partition's result into the aggregate; the versions of the files it read kept for
        the fingerprint (an array a partition: 16 bytes a record, not a path)."""
        if self.dataset.fingerprint is None and result.file_versions:
            versions = self._versions.get(result.partition)
            if versions is None:
                size = len(self.dataset.partitions[result.partition])
                versions = self._versions[result.partition] = np.full((size, 2), -1, np.int64)
            found = np.asarray(result.file_versions, np.int64)
            versions[found[:, 0]] = found[:, 1:]
        result.file_versions = []
        self.aggregate.add(result)

    def _read_versions(self) -> Iterator[tuple[int, int] | None]:
        """The version each member was read at, in `members` order (None: not read)."""
        for number, partition in enumerate(self.dataset.partitions):
            versions = self._versions.get(number)
            if versions is None:
                yield from (None for _ in range(len(partition)))
                continue
            for size, mtime in versions.tolist():
                yield (size, mtime) if size >= 0 else None

    def _cached_tasks(self, cache: ResultCache) -> Tasks:
        """Reuse the cache's results for unchanged records; return the tasks for the others, whose
        results are stored for the next scan."""
        from scrub.scanning.reusing import Reuse, Subset, SubsetWork

        dataset, aggregate = self.dataset, self.aggregate
        reader = dataset.reader
        reuse = Reuse(reader, self.checks)
        lookups, subsets = {}, []
        reuse_results = self.replay is None
        for number, partition in enumerate(dataset.partitions):
            entries = reader.cache_entries(partition)
            assert entries is not None  # a cache is opened only for a reader whose records it holds
            found = lookups[number] = cache.lookup(entries, usable=reuse_results)
            if found.hits:
                assert cache.snapshot is not None  # hits come from one
                rows = cache.reused(found)
                reused = reuse.result(number, partition, found.hits, rows, cache.snapshot)
                if self.options.profile:  # counted, but nothing of them is sketched: not read
                    reused.profile = PartitionProfile(records=reused.records, reused=reused.records)
                aggregate.add(reused)
            if found.misses:
                subsets.append(Subset(number, reader.subset(partition, found.misses), tuple(found.misses)))
        size = self.options.run.partition_size or reader.records_per_task
        # the cache's subsets are partitions' leftovers: regroup them into tasks of a partition's size
        subset_work = SubsetWork(self.work)

        def add(result) -> None:
            identities = lookups[result.partition].identities
            for offset, digest, outcome, values in result.captured:
                if offset in identities and (identities[offset][3] or digest) is not None:
                    key, stat, context, content = identities[offset]
                    cache.store(key, stat, content or digest, context, outcome, values)
            result.captured = []
            aggregate.add(result)

        # the stats the lookups took are the fingerprint's: a second stat of every file is not needed
        dataset.fingerprint = dataset.take_fingerprint(known=cache.stats)
        self.left = sum(len(s) for s in subsets)
        self.task_count = math.ceil(self.left / size)
        return Tasks(subset_work, subsets, add, subset_work.failure)

    def finish(self, plan: pipeline.Plan) -> None:
        """After every result is in: the profile (`aggregate.profile`, which what judges the
        dataset as a whole reads), the fingerprint where the reads took it, the dataset checks,
        then the replay."""
        dataset, aggregate = self.dataset, self.aggregate
        aggregate.finish_profile(self.label_kind)
        if dataset.fingerprint is None:  # the records carried their files' versions
            dataset.fingerprint = dataset.take_fingerprint(read=self._read_versions())
            self._versions.clear()
        info = dataset.info
        aggregate.finish_dataset_checks(*self.identities())
        self._note_the_range()
        self._note_idle_selections()
        checks, origin = self.options.checks, self.options.origin
        aggregate.notes += ignore_note(aggregate.stats.get("mask_pixels"), checks, origin)
        aggregate.notes += token_notes(
            aggregate.stats.get("tokens"),
            self.options.checks,
            self.options.origin,
            self.options.replay.batch_size if self.options.replay is not None else None,
        )
        if self.replay is not None:
            self.replayed = _replay(dataset, self.checking, self.replay, plan, aggregate, self.checks)
        if aggregate.records != info.records and info.snapshots:
            aggregate.notes.append(
                f"the database changed during the scan: {counted(info.records, 'record')} when it was "
                "listed, "
                f"{aggregate.records:,} read (each partition's key range whole, from one snapshot)"
            )
            info.records = aggregate.records
        elif aggregate.records != info.records:
            aggregate.notes.append(
                f"incomplete: {aggregate.records:,} of the {info.records:,} records listed were read (the "
                "dataset "
                "changed during the scan?): the scan exits 3, whatever it found"
            )
        self._drift()
        self._contract()

    def identities(self) -> tuple[Callable, Callable | None]:
        """How findings name records by position: their (source, key, index), and, where keys
        are positions, their content hashes (their identity across scans)."""
        reader, partitions = self.dataset.reader, self.dataset.partitions
        return _locator(reader, partitions), _contents(reader, partitions) if reader.positional_keys else None

    def _contract(self) -> None:
        """With ``--contract``: each rule the dataset as a whole breaks is a dataset-level issue
        (its per-record rules were judged record by record)."""
        contract = self.options.checks.contract
        if contract is None:
            return
        if self.aggregate.profile is None:
            self.aggregate.notes.append(
                f"contract: this scan built no profile (--no-profile): only the rules records break "
                f"({contract.path}: classes, image sizes, lengths) were checked"
            )
            return
        from scrub.scanning.contract import contract_issues

        selected = {check.id for check in self.checks}
        for issue in contract_issues(contract, self.aggregate.profile, str(self.dataset.path), selected):
            self.aggregate.add_issue(issue)

    def _drift(self) -> None:
        """With ``--baseline``: each way tonight's profile moved from the baseline's is a
        dataset-level issue (`scrub.scanning.drift`); what cannot be compared, a note."""
        if self.options.baseline is None:
            return
        from scrub.paths import absolute_place
        from scrub.scanning.drift import baseline_record, drift_issues

        record, note = baseline_record(self.options.baseline)
        if note is not None:
            self.aggregate.notes.append(note)
        path = str(self.dataset.path)
        issues, notes = drift_issues(
            record,
            self.aggregate.profile,
            path,
            absolute_place(path),
            self.options.drift_thresholds,
            {check.id for check in self.checks},
            several=self.aggregate.dataset is not None,
        )
        self.aggregate.notes += notes
        if issues is None:  # not measured (the notes say why)
            return
        # the check table lists the drift checks that had something to compare, not all seven
        from scrub.profile.drift import DRIFT_CHECKS, compared_checks
        from scrub.scanning.drift import profile_of

        several = self.aggregate.dataset is not None
        previous = profile_of(record or {}, path, absolute_place(path), several) or {}
        compared = compared_checks(previous, self.aggregate.profile or {})
        selected = set(self.options.selection.select or ())
        for idle in sorted(set(DRIFT_CHECKS) - compared):
            if not self.aggregate.by_check.get(idle):
                self.aggregate.by_check.pop(idle, None)
            if idle in selected:
                self.aggregate.notes.append(
                    f"{self.options.origin('select')} {idle}: compared nothing: neither this scan's "
                    "profile nor the baseline's holds what it measures"
                )
        self.checks = [check for check in self.checks if check.id not in DRIFT_CHECKS or check.id in compared]
        for issue in issues:
            self.aggregate.add_issue(issue)  # its severity as --check-severity sets it
        self.drift = [
            {
                "check": issue.check,
                "severity": issue.severity.value,
                "feature": issue.details["feature"],
                "distance": issue.details["distance"],
                "threshold": issue.details["threshold"],
                "message": issue.message,
            }
            for issue in issues
        ]

    def _note_idle_selections(self) -> None:
        """A check the user selected that found nothing to look at in any record is said: a pass
        of `--select nonfinite-data` over 8-bit images (which hold no NaN) is not a clean bill."""
        selected = self.options.selection.select
        if not selected or self.aggregate.records == 0:
            return
        seen = {
            Carries.ARRAY: any(
                s.finite_values or s.nonfinite_values for s in self.aggregate.numeric.values()
            ),
            Carries.IMAGE: bool(self.aggregate.stats.get("formats")),
        }
        what = {
            Carries.ARRAY: "numeric values (float images, arrays)",
            Carries.IMAGE: "an image that decodes",
        }
        for check in self.checks:
            if check.id in selected and not seen.get(check.needs, True):
                self.aggregate.notes.append(
                    f"{self.options.origin('select')} {check.id}: ran on no record: none of the "
                    f"{counted(self.aggregate.records, 'record')} holds {what[check.needs]}"
                )

    def _note_the_range(self) -> None:
        """A class range the user declared that leaves whole label values out is said once, as
        a question about the option, beside its (many) `label-out-of-range` findings."""
        from scrub.checks.labels import range_note

        declared = self.options.checks.declared_range  # the user's, not the dataset's own ClassLabel
        info = self.dataset.info
        if (
            declared is None
            or info.label_width is not None
            or "label-out-of-range" not in self.aggregate.by_check
        ):
            return
        name = "num-classes" if self.options.checks.label_range is None else "label-range"
        shown = self.options.checks.num_classes if name == "num-classes" else f"{declared[0]}:{declared[1]}"
        note = range_note(
            self.aggregate.stats.get("labels"),
            declared,
            f"{self.options.origin(name)} {shown}",
            info.classes,
            folders=info.layout == "class-folders",
        )
        if note is not None:
            self.aggregate.notes.append(note)

    def summary(
        self, plan: pipeline.Plan, seconds: float, manifest: Path, compared: dict[str, Any] | None
    ) -> Summary:
        dataset, aggregate, info = self.dataset, self.aggregate, self.dataset.info
        locate = tuple_locator(dataset.reader, dataset.partitions)
        assert dataset.fingerprint is not None  # taken on opening, or from the cache's lookups
        if self.cache is not None:
            self.cache.save()
            aggregate.notes += self.cache.notes
        return Summary(
            dataset=info,
            path=str(dataset.path),
            records=aggregate.records,
            issues_by_check=dict(aggregate.by_check),
            issues_by_severity=dict(aggregate.by_severity),
            records_with_errors=aggregate.records_with(Severity.ERROR, locate),
            records_with_warnings=aggregate.records_with(Severity.WARNING, locate),
            records_warned=aggregate.records_with(Severity.WARNING, locate, exactly=True),
            stats={name: dict(sorted(counter.items())) for name, counter in sorted(aggregate.stats.items())},
            checks=[c.id for c in self.checks],
            options=self.options.verdict_options(),
            scheduler=plan.scheduler,
            workers=plan.workers,
            seconds=seconds,
            manifest=str(manifest),
            datasets={
                source: {**info.files.get(source, {}), **stats.to_dict()}
                for source, stats in sorted(aggregate.numeric.items())
            },
            reading=dataset.reading,
            fingerprint=dataset.fingerprint,
            replay=self.replayed,
            notes=info.notes + aggregate.notes,
            baseline=compared,
            cache=self.cache.describe() if self.cache is not None else None,
            profile=aggregate.profile,
            drift=self.drift,
        )


#: what a cache says of a scan with ``--dummy-loss``
REPLAY_REUSES_NOTHING = (
    "cache: --dummy-loss reads every record for the replay, so no stored result was reused"
)


def _cached(cls: type[Reader]) -> bool:
    """Whether ``--cache`` keeps the results of ``cls``'s records (one by one, or their
    partitions whole)."""
    return cls.cache_entries is not Reader.cache_entries or cls.partition_entry is not Reader.partition_entry


def _open_cache(
    dataset: OpenedDataset, options: ScanOptions, checking: CheckOptions, checks: Sequence
) -> tuple[ResultCache | PartitionResults | None, list[str]]:
    """The result cache for this dataset and these options, or None and a note saying why
    (the reader's records cannot be cached)."""
    from scrub import __version__
    from scrub.scanning.cache import ResultCache, scope_digest

    reader = dataset.reader
    by_record = type(reader).cache_entries is not Reader.cache_entries
    if not by_record and type(reader).partition_entry is Reader.partition_entry:
        from scrub.formats import format_names
        from scrub.readers.base import reader_class

        cached = [name for name in format_names() if _cached(reader_class(name))]
        listed = " and ".join([", ".join(cached[:-1]), cached[-1]] if len(cached) > 1 else cached)
        return None, [
            f"cache: {reader.format} records are not cached ({listed} records are): every record was scanned"
        ]
    scope = scope_digest(
        (
            __version__,
            dataset.reading,
            options.verdict_options(),
            checking.labelled,
            dataset.info.label_width,
            [c.id for c in checks if c.id not in NAMES_NO_RECORD],  # drift judges no record
        )
    )
    assert options.cache is not None  # opened only when --cache is given
    if not by_record:  # its records are checked in blocks: whole partitions are kept
        wholes = PartitionResults(dataset.memo, scope)
        if options.replay is not None:
            wholes.notes.append(REPLAY_REUSES_NOTHING)
        return wholes, []
    cache = ResultCache(options.cache, scope, dataset.path, [c.id for c in checks if c.kind in COLUMN_KINDS])
    if options.replay is not None:
        cache.notes.append(REPLAY_REUSES_NOTHING)
    return cache, []


def _label_kind(
    dataset: OpenedDataset, checking: CheckOptions, scan_options: ScanOptions
) -> tuple[str, str | None]:
    """What the dataset's labels are, class ids or continuous values, with a note to say so
    (`scrub.checks.labels.label_kind`); decided here, once, from a sample of its labels, so that
    every partition judges them alike. ``--label-kind value`` where the labels can only be class
    ids (class folders, a ``ClassLabel``, masks) or beside a class range is an error."""
    info = dataset.info
    declared = info.classes is not None or info.class_range is not None
    masks = Carries.MASKS in dataset.reader.provides
    given = scan_options.origin("label-kind")
    if checking.label_kind != "auto" and not info.labelled:
        raise UsageError(
            f"{given}: {dataset.path} has no labels to judge ({info.format}, {info.layout}); drop it"
        )
    if checking.label_kind == "value":
        if masks or declared:
            what = "segmentation masks" if masks else "class folders" if info.classes else "a ClassLabel"
            raise UsageError(
                f"{given} value: the labels of {dataset.path} are {what}, class ids by what they are"
            )
        if checking.declared_range is not None:
            other = "num-classes" if checking.num_classes is not None else "label-range"
            raise UsageError(
                f"{given} value and {scan_options.origin(other)}: continuous labels have no classes; drop one"
            )
    if not info.labelled or masks:
        return "class", None
    sample = None
    if checking.label_kind == "auto" and not declared and checking.declared_range is None:
        with dataset.memo.in_use():  # a sample read before, of unchanged files, is not read again
            sample = dataset.reader.label_sample(dataset.partitions, LABEL_SAMPLE)
    return label_kind(checking, sample, declared, bool(info.label_width))


def _checking(dataset: OpenedDataset, options: ScanOptions, replay: bool) -> tuple[CheckOptions, str]:
    """The check options for this dataset, and its labels' kind: whether it is labelled, the class
    range it declares, the kind of its labels decided once (said in its notes, as a mask dataset's
    values left unchecked without a class count are)."""
    info, reader = dataset.info, dataset.reader
    checking = replace(options.checks, labelled=info.labelled)
    if checking.declared_range is None and info.class_range is not None:
        checking = replace(checking, label_range=info.class_range)
    if Carries.MASKS in reader.provides and checking.declared_range is None:
        note = "mask values are not checked against a class count (mask-out-of-range): give --num-classes"
        if note not in info.notes:
            info.notes.append(note)
    _check_label_options(dataset, options, replay)
    kind, kind_note = _label_kind(dataset, checking, options)
    if kind_note is not None and kind_note not in info.notes:
        info.notes.append(kind_note)
    return replace(checking, label_kind=kind), kind


def _provided(
    dataset: OpenedDataset, options: ScanOptions, kind: str, replay: bool, split: str | None
) -> set[Carries]:
    """What the run feeds checks: what the reader's records carry, and what the scan's options
    add (a replay, a baseline, a contract, the labels' kind, a split, texts to sign)."""
    info, reader = dataset.info, dataset.reader
    provides = set(reader.provides)
    wanted = {
        Carries.REPLAY: replay,
        Carries.BASELINE: options.baseline is not None,
        Carries.CONTRACT: options.checks.contract is not None,
        Carries.LABEL_VECTORS: bool(info.label_width) and kind == "class",
        Carries.CLASS_LABELS if kind == "class" else Carries.VALUE_LABELS: info.labelled,
        Carries.SPLITS: split is not None,
        Carries.NEAR_TEXTS: bool(options.checks.near_text) and Carries.TOKENS in reader.provides,
    }
    return provides | {carried for carried, given in wanted.items() if given}


def _check_label_options(dataset: OpenedDataset, scan_options: ScanOptions, replay: bool) -> None:
    """A label option that cannot apply is an error, never a silent no-op."""
    options = scan_options.checks
    name = (
        "num-classes" if options.num_classes is not None else "label-range" if options.label_range else None
    )
    if name is None:
        return
    given = scan_options.origin(name)
    info = dataset.info
    if not info.labelled and not replay:
        naming = [
            f"--{name.replace('_', '-')}"
            for name in ("label_key", "labels")
            if name in reader_options(dataset)
        ]
        raise UsageError(
            f"{given}: {dataset.path} has no labels to check ({info.format}, {info.layout}); drop it"
            + (f", or name the labels ({', '.join(naming)})" if naming else "")
            + (f"; {info.label_hint}" if info.label_hint else "")
        )
    width = info.label_width
    if width is not None and name == "label-range":
        raise UsageError(f"{given}: the labels of {dataset.path} are vectors of {width}, not class ids")
    if width is not None and options.num_classes != width:
        raise UsageError(
            f"{given} {options.num_classes}: the labels of {dataset.path} are vectors of {width} classes"
        )


def reader_options(dataset: OpenedDataset) -> frozenset[str]:
    """The `ReadOptions` fields the dataset's reader reads."""
    return type(dataset.reader).options_used


def _replay(
    dataset: OpenedDataset,
    options: CheckOptions,
    replay: ReplayOptions,
    plan: pipeline.Plan,
    aggregate: ScanAggregate,
    checks: Sequence,
) -> dict[str, Any]:
    """The dummy-loss replay: a second pass, featurized in parallel, replayed in record order."""
    if Carries.TOKENS in dataset.reader.provides:
        from scrub.replay.stage import replay_tokens

        return replay_tokens(dataset, options, replay, plan, aggregate, {c.id for c in checks})
    from scrub.replay.replayer import Replayer
    from scrub.replay.stage import ReplayStage, ReplayWork, class_count, feature_spec, standardizer

    config = replay.config(options.precision)
    spec = feature_spec(aggregate.stats, scale=replay.scale, max_pixels=options.max_pixels)
    classes = class_count(
        options.num_classes,
        options.label_range,
        dataset.info.classes,
        aggregate.stats.get("labels"),
        dataset.info.label_width,
    )
    standardize = standardizer(spec, aggregate.stats, aggregate.moments) if config.normalize else None
    selected = {c.id for c in checks}

    def emit(issue: Issue) -> None:
        if issue.check in selected:
            aggregate.add_issue(issue)

    replayer = Replayer(config, classes, spec.dim, standardize, spec.shape or (spec.dim,))
    stage = ReplayStage(replayer, [len(p) for p in dataset.partitions], emit, aggregate.label_flagged)
    work = ReplayWork(dataset.reader, spec)
    pipeline.run(work, dataset.partitions, plan, stage.add, work.failure)
    if config.normalize and standardize is None:
        aggregate.notes.append(
            "dummy-loss replay: no typical rows to standardize with: the raw values were replayed"
        )
    used = standardize if replayer.standardizes else None
    return {
        "classes": classes,
        "features": spec.dim,
        "options": asdict(replay) | {"precision": options.precision},
        "standardization": used.describe() if used is not None else None,
        **stage.finish(),
    }


#: flagged rows fewer than this many rows apart are read back in one reading (the rows between
#: them are read and passed over): a reading per row costs a file's opening each
READ_BACK_GAP = 1024


def _contents(reader: Reader, partitions: Sequence) -> Callable:
    """The content hashes of records keyed by position, read back after the scan: each
    partition's flagged rows in runs of nearby rows (`READ_BACK_GAP`), a reading each run
    (`duplicate` can flag most rows of a dataset of repeated rows)."""
    from scrub.scanning.results import row_digest

    def contents(positions: Sequence[tuple[int, int]]) -> list[str | None]:
        found: dict[tuple[int, int], str] = {}
        by_partition: dict[int, list[int]] = {}
        for number, offset in positions:
            by_partition.setdefault(number, []).append(offset)
        for number, offsets in by_partition.items():
            wanted = np.unique(np.asarray(offsets, np.int64))
            for run in np.split(wanted, np.flatnonzero(np.diff(wanted) > READ_BACK_GAP) + 1):
                want, offset = set(run.tolist()), int(run[0])
                # the reading stays open while the digests are made: a row read in pieces reads then
                for item in reader.read(partitions[number], int(run[0]), int(run[-1]) + 1):
                    size = len(item) if isinstance(item, Batch) else 1
                    if isinstance(item, Batch):
                        for row in range(size):
                            if offset + row in want:
                                found[(number, offset + row)] = row_digest(item, row)
                    offset += size
        return [found.get(position) for position in positions]

    return contents


def tuple_locator(reader, partitions: Sequence) -> Callable:
    """`_locator` giving (source, key, index) tuples (the aggregate's identities)."""
    locate = _locator(reader, partitions)
    return lambda positions: [tuple(identity) for identity in locate(positions)]


def _locator(reader, partitions: Sequence) -> Callable:
    """Resolve (partition, offset) positions to record identities, grouped by partition."""

    def locate(positions: Sequence[tuple[int, int]]) -> list[tuple[str, str, int]]:
        found: dict[tuple[int, int], tuple[str, str, int]] = {}
        by_partition: dict[int, list[int]] = {}
        for number, offset in positions:
            by_partition.setdefault(number, []).append(offset)
        for number, offsets in by_partition.items():
            for offset, identity in zip(offsets, reader.locate(partitions[number], offsets)):
                found[(number, offset)] = identity
        return [found[(number, offset)] for number, offset in positions]

    return locate
