"""Near-duplicate texts by MinHash and locality-sensitive hashing (LSH): a text of an evaluation
split that is a lightly edited copy of a training text, found without comparing every pair.

A text is the set of its shingles: each run of `SHINGLE_WORDS` consecutive words of its
`normalized_text` (so case, Unicode form and whitespace make no difference, as for the exact
identity). Two texts' resemblance is the Jaccard similarity of their shingle sets, |A ∩ B| /
|A ∪ B|; a word changed, inserted or deleted breaks the up to `SHINGLE_WORDS` shingles that hold
it, so the longer a text, the more edits a near copy of it may have. A text of fewer words than a
shingle is one shingle of all its words (it is near only to the same words); a text without
words (empty, or only whitespace) has no signature (`NO_SIGNATURE`) and matches nothing: no
resemblance can be estimated of an empty set.

A signature estimates the resemblance: `NUM_PERM` values, each the minimum over a text's
shingles of one random permutation of their hashes; two texts agree at a position with the
probability of their Jaccard similarity, so the fraction of positions that agree is its
estimate (standard error sqrt(J (1 - J) / `NUM_PERM`)). The scheme is datasketch's (``MinHash``,
its default ``affine32`` scheme since 2.0, seed `SEED`), so that a signature made here is the
one datasketch makes of the same shingle hashes, position for position: each shingle's UTF-8
bytes hashed to 32 bits (xxHash's XXH32), mixed once by MurmurHash3's 32-bit finalizer, then
permuted by ``a * h + b mod 2^32`` (``a`` odd: a bijection), ``a`` and ``b`` drawn from NumPy's
``RandomState(seed)``. Here every text of a batch is made in a few NumPy calls over all their
shingles, not a Python loop over the permutations of each text.

LSH finds the candidate pairs: a signature's first `BANDS` x `ROWS` values are cut into `BANDS`
bands of `ROWS`, each band hashed to a 64-bit key (`band_keys`); two texts that share a key in a
band are a candidate pair, and a pair of similarity J is one with probability 1 - (1 - J^ROWS)^BANDS,
an S-curve rising through (1 / BANDS)^(1 / ROWS) (docs/benchmarks.md has its values). The bands
are chosen for a curve that rises below `THRESHOLD`, so that few pairs above it are missed, and
each candidate is verified by its signatures' agreement (`near_text_pairs`): a false candidate
costs a comparison, never a finding.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Iterator, Sequence

import numpy as np
import xxhash

#: words a shingle holds (datatrove's and Lee et al.'s 5-grams; 3 would pair more templated
#: texts, 8 would miss copies with an edit every few dozen words)
SHINGLE_WORDS = 5
#: values a signature holds: the standard error of an estimate is sqrt(J (1 - J) / NUM_PERM),
#: 0.035 at J = 0.8; a signature is 4 bytes a value
NUM_PERM = 128
#: the seed of the permutations (datasketch's default: its signatures are these)
SEED = 1
#: the estimated Jaccard similarity from which a text is a near copy of another
THRESHOLD = 0.8
#: bands x rows of the LSH: 16 x 8 (128 values) puts the S-curve's steepest rise at
#: (1/16)^(1/8) = 0.71, below `THRESHOLD`, so that a pair at 0.8 is a candidate 95% of the time
#: (datasketch's ``_optimal_param(0.8, 128)``, 9 x 13, rises at 0.84 and misses 60% of them:
#: it weighs a false candidate as much as a missed pair, where here a false one costs only its
#: verification)
BANDS = 16
ROWS = 8
#: a signature's value at every position when its text has no shingle: it matches nothing
NO_SIGNATURE = np.uint32(0xFFFFFFFF)
#: shingles whose permuted hashes one step of `signatures` holds at once (4 bytes x `NUM_PERM`
#: each: 2 MiB, which stays in cache; 8 times as many took a third longer)
SHINGLES_PER_STEP = 1 << 12
#: candidate pairs one step of `near_text_pairs` compares at once (2 x 4 x `NUM_PERM` bytes each)
CANDIDATES_PER_STEP = 1 << 12

_MASK32 = 0xFFFFFFFF


def normalized_text(text: str) -> str:
    """A text as two copies of one document compare: Unicode NFC, case folded, every run of
    whitespace one space, none at either end."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def shingles(text: str, size: int = SHINGLE_WORDS) -> list[str]:
    """Each run of ``size`` consecutive words of ``text``'s `normalized_text`, in order (a
    repeated one repeats: a signature is the same for a set and for a list of its members).
    A text of fewer words is one shingle of all of them; one without words has none."""
    words = normalized_text(text).split(" ")
    if words == [""]:
        return []
    if len(words) <= size:
        return [" ".join(words)]
    return [" ".join(words[start : start + size]) for start in range(len(words) - size + 1)]


def shingle_hashes(text: str, size: int = SHINGLE_WORDS) -> list[int]:
    """The 32-bit hash (XXH32, seed 0) of the UTF-8 bytes of each of ``text``'s `shingles`: what a
    signature permutes, and what datasketch's ``MinHash`` is given as ``hashfunc``'s values."""
    return [xxhash.xxh32_intdigest(shingle.encode()) for shingle in shingles(text, size)]


def permutations(num_perm: int = NUM_PERM, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """The ``a`` (odd) and ``b`` of each of ``num_perm`` permutations ``a * h + b mod 2^32``
    (uint32): datasketch's ``affine32`` draw from ``RandomState(seed)``, in its order."""
    generator = np.random.RandomState(seed)
    odd = generator.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    offset = generator.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return odd, offset


def mixed(hashes: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer of each of ``hashes`` (uint32): a bijection that spreads a
    weak hash's bits before the affine permutations, as datasketch does."""
    hashes = np.asarray(hashes, np.uint32)
    hashes = hashes ^ (hashes >> np.uint32(16))
    hashes = hashes * np.uint32(0x85EBCA6B)
    hashes = hashes ^ (hashes >> np.uint32(13))
    hashes = hashes * np.uint32(0xC2B2AE35)
    return hashes ^ (hashes >> np.uint32(16))


def signatures(
    texts: Sequence[str], size: int = SHINGLE_WORDS, num_perm: int = NUM_PERM, seed: int = SEED
) -> np.ndarray:
    """The MinHash signature ((n, ``num_perm``) uint32) of each of ``texts``: each position the
    least permuted hash of its shingles, all texts' shingles permuted together a step of
    `SHINGLES_PER_STEP` at a time; a text without shingles is all `NO_SIGNATURE`."""
    hashed = [shingle_hashes(text, size) for text in texts]
    counts = np.fromiter((len(hashes) for hashes in hashed), np.int64, len(hashed))
    flat = mixed(np.fromiter(itertools.chain.from_iterable(hashed), np.uint32, int(counts.sum())))
    owners = np.repeat(np.arange(len(texts)), counts)
    odd, offset = permutations(num_perm, seed)
    found = np.full((len(texts), num_perm), NO_SIGNATURE, np.uint32)
    for start in range(0, len(flat), SHINGLES_PER_STEP):
        stop = min(start + SHINGLES_PER_STEP, len(flat))
        permuted = flat[start:stop, None] * odd + offset  # uint32: wraps mod 2^32, as intended
        step_owners = owners[start:stop]
        firsts = np.flatnonzero(np.r_[True, step_owners[1:] != step_owners[:-1]])
        texts_here = step_owners[firsts]  # a text's shingles are consecutive: each once a step
        least = np.minimum.reduceat(permuted, firsts, axis=0)
        found[texts_here] = np.minimum(found[texts_here], least)
    return found


def _fmix64(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer (uint64, a bijection)."""
    values = values ^ (values >> np.uint64(33))
    values = values * np.uint64(0xFF51AFD7ED558CCD)
    values = values ^ (values >> np.uint64(33))
    values = values * np.uint64(0xC4CEB9FE1A85EC53)
    return values ^ (values >> np.uint64(33))


def band_keys(signatures: np.ndarray, bands: int = BANDS, rows: int = ROWS) -> np.ndarray:
    """Each signature's ``bands`` bands of ``rows`` values (its first ``bands * rows``), each
    hashed to one 64-bit key ((n, ``bands``) uint64): two signatures share a band's key when they
    agree on its every row (and otherwise with a chance of about 2^-64)."""
    signatures = np.asarray(signatures, np.uint32)
    if bands * rows > signatures.shape[1]:
        raise ValueError(f"{bands} bands of {rows} rows need {bands * rows} values a signature")
    values = signatures[:, : bands * rows].reshape(len(signatures), bands, rows).astype(np.uint64)
    keys = np.zeros((len(signatures), bands), np.uint64)
    for row in range(rows):  # each step injective in the row's value: 2^32 values, 2^64 keys
        keys = _fmix64(keys * np.uint64(0x9E3779B97F4A7C15) + values[:, :, row] + np.uint64(1))
    return keys


def near_text_pairs(
    known_keys: np.ndarray,
    known_signatures: np.ndarray,
    query_keys: np.ndarray,
    query_signatures: np.ndarray,
    threshold: float = THRESHOLD,
    earlier: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each query text with a known text whose estimated Jaccard similarity is at least
    ``threshold``: its index, the index of the most similar known text (the first of equals),
    and the estimate (the fraction of the signatures' positions that agree). Candidates are the
    known texts that share a band's key (`band_keys`) with the query, so the cost follows the
    pairs that share a band, not every pair; a text with `NO_SIGNATURE` matches nothing, and of
    known texts with one signature only the first is compared (thousands of copies of one
    boilerplate text cost one comparison a query, not thousands). With ``earlier`` (the known
    texts are the queries: a dataset against itself), a text is compared with earlier texts
    only."""
    best = np.full(len(query_signatures), -1.0)
    match = np.full(len(query_signatures), -1, np.int64)
    usable_known = _first_of_each_signature(known_signatures)
    usable_queries = np.flatnonzero(~_without_signature(query_signatures))
    if not len(usable_known) or not len(usable_queries):
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
    for band in range(known_keys.shape[1]):
        keys = known_keys[usable_known, band]
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        wanted = query_keys[usable_queries, band]
        starts = np.searchsorted(ordered, wanted, side="left")
        counts = np.searchsorted(ordered, wanted, side="right") - starts
        for queries, positions in _candidates(starts, counts):
            _keep_nearest(
                usable_queries[queries],
                usable_known[order[positions]],
                known_signatures,
                query_signatures,
                best,
                match,
                earlier,
            )
    hit = np.flatnonzero((match >= 0) & (best >= threshold))
    return hit, match[hit], best[hit]


def _without_signature(signatures: np.ndarray) -> np.ndarray:
    """Which signatures are `NO_SIGNATURE` (their texts had no shingle)."""
    return np.all(signatures == NO_SIGNATURE, axis=1)


def _first_of_each_signature(signatures: np.ndarray) -> np.ndarray:
    """The rows of ``signatures`` that have one (not `NO_SIGNATURE`) and that no earlier row
    equals, in order."""
    rows = np.ascontiguousarray(signatures)
    if not len(rows):
        return np.empty(0, np.int64)
    whole = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)
    firsts = np.sort(np.unique(whole, return_index=True)[1])
    return firsts[~_without_signature(rows[firsts])]


def _candidates(starts: np.ndarray, counts: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The candidate pairs of one band, at most `CANDIDATES_PER_STEP` a step (one query with more
    is a step of its own): positions in the queries, and in the known texts' band order (query
    ``i``'s are ``starts[i]`` to ``starts[i] + counts[i]``)."""
    asking = np.flatnonzero(counts)
    total = np.cumsum(counts[asking])
    start = 0
    while start < len(asking):
        base = total[start - 1] if start else 0
        stop = max(int(np.searchsorted(total, base + CANDIDATES_PER_STEP, side="right")), start + 1)
        queries, step_counts = asking[start:stop], counts[asking[start:stop]]
        firsts = np.cumsum(step_counts) - step_counts
        offsets = np.arange(int(step_counts.sum())) - np.repeat(firsts, step_counts)
        yield np.repeat(queries, step_counts), np.repeat(starts[queries], step_counts) + offsets
        start = stop


def _keep_nearest(
    queries: np.ndarray,
    known: np.ndarray,
    known_signatures: np.ndarray,
    query_signatures: np.ndarray,
    best: np.ndarray,
    match: np.ndarray,
    earlier: bool = False,
) -> None:
    """Estimate each candidate pair's similarity (``queries[i]`` with ``known[i]``), and keep in
    ``best``/``match`` each query's most similar known text (the first of equals) against what
    earlier steps found; with ``earlier``, only known texts before the query."""
    if earlier:
        before = known < queries
        queries, known = queries[before], known[before]
        if not len(queries):
            return
    estimate = np.mean(query_signatures[queries] == known_signatures[known], axis=1)
    ranked = np.lexsort((known, -estimate, queries))
    queries, known, estimate = queries[ranked], known[ranked], estimate[ranked]
    first = np.r_[True, queries[1:] != queries[:-1]]
    queries, known, estimate = queries[first], known[first], estimate[first]
    better = (estimate > best[queries]) | ((estimate == best[queries]) & (known < match[queries]))
    best[queries[better]] = estimate[better]
    match[queries[better]] = known[better]
