"""The token checks' vectorized forms, over `TokenRows`: many sequences of ids only (a Megatron
``.bin``'s documents, windows of a nanoGPT or llm.c token file), end to end in one array.

Each form gives exactly the findings its record form (`scrub.checks.tokens`) gives each of
those sequences as a record of input ids without labels or attention mask: its labels are its
ids, shifted by one as a causal model shifts them, so a sequence of fewer than two tokens (within
``--max-length``) has no supervised token. The common case costs one pass over the tokens: the
batch's largest id (and, for a signed store, its smallest) against the vocabulary; only a batch
that holds an id out of range is split per sequence, and only flagged sequences are examined
further, so a store is checked at about the speed its pages are read.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from scrub.checks.base import CheckOptions, Finding, batch_check
from scrub.checks.tokens import ONE_TOKEN, model_positions, vocabulary_size
from scrub.records import Batch, Severity, TokenRows

Found = list[tuple[int, Finding]]


def _rows(batch: Batch) -> TokenRows | None:
    return batch.data if isinstance(batch.data, TokenRows) else None


@batch_check("empty-sequence")
def empty_sequences(batch: Batch, options: CheckOptions) -> Found:
    rows = _rows(batch)
    if rows is None:
        return []
    return [(int(row), Finding("empty sequence: no token")) for row in np.flatnonzero(rows.lengths == 0)]


@batch_check("no-supervised-tokens")
def no_supervised(batch: Batch, options: CheckOptions) -> Found:
    rows = _rows(batch)
    if rows is None:
        return []
    lengths = rows.lengths
    cut = lengths if options.max_length is None else np.minimum(lengths, options.max_length)
    found = []
    for row in np.flatnonzero((cut == 1) & (lengths > 0)):  # one token: nothing left after the shift
        length = int(lengths[row])
        details: dict = {"length": length}
        if options.max_length is not None and length > options.max_length:
            details["max_length"] = options.max_length
            found.append(
                (
                    int(row),
                    Finding(
                        f"no supervised token within the first {options.max_length} (--max-length) of "
                        f"{length} tokens: the loss over it is NaN",
                        details,
                    ),
                )
            )
        else:
            found.append(
                (
                    int(row),
                    Finding(ONE_TOKEN, details),
                )
            )
    return found


@batch_check("empty-attention")
def empty_attention(batch: Batch, options: CheckOptions) -> Found:
    """Sequences of ids only carry no attention mask: every token attends, nothing to find."""
    return []


@batch_check("token-out-of-range")
def out_of_range(batch: Batch, options: CheckOptions) -> Found:
    rows = _rows(batch)
    if rows is None or not rows.tokens.size:
        return []
    tokens = rows.tokens
    vocabulary = options.vocab_size if options.vocab_size is not None else vocabulary_size(options)
    signed = tokens.dtype.kind == "i"
    high = int(tokens.max()) if vocabulary is not None else None
    low = int(tokens.min()) if signed else 0
    if low >= 0 and (high is None or high < cast(int, vocabulary)):
        return []  # the common case: one pass, no finding
    lengths = rows.lengths
    present = np.flatnonzero(lengths > 0)  # reduceat over the non-empty rows: their runs are exact
    starts = rows.bounds[present]
    lows = np.minimum.reduceat(tokens, starts) if signed else np.zeros(len(present), tokens.dtype)
    highs = np.maximum.reduceat(tokens, starts)
    bad = (lows < 0) | (highs >= vocabulary if vocabulary is not None else False)
    found = []
    for where in np.flatnonzero(bad):
        row = int(present[where])
        values = rows[row]
        if lows[where] < 0:
            value = int(lows[where])
            position = int(np.argmax(values < 0))
            found.append(
                (
                    row,
                    Finding(
                        f"token id {value} is negative",
                        {"what": "token id", "value": value, "position": position},
                    ),
                )
            )
            continue
        value = int(highs[where])
        position = int(np.argmax(values >= vocabulary))
        found.append(
            (
                row,
                Finding(
                    f"token id {value} >= vocabulary size {vocabulary}",
                    {"what": "token id", "value": value, "position": position, "vocab_size": vocabulary},
                ),
            )
        )
    return found


@batch_check("sequence-too-long")
def too_long(batch: Batch, options: CheckOptions) -> Found:
    rows = _rows(batch)
    if rows is None:
        return []
    positions = options.max_positions if options.max_positions is not None else model_positions(options)
    limit = options.max_length
    if positions is None and limit is None:
        return []
    lengths = rows.lengths
    truncates = lengths > limit if limit is not None else np.zeros(len(lengths), bool)
    beyond = (lengths > positions) & ~truncates if positions is not None else np.zeros(len(lengths), bool)
    found: Found = []
    for row in np.flatnonzero(beyond | truncates):
        length = int(lengths[row])
        if beyond[row]:
            finding = Finding(
                f"{length} tokens > the model's {positions} positions",
                {"length": length, "max_positions": positions},
                severity=Severity.ERROR,
            )
        else:
            finding = Finding(
                f"{length} tokens > --max-length {limit}: truncated, the rest is never learned",
                {"length": length, "max_length": limit},
            )
        found.append((int(row), finding))
    return found
