"""The replay as a pipeline stage: workers featurize partitions in parallel, the driver replays
them strictly in record order.

`ReplayWork` is the picklable per-partition function `scrub.pipeline` maps (like
`scrub.scanning.runner.PartitionWork`); it returns a `ReplayPiece`. `ReplayStage` receives pieces in
whatever order they complete, holds those that arrive early, and feeds each partition to the
`Replayer` as soon as every partition before it has been fed: the replay sees one stream in
record order, whatever the scheduler and the number of workers. Memory: the features of the
partitions that finish ahead of a slower one (a few partitions' worth).

The stage knows no format: the vector length comes from what the scan saw (image records, or
the most common array shape), the class count from the options or the scan's label histogram.
Token data (`scrub.replay.tokens`) goes the same way as sequences: `TokenExtentWork` first finds
the largest id and the longest sequence when the options do not give them. The token replay
skips the records the scan condemned (an error: `condemned_offsets`), whose findings a language
model's loss would only repeat, and says so in a note; the stage feeds the first batch alone,
times it, and says up front what the rest will cost when that is over `SAID_COST_SECONDS`.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scrub.checks.imagedecode import NUMERIC_MODES
from scrub.readers.base import Reader
from scrub.records import Batch, Issue, Record, Severity, TokenRows
from scrub.replay.features import Features, FeatureSpec, featurize_batch, featurize_records
from scrub.replay.replayer import Replayer
from scrub.replay.standardize import PIXELS, Moments, Standardizer
from scrub.replay.tokens import TokenFeatures, TokenSpec, featurize_token_records, token_extent
from scrub.wording import agreeing, counted

log = logging.getLogger(__name__)

#: a replay estimated to take longer than this (seconds, from its first batch) says so up front
SAID_COST_SECONDS = 10.0


@dataclass
class ReplayPiece:
    """The features of records ``start .. start + records`` of a partition."""

    partition: int
    start: int
    records: int
    features: Features | TokenFeatures


class ReplayWork:
    """Featurize every record of a partition (worker side)."""

    def __init__(
        self, reader: Reader, spec: FeatureSpec | TokenSpec, condemned: dict[int, np.ndarray] | None = None
    ) -> None:
        self.reader = reader
        self.spec = spec
        #: partition -> offsets (sorted) of the records the scan already condemned: token records
        #: there are not replayed (counted as "condemned"), their errors are the scan's
        self.condemned = condemned or {}

    def __call__(
        self,
        partition_no: int,
        partition: Sequence[Any],
        start: int = 0,
        stop: int | None = None,
        on_record: Callable[[int], None] | None = None,
    ) -> ReplayPiece:
        spec = self.spec
        if isinstance(spec, TokenSpec):
            return self._tokens(partition_no, partition, spec, start, stop, on_record)
        parts: list[Features] = []
        records: list = []
        offset = start
        for item in self.reader.read(partition, start, stop):
            if on_record is not None:
                on_record(offset)
            if isinstance(item, Batch):
                parts.append(featurize_batch(item, spec))
                offset += len(item)
            else:
                records.append(item)
                offset += 1
        if records:
            parts.append(featurize_records(records, spec))
        return ReplayPiece(partition_no, start, offset - start, Features.concatenate(parts, spec.dim))

    def _tokens(
        self,
        partition_no: int,
        partition: Sequence[Any],
        spec: TokenSpec,
        start: int,
        stop: int | None,
        on_record: Callable[[int], None] | None,
    ) -> ReplayPiece:
        skipped: Counter[str] = Counter()
        condemned = self.condemned.get(partition_no)
        reading = TokenRecords(self.reader, partition, start, stop, on_record, skipped, condemned)
        features = featurize_token_records(list(reading), spec)
        features.skipped.update(skipped)
        return ReplayPiece(partition_no, start, reading.read, features)

    def failure(self, partition_no: int, partition: Sequence[Any], offset: int, reason: str) -> ReplayPiece:
        """A record that crashed or hung its worker (the scan reported it): not replayed."""
        crashed = Counter({"crashed": 1})
        if isinstance(self.spec, TokenSpec):
            return ReplayPiece(partition_no, offset, 1, TokenFeatures.empty(crashed))
        return ReplayPiece(partition_no, offset, 1, Features.empty(self.spec.dim, crashed))


class TokenRecords:
    """The language-model records of a partition's slice, as both token passes read them: a flat
    token store's batches (`TokenRows`) as a record a sequence (`token_rows`), batches of numbers
    left out (counted as "payload" in ``skipped``, when given), ``on_record`` told the offset of
    each item read. ``read`` counts the records read so far, the piece's extent. Records at the
    ``condemned`` offsets of the partition (sorted) are left out, counted as "condemned"."""

    def __init__(
        self,
        reader: Reader,
        partition: Sequence[Any],
        start: int,
        stop: int | None,
        on_record: Callable[[int], None] | None,
        skipped: Counter[str] | None = None,
        condemned: np.ndarray | None = None,
    ) -> None:
        self.reader, self.partition, self.start, self.stop = reader, partition, start, stop
        self.on_record = on_record
        self.skipped = skipped if skipped is not None or condemned is None else Counter()
        self.condemned = condemned if condemned is not None and len(condemned) else None
        self.read = 0

    def __iter__(self) -> Iterator[Record]:
        for item in self.reader.read(self.partition, self.start, self.stop):
            offset = self.start + self.read
            if self.on_record is not None:
                self.on_record(offset)
            if isinstance(item, Batch):
                self.read += len(item)
                as_records = records_of_batches(item.data)
                if as_records is not None:
                    yield from as_records(item, self.skipped, self._condemned(offset, len(item)))
                elif self.skipped is not None:  # rows of numbers: not a language model's records
                    self.skipped["payload"] += len(item)
                continue
            self.read += 1
            if self._condemned(offset, 1) is not None:
                assert self.skipped is not None  # a Counter whenever there are condemned offsets
                self.skipped["condemned"] += 1
                continue
            yield item

    def _condemned(self, offset: int, count: int) -> np.ndarray | None:
        """Which of the ``count`` records from ``offset`` are condemned (None: none)."""
        if self.condemned is None:
            return None
        low, high = np.searchsorted(self.condemned, [offset, offset + count])
        if low == high:
            return None
        mask = np.zeros(count, bool)
        mask[self.condemned[low:high] - offset] = True
        return mask


def token_rows(
    batch: Batch, skipped: Counter[str] | None = None, condemned: np.ndarray | None = None
) -> list[Record]:
    """The sequences of a flat token store's batch (`TokenRows`) as token records, each its own
    copy of its ids (the batch may be a view of a memory map). Training packs such a store's
    documents into samples, so one of fewer than two tokens never has a loss of its own: it is
    counted in ``skipped`` ("packed") rather than replayed alone into a 0/0. The rows where
    ``condemned`` (a mask) is true are left out, counted as "condemned"."""
    rows = batch.data
    keep = np.ones(len(batch), bool)
    if condemned is not None:
        keep &= ~condemned
        if skipped is not None:
            skipped["condemned"] += int(np.count_nonzero(condemned))
    if skipped is not None:
        short = keep & (np.asarray(rows.lengths) < 2)
        skipped["packed"] += int(np.count_nonzero(short))
        keep &= ~short
    return [
        Record(batch.source, batch.key(row), batch.start + row, np.array(rows[row]), meta={"kind": "tokens"})
        for row in np.flatnonzero(keep).tolist()
    ]


@dataclass
class TokenExtent:
    """The largest id (or label), the longest sequence as fed, and the text records that cannot
    be tokenized, of some records."""

    largest: int = -1
    longest: int = 0
    texts: int = 0

    def add(self, other: "TokenExtent") -> None:
        self.largest = max(self.largest, other.largest)
        self.longest = max(self.longest, other.longest)
        self.texts += other.texts


class TokenExtentWork:
    """`TokenExtent` of a partition (worker side): the replay's pass before its first batch, when
    ``--vocab-size`` (or, for a PyTorch factory, ``--max-length``) is not given."""

    def __init__(self, reader: Reader, spec: TokenSpec) -> None:
        self.reader = reader
        self.spec = spec

    def __call__(
        self,
        partition_no: int,
        partition: Sequence[Any],
        start: int = 0,
        stop: int | None = None,
        on_record: Callable[[int], None] | None = None,
    ) -> TokenExtent:
        records = TokenRecords(self.reader, partition, start, stop, on_record)  # short sequences too
        return TokenExtent(*token_extent(records, self.spec.options))

    def failure(self, partition_no: int, partition: Sequence[Any], offset: int, reason: str) -> TokenExtent:
        return TokenExtent()


@dataclass
class ReplayStage:
    """Feeds pieces to the replayer in record order; collects its issues (driver side)."""

    replayer: Replayer
    sizes: list[int]  # records per partition
    emit: Callable[[Issue], None]
    #: identities that already have a label issue from the scan: the replay's own
    #: `label-out-of-range` for them would repeat it
    labelled_bad: set[tuple[str, str]] = field(default_factory=set)
    skipped: Counter = field(default_factory=Counter)
    #: seconds the rest of the replay should take, estimated after its first batch (`_say_cost`)
    estimate: float | None = None
    _next: int = 0
    _waiting: dict[int, list[ReplayPiece]] = field(default_factory=dict)
    _seconds: float = 0.0  # spent in the replayer

    def add(self, piece: ReplayPiece) -> None:
        self._waiting.setdefault(piece.partition, []).append(piece)
        while self._next < len(self.sizes) and self._complete(self._next):
            for ready in sorted(self._waiting.pop(self._next), key=lambda p: p.start):
                self._feed(ready.features)
            self._next += 1

    def _complete(self, partition: int) -> bool:
        return sum(p.records for p in self._waiting.get(partition, ())) >= self.sizes[partition]

    def _feed(self, features: Features | TokenFeatures) -> None:
        self.skipped.update(features.skipped)
        low = 0
        while low < len(features):
            # a batch at a time until the first batch has run and been timed, then all at once
            high = low + self.replayer.config.batch_size if self.estimate is None else len(features)
            started = time.perf_counter()
            issues = self.replayer.feed(
                features.identities[low:high], features.X[low:high], features.y[low:high]
            )
            self._seconds += time.perf_counter() - started
            self._emit(issues)
            if self.estimate is None and self.replayer.stats.batches:
                self._say_cost()
            low = high

    def _say_cost(self) -> None:
        """Estimate the rest of the replay from its first batch; say it when it is over
        `SAID_COST_SECONDS` (on stderr, as ``scrub: ...``; not with --quiet)."""
        done = self.replayer.stats.batches
        per_batch = self._seconds / done
        left = max(math.ceil(sum(self.sizes) / self.replayer.config.batch_size) - done, 0)
        self.estimate = per_batch * left
        if self.estimate > SAID_COST_SECONDS:
            log.info(
                "dummy-loss replay: the first batch took %.2g s: about %s for the other %s "
                "(--batch-size, --max-length or a sample of the data shortens it)",
                per_batch,
                duration(self.estimate),
                counted(left, "batch"),
            )

    def finish(self) -> dict[str, Any]:
        if self._next != len(self.sizes):
            missing = [p for p in range(self._next, len(self.sizes)) if not self._complete(p)]
            raise RuntimeError(f"replay: partitions {missing[:5]} never completed")
        started = time.perf_counter()
        self._emit(self.replayer.finish())
        self._seconds += time.perf_counter() - started
        return {
            **self.replayer.stats.to_dict(),
            "seconds": round(self._seconds, 3),
            "skipped": dict(self.skipped),
        }

    def _emit(self, issues: list[Issue]) -> None:
        for issue in issues:
            if issue.check == "label-out-of-range" and (issue.source, issue.key) in self.labelled_bad:
                continue
            self.emit(issue)


def duration(seconds: float) -> str:
    """``45 s``, ``3.2 min``, ``1.5 h``: a duration as a person reads it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.2g} min"
    return f"{seconds / 3600:.2g} h"


def feature_spec(
    stats: dict[str, Counter], image_size: int = 16, scale: float | None = None, max_pixels: int | None = None
) -> FeatureSpec:
    """Images when most records the scan saw were images, else the most common array shape."""
    images = sum(stats.get("formats", Counter()).values())
    shapes = stats.get("shapes", Counter())
    if shapes and sum(shapes.values()) > images:
        shape = max(shapes.items(), key=lambda item: (item[1], item[0]))[0]
        return FeatureSpec.for_arrays(
            tuple(int(n) for n in str(shape).split("x") if n), scale=scale, max_pixels=max_pixels
        )
    return FeatureSpec.for_images(image_size, scale=scale, max_pixels=max_pixels)


def standardizer(
    spec: FeatureSpec, stats: dict[str, Counter], moments: dict[str, Moments]
) -> Standardizer | None:
    """How the replay standardizes (see `scrub.replay.standardize`): ImageNet's statistics for
    8-bit images, the scan's pixel statistics when most images are float, the scan's per-feature
    statistics of the dominant row shape for arrays; None when the scan found no typical row."""
    if spec.images:
        modes = stats.get("modes", Counter())
        numeric = sum(n for mode, n in modes.items() if mode in NUMERIC_MODES)
        if numeric * 2 > sum(modes.values()):
            return Standardizer.from_moments(moments.get(PIXELS), spec.dim, "pixels")
        return Standardizer.for_rgb(spec.image_size)
    return Standardizer.from_moments(moments.get("x".join(map(str, spec.shape))), spec.dim, "features")


def class_count(
    num_classes: int | None,
    label_range: tuple[int, int] | None,
    classes: list[str] | None,
    labels: Counter | None,
    label_width: int | None = None,
) -> int:
    """C: declared (``--num-classes``, the top of ``--label-range``), the width of label
    vectors, the class folders, or one more than the largest label that is not a far outlier
    (`label-outlier`'s rule); at least 2, so that even unlabelled data has a loss to go wrong."""
    from scrub.checks.dataset import far_labels

    if num_classes is not None:
        return max(2, num_classes)
    if label_width is not None:
        return max(2, label_width)
    if label_range is not None:
        return max(2, label_range[1])
    if classes:
        return max(2, len(classes))
    if labels:
        distinct = np.array(sorted(float(v) for v in labels), dtype=np.float64)
        counts = np.array([labels[v] for v in sorted(labels, key=float)], dtype=np.int64)
        far = set(far_labels(distinct, counts).tolist())
        usable = [v for v in distinct.tolist() if v >= 0 and v not in far]
        if usable:
            return max(2, int(max(usable)) + 1)
    return 2


def condemned_offsets(aggregate: Any) -> dict[int, np.ndarray]:
    """Partition -> offsets of the records the scan found an error in (``aggregate``: the
    scan's `ScanAggregate`, which marks them). The token replay skips them: on an embedding
    model, a record the checks condemned gives back what they found (a mean over no token)."""
    return {
        partition: np.flatnonzero(mask)
        for partition, mask in aggregate.marks.get(Severity.ERROR.value, {}).items()
        if mask.any()
    }


def replay_tokens(
    dataset: Any, options: Any, replay: Any, plan: Any, aggregate: Any, selected: set[str]
) -> dict[str, Any]:
    """The replay of token data (`scrub.replay.tokens`), inside a scan: V from ``--vocab-size``,
    else ``--tokenizer``, else one more than the data's largest id (a first pass finds it, and the
    longest sequence for a PyTorch factory's ``max_length`` when ``--max-length`` is not given).
    ``dataset`` is the `OpenedDataset`, ``options`` its `CheckOptions`, ``aggregate`` the scan's
    `ScanAggregate`, which receives the issues of the checks in ``selected`` and the notes."""
    from dataclasses import asdict

    from scrub import pipeline
    from scrub.replay.config import ReplayStats
    from scrub.replay.tokens import EMBEDDING_DIM, MAX_DERIVED_VOCABULARY, MODEL_VOCABULARY

    config = replay.config(options.precision)
    vocab, origin = options.vocab_size, "--vocab-size"
    if vocab is None and options.tokenizer is not None:
        from scrub.vocabulary import load_vocabulary

        vocab, origin = load_vocabulary(options.tokenizer).size, "--tokenizer"
    longest = options.max_length
    if vocab is None or (longest is None and ":" in config.model):
        extent = TokenExtent()
        probe = TokenExtentWork(dataset.reader, TokenSpec(1, options))
        pipeline.run(probe, dataset.partitions, plan, extent.add, probe.failure)
        if vocab is None:
            vocab, origin = extent.largest + 1, "data"
        longest = extent.longest if longest is None else longest
    described = {
        "classes": vocab,
        "features": EMBEDDING_DIM,
        "options": asdict(replay) | {"precision": options.precision},
        "standardization": None,
        "tokens": {
            "vocab_size": vocab,
            "vocab_from": origin,
            "ignore_index": options.token_ignore_index,
            "max_length": options.max_length,
            # the built-in model's vocabulary: V's tokens hashed into at most MODEL_VOCABULARY
            "model_vocabulary": None if ":" in config.model else min(vocab, MODEL_VOCABULARY),
        },
    }
    if vocab < 1 or (origin == "data" and vocab > MAX_DERIVED_VOCABULARY):
        why = (
            "no token id in the data"
            if vocab < 1
            else f"the largest token id, {vocab - 1:,}, is beyond any vocabulary: give --vocab-size "
            "(token-out-of-range then names the records above it)"
        )
        aggregate.notes.append(f"dummy-loss replay: not run: {why}")
        return described | ReplayStats().to_dict() | {"skipped": {}}

    def emit(issue: Issue) -> None:
        if issue.check in selected:
            aggregate.add_issue(issue)

    replayer = Replayer(config, vocab, EMBEDDING_DIM, None, (max(longest or 1, 1),), tokens=True)
    stage = ReplayStage(replayer, [len(p) for p in dataset.partitions], emit, aggregate.label_flagged)
    work = ReplayWork(dataset.reader, TokenSpec(vocab, options), condemned_offsets(aggregate))
    pipeline.run(work, dataset.partitions, plan, stage.add, work.failure)
    found = stage.finish()
    condemned = found["skipped"].get("condemned", 0)
    if condemned:
        aggregate.notes.append(
            f"dummy-loss replay: {counted(condemned, 'record')} skipped: already condemned by the scan "
            "(an error above); the replay names what the checks cannot"
        )
    packed = found["skipped"].get("packed", 0)
    if packed:
        aggregate.notes.append(
            f"dummy-loss replay: {counted(packed, 'document')} of fewer than two tokens not replayed alone: "
            "training packs them into samples with their neighbours"
        )
    texts = found["skipped"].get("text", 0)
    if texts:
        aggregate.notes.append(
            f"dummy-loss replay: {counted(texts, 'text record')} not replayed: "
            f"{agreeing(texts, 'it becomes', 'they become')} tokens only with --tokenizer"
        )
    return described | found


#: payload type -> how a batch of it becomes language-model records for the token replay
#: (``(batch, skipped, condemned) -> records``, as `token_rows`); a format whose batches carry
#: token sequences of its own kind registers it here. Other batches are rows of numbers.
TOKEN_BATCHES: dict[type, Callable[[Batch, Counter[str] | None, np.ndarray | None], list[Record]]] = {
    TokenRows: token_rows
}


def records_of_batches(
    data: Any,
) -> Callable[[Batch, Counter[str] | None, np.ndarray | None], list[Record]] | None:
    """How batches of ``data``'s type (or its nearest registered base) become token records;
    None for rows of numbers."""
    return next((TOKEN_BATCHES[kind] for kind in type(data).__mro__ if kind in TOKEN_BATCHES), None)
