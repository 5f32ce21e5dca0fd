"""Run the pipeline's partitions on an existing ``dask.distributed`` cluster.

Imported only when ``--scheduler`` is an address: importing ``distributed`` costs ~0.5 s, which
small local jobs should not pay. The workers must see the dataset at the same path as this
process (a shared file system), since they read it themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scrub.errors import ScrubError

WORKER_DIED = "decoder crashed or timed out (its worker process died)"


def run_on_cluster(work, partitions: Sequence[Any], plan, on_result: Callable, on_failure: Callable) -> None:
    """Submit one task per partition and consume results as they complete.

    A task whose worker dies is retried by the scheduler; after its allowed failures it ends
    with ``KilledWorker``. That range of records is then bisected on the cluster until the
    single record that kills workers is found and reported through ``on_failure``.
    """
    from distributed import Client, as_completed
    from distributed.scheduler import KilledWorker

    try:
        client = Client(plan.scheduler, timeout="10s")
    except (OSError, TimeoutError, ValueError) as error:
        raise ScrubError(f"cannot reach the dask scheduler at {plan.scheduler}: {error}") from None
    with client:
        pending: dict[Any, tuple[int, Any, int, int]] = {}

        def submit(number: int, partition: Any, start: int, stop: int):
            future = client.submit(work, number, partition, start, stop, pure=False)
            pending[future] = (number, partition, start, stop)
            return future

        completed = as_completed([submit(n, p, 0, len(p)) for n, p in enumerate(partitions)])
        for future in completed:
            number, partition, start, stop = pending.pop(future)
            if future.status == "finished":
                on_result(future.result())
            else:
                error = future.exception()
                if not isinstance(error, KilledWorker):
                    raise error
                if stop - start == 1:
                    on_result(on_failure(number, partition, start, WORKER_DIED))
                else:
                    middle = (start + stop) // 2
                    completed.add(submit(number, partition, start, middle))
                    completed.add(submit(number, partition, middle, stop))
            future.release()
