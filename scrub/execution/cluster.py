"""Run the pipeline's partitions on an existing ``dask.distributed`` cluster.

Imported only when ``--scheduler`` is an address: importing ``distributed`` is slow (see
docs/benchmarks.md, "Design measurements"), which small local jobs should not pay. The workers
must see the dataset at the same path as this process (a shared file system), since they read
it themselves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from scrub.errors import IncompleteScan, ScrubError

WORKER_DIED = "decoder crashed or timed out (its worker process died)"

log = logging.getLogger(__name__)


class ClusterLost(IncompleteScan):
    """The dask scheduler went away mid-scan, or the cluster had no worker for ``--cluster-wait``
    seconds (none ever joined, or every one left): the scan cannot cover every record (exit 3)."""


def run_on_cluster(work, partitions: Sequence[Any], plan, on_result: Callable, on_failure: Callable) -> None:
    """Submit one task per partition and consume results as they complete.

    A task whose worker dies is retried by the scheduler; after its allowed failures it ends
    with ``KilledWorker``. Such tasks are suspects, not culprits: tasks queued on a dying worker
    are blamed with it. Once the rest is done, each suspect range runs alone on the cluster, so
    a dead worker can only mean that range; it is bisected down to the single record, which is
    reported through ``on_failure``.
    """
    from concurrent.futures import CancelledError

    import dask
    from distributed import Client
    from distributed.comm import CommClosedError

    from scrub.execution.workers import GuardedWork

    # A hung decoder on a worker: the watchdog ends the worker process, its nanny starts another,
    # the task ends as KilledWorker and is bisected down to the record like a crash.
    leaving = getattr(work, "leaving", None)
    work = GuardedWork(work, plan.timeout)
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "10s"}):
            client = Client(plan.scheduler, timeout="10s")
    except (OSError, TimeoutError, ValueError) as error:
        raise ScrubError(f"cannot reach the dask scheduler at {plan.scheduler}: {error}") from None
    # A scheduler that goes away makes the client log reconnection tracebacks: the scan says it
    # in one line instead (`ClusterLost`).
    for name in ("distributed.client", "distributed.comm", "distributed.core", "distributed.batched"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    keep = False
    try:
        watch = WorkerWatch(client, plan.scheduler, plan.cluster_wait)
        _run(watch, work, leaving, partitions, on_result, on_failure)
        keep = leaving is not None
    except Exception as error:
        # a closed connection to the scheduler can surface before the client's status says so
        lost = isinstance(error, (Cancelled, CancelledError, CommClosedError, NoWorkers))
        if client.status == "running" and not lost:
            raise  # the scan's own error, or a task's
        if isinstance(error, NoWorkers):
            raise ClusterLost(f"the dask cluster at {plan.scheduler} has no workers ({error})") from None
        raise ClusterLost(
            f"the dask scheduler at {plan.scheduler} went away mid-scan ({_reason(error)})"
        ) from None
    finally:
        if keep:  # the results left on the cluster live as long as their client
            _LEFT_WITH.append(client)
        else:
            _close(client)


#: the clients of runs that left results on their clusters (`release_left` closes them)
_LEFT_WITH: list[Any] = []


def release_left() -> None:
    """Close the clients holding results left on clusters: their futures, and the data the
    workers held for them, go."""
    while _LEFT_WITH:
        _close(_LEFT_WITH.pop())


def _close(client: Any) -> None:
    try:
        client.close(timeout=2)
    except Exception:
        pass


class Cancelled(Exception):
    """A task's future ended without a result or an error: its scheduler is gone."""


def _reason(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:200]


class NoWorkers(Exception):
    """The cluster has had no worker for ``--cluster-wait`` seconds: its tasks would wait forever."""


#: Seconds without a worker before the scan says that it waits: a `dask worker` started with the
#: scan joins well within it, and a nanny restarts a dead worker in about as long; neither is a
#: wait worth a line (see docs/benchmarks.md, "Design measurements").
WAIT_NOTICE_SECONDS = 3.0
#: ...and with ``--quiet`` (this module's logger not enabled for INFO), where only a long wait is
#: worth a line.
LONG_WAIT_SECONDS = 30.0


class WorkerWatch:
    """Whether the cluster has workers, asked once a second while the scan waits for results.

    Dask waits for a worker forever, so a scan on a cluster with none looks hung. The watch says
    that it waits, once per scan, on this module's logger (the command line prints it on stderr),
    says how many workers joined when the wait it said ends, and raises `NoWorkers` once the
    cluster has had no worker for ``wait`` seconds, telling "no worker ever joined" from "every
    worker left".
    """

    def __init__(self, client: Any, address: str, wait: float) -> None:
        self.client = client
        self.address = address
        self.wait = wait
        self.joined = False  # a worker was seen (or a result came) during this scan
        self.without_workers_since: float | None = None
        self.checked = -float("inf")
        self.said_wait = False  # said once per scan: a cluster whose workers come and go must not flood
        self.wait_said_since: float | None = None  # the wait said, while it lasts

    def results_came(self) -> None:
        """A result proves a worker: the cluster is not without one."""
        self.joined = True
        self.without_workers_since = None
        if self.wait_said_since is not None:  # it may finish before the next check
            self._say_joined(len(self.client.nthreads()))

    def check(self) -> None:
        """Ask the scheduler for its workers, at most once a second."""
        now = time.monotonic()
        if now - self.checked < 1.0:
            return
        self.checked = now
        workers = len(self.client.nthreads())
        if workers:
            self._say_joined(workers)
            self.joined = True
            self.without_workers_since = None
            return
        if self.without_workers_since is None:
            self.without_workers_since = now
        waited = now - self.without_workers_since
        if waited > self.wait:
            raise NoWorkers(
                f"no worker for {self.wait:g} s: every worker died or left"
                if self.joined
                else f"no worker ever joined in {self.wait:g} s; --cluster-wait sets how long to wait"
            )
        if not self.said_wait and waited >= self._worth_a_line_after():
            self.said_wait = True
            self.wait_said_since = self.without_workers_since
            what = "every worker has left" if self.joined else "no worker has joined yet"
            log.log(
                logging.WARNING if waited >= LONG_WAIT_SECONDS else logging.INFO,
                f"waiting for a dask worker on {self.address} ({what}); the scan ends after "
                f"{self.wait:g} s without one (--cluster-wait)",
            )

    def _say_joined(self, workers: int) -> None:
        """The end of the wait said, if one was: how many workers the cluster has now."""
        if self.wait_said_since is None:
            return
        log.info(
            f"{workers} dask worker{'s' if workers != 1 else ''} on {self.address} after "
            f"{time.monotonic() - self.wait_said_since:.0f} s without one: the scan goes on"
        )
        self.wait_said_since = None

    def _worth_a_line_after(self) -> float:
        """Seconds without a worker before the wait is said: soon, unless only warnings are
        wanted (``--quiet``): then only a long wait is said, as a warning."""
        if log.isEnabledFor(logging.INFO):
            return min(WAIT_NOTICE_SECONDS, self.wait / 2)
        return LONG_WAIT_SECONDS


def _completed(watch: WorkerWatch, futures) -> Iterator[Any]:
    """Each of ``futures`` as it completes (``distributed.as_completed``, polled as its own
    iterator polls), with ``watch`` on the cluster meanwhile: it raises `NoWorkers` where Dask
    would wait for a worker forever."""
    from distributed import as_completed

    found = as_completed(futures)
    while not found.is_empty():
        batch = found.next_batch(block=False)
        if batch:
            watch.results_came()
            yield from batch
            continue
        time.sleep(0.05)
        watch.check()


def _result(watch: WorkerWatch, future) -> Any:
    """A finished task's result, its wait watched as the tasks' are. The worker holding it may
    die while it sends it: Dask then computes the task again, which waits for a worker forever
    (the test whose workers all die hung in ``future.result()`` in 3 of ~30 runs). Fetched on the
    client's event loop with no time limit of its own (a large result may take long to send),
    while this thread asks the watch, which raises `NoWorkers` once the cluster has none.

    The fetch is not cancelled then (closing the client ends it): with a cancel, 3 of 15 runs of
    that test ended in a SystemError from Python 3.11's ast module as pytest exited, 0 of 30
    without (likely Dask's gather, cut midway, leaving inner tasks to fail unretrieved)."""
    import asyncio
    from concurrent.futures import wait

    client = watch.client
    fetching = asyncio.run_coroutine_threadsafe(
        client.gather(future, asynchronous=True), client.loop.asyncio_loop
    )
    while not wait([fetching], timeout=0.05).done:
        watch.check()
    return fetching.result()


def _finished(watch: WorkerWatch, leaving, future) -> Any:
    """A finished task's result; the part ``leaving`` (the work's `scrub.pipeline.Leaving`, or
    None) leaves stays on the worker that holds the result, its future in the result."""
    if leaving is None:
        return _result(watch, future)
    client = watch.client
    taken = client.submit(leaving.taken, future, pure=False)
    left = client.submit(leaving.left, future, pure=False)
    try:
        result = _result(watch, taken)
    finally:
        taken.release()
    return leaving.attach(result, left)


def _run(
    watch: WorkerWatch, work, leaving, partitions: Sequence[Any], on_result: Callable, on_failure: Callable
) -> None:
    """Every partition, then the suspects of dead workers bisected (see `run_on_cluster`);
    ``leaving``: the `scrub.pipeline.Leaving` of the work ``work`` guards, or None."""
    client = watch.client
    suspects: list[tuple[int, Any, int, int]] = []
    pending = list(enumerate(partitions))
    while pending:
        futures = {
            client.submit(work, number, partition, 0, len(partition), pure=False): (number, partition)
            for number, partition in pending
        }
        pending = []
        for future in _completed(watch, list(futures)):
            number, partition = futures.pop(future)
            outcome = _outcome(future)
            if outcome == "finished":
                on_result(_finished(watch, leaving, future))
            elif outcome == "killed":
                suspects.append((number, partition, 0, len(partition)))
            else:
                pending.append((number, partition))
            future.release()
    while suspects:
        number, partition, start, stop = suspects.pop()
        future = client.submit(work, number, partition, start, stop, pure=False)
        try:
            for _ in _completed(watch, [future]):
                outcome = _outcome(future)
                if outcome == "finished":
                    on_result(_finished(watch, leaving, future))
                elif outcome == "lost":
                    suspects.append((number, partition, start, stop))
                elif stop - start == 1:
                    on_result(on_failure(number, partition, start, WORKER_DIED))
                else:
                    middle = (start + stop) // 2
                    suspects += [(number, partition, middle, stop), (number, partition, start, middle)]
        finally:
            future.release()


def _outcome(future) -> str:
    """How a completed task ended: "finished"; "killed" (its worker died while running it:
    a suspect); "lost" (it finished, but its result died with its worker: to compute again).
    A task's own error is raised, as is `Cancelled` when no result will come."""
    from distributed.scheduler import KilledWorker

    if future.status == "error":
        if isinstance(future.exception(), KilledWorker):
            return "killed"
        raise future.exception()
    if future.status in ("finished", "lost"):
        return future.status
    raise Cancelled(f"a task ended {future.status}, without a result")
