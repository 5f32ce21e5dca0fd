"""`scrub.scanning.joins` on a real dask.distributed cluster: the distributed join finds what
`split_leak`'s two joins find on one machine (the sort of the identities, `near_pairs` of the
hashes), pair for pair, on random hashes with near copies planted at every distance up to one
past the radius."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrub.checks.perceptual import NO_HASH, near_pairs
from scrub.scanning.joins import EXACT, band_layout, distributed_leaks, hash_columns, identity_words

#: starts a cluster of worker processes: `-m "not slow"` (the quick subset) leaves it out
pytestmark = pytest.mark.slow

distributed = pytest.importorskip("distributed")
dd = pytest.importorskip("dask.dataframe")


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as connected,
    ):
        yield connected


def one_machine_leaks(
    known_ids: np.ndarray, known_hashes: np.ndarray, ids: np.ndarray, hashes: np.ndarray, radius: int
) -> dict[int, tuple[int, int]]:
    """What `split_leak` computes: each query's first known row of its identity (`EXACT`), else
    `near_pairs`' nearest hash."""
    by_identity = np.argsort(known_ids, kind="stable")
    ordered = known_ids[by_identity]
    found = np.searchsorted(ordered, ids)
    found[found == len(ordered)] = 0
    exact = ordered[found] == ids
    leaks = {int(row): (int(by_identity[found[row]]), EXACT) for row in np.flatnonzero(exact)}
    rest = np.flatnonzero(~exact)
    near, nearest, distance = near_pairs(known_hashes, hashes[rest], radius)
    leaks.update({int(rest[n]): (int(k), int(d)) for n, k, d in zip(near, nearest, distance)})
    return leaks


def random_identities(rng: np.random.Generator, count: int) -> np.ndarray:
    return rng.integers(0, 256, (count, 16), dtype=np.uint8).view("S16").reshape(-1)


def flipped(rng: np.random.Generator, value: np.uint64, bits: int) -> np.uint64:
    """``value`` with ``bits`` of its bits, chosen at random, flipped."""
    chosen = rng.choice(64, bits, replace=False)
    return value ^ np.uint64(sum(1 << int(bit) for bit in chosen))


def planted_splits(seed: int, radius: int, known_count: int = 4000, query_count: int = 600):
    """Random hashes and identities; among the queries, near copies of known hashes at every
    distance from 0 to radius + 1, copies of known identities, records without a hash; among
    the known, repeated hashes and identities (the smallest row must win)."""
    rng = np.random.default_rng(seed)
    known_hashes = rng.integers(1, 2**64, known_count, dtype=np.uint64)
    queries = rng.integers(1, 2**64, query_count, dtype=np.uint64)
    known_ids, ids = random_identities(rng, known_count), random_identities(rng, query_count)
    known_hashes[rng.integers(known_count, size=20)] = known_hashes[rng.integers(known_count, size=20)]
    known_ids[rng.integers(known_count, size=20)] = known_ids[rng.integers(known_count, size=20)]
    known_hashes[rng.integers(known_count, size=30)] = NO_HASH
    for row in range(200):
        queries[row] = flipped(rng, known_hashes[rng.integers(known_count)], row % (radius + 2))
    ids[200:260] = known_ids[rng.integers(known_count, size=60)]
    queries[240:280] = NO_HASH  # some with an identity copy, some with none
    return known_ids, known_hashes, ids, queries


def frame(ids: np.ndarray, hashes: np.ndarray, partitions: int):
    return dd.from_pandas(hash_columns(np.arange(len(ids)), ids, hashes), npartitions=partitions, sort=False)


@settings(max_examples=4, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    radius=st.integers(0, 10),
    partitions=st.sampled_from([None, 1, 5]),
)
def test_the_distributed_join_finds_what_one_machine_finds(client, seed, radius, partitions):
    known_ids, known_hashes, ids, hashes = planted_splits(seed, radius)
    expected = one_machine_leaks(known_ids, known_hashes, ids, hashes, radius)
    found = distributed_leaks(
        client, frame(known_ids, known_hashes, 3), frame(ids, hashes, 2), radius, partitions
    )
    assert {int(q): (int(k), int(d)) for q, k, d in zip(*found)} == expected
    assert list(found[0]) == sorted(expected)
    assert any(distance == radius for _, distance in expected.values())  # the planted copies


def test_a_negative_radius_joins_identities_only(client):
    known_ids, known_hashes, ids, hashes = planted_splits(7, 4)
    found = distributed_leaks(client, frame(known_ids, known_hashes, 2), frame(ids, hashes, 2), -1)
    expected = one_machine_leaks(known_ids, known_hashes, ids, hashes, -1)
    assert {int(q): (int(k), int(d)) for q, k, d in zip(*found)} == expected
    assert set(found[2]) == {EXACT}


def test_the_bands_cover_every_bit_once():
    for radius in range(64):
        layout = band_layout(radius)
        assert len(layout) == radius + 1
        assert sorted(bit for low, width in layout for bit in range(low, low + width)) == list(range(64))
    assert band_layout(64) == [(0, 0)]


def test_identity_words_are_the_bytes_in_order():
    identities = np.array([bytes(range(16)), b"\xff" * 16], "S16")
    high, low = identity_words(identities)
    assert high.tolist() == [0x0001020304050607, 2**64 - 1]
    assert low.tolist() == [0x08090A0B0C0D0E0F, 2**64 - 1]
