"""Helper processes die with the scan that started them, however it ends.

A scan's helpers are the worker server (multiprocessing's forkserver), the workers it forks and
the supervised children that pinpoint crashing records. When the driver is killed by a signal it
cannot catch (``kill -9``, the OOM killer, a CI timeout), nothing of its own runs: measured
before this module, the worker server and both workers stayed alive indefinitely (~140 MB each),
waiting on pipes that no one would write to again.

So every helper ties its life to its parent's: on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``
makes the kernel kill it the moment its parent exits (the server's parent is the driver, a
worker's is the server, so a dead driver takes the whole tree down within milliseconds);
elsewhere a daemon thread polls the parent's pid every half second. A helper whose parent died
before the tie was made exits at once (the pid it was started by is passed down in the
environment, since a fork cannot be told apart from a re-parenting afterwards).

The worker server imports `scrub.execution.workerserver` (its preload), which calls `tie_to_parent`; a
worker calls it from its initializer. Stdlib only.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: the environment variable that tells the worker server the driver's pid, and workers the server's
PARENT_PID = "SCRUB_PARENT_PID"
_PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.5


def tie_to_parent(expected_parent: int | None = None) -> None:
    """End this process when its parent ends. ``expected_parent``: the pid the parent had when
    this process was started (default: the parent's pid now); if the parent is already another
    process, the real one is gone: exit now."""
    expected_parent = expected_parent or os.getppid()
    if not _pdeathsig(signal.SIGKILL):
        threading.Thread(target=_watch, args=(expected_parent,), name="scrub-lifeline", daemon=True).start()
    if os.getppid() != expected_parent:
        os._exit(1)


def hand_down() -> None:
    """Tell the processes this one starts from now on its pid (see `tie_to_parent`)."""
    os.environ[PARENT_PID] = str(os.getpid())


def expected_parent() -> int | None:
    """The parent pid handed down by the process that started this one, if any."""
    try:
        return int(os.environ[PARENT_PID])
    except (KeyError, ValueError):
        return None


def _pdeathsig(signum: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_POLL_SECONDS)
    os._exit(1)
