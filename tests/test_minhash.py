"""Near-duplicate texts by MinHash LSH (`scrub.checks.minhash`): its signatures are datasketch's,
position for position; an edited copy of a document is paired with its original, unrelated
documents are not, and texts without words match nothing."""

from __future__ import annotations

import codecs
import random
import this

import numpy as np
import pytest
import xxhash

from scrub.checks import minhash
from scrub.checks.minhash import (
    BANDS,
    NO_SIGNATURE,
    NUM_PERM,
    ROWS,
    SHINGLE_WORDS,
    THRESHOLD,
    band_keys,
    near_text_pairs,
    shingles,
    signatures,
)

#: the words of the Zen of Python (``this`` holds it in ROT13): a vocabulary of ~80 words
WORDS = codecs.decode(this.s, "rot13").split()


def document(rng: random.Random, length: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(length)]


def changed(words: list[str], positions: list[int]) -> list[str]:
    """``words`` with each of ``positions`` replaced by a word the vocabulary does not hold."""
    return [f"edit{number}" if number in positions else word for number, word in enumerate(words)]


def pairs(known: list[str], queries: list[str]) -> list[tuple[int, int, float]]:
    known_signatures, query_signatures = signatures(known), signatures(queries)
    found = near_text_pairs(
        band_keys(known_signatures), known_signatures, band_keys(query_signatures), query_signatures
    )
    return [(int(query), int(match), float(estimate)) for query, match, estimate in zip(*found)]


def exact_jaccard(first: str, second: str) -> float:
    one, other = set(shingles(first)), set(shingles(second))
    return len(one & other) / len(one | other)


def test_signatures_are_datasketchs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same shingle hashes give datasketch's ``MinHash`` (default scheme and seed) the same
    values at every position, whatever the text and however the shingles fall into steps."""
    datasketch = pytest.importorskip("datasketch", minversion="2.0")
    rng = random.Random(1)
    texts = [" ".join(document(rng, length)) for length in (1, 2, 4, 5, 6, 50, 300)]
    texts += ["Ünïcödé  TEXT\twith\nWhitespace", "straße STRASSE", " ".join(WORDS)]
    monkeypatch.setattr(minhash, "SHINGLES_PER_STEP", 7)  # a text's shingles over several steps
    made = signatures(texts)
    assert made.dtype == np.uint32 and made.shape == (len(texts), NUM_PERM)
    for text, signature in zip(texts, made):
        sketch = datasketch.MinHash(num_perm=NUM_PERM, hashfunc=xxhash.xxh32_intdigest)
        sketch.update_batch([shingle.encode() for shingle in shingles(text)])
        assert np.array_equal(sketch.hashvalues, signature), text
    monkeypatch.undo()
    assert np.array_equal(signatures(texts), made)


def test_shingles_of_normalized_words() -> None:
    """Shingles are runs of words of the normalized text; a short text is one shingle, an empty
    one has none."""
    assert shingles("One  TWO three\nfour five six") == ["one two three four five", "two three four five six"]
    assert shingles("Hello   WORLD") == ["hello world"]
    assert shingles("a b c d e") == ["a b c d e"]
    assert shingles("") == [] and shingles(" \n\t") == []
    assert SHINGLE_WORDS == 5


def test_edited_copies_are_paired_with_their_originals() -> None:
    """A 200-word document with a word or two changed, a word inserted or deleted, is paired with
    its original among 300 documents, at about its true Jaccard similarity."""
    rng = random.Random(2)
    known = [document(rng, 200) for _ in range(300)]
    edits = {
        10: changed(known[10], [50]),
        20: changed(known[20], [30, 150]),
        30: known[30][:100] + ["inserted"] + known[30][100:],
        40: known[40][:70] + known[40][71:],
        50: list(known[50]),
    }
    queries = [" ".join(words) for words in edits.values()]
    found = pairs([" ".join(words) for words in known], queries)
    assert [(query, match) for query, match, _ in found] == list(enumerate(edits))
    for query, match, estimate in found:
        true = exact_jaccard(queries[query], " ".join(known[match]))
        assert estimate >= THRESHOLD and abs(estimate - true) < 0.12


def test_one_changed_word_in_fifty_is_at_the_threshold() -> None:
    """Why the tests above use 200 words: a word changed in the middle of a 50-word document
    breaks the 5 shingles that hold it, a true Jaccard similarity of 41 / 51 = 0.80, right at
    `THRESHOLD`: such a copy is found about half the time (docs/benchmarks.md)."""
    words = document(random.Random(3), 50)
    assert exact_jaccard(" ".join(words), " ".join(changed(words, [25]))) == pytest.approx(41 / 51)


def test_unrelated_documents_are_not_paired() -> None:
    rng = random.Random(4)
    known = [" ".join(document(rng, rng.randint(20, 200))) for _ in range(300)]
    queries = [" ".join(document(rng, rng.randint(20, 200))) for _ in range(300)]
    assert pairs(known, queries) == []


def test_the_most_similar_and_first_known_is_named() -> None:
    """A query near two known documents is paired with the nearer; of identical known
    documents, with the first."""
    rng = random.Random(5)
    original = document(rng, 200)
    known = [
        " ".join(document(rng, 200)),
        " ".join(changed(original, [20, 60, 100])),
        " ".join(original),
        " ".join(original).upper(),  # the same normalized text: the same signature
    ]
    assert [(query, match) for query, match, _ in pairs(known, [" ".join(original)])] == [(0, 2)]
    assert pairs(known, [" ".join(original)])[0][2] == 1.0


def test_texts_without_words_match_nothing() -> None:
    """An empty text has no signature and is paired with nothing, not even another empty text; a
    text shorter than a shingle is paired with the same words only."""
    made = signatures(["", "   ", "hello world"])
    assert np.all(made[:2] == NO_SIGNATURE) and not np.all(made[2] == NO_SIGNATURE)
    known = ["", "hello world", "hello there", "  "]
    assert pairs(known, ["", " \n", "Hello   WORLD", "world hello"]) == [(2, 1, 1.0)]
    assert pairs(["", ""], ["", "hello"]) == []


def test_nothing_to_compare() -> None:
    empty = signatures([])
    assert empty.shape == (0, NUM_PERM) and band_keys(empty).shape == (0, BANDS)
    assert pairs([], ["hello world"]) == [] and pairs(["hello world"], []) == []


def test_band_keys() -> None:
    """A band's key depends on its rows only; a band of other values has another key."""
    made = signatures(["one two three four five six", "seven eight nine ten eleven twelve"])
    keys = band_keys(made)
    assert keys.dtype == np.uint64 and keys.shape == (2, BANDS)
    mixed = made[0].copy()
    mixed[ROWS:] = made[1][ROWS:]  # the first band of the first, the rest of the second
    keys_mixed = band_keys(mixed[None])[0]
    assert keys_mixed[0] == keys[0, 0] and np.array_equal(keys_mixed[1:], keys[1, 1:])
    assert not np.any(keys[0] == keys[1])
    with pytest.raises(ValueError, match="need 136 values"):
        band_keys(made, bands=17, rows=8)


def test_bands_rise_below_the_threshold() -> None:
    """The S-curve of `BANDS` x `ROWS` rises below `THRESHOLD`: a pair at it is a candidate 19
    times in 20."""
    assert BANDS * ROWS <= NUM_PERM
    assert (1 / BANDS) ** (1 / ROWS) < THRESHOLD
    assert 1 - (1 - THRESHOLD**ROWS) ** BANDS > 0.94
