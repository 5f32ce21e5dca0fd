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
    with ``KilledWorker``. Such tasks are suspects, not culprits: tasks queued on a dying worker
    are blamed with it. Once the rest is done, each suspect range runs alone on the cluster, so
    a dead worker can only mean that range; it is bisected down to the single record, which is
    reported through ``on_failure``.
    """
    from distributed import Client, as_completed
    from distributed.scheduler import KilledWorker

    try:
        client = Client(plan.scheduler, timeout="10s")
    except (OSError, TimeoutError, ValueError) as error:
        raise ScrubError(f"cannot reach the dask scheduler at {plan.scheduler}: {error}") from None
    with client:
        suspects: list[tuple[int, Any, int, int]] = []
        futures = {
            client.submit(work, number, partition, 0, len(partition), pure=False): (number, partition)
            for number, partition in enumerate(partitions)
        }
        for future in as_completed(futures):
            number, partition = futures.pop(future)
            if future.status == "finished":
                on_result(future.result())
            elif isinstance(future.exception(), KilledWorker):
                suspects.append((number, partition, 0, len(partition)))
            else:
                raise future.exception()
            future.release()
        while suspects:
            number, partition, start, stop = suspects.pop()
            future = client.submit(work, number, partition, start, stop, pure=False)
            try:
                on_result(future.result())
            except KilledWorker:
                if stop - start == 1:
                    on_result(on_failure(number, partition, start, WORKER_DIED))
                else:
                    middle = (start + stop) // 2
                    suspects += [(number, partition, middle, stop), (number, partition, start, middle)]
            finally:
                future.release()
