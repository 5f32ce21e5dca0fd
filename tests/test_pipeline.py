"""The Dask pipeline: crash and hang isolation, a real distributed cluster."""

from __future__ import annotations

import subprocess
import sys
import threading

import dask
import numpy as np
import pytest
from conftest import SAMPLES, findings, image_bytes, write
from test_samples import IMAGES_EXPECTED

import scrub


@pytest.fixture
def crashing_dataset(tmp_path):
    import plugins.crashing  # noqa: F401 - registers the check in this process and in workers

    root = tmp_path / "data"
    for i in range(9):
        write(root / "a" / f"{i}.jpg", image_bytes(i))
    write(root / "a" / "crash.jpg", image_bytes(20))
    write(root / "a" / "hang.jpg", image_bytes(21))
    return root


def test_a_check_that_raises_stops_the_scan_naming_the_check_and_the_record(tmp_path):
    """A bug in a check is scrub's bug, not the data's: the scan stops and says where."""
    import plugins.crashing  # noqa: F401 - registers the check

    root = tmp_path / "data"
    for name in ("0.jpg", "bug.jpg", "2.jpg"):
        write(root / "a" / name, image_bytes(len(name)))
    with pytest.raises(scrub.ScrubError) as raised:
        scrub.scan(root, scheduler="sync", select=["test-crash-or-hang"])
    assert str(raised.value) == (
        "internal error: check test-crash-or-hang failed on a/bug.jpg: ValueError('a bug in this check')"
    )


@pytest.fixture(params=["forked", "server"])
def worker_origin(request):
    """Workers forked from the scan (an image folder, on Linux, nothing else running in the
    scan's process), or from the worker server: another thread running forbids the fork."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    if request.param == "server":
        thread.start()
    yield request.param
    stop.set()
    if thread.is_alive():
        thread.join()


def test_workers_are_forked_from_the_scan_only_where_nothing_forbids_it(tmp_path):
    from test_lmdb import npy, write_db

    from scrub import pipeline
    from scrub.execution.workers import fork_context
    from scrub.options.model import RunOptions
    from scrub.readers.base import ReadOptions
    from scrub.readers.hdf5 import HDF5Reader
    from scrub.readers.images import ImageReader
    from scrub.readers.lmdb import LMDBReader
    from scrub.storage import location

    database = write_db(tmp_path / "db", [(b"a", npy(np.zeros(2, np.float32)))])
    folder = ImageReader(tmp_path, ReadOptions())
    bucket = ImageReader(location("s3://bucket/images"), ReadOptions())
    assert folder.forks_cleanly and not bucket.forks_cleanly  # a bucket's file system runs a thread
    assert LMDBReader(database, ReadOptions()).forks_cleanly  # its environments close before a fork
    assert not HDF5Reader(tmp_path / "x.h5", ReadOptions()).forks_cleanly  # HDF5's library state

    def plan(*cleanly: bool, scheduler=None) -> pipeline.Plan:
        demands = [pipeline.Demand("x", "processes", None, False, clean) for clean in cleanly]
        return pipeline.Plan.for_scan(RunOptions(scheduler=scheduler, workers=2), demands, 8)

    assert plan(True).fork and plan(True, True).fork
    assert not plan(True, False).fork  # every dataset of the run, or none
    assert not plan(True, scheduler="threads").fork
    fresh = subprocess.run(  # a new process (this one may run other tests' threads by now)
        [
            sys.executable,
            "-c",
            "from scrub.execution.workers import fork_context; print(fork_context() is not None)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert fresh.stdout.strip() == str(sys.platform.startswith("linux"))
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    try:
        assert fork_context() is None  # a lock that thread holds would be copied held
    finally:
        stop.set()
        thread.join()


@pytest.mark.slow
def test_crash_and_hang_are_reported_and_the_scan_goes_on(crashing_dataset, worker_origin):
    result = scrub.scan(
        crashing_dataset,
        scheduler="processes",
        workers=2,
        partition_size=2,
        timeout=3,
        select=["test-crash-or-hang", "corrupt-image"],
    )
    issues = {issue.key: issue for issue in result.issues()}
    assert set(issues) == {"a/crash.jpg", "a/hang.jpg"}
    assert issues["a/crash.jpg"].check == issues["a/hang.jpg"].check == "corrupt-image"
    assert issues["a/crash.jpg"].details["reason"] == "decoder crashed"
    assert issues["a/hang.jpg"].details["reason"] == "timed out"
    assert result.summary.records == 11


@pytest.mark.slow
def test_scan_on_a_real_distributed_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        result = scrub.scan(SAMPLES / "images", scheduler=cluster.scheduler_address, partition_size=4)
    assert findings(result) == IMAGES_EXPECTED
    assert result.summary.scheduler == cluster.scheduler_address


@pytest.mark.slow
def test_a_record_that_kills_cluster_workers_is_bisected_out(crashing_dataset):
    distributed = pytest.importorskip("distributed")
    (crashing_dataset / "a" / "hang.jpg").unlink()
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
    ):
        result = scrub.scan(
            crashing_dataset,
            scheduler=cluster.scheduler_address,
            partition_size=4,
            select=["test-crash-or-hang"],
        )
    assert [(i.key, i.check) for i in result.issues()] == [("a/crash.jpg", "corrupt-image")]
    assert result.summary.records == 10


def _square(value: int) -> int:
    return value * value


@pytest.mark.slow
def test_stopping_a_pool_whose_result_was_cut_short_does_not_hang():
    """A worker killed while it sends a result leaves the pool's manager thread waiting for the
    rest of the message, and the interpreter's exit joining that thread forever. The cut-short
    message is made here as a dying worker leaves it: a whole header, part of the payload."""
    import os
    import struct
    import time
    from concurrent.futures import ProcessPoolExecutor

    from scrub import pipeline

    pool = ProcessPoolExecutor(1, mp_context=pipeline.worker_context())
    assert pool.submit(_square, 7).result() == 49  # the manager thread runs
    manager = pool._executor_manager_thread
    writer = pool._result_queue._writer
    os.write(writer.fileno(), struct.pack("!i", 1 << 20) + b"\x80" * 1000)  # 1 MiB announced
    time.sleep(0.2)
    started = time.monotonic()
    pipeline._stop(pool)
    assert not manager.is_alive()
    assert time.monotonic() - started < pipeline.MANAGER_STUCK_SECONDS + 3


#: Run in a fresh interpreter, where nothing forbids the fork (pytest's own threads may).
INHERITING = r"""
import os, sys
from scrub import pipeline
from scrub.execution.workers import fork_context

class Unpicklable:
    def __init__(self, values):
        self.values = values
    def __len__(self):
        return len(self.values)
    def __reduce__(self):
        raise TypeError("this partition was pickled")

def total(number, partition, start=0, stop=None, on_record=None):
    return number, sum(partition.values), os.getpid()

if fork_context() is None:
    sys.exit("not forked")
results = []
partitions = [Unpicklable(list(range(n + 1))) for n in range(7)]
plan = pipeline.Plan("processes", 2, 5.0, fork=True)
pipeline.run(total, partitions, plan, results.append, lambda *failed: sys.exit(f"failed: {failed}"))
assert sorted((n, t) for n, t, _ in results) == [(n, sum(range(n + 1))) for n in range(7)], results
assert os.getpid() not in {pid for _, _, pid in results}
assert not pipeline._INHERITED
print("inherited")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_forked_workers_inherit_the_partitions_instead_of_receiving_them():
    """Sending a partition pickles its entries in the scan and unpickles them in the worker, per
    task; forked workers already hold them. Every partition runs, on the workers, and the pool
    leaves nothing of them behind in this process."""
    done = subprocess.run([sys.executable, "-c", INHERITING], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "inherited", done.stderr
