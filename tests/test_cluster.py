"""Scans on a real dask.distributed cluster to the end: a hung decoder on a worker, several
datasets in one run, and a scheduler that goes away mid-scan (`dask scheduler` and `dask worker`
run as the README shows them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask
import pytest
from conftest import SAMPLES, image_bytes, one_line_error, write
from PIL import Image
from typer.testing import CliRunner

import scrub
from scrub.cli import app
from scrub.options.config import resolve

#: starts real dask schedulers and workers, and kills them: `-m "not slow"` (the quick subset) leaves it out
pytestmark = pytest.mark.slow

distributed = pytest.importorskip("distributed")
TESTS = Path(__file__).parent


def test_a_hung_decoder_on_a_cluster_worker_is_reported(tmp_path):
    import plugins.crashing  # noqa: F401 - registers the check here and in the workers

    root = tmp_path / "data"
    for number in range(7):
        write(root / "a" / f"{number}.jpg", image_bytes(number))
    write(root / "a" / "hang.jpg", image_bytes(30))
    # two threads a worker: a task that ends or makes progress must not disarm the watchdog
    # of the one that hangs beside it
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
    ):
        result = scrub.scan(
            root,
            scheduler=cluster.scheduler_address,
            partition_size=2,
            timeout=1,
            select=["test-crash-or-hang"],
        )
    assert [(i.key, i.check) for i in result.issues()] == [("a/hang.jpg", "corrupt-image")]
    assert result.summary.records == 8


def dask_command(*arguments: str) -> subprocess.Popen:
    """`dask ARGUMENTS` in a session of its own (its workers and nannies end with its group)."""
    return subprocess.Popen(
        [sys.executable, "-m", "dask", *arguments],
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def start_scheduler(address_file: Path) -> subprocess.Popen:
    return dask_command(
        "scheduler",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--no-dashboard",
        "--scheduler-file",
        str(address_file),
    )


def start_workers(address_file: Path, count: int) -> subprocess.Popen:
    return dask_command(
        "worker",
        "--scheduler-file",
        str(address_file),
        "--nworkers",
        str(count),
        "--nthreads",
        "1",
        "--no-dashboard",
    )


def scheduler_address(address_file: Path) -> str:
    deadline = time.monotonic() + 60
    while not address_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return json.loads(address_file.read_text())["address"]


def stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM first: killed, the workers' nannies leave their named semaphores in /dev/shm."""
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def cluster(tmp_path):
    """`dask scheduler` and `dask worker` as separate processes, as on a real deployment."""
    address_file = tmp_path / "scheduler.json"
    scheduler = start_scheduler(address_file)
    worker = start_workers(address_file, 2)
    try:
        address = scheduler_address(address_file)
        with distributed.Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        yield address, scheduler, worker
    finally:
        stop([worker, scheduler])


@pytest.fixture
def scheduler_alone(tmp_path):
    """A `dask scheduler` no worker has joined yet: its address, and a function that starts one
    worker (stopped with the scheduler when the test ends)."""
    address_file = tmp_path / "scheduler.json"
    processes = [start_scheduler(address_file)]

    def start_worker() -> None:
        processes.insert(0, start_workers(address_file, 1))

    try:
        yield scheduler_address(address_file), start_worker
    finally:
        stop(processes)


@pytest.fixture
def scrub_scan():
    """Starts `scrub scan DATASET OPTIONS` as a user runs it (stdout is not a terminal: no
    progress bar); one still running when the test ends (it failed) is killed."""
    started: list[subprocess.Popen] = []

    def start(dataset: Path, *options: object) -> subprocess.Popen:
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "scrub", "scan", str(dataset), *map(str, options)],
                env={**os.environ, "PYTHONPATH": str(TESTS)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        return started[-1]

    yield start
    for scan in started:
        if scan.poll() is None:
            scan.kill()
        scan.communicate()


def test_a_cluster_no_worker_ever_joined_ends_the_scan_and_says_it_waited(
    tmp_path, scheduler_alone, scrub_scan
):
    """A cluster without workers looked hung (a progress bar at 0 for a minute), then blamed
    workers that died although none had joined: the scan says that it waits, and why it ended;
    with -q a wait this short is not worth a line."""
    address, _ = scheduler_alone
    started = time.monotonic()
    told, quiet = (  # both at once: the wait is the test's time
        scrub_scan(
            SAMPLES / "images", "--scheduler", address, "--cluster-wait", 2, *extra, "--manifest", manifest
        )
        for extra, manifest in (((), tmp_path / "m.jsonl"), (("-q",), tmp_path / "q.jsonl"))
    )
    said = told.communicate(timeout=60)[1].strip().splitlines()
    said_quietly = quiet.communicate(timeout=60)[1].strip().splitlines()
    assert time.monotonic() - started < 15
    ended = f"scrub: error: the dask cluster at {address} has no workers (no worker ever joined in 2 s;"
    assert told.returncode == 3 and len(said) == 2, said
    assert said[0].startswith(f"scrub: waiting for a dask worker on {address} (no worker has joined yet)")
    assert said[1].startswith(ended) and "every worker died or left" not in said[1]
    assert quiet.returncode == 3 and len(said_quietly) == 1 and said_quietly[0].startswith(ended)
    assert not (tmp_path / "m.jsonl").exists() and not (tmp_path / "q.jsonl").exists()


def test_a_worker_that_joins_during_the_wait_runs_the_scan(tmp_path, scheduler_alone, scrub_scan):
    address, start_worker = scheduler_alone
    scan = scrub_scan(
        SAMPLES / "images", "--scheduler", address, "--cluster-wait", 30, "--manifest", tmp_path / "m.jsonl"
    )
    waiting = scan.stderr.readline()  # (or nothing, once the scan has ended)
    assert waiting.startswith(f"scrub: waiting for a dask worker on {address} (no worker has joined yet)")
    start_worker()
    stdout, stderr = scan.communicate(timeout=60)
    assert scan.returncode == 1, stderr  # the samples' planted errors: the scan ran to its end
    joined = rf"scrub: 1 dask worker on {re.escape(address)} after \d+ s without one: the scan goes on"
    assert re.fullmatch(joined, stderr.strip()), stderr
    assert "35 records scanned" in stdout and (tmp_path / "m.jsonl").exists()


def test_cluster_wait_is_refused_where_no_cluster_waits(tmp_path):
    """A wait that cannot apply must not be ignored without a word (a flag typed in vain); a
    config file's may: the file serves local runs too, and the cluster's address is per run."""
    images = SAMPLES / "images"
    said = one_line_error("scan", images, "--cluster-wait", 300)
    assert "--cluster-wait: only a scan on a dask cluster (--scheduler tcp://host:port) waits" in said
    said = one_line_error(
        "fix", images, "--cluster-wait", 300, "--scheduler", "threads", "--out", tmp_path / "o"
    )
    assert "--scheduler threads runs on this machine" in said
    said = one_line_error("scan", images, "--cluster-wait", 0, "--scheduler", "tcp://127.0.0.1:1")
    assert "--cluster-wait: must be at least 0.001, got 0.0" in said
    assert not (tmp_path / "o").exists()

    data = tmp_path / "data"
    shutil.copytree(images / "cat", data / "cat")
    (tmp_path / "scrub.toml").write_text("cluster-wait = 600\n")
    assert resolve("scan", data, {}).options.run.cluster_wait == 600
    assert resolve("fix", data, {"scheduler": "tcp://127.0.0.1:1"}).options.scan.run.cluster_wait == 600
    shown = CliRunner().invoke(app, ["config", str(data)]).output
    assert f"cluster-wait = 600.0  # {tmp_path / 'scrub.toml'}:1: cluster-wait" in shown


def test_several_datasets_on_a_cluster_then_the_scheduler_goes_away(tmp_path, cluster):
    address, scheduler, _ = cluster
    lmdb = tmp_path / "lmdb"
    shutil.copytree(SAMPLES / "lmdb", lmdb)
    result = scrub.scan([lmdb], scheduler=address, partition_size=4)
    local = scrub.scan([lmdb], scheduler="sync")
    assert result.summary.scheduler == address
    assert sorted(i.identity() for i in result.issues()) == sorted(i.identity() for i in local.issues())

    images = tmp_path / "slow"
    images.mkdir()
    for number in range(600):  # 600 x 20 ms on 2 workers: ~6 s
        Image.new("RGB", (8, 8), (number % 256, 0, 0)).save(images / f"{number}.png")
    command = [
        sys.executable,
        "-m",
        "scrub",
        "scan",
        str(images),
        "--scheduler",
        address,
        "--plugin",
        "plugins.slow",
        "--partition-size",
        "20",
        "--manifest",
        str(tmp_path / "m.jsonl"),
    ]
    scan = subprocess.Popen(
        command,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4)  # the scan is under way
    assert scan.poll() is None
    os.killpg(scheduler.pid, signal.SIGKILL)
    killed = time.monotonic()
    _, stderr = scan.communicate(timeout=60)
    assert time.monotonic() - killed < 30
    assert scan.returncode == 3, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "went away mid-scan" in lines[0] and address in lines[0], stderr
    assert not (tmp_path / "m.jsonl").exists()


def test_a_cluster_whose_workers_all_die_ends_the_scan(tmp_path, cluster):
    """Dask waits for a worker forever; a nightly scan must not: once the cluster has had no
    worker for ``--cluster-wait`` seconds, the scan ends, incomplete (exit 3), and says why."""
    import threading

    from scrub.errors import IncompleteScan

    address, _, worker = cluster
    images = tmp_path / "slow"
    images.mkdir()
    for number in range(600):  # 600 x 20 ms on 2 workers: ~6 s
        Image.new("RGB", (8, 8), (number % 256, 0, 0)).save(images / f"{number}.png")
    ended: list[BaseException | None] = []

    def run() -> None:
        try:
            scrub.scan(images, scheduler=address, plugins=["plugins.slow"], partition_size=20, cluster_wait=2)
            ended.append(None)
        except BaseException as error:  # handed to the test's thread
            ended.append(error)

    scan = threading.Thread(target=run, daemon=True)  # (without the watch it would never end)
    scan.start()
    time.sleep(3)  # the scan is under way
    assert scan.is_alive()
    kill_all_but_the_resource_tracker(worker.pid)  # every worker, and the nannies that would restart them
    killed = time.monotonic()
    scan.join(timeout=30)
    assert not scan.is_alive() and time.monotonic() - killed < 30
    assert isinstance(ended[0], IncompleteScan), ended
    assert "has no workers (no worker for 2 s: every worker died or left)" in str(ended[0])
    assert address in str(ended[0])


def kill_all_but_the_resource_tracker(group: int) -> None:
    """SIGKILL every process of a process group but multiprocessing's resource tracker: left
    alive, it unlinks the named semaphores of the processes killed once they are gone (killed
    with them, it left 12 in /dev/shm for good each run)."""
    import psutil

    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getpgid(process.pid) != group or "resource_tracker" in " ".join(
                process.info["cmdline"] or ()
            ):
                continue
            process.kill()
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
