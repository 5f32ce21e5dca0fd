"""Run the pipeline's partitions on an existing ``dask.distributed`` cluster.

Imported only when ``--scheduler`` is an address: importing ``distributed`` costs ~0.5 s, which
small local jobs should not pay. The workers must see the dataset at the same path as this
process (a shared file system), since they read it themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from scrub.errors import IncompleteScan, ScrubError

WORKER_DIED = "decoder crashed or timed out (its worker process died)"


class ClusterLost(IncompleteScan):
    """The dask scheduler went away mid-scan: the scan cannot cover every record (exit 3)."""


def run_on_cluster(work, partitions: Sequence[Any], plan, on_result: Callable, on_failure: Callable) -> None:
    """Submit one task per partition and consume results as they complete.

    A task whose worker dies is retried by the scheduler; after its allowed failures it ends
    with ``KilledWorker``. Such tasks are suspects, not culprits: tasks queued on a dying worker
    are blamed with it. Once the rest is done, each suspect range runs alone on the cluster, so
    a dead worker can only mean that range; it is bisected down to the single record, which is
    reported through ``on_failure``.
    """
    import logging
    from concurrent.futures import CancelledError

    import dask
    from distributed import Client
    from distributed.comm import CommClosedError

    from scrub.pipeline import GuardedWork

    # A hung decoder on a worker: the watchdog ends the worker process, its nanny starts another,
    # the task ends as KilledWorker and is bisected down to the record like a crash.
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
    try:
        _run(client, work, partitions, on_result, on_failure, plan.cluster_wait)
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


def _completed(client, futures, wait: float) -> Iterator[Any]:
    """Each of ``futures`` as it completes (``distributed.as_completed``, polled as its own
    iterator polls), watching the cluster meanwhile: `NoWorkers` once it has had no worker for
    ``wait`` seconds, where Dask would wait for one forever."""
    from distributed import as_completed

    found = as_completed(futures)
    checked = time.monotonic()
    without_workers_since: float | None = None
    while not found.is_empty():
        batch = found.next_batch(block=False)
        if batch:
            yield from batch
            without_workers_since = None
            continue
        time.sleep(0.05)
        now = time.monotonic()
        if now - checked < 1.0:
            continue
        checked = now
        if client.nthreads():
            without_workers_since = None
        elif without_workers_since is None:
            without_workers_since = now
        elif now - without_workers_since > wait:
            raise NoWorkers(f"no worker for {wait:g} s: every worker died or left")


def _run(
    client, work, partitions: Sequence[Any], on_result: Callable, on_failure: Callable, wait: float
) -> None:
    """Every partition, then the suspects of dead workers bisected (see `run_on_cluster`); the
    cluster may have no worker for ``wait`` seconds."""
    suspects: list[tuple[int, Any, int, int]] = []
    pending = list(enumerate(partitions))
    while pending:
        futures = {
            client.submit(work, number, partition, 0, len(partition), pure=False): (number, partition)
            for number, partition in pending
        }
        pending = []
        for future in _completed(client, list(futures), wait):
            number, partition = futures.pop(future)
            outcome = _outcome(future)
            if outcome == "finished":
                on_result(future.result())
            elif outcome == "killed":
                suspects.append((number, partition, 0, len(partition)))
            else:
                pending.append((number, partition))
            future.release()
    while suspects:
        number, partition, start, stop = suspects.pop()
        future = client.submit(work, number, partition, start, stop, pure=False)
        try:
            for _ in _completed(client, [future], wait):
                outcome = _outcome(future)
                if outcome == "finished":
                    on_result(future.result())
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
