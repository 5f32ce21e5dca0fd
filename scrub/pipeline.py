"""Map a per-partition function over a pool or a Dask cluster; hand each result back as it completes.

This module knows nothing of formats, records or checks. It receives a picklable
``work(partition_no, partition, start, stop, on_record)`` that returns a partial result, runs it
on every partition on the chosen scheduler, and calls ``on_result`` with each partial result as
soon as it is done, so the caller aggregates incrementally.

Schedulers:

* ``sync``: in this process, one partition after another (debugging, and tiny jobs).
* ``threads`` / ``processes``: a local pool of ``workers`` threads or processes.
* ``tcp://host:port`` (any address with ``://``): an existing ``dask.distributed`` scheduler.

Crashes and hangs: a record whose processing kills its worker process (a decoder segfault) or
runs longer than ``timeout`` must not end the scan. Worker processes arm a watchdog per record
(``faulthandler.dump_traceback_later(exit=True)``), so a hang becomes a dead worker. The
partitions left unfinished when a worker dies are re-run record by record in a supervised child
process (`scrub.execution.isolation`), which pinpoints the record, reports it through ``on_failure`` and
goes on with the next one. On a distributed cluster, a partition whose workers keep dying
(``KilledWorker``) is bisected on the cluster down to the single record.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from scrub.errors import UsageError

if TYPE_CHECKING:
    from scrub.options.model import RunOptions
from scrub.execution.interrupt import deferred, ignore_in_worker
from scrub.execution.workers import (
    GuardedWork,
    can_fork,
    fork_context,
    forked_start,
    start_forked_worker,
    start_worker_server,
    worker_context,
)
from scrub.fixing.outputs import remove_abandoned_scratch

LOCAL_SCHEDULERS = ("threads", "processes", "sync")
#: Work (one core's seconds, `Reader.work_seconds`) below which a scan runs in its own process:
#: there a pool of threads gains nothing, and above it in-process loses to threads, more the
#: larger the dataset (see docs/benchmarks.md, "Design measurements").
IN_PROCESS_SECONDS = 0.05
#: Seconds one record may take before its decoder is deemed hung (``--timeout``).
DEFAULT_TIMEOUT = 60.0
#: Seconds a dask cluster may have no worker before the scan ends (``--cluster-wait``): Dask
#: itself would wait for one forever.
DEFAULT_CLUSTER_WAIT = 60.0

OnRecord = Callable[[int], None]


class Work(Protocol):
    """Called with positional arguments only: implementations name them as suits them (a
    `scrub.scanning.reusing.SubsetWork` takes a subset, not a partition)."""

    def __call__(
        self,
        partition_no: int,
        partition: Any,
        start: int = 0,
        stop: int | None = None,
        on_record: OnRecord | None = None,
        /,
    ) -> Any: ...


class Leaving(Protocol):
    """How a `Work` (its ``leaving`` attribute; None, or none, where nothing is) leaves a part
    of each result on a cluster: a large part the driver need not hold (its caller joins it on
    the cluster later) stays on the worker that made it. Off a cluster the result comes back
    whole.

    The finished task's result is split on its worker: `taken` comes back, `left` stays (on the
    same worker: it holds the result), and `attach` gives the driver's result the future of the
    part left; those futures stay valid until `release_cluster_results`. A small object of its
    own, not a method of the work: it is sent with two tasks a partition."""

    def taken(self, result: Any) -> Any: ...

    def left(self, result: Any) -> Any: ...

    def attach(self, result: Any, left: Any) -> Any: ...


@dataclass(frozen=True)
class Plan:
    """How to run: which scheduler, how many local workers, the per-record time limit, and how
    long a cluster may have no worker."""

    scheduler: str
    workers: int
    timeout: float
    cluster_wait: float = DEFAULT_CLUSTER_WAIT
    #: local worker processes may be forked from this process (every reader of the run
    #: `forks_cleanly`), rather than from the worker server
    fork: bool = False

    @classmethod
    def choose(
        cls,
        scheduler: str | None,
        workers: int | None,
        timeout: float,
        preferred: str,
        partitions: int | None,
        cluster_wait: float = DEFAULT_CLUSTER_WAIT,
    ) -> "Plan":
        """Resolve the defaults: all cores, the reader's preferred scheduler, in-process when tiny."""
        if workers is not None and workers < 1:
            raise UsageError("--workers must be at least 1")
        if timeout <= 0:
            raise UsageError("--timeout must be more than 0 seconds")
        workers = workers or os.cpu_count() or 1
        if scheduler is None:
            tiny = partitions is not None and partitions <= 1
            scheduler = "sync" if tiny or workers == 1 else preferred
        if scheduler == "sync":
            workers = 1
        if scheduler not in LOCAL_SCHEDULERS and "://" not in scheduler:
            raise UsageError(
                f"unknown scheduler {scheduler!r}: use threads, processes, sync or tcp://host:port"
            )
        return cls(scheduler, workers, timeout, cluster_wait)

    @classmethod
    def for_scan(cls, run: RunOptions, demands: Sequence[Demand], tasks: int) -> Plan:
        """One plan for a run's datasets: processes if any reader prefers them, else the first
        one's preference; in this process when the whole work is known to be tiny (a pool would
        cost more than it saves); threads when a reader's handle lives in this process (threads
        share it, other processes cannot)."""
        scheduler = "processes" if any(d.preferred == "processes" for d in demands) else demands[0].preferred
        work = [demand.work_seconds for demand in demands]
        known = [seconds for seconds in work if seconds is not None]
        if run.workers is None and len(known) == len(work) and sum(known) < IN_PROCESS_SECONDS:
            scheduler = "sync"
        alone = [demand.name for demand in demands if demand.in_one_process]
        if alone:
            if run.scheduler not in (None, "threads", "sync"):
                raise UsageError(
                    f"--scheduler {run.scheduler}: {alone[0]} is read by the scan's own process only "
                    "(one handle, shared by threads): use --scheduler threads or sync"
                )
            scheduler = "threads"
        plan = cls.choose(run.scheduler, run.workers, run.timeout, scheduler, tasks, run.cluster_wait)
        return replace(plan, fork=plan.scheduler == "processes" and all(d.forks_cleanly for d in demands))

    @classmethod
    def for_copies(cls, run: RunOptions | None, partitions: int, fork: bool = False) -> Plan:
        """How `fix` copies files: on local worker processes (writing a file holds the GIL, so
        threads made it slower; a cluster's workers cannot write this machine's outputs), on
        threads when the run was asked to run on threads (a script without the main-module
        guard cannot start processes), in this process for a single partition, ``--workers 1``
        or ``--scheduler sync``. ``fork``: the workers may be forked from this process (the
        dataset's reader `forks_cleanly`)."""
        cores = os.cpu_count() or 1
        workers = min(run.workers, cores) if run is not None and run.workers else cores
        timeout = run.timeout if run is not None else DEFAULT_TIMEOUT
        scheduler = run.scheduler if run is not None else None
        if partitions <= 1 or workers == 1 or scheduler == "sync":
            return cls("sync", 1, timeout)
        if scheduler == "threads":
            return cls("threads", workers, timeout)
        return cls("processes", workers, timeout, fork=fork)


@dataclass(frozen=True)
class Demand:
    """What one dataset asks of a run's plan: its reader's capabilities, not its format."""

    name: str  # the format, for messages
    preferred: str  # the local scheduler that runs it fastest
    work_seconds: float | None  # one core's work on it, where its size tells
    in_one_process: bool  # its handle lives in the scan's own process
    forks_cleanly: bool = False  # its workers may be forked from the scan's process


def run(
    work: Work,
    partitions: Sequence[Any],
    plan: Plan,
    on_result: Callable[[Any], None],
    on_failure: Callable[[int, Any, int, str], Any],
) -> None:
    """Run ``work`` over every partition; ``on_result`` receives each partial result once.

    ``on_failure(partition_no, partition, offset, reason)`` builds the partial result for a
    record whose processing crashed or timed out.
    """
    if plan.scheduler == "sync":
        for number, partition in enumerate(partitions):
            on_result(work(number, partition))
    elif plan.scheduler in ("threads", "processes"):
        _run_local(work, partitions, plan, on_result, on_failure)
    else:
        from scrub.execution.cluster import run_on_cluster

        run_on_cluster(work, partitions, plan, on_result, on_failure)


def release_cluster_results() -> None:
    """Let go of the results a `Leaving` left on clusters (and of the clients holding them):
    called once the run is judged, or has failed."""
    import sys

    if "scrub.execution.cluster" in sys.modules:  # imported by a run on a cluster only
        from scrub.execution.cluster import release_left

        release_left()


def _run_local(work: Work, partitions: Sequence[Any], plan: Plan, on_result, on_failure) -> None:
    """A local pool; after a worker process dies, the partitions that were running
    are re-run under supervision and the ones not yet started go back to a fresh pool."""
    remaining = list(enumerate(partitions))
    while remaining:
        started: set[int] = set()
        done: set[int] = set()
        try:
            _compute_local(work, remaining, plan, on_result, started, done)
            return
        except Exception as error:
            if plan.scheduler != "processes" or not _is_dead_worker(error):
                raise
        from scrub.execution.isolation import run_isolated

        for number, partition in remaining:
            if number in started and number not in done:
                for piece in run_isolated(work, number, partition, plan.timeout, on_failure):
                    on_result(piece)
        remaining = [(number, partition) for number, partition in remaining if number not in started]


def _compute_local(
    work: Work, numbered: list[tuple[int, Any]], plan: Plan, on_result, started: set, done: set
) -> None:
    """The partitions on a pool of ``plan.workers`` threads or processes, one task per worker in
    flight and `IN_FLIGHT_EXTRA` queued: a partition is ``started`` once it is handed to the
    pool, so when a worker dies, the ones started and not ``done`` are the ones it may have been
    running (or was about to run). Each result goes to ``on_result`` as soon as it arrives.

    The pools are the standard library's, not Dask's local schedulers: the tasks are
    independent, so Dask's graph adds nothing here, and importing Dask cost time in this
    process and as much in the worker server, on the critical path of every local scan
    (measured: see docs/benchmarks.md, "Design measurements"). Clusters still run on
    ``dask.distributed``.
    """
    guarded = plan.scheduler == "processes"
    task = GuardedWork(work, plan.timeout) if guarded else work
    pool: Executor
    forking = fork_context() if guarded and plan.fork else None
    if forking is not None:
        pool = ProcessPoolExecutor(plan.workers, mp_context=forking, initializer=start_forked_worker)
    elif guarded:
        context = worker_context()  # before the server starts: its preload ties it to this process
        start_worker_server()
        pool = ProcessPoolExecutor(plan.workers, mp_context=context, initializer=ignore_in_worker)
    else:
        pool = ThreadPoolExecutor(plan.workers, thread_name_prefix="scrub-worker")
    waiting = iter(numbered)
    running: dict[Future, int] = {}
    if forking is not None:  # forked workers inherit the work and the partitions: only numbers travel
        _INHERITED.update(task=task, partitions=dict(numbered))

    def hand_out() -> None:
        for number, partition in waiting:
            started.add(number)
            with deferred():  # submitting may start a worker: an exchange not to cut in half
                if forking is not None:
                    running[pool.submit(_run_inherited, number)] = number
                else:
                    running[pool.submit(task, number, partition)] = number
            return

    interrupted = False
    try:
        with forked_start() if forking is not None else nullcontext():  # the first task forks them all
            for _ in range(plan.workers + IN_FLIGHT_EXTRA):
                hand_out()
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                number = running.pop(future)
                result = future.result()  # a task's error, or BrokenProcessPool for a dead worker
                done.add(number)
                try:
                    hand_out()  # before the result is merged: the worker does not wait for the driver
                finally:  # merged even when handing out finds the pool broken: it is done, not re-run
                    on_result(result)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        if isinstance(pool, ProcessPoolExecutor):
            _stop(pool, drain=DRAIN_SECONDS if interrupted else 0.0)
        else:  # threads cannot be stopped: the ones running finish their partition
            pool.shutdown(wait=not interrupted, cancel_futures=True)
        _INHERITED.clear()


#: Tasks handed to a local pool beyond one per worker: a worker that finishes a partition finds
#: the next one queued instead of idling while its result travels to this process and a new task
#: comes back (1-3 ms a partition; see docs/benchmarks.md). More in flight would only put more
#: partitions under suspicion (re-run under supervision) when a worker dies.
IN_FLIGHT_EXTRA = 1

#: What a forking pool's workers inherit (set before the fork, cleared after the pool): the work
#: and the partitions by number, so a task sends a number instead of pickling the work and a
#: partition's thousand entries each time, in this process and again in the worker.
_INHERITED: dict[str, Any] = {}


def _run_inherited(number: int) -> Any:
    """A task of a forked worker: partition ``number`` of the work it inherited (`_INHERITED`)."""
    return _INHERITED["task"](number, _INHERITED["partitions"][number])


#: After Ctrl-C, seconds the workers get to finish the partition they are on (they ignore
#: SIGINT) before they are killed: a worker killed while it sends a result leaves the pool's
#: manager thread waiting for the rest of it, and the process unable to exit.
DRAIN_SECONDS = 5.0
#: How long the pool's manager thread gets to end once its workers are stopped (it takes
#: milliseconds), before it is taken for stuck in a result cut short (see `_unblock`).
MANAGER_STUCK_SECONDS = 1.0
#: ...and how long it then gets to end.
MANAGER_EXIT_SECONDS = 5.0


def _stop(pool: ProcessPoolExecutor, drain: float = 0.0) -> None:
    """Stop the workers now: a worker's own interpreter shutdown would delay the exit.

    The pool is shut down first (its manager thread exits cleanly), then any worker still
    alive is killed: at the end of a scan they are idle, every result is in; after an
    interrupt, they first get ``drain`` seconds to finish what they are running.
    """
    processes = list(getattr(pool, "_processes", {}).values())
    # shutdown() forgets both: the manager thread, and the queue its workers send results on
    manager = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + drain
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        process.terminate()
    # The pool's manager thread closes its wake-up pipe as it ends; one still ending at exit
    # races the interpreter's own exit hook, which writes to that pipe ("Bad file descriptor",
    # a 15-line traceback after the scan's error line: seen when a result's handler raised).
    if manager is not None:
        manager.join(MANAGER_STUCK_SECONDS)
        if manager.is_alive() and results is not None:
            _unblock(manager, results)


def _unblock(manager: threading.Thread, results: Any) -> None:
    """End a pool's manager thread stuck in the middle of a result.

    A worker killed while it sends a result (a scan that stops on an error while partitions
    are in flight) leaves the thread waiting for the rest of the message, and the interpreter's
    exit joining that thread: forever (seen in 1 of 5 runs of a fix whose manifest filled the
    disk). Zeros complete the message; it fails to unpickle, the thread takes the pool for
    broken and ends as it would after a crash. The message's 4-byte header is written whole,
    so what is missing is payload: at most one result's size.
    """
    descriptor = results._writer.fileno()
    os.set_blocking(descriptor, False)
    zeros = bytes(1 << 16)
    deadline = time.monotonic() + MANAGER_EXIT_SECONDS
    while manager.is_alive() and time.monotonic() < deadline:
        try:
            os.write(descriptor, zeros)
        except BlockingIOError:  # the pipe is full: the thread is reading
            manager.join(0.01)
        except OSError:  # the thread ended and closed its side
            break
    manager.join(MANAGER_EXIT_SECONDS)


def prepare(plan: Plan, imports: Sequence[str] = ()) -> None:
    """Start what the plan's workers need in the background while the dataset is listed.

    Called once the format is known (`scrub.scanning.opening.worker_starter`, then at the plan): the worker
    server imports NumPy and scrub (time of the other core), which only a scan on processes
    repays. Started earlier, before the format was known, it ran beside every scan on threads and
    slowed them (an HDF5 file was faster without it), and gained nothing on processes (the same
    within noise; see docs/benchmarks.md, "Design measurements"). Workers that will be forked
    from this process (`Plan.fork`, `scrub.execution.workers.fork_context`) need no server."""
    if plan.scheduler == "processes" and plan.fork and can_fork():
        remove_abandoned_scratch()  # what the server's start sweeps: a killed run's semaphores
    elif plan.scheduler == "processes":
        worker_context(imports)
        start_worker_server()


def _is_dead_worker(error: BaseException | None) -> bool:
    from concurrent.futures.process import BrokenProcessPool

    while error is not None:
        if isinstance(error, BrokenProcessPool):
            return True
        error = error.__cause__ or error.__context__
    return False
