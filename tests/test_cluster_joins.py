"""`duplicate` and `split-leak` of a scan on a real dask.distributed cluster (`scrub.scanning.joins`):
their columns stay on the workers that made them, and are joined there (past
`FETCHED_BELOW` values: the tests set it to 0) or fetched and judged in the driver (below it);
either way the findings are the ones a scan on this machine makes, and the workers hold
nothing once the scan ends."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_splits import encoded, scene

import scrub
from scrub.scanning import joins
from scrub.scanning.columnstores import ColumnStore

#: starts a real dask cluster: `-m "not slow"` (the quick subset) leaves it out
pytestmark = pytest.mark.slow

distributed = pytest.importorskip("distributed")
pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as running:
        yield running


@pytest.fixture(params=["joined", "fetched"])
def joined(request, monkeypatch) -> bool:
    """Whether the columns left on the cluster are joined there (however few), or fetched."""
    if request.param == "joined":
        monkeypatch.setattr(joins, "FETCHED_BELOW", 0)
    return request.param == "joined"


@pytest.fixture
def gathered(monkeypatch) -> list[str]:
    """The checks whose whole column the driver gathered (`ColumnStore.column`)."""
    called: list[str] = []
    column = ColumnStore.column

    def spied(store: ColumnStore):
        called.append(store.check_id)
        return column(store)

    monkeypatch.setattr(ColumnStore, "column", spied)
    return called


def planted_splits(root: Path) -> Path:
    """train/val/test folders of photograph-like JPEGs: val holds a resized, a cropped and an
    exact copy of training images, test a re-encoded and a brightened one; train holds a file
    twice, and so does val."""
    pictures = {seed: scene(seed, 128) for seed in range(12)}
    for seed, picture in pictures.items():
        write(root / "train" / f"{seed:02d}.jpg", encoded(picture))
    for seed in range(20, 26):
        write(root / "val" / f"{seed}.jpg", encoded(scene(seed, 128)))
    for seed in range(30, 34):
        write(root / "test" / f"{seed}.jpg", encoded(scene(seed, 128)))
    write(root / "val" / "resized.jpg", encoded(pictures[3].resize((96, 96))))
    write(root / "val" / "cropped.jpg", encoded(pictures[5].crop((4, 4, 124, 124))))
    shutil.copy(root / "train" / "07.jpg", root / "val" / "exact.jpg")
    write(root / "test" / "reencoded.jpg", encoded(pictures[9], quality=60))
    brighter = np.clip(np.asarray(pictures[10], np.float64) * 1.1, 0, 255).astype(np.uint8)
    write(root / "test" / "brighter.png", encoded(scene_image(brighter), "PNG"))
    shutil.copy(root / "train" / "02.jpg", root / "train" / "twice.jpg")
    write(root / "train" / "smaller-04.jpg", encoded(pictures[4].resize((100, 100)), quality=80))
    shutil.copy(root / "val" / "21.jpg", root / "val" / "copy-of-21.jpg")
    return root


def scene_image(pixels: np.ndarray):
    from PIL import Image

    return Image.fromarray(pixels)


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def findings(result, checks=("duplicate", "near-duplicate", "split-leak")) -> set[tuple]:
    return {
        (Path(issue.dataset or "").name, issue.key, issue.check, issue.message, str(issue.details))
        for issue in result.issues()
        if issue.check in checks
    }


def held_by_workers(cluster) -> list[int]:
    with distributed.Client(cluster) as client:
        return sorted(client.run(lambda dask_worker: len(dask_worker.data)).values())


def test_leaks_and_duplicates_of_splits_on_a_cluster(cluster, joined, gathered, tmp_path):
    data = planted_splits(tmp_path / "data")
    here = scrub.scan(data, partition_size=3, scheduler="threads")
    gathered.clear()
    there = scrub.scan(data, partition_size=3, scheduler=cluster.scheduler_address)
    assert findings(there) == findings(here)
    leaked = {(dataset, key) for dataset, key, check, *_ in findings(there) if check == "split-leak"}
    assert leaked == {
        ("val", "resized.jpg"),
        ("val", "cropped.jpg"),
        ("val", "exact.jpg"),
        ("test", "reencoded.jpg"),
        ("test", "brighter.png"),
    }
    copies = {(dataset, key) for dataset, key, check, *_ in findings(there) if check == "duplicate"}
    assert copies == {("train", "twice.jpg"), ("val", "copy-of-21.jpg")}
    near = {(dataset, key) for dataset, key, check, *_ in findings(there) if check == "near-duplicate"}
    assert near == {("train", "smaller-04.jpg")}
    # joined where they were made, or fetched at once when judged
    checks = {"duplicate", "near-duplicate", "split-leak"}
    assert checks & set(gathered) == (set() if joined else checks)
    assert held_by_workers(cluster) == [0, 0]  # and let go once judged
    assert there.exit_code() == here.exit_code() == 1


def test_duplicate_rows_of_an_array_file_on_a_cluster(cluster, joined, gathered, tmp_path):
    rows = np.random.default_rng(4).normal(size=(200, 8)).astype(np.float32)
    rows[[50, 120, 199]] = rows[7]
    rows[150] = rows[149]
    with h5py.File(tmp_path / "rows.h5", "w") as file:
        file["data"] = rows
    here = scrub.scan(tmp_path / "rows.h5", partition_size=32, scheduler="threads")
    gathered.clear()
    there = scrub.scan(tmp_path / "rows.h5", partition_size=32, scheduler=cluster.scheduler_address)
    assert findings(there) == findings(here)
    assert sorted(issue.key for issue in there.issues() if issue.check == "duplicate") == sorted(
        issue.key for issue in here.issues() if issue.check == "duplicate"
    )
    assert len([issue for issue in there.issues() if issue.check == "duplicate"]) == 4
    assert ("duplicate" in gathered) is not joined
    assert held_by_workers(cluster) == [0, 0]


def test_groups_of_near_images_on_a_cluster(cluster, joined, tmp_path):
    """Chains of near copies in one folder, spread over partitions: the same groups, firsts and
    distances as on one machine."""
    folder = tmp_path / "images"
    for seed in range(40, 46):
        picture = scene(seed, 128)
        write(folder / f"{seed}-a.jpg", encoded(picture))
        if seed % 2:
            write(folder / f"{seed}-b.jpg", encoded(picture.resize((100, 100))))
            write(folder / f"{seed}-c.jpg", encoded(picture, quality=60))
    here = scrub.scan(folder, partition_size=2, scheduler="threads")
    there = scrub.scan(folder, partition_size=2, scheduler=cluster.scheduler_address)
    assert findings(there) == findings(here)
    groups = [issue.details["group"]["size"] for issue in there.issues() if issue.check == "near-duplicate"]
    assert groups == [3] * 6


def test_a_cache_or_kept_splits_keep_the_columns_in_the_driver(cluster, gathered, monkeypatch, tmp_path):
    """A result cache stores every record's identity, a store of kept splits every training
    record's: the driver needs them, so they come back, and the findings are the same."""
    monkeypatch.setattr(joins, "FETCHED_BELOW", 0)
    data = planted_splits(tmp_path / "data")
    here = scrub.scan(data, partition_size=3, scheduler="threads")
    gathered.clear()
    there = scrub.scan(data, partition_size=3, scheduler=cluster.scheduler_address, against=tmp_path / "kept")
    assert findings(there, ("split-leak",)) == findings(here, ("split-leak",))
    assert "split-leak" in gathered and "duplicate" not in gathered
    gathered.clear()
    cached = scrub.scan(data, partition_size=3, scheduler=cluster.scheduler_address, cache=tmp_path / "cache")
    assert findings(cached) == findings(here)
    assert {"duplicate", "split-leak"} <= set(gathered)


def test_a_join_whose_workers_die_ends_the_scan_in_one_line():
    import os

    import dask

    from scrub.errors import IncompleteScan
    from scrub.scanning.joins import _computed

    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
        pytest.raises(IncompleteScan, match="failed while joining the records' content identities"),
    ):
        _computed(client, dask.delayed(os._exit)(1))


def test_a_partitions_frame_holds_its_rows_identities_and_no_hash():
    """Made on the worker from the values it collected (a list, as a record check collects
    them): each row at its number, its identity as two words, `NO_HASH` where none."""
    identity = bytes(range(1, 16)) + b"\x00"
    frame = joins.part_frame({"duplicate": ([3], [identity])}, "duplicate", "S16", 7 << 32)
    high, low = joins.identity_words(np.array([identity], "S16"))
    assert frame[joins.ROW].tolist() == [(7 << 32) + 3]
    assert frame[joins.IDENTITY_HIGH].tolist() == high.tolist()
    assert frame[joins.IDENTITY_LOW].tolist() == low.tolist()
    assert (frame[joins.PHASH] == joins.NO_HASH).all()
