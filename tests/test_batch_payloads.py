"""How a batch is checked is registered by the type of its payload, not tested for in the runner:
a format whose batches carry a payload of its own registers its handling
(`scrub.scanning.runner.handles_batches`), a subclass of a registered type is handled as its base,
and an unregistered one is checked as rows of numbers."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from scrub.checks.base import CheckOptions, get
from scrub.profile.collect import Collector
from scrub.records import Batch, TokenRows
from scrub.scanning import runner
from scrub.scanning.runner import ROW_BATCHES, BatchHandling, PartitionWork, batch_handling


class Words(list):
    """A payload of its own: rows of words (a list slices as rows do)."""


class WordReader:
    """Reads one batch of words a partition (a reader's `read`, all the runner asks of it)."""

    def read(self, partition: list[str], start: int = 0, stop: int | None = None) -> Iterator[Batch]:
        yield Batch("words.txt", start, start, Words(partition[start:stop]))


def test_a_payload_of_its_own_is_checked_by_its_registered_handling(monkeypatch):
    seen: list[list[str]] = []

    def check(work, rows, plan, columns, label_counts, result, encoder):
        seen.append(list(rows.data))

    monkeypatch.setitem(runner.BATCH_HANDLERS, Words, BatchHandling(check, Collector.rows))
    work = PartitionWork(WordReader(), CheckOptions(), [get("nonfinite-data")])  # type: ignore[arg-type]
    result = work(0, ["a", "b", "c"])
    assert seen == [["a", "b", "c"]] and result.records == 3


def test_subclasses_are_handled_as_their_base_and_others_as_rows():
    class Packed(TokenRows):
        pass

    tokens = TokenRows(np.arange(4), np.array([0, 2, 4]))
    assert batch_handling(Packed(tokens.tokens, tokens.bounds)) is batch_handling(tokens)
    assert batch_handling(tokens) is not ROW_BATCHES
    assert batch_handling(np.zeros((2, 3))) is ROW_BATCHES
    assert batch_handling(Words()) is ROW_BATCHES  # not registered outside its test
