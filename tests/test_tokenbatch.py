"""The token checks' vectorized forms (`scrub.checks.tokenbatch`) give, sequence by sequence,
exactly the findings their record forms give each sequence as a record of input ids."""

from __future__ import annotations

import numpy as np
import pytest

from scrub.checks.base import REGISTRY, CheckOptions
from scrub.records import Batch, Record, TokenRows

TOKEN_CHECKS = [
    "empty-sequence",
    "no-supervised-tokens",
    "empty-attention",
    "token-out-of-range",
    "sequence-too-long",
]


def random_rows(seed: int, dtype: str) -> TokenRows:
    rng = np.random.default_rng(seed)
    lengths = rng.choice([0, 1, 2, 3, 17, 64, 65, 200], size=300)
    low = -5 if np.dtype(dtype).kind == "i" else 0
    tokens = rng.integers(low, 1010, int(lengths.sum())).astype(dtype)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return TokenRows(tokens, bounds)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", ["uint16", "int32"])
@pytest.mark.parametrize(
    "options",
    [
        CheckOptions(labelled=False, vocab_size=1000, max_length=64),
        CheckOptions(labelled=False, vocab_size=1000, max_positions=100),
        CheckOptions(labelled=False, max_length=1, max_positions=150),
        CheckOptions(labelled=False),
    ],
)
def test_batch_forms_find_what_record_forms_find(seed, dtype, options):
    rows = random_rows(seed, dtype)
    batch = Batch("t.bin", 1000, 0, rows)
    for check_id in TOKEN_CHECKS:
        check = REGISTRY[check_id]
        assert check.batch is not None and check.func is not None
        batched = {row: finding for row, finding in check.batch(batch, options)}
        each = {}
        for row in range(len(rows)):
            record = Record("t.bin", str(1000 + row), 1000 + row, rows[row], meta={"kind": "tokens"})
            finding = check.func(record, options)
            if finding is not None:
                each[row] = finding
        assert batched == each, check_id


def test_token_rows_slice_into_views_with_their_own_bounds():
    rows = TokenRows(np.arange(10, dtype=np.uint16), np.array([0, 3, 3, 7, 10]))
    part = rows[1:3]
    assert len(part) == 2 and list(part.bounds) == [0, 0, 4] and list(part[1]) == [3, 4, 5, 6]
    assert list(rows.lengths) == [3, 0, 4, 3] and np.shares_memory(part.tokens, rows.tokens)
