"""Worker processes: the server they are forked from, and the watchdog that ends a hung one.

Shared by the local pool (`scrub.pipeline`), the supervised re-runs (`scrub.execution.isolation`) and the
cluster (`scrub.execution.cluster`), below all three: none of them imports another for these.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from scrub.execution.interrupt import ignore_in_worker, ignored_by_children
from scrub.execution.lifeline import hand_down
from scrub.fixing.outputs import remove_abandoned_scratch


def start_worker_server() -> None:
    """The server, and every worker forked from it, ignores SIGINT: Ctrl-C is the driver's (see
    `scrub.execution.interrupt`)."""
    from multiprocessing import forkserver, resource_tracker

    hand_down()  # the server dies with this process (see `scrub.execution.lifeline`)
    _own_scratch_folder()
    if _server_running(forkserver):
        return  # no window with SIGINT ignored: a Ctrl-C taken by another thread then is lost
    # The resource tracker first: its start unblocks SIGINT when it is done, which inside the
    # window below delivered a pending Ctrl-C while it was ignored (lost: exit 0, measured)
    _quiet_resource_tracker()
    resource_tracker.ensure_running()
    with ignored_by_children():
        forkserver.ensure_running()


#: what the resource tracker is started with (it takes this process's -W options): when the scan
#: is killed it unlinks the pool's semaphores, as it should, and then warned on the user's terminal
#: of "leaked semaphore objects" it had just cleaned up (and the next run would have removed)
TRACKER_WARNINGS = "ignore::UserWarning:multiprocessing.resource_tracker"


def _quiet_resource_tracker() -> None:
    """Start the resource tracker without its leaked-resources warning (`TRACKER_WARNINGS`)."""
    if TRACKER_WARNINGS not in sys.warnoptions:
        sys.warnoptions.append(TRACKER_WARNINGS)


def _server_running(forkserver) -> bool:
    """Whether this process's worker server is up (multiprocessing keeps its pid privately)."""
    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid is None:
        return False
    try:  # without reaping it: multiprocessing's own check waits for a dead one
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def _own_scratch_folder() -> None:
    """multiprocessing keeps the worker server's socket in a ``pymp-XXXX`` folder that only a
    normal exit removes; a killed scan left one behind in /tmp for good. Named after this process
    instead (`scrub.fixing.outputs.scratch_folder`), the next run removes it. The same for the pool's
    named semaphores (``/dev/shm/sem.mp-XXXX``): when the whole process group is killed (an OOM
    killer, a CI timeout), the resource tracker that would unlink them dies too, and each such
    scan left 5 for good; named after this process, the next run removes them
    (`scrub.fixing.outputs.remove_abandoned_scratch`). (``_config`` is private: without it,
    multiprocessing's own names are used.)"""
    import shutil
    from multiprocessing import process, util

    from scrub.fixing.outputs import scratch_folder, semaphore_prefix

    config = getattr(process.current_process(), "_config", None)
    if isinstance(config, dict) and config.get("tempdir") is None:
        folder = scratch_folder("workers")
        util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)
        config["tempdir"] = folder
    if isinstance(config, dict) and config.get("semprefix") == "/mp":
        config["semprefix"] = "/" + semaphore_prefix(os.getpid())


def worker_context(imports: Sequence[str] = ()):
    """Workers fork from a clean server process that has scrub (and ``imports``) imported:
    fork-fast start-up (spawned workers, each importing everything again, made a scan slower:
    see docs/benchmarks.md, "Design measurements") without forking this possibly multi-threaded
    process. The first call's ``imports`` win: the server starts once."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["scrub.execution.workerserver", "scrub.scanning.runner", *imports])
    return context


def _native_threads() -> int:
    """The threads of this process as the kernel counts them (Linux), NumPy's BLAS pool too."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


#: the threads this process had once scrub was imported (the main one and NumPy's BLAS pool):
#: one started since (a plugin's, an OpenMP pool, a file system's event loop) forbids a fork
_THREADS_AT_IMPORT = _native_threads()


def fork_context():
    """The ``fork`` context, where workers may be forked from this process; else None (the
    worker server, `worker_context`).

    Forked from the scan's own process, the workers start at once: they hold everything it
    imported, where the worker server first starts an interpreter and imports NumPy and scrub,
    on the critical path of every scan on processes (see docs/benchmarks.md, "Design
    measurements"). The server exists for what a fork would copy: a lock another thread holds
    (a progress display writing to the terminal), a library's handle. So only on Linux (macOS
    frameworks are not fork-safe: Python starts processes there by ``spawn``), only when this
    process runs no thread but the main one and the native ones its imports started (NumPy's
    BLAS pool stops and restarts itself around a fork; an OpenMP pool a plugin started might
    not), and only when every reader of the run `forks_cleanly` (the caller's check)."""
    import multiprocessing

    if not can_fork():
        return None
    remove_abandoned_scratch()  # a killed run's; this one's semaphores are unlinked as they are made
    hand_down()  # the workers' parent is this process (`scrub.execution.lifeline`)
    return multiprocessing.get_context("fork")


def can_fork() -> bool:
    """Whether `fork_context` would fork now (asked early too: where it will not, because a
    progress display already runs its thread, the worker server is started early as before)."""
    import multiprocessing

    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return False
    if _native_threads() > _THREADS_AT_IMPORT or _THREADS_AT_IMPORT < 0:
        return False
    return "fork" in multiprocessing.get_all_start_methods()


def start_forked_worker() -> None:
    """The initializer of a worker forked from the scan: it starts as one from the worker
    server (a new interpreter) would: Ctrl-C ignored, tied to its parent (`ignore_in_worker`),
    and without a fault handler the scan's process enabled for itself (pytest does), which
    printed a decoder's crash on the terminal where the scan reports it as a finding."""
    ignore_in_worker()
    asked = os.environ.get("PYTHONFAULTHANDLER") or "faulthandler" in getattr(sys, "_xoptions", {})
    if faulthandler.is_enabled() and not asked:
        faulthandler.disable()


class forked_start:
    """Around the first task handed to a forking pool (it forks every worker): Ctrl-C ignored
    by the children and held for this process (`ignored_by_children`), the garbage collector's
    objects frozen so that the workers' collections never touch (and so copy) this process's
    pages, and Python's warning that a process with threads forks (NumPy's BLAS threads, which
    handle it) silenced. Main thread only, as a fork is made only with no other thread."""

    def __enter__(self) -> None:
        import gc
        import warnings

        for stream in (sys.stdout, sys.stderr):  # a worker must not inherit (and write) their text
            stream.flush()
        self.signals = ignored_by_children()
        self.signals.__enter__()
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.filterwarnings("ignore", r".*fork\(\) may lead to deadlocks", DeprecationWarning)
        gc.freeze()

    def __exit__(self, *exc) -> None:
        import gc

        gc.unfreeze()
        self.warnings.__exit__(*exc)
        self.signals.__exit__(*exc)


class GuardedWork:
    """Runs ``work`` in a worker process with a watchdog that ends the process on a hang.

    A hung decoder cannot be interrupted from Python (it may hold the GIL), but it can be
    killed: the C watchdog thread of `faulthandler` calls ``_exit`` when it is not re-armed in
    time, the pool (or the cluster's nanny) sees a dead worker, and the unfinished partitions
    are re-run under supervision (or bisected on the cluster). Arming is not free (it starts a
    thread), so it is re-armed at most once per ``timeout``, for ``2 * timeout`` after the
    earliest progress of every guarded task of the process: a record runs at least ``timeout``
    and at most ``2 * timeout`` seconds before the kill. The watchdog is one per process, so a
    cluster worker running tasks on several threads shares it: a task that makes progress must
    not keep re-arming it for one that hangs, and one that ends must not cancel it for another.
    """

    def __init__(self, work: Callable[..., Any], timeout: float) -> None:
        self.work = work
        self.timeout = timeout

    def __call__(
        self, partition_no: int, partition: Any, start: int = 0, stop: int | None = None, on_record=None
    ):
        task = object()
        _Watchdog.progress(task, self.timeout, force=True)

        def arm(offset: int) -> None:
            _Watchdog.progress(task, self.timeout)
            if on_record is not None:
                on_record(offset)

        try:
            return self.work(partition_no, partition, start, stop, arm)
        finally:
            _Watchdog.done(task, self.timeout)


class _Watchdog:
    """The process's `faulthandler` watchdog, shared by the guarded tasks of its threads."""

    lock = threading.Lock()
    last: dict[object, float] = {}  # task -> when it last made progress
    armed_at = -float("inf")
    sink = None

    @classmethod
    def progress(cls, task: object, timeout: float, force: bool = False) -> None:
        now = time.monotonic()
        with cls.lock:
            cls.last[task] = now
            if force or now - cls.armed_at > timeout:
                cls._arm(now, timeout)

    @classmethod
    def done(cls, task: object, timeout: float) -> None:
        with cls.lock:
            cls.last.pop(task, None)
            if cls.last:
                cls._arm(time.monotonic(), timeout)
            else:
                faulthandler.cancel_dump_traceback_later()
                cls.armed_at = -float("inf")

    @classmethod
    def _arm(cls, now: float, timeout: float) -> None:
        if cls.sink is None:
            cls.sink = open(os.devnull, "w")  # noqa: SIM115 - the watchdog writes to it until exit
        earliest = min(cls.last.values())
        faulthandler.dump_traceback_later(max(0.001, earliest + 2 * timeout - now), exit=True, file=cls.sink)
        cls.armed_at = now
