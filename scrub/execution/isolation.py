"""Run one partition in a supervised child process that reports each record before touching it.

Used only after a worker process died: the child tells the parent the offset of every record it
starts, so when the child dies (a decoder crash) or stops reporting for ``timeout`` seconds (a
hang, and the parent kills it), the parent knows the exact record. It reports that record, then
checks the records before it again (their results died with the child) and those after it in new
children. Everything else in the partition is checked as usual.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from scrub.errors import ScrubError
from scrub.execution.interrupt import ignore_in_worker

CRASHED = "decoder crashed"
TIMED_OUT = "timed out"
#: Seconds a new child may take to start and report its first record (forking from the server
#: is fast, but a loaded machine can be slow, and a slow start must not blame a record).
STARTUP_TIMEOUT = 120.0


def _child(work, partition_no: int, partition: Any, start: int, stop: int, connection) -> None:
    ignore_in_worker()  # Ctrl-C is the parent's to handle; dies with the worker server, as workers do
    try:
        result = work(partition_no, partition, start, stop, lambda offset: connection.send(("at", offset)))
        connection.send(("done", result))
    except BaseException:
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
    from scrub.execution.workers import worker_context

    context = worker_context()
    pieces: list[Any] = []
    segments = [(0, len(partition))]  # record ranges still to check
    while segments:
        start, stop = segments.pop()
        if start >= stop:
            continue
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(
            target=_child, args=(work, partition_no, partition, start, stop, sender), daemon=True
        )
        child.start()
        sender.close()
        current: int | None = None  # the record the child is on, once it has said
        failure: str | None = None
        try:
            while True:
                if not receiver.poll(STARTUP_TIMEOUT if current is None else timeout):
                    failure = TIMED_OUT
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
                    last_line = value.strip().splitlines()[-1]
                    raise ScrubError(f"internal error while checking partition {partition_no}: {last_line}")
        finally:  # a hung child, an error, or Ctrl-C here: the child goes too (done, it is leaving anyway)
            child.kill()
            child.join()
            receiver.close()
        if failure is None:
            continue
        if current is None:
            raise ScrubError(
                "worker processes could not start; a script that calls scrub.scan needs the "
                "`if __name__ == '__main__':` guard (or use scheduler='threads')"
            )
        pieces.append(on_failure(partition_no, partition, current, failure))
        # The dead child's results for start..current-1 died with it: check those again.
        segments += [(current + 1, stop), (start, current)]
    return pieces
