"""Ctrl-C: one line on stderr, exit code 130, no traceback, no process left running.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: scrub, its worker
processes and the server they fork from. Measured before this module: 20-40 lines of tracebacks
(every worker raised KeyboardInterrupt wherever it was), and now and then a process that never
exited, its pool's manager thread blocked reading the half-written result of a killed worker.

So: the worker server starts with SIGINT ignored (`ignored_by_children`), so that it and every
worker forked from it never see Ctrl-C (their start-up imports would otherwise print a traceback too),
and workers also ignore it (`ignore_in_worker`): the scan's driver lets them finish the
partition they are on for a few seconds, then stops them (`scrub.pipeline`). The command line
installs `install`'s handler first thing. On the first Ctrl-C the handler ignores further ones,
arms a watchdog, and raises KeyboardInterrupt in the main thread, so that the usual ``except
BaseException`` paths discard temporary outputs and stop the pool; the CLI then prints its line
(`interrupted`) and exits 130. A KeyboardInterrupt that lands in a destructor or a weakref
callback is swallowed by Python: the unraisable hook keeps it from printing "Exception ignored
in ...", and the watchdog ends the process `GRACE` seconds after the Ctrl-C whatever happens
(`exit_now`: ``os._exit``, which waits for no thread).

Stdlib only: it is imported before anything heavy, so that an interrupt during start-up is
handled too.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import NoReturn

EXIT_CODE = 130  # 128 + SIGINT, what shells report for a process ended by Ctrl-C
#: Seconds the cleanup (temporary outputs, worker pool) may take before the watchdog exits.
GRACE = 10.0

_lock = threading.Lock()
_printed = False
_requested = False


def install() -> None:
    """Handle Ctrl-C as described above (command line only: a library never takes SIGINT)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_interrupt)


def import_blocked(*modules: str) -> None:
    """Import ``modules`` with SIGINT blocked in this thread. The native threads a library starts
    as it is imported (NumPy's OpenBLAS pool) inherit the block and keep it: a Ctrl-C sent to the
    process is delivered to some thread that does not block it, and one delivered to such a
    thread while `ignored_by_children` has SIGINT ignored was lost (measured: 1 Ctrl-C in 40
    sent at start-up, exit 0). A Ctrl-C pressed meanwhile stays pending and arrives right after."""
    import importlib

    block = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    if block:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        if block:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def requested() -> bool:
    """Whether Ctrl-C was pressed (the command line's handler saw it)."""
    return _requested


class ignored_by_children:
    """Processes started inside the block ignore SIGINT: an ignored signal stays ignored across
    ``exec`` (a caught or blocked one does not: measured, the worker server's mask came back
    empty), and Python then installs no KeyboardInterrupt handler of its own. SIGINT is also
    blocked meanwhile, so that a Ctrl-C pressed in the window stays pending (Linux never
    discards a blocked signal) and reaches this process's handler when the block ends: blocked
    in this thread, so every other thread must block it too (see `import_blocked`)."""

    def __enter__(self) -> None:
        self.active = (
            hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
        )
        if self.active:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            self.previous = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def __exit__(self, *exc) -> None:
        if self.active:
            signal.signal(signal.SIGINT, self.previous)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def ignore_in_worker() -> None:
    """For worker processes: the driver stops them; their own KeyboardInterrupt would only print
    a traceback and may cut a result in half. They also die with the server that forked them
    (`scrub.execution.lifeline`), which dies with the driver."""
    from scrub.execution.lifeline import expected_parent, tie_to_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tie_to_parent(expected_parent())


def interrupted() -> None:
    """Print the one line, once."""
    global _printed
    with _lock:
        if not _printed:
            _printed = True
            try:
                sys.stdout.flush()
                sys.stderr.write("scrub: interrupted\n")
                sys.stderr.flush()
            except Exception:
                pass


def leave_interrupted() -> NoReturn:
    """The end of an interrupted command: the line, the exit handlers (the worker server's
    shutdown), then exit 130 at once. Not through the interpreter's own exit: CPython 3.11 ends a
    run that a KeyboardInterrupt went through by killing itself with SIGINT (exit -2, measured: 5
    of 30 Ctrl-Cs during start-up), whatever exit code the program chose."""
    import atexit

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupted()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except Exception:
        pass
    os._exit(EXIT_CODE)


def exit_now() -> NoReturn:
    """Print the line and leave at once, without joining any thread."""
    interrupted()
    os._exit(EXIT_CODE)


class deferred:
    """A Ctrl-C pressed inside the block takes effect as the block ends: for exchanges with a
    helper process that must not be cut in half (handing a task to a process pool may start a
    worker: cut between connecting to the worker server and sending it the worker's pipes, the
    server died with a traceback on the terminal). Main thread only, like the handler."""

    def __enter__(self) -> None:
        global _deferring
        self.active = threading.current_thread() is threading.main_thread()  # else: no effect
        _deferring += self.active

    def __exit__(self, exc_type, *rest) -> None:
        global _deferring, _deferred
        _deferring -= self.active
        if self.active and not _deferring and _deferred:
            _deferred = False
            if exc_type is None:
                raise KeyboardInterrupt


_deferring = 0
_deferred = False


def _on_interrupt(signum, frame) -> None:
    global _requested, _deferred
    _requested = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # one Ctrl-C is enough
    threading.Thread(target=_exit_after, args=(GRACE,), name="scrub-interrupt", daemon=True).start()
    sys.unraisablehook = _unraisable
    if _deferring:
        _deferred = True
        return
    raise KeyboardInterrupt


def _unraisable(unraisable) -> None:
    """A KeyboardInterrupt Python had to swallow prints nothing: the watchdog ends the process."""
    if not issubclass(unraisable.exc_type, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def _exit_after(seconds: float) -> None:
    time.sleep(seconds)
    exit_now()
