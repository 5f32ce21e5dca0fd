"""Run one partition in a supervised child process that reports each record before touching it.

Used only after a worker process died: the child tells the parent the offset of every record it
starts, so when the child dies (a decoder crash) or stops reporting for ``timeout`` seconds (a
hang, and the parent kills it), the parent knows the exact record. It reports that record, then
starts a new child at the next one. Everything else in the partition is checked as usual.
"""

from __future__ import annotations

import multiprocessing
import traceback
from typing import Any, Callable

from scrub.errors import ScrubError

CRASHED = "decoder crashed"
TIMED_OUT = "timed out"


def _child(work, partition_no: int, partition: Any, start: int, connection) -> None:
    try:
        result = work(partition_no, partition, start, None, lambda offset: connection.send(("at", offset)))
        connection.send(("done", result))
    except BaseException:  # noqa: BLE001 - a bug in scrub, reported to the parent to re-raise
        connection.send(("error", traceback.format_exc()))
    finally:
        connection.close()


def run_isolated(
    work: Callable[..., Any],
    partition_no: int,
    partition: Any,
    timeout: float,
    on_failure: Callable[[int, Any, int, str], Any],
) -> list[Any]:
    """Partial results for the whole partition, crash- and hang-proof, as a list of pieces."""
    context = multiprocessing.get_context("spawn")
    pieces: list[Any] = []
    start = 0
    while True:
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(target=_child, args=(work, partition_no, partition, start, sender), daemon=True)
        child.start()
        sender.close()
        current = start
        failure: str | None = None
        while True:
            if not receiver.poll(timeout):
                failure = TIMED_OUT
                child.kill()
                break
            try:
                kind, value = receiver.recv()
            except EOFError:
                failure = CRASHED
                break
            if kind == "at":
                current = value
            elif kind == "done":
                pieces.append(value)
                break
            else:
                child.kill()
                last_line = value.strip().splitlines()[-1]
                raise ScrubError(f"internal error while checking partition {partition_no}: {last_line}")
        child.join()
        receiver.close()
        if failure is None:
            return pieces
        pieces.append(on_failure(partition_no, partition, current, failure))
        start = current + 1
