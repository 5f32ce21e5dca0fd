"""``python -m scrub`` and the ``scrub`` command: Ctrl-C is handled before anything heavy loads."""


def main() -> None:
    import gc
    import signal

    from scrub.execution.interrupt import import_blocked, install, leave_interrupted, requested

    install()
    try:
        import_blocked("numpy")  # its BLAS threads must never take a Ctrl-C
        from scrub.cli import app

        app(prog_name="scrub")
    except KeyboardInterrupt:  # during start-up
        leave_interrupted()
    except SystemExit:
        if requested():  # typer turns a KeyboardInterrupt outside a command's body into exit 130
            leave_interrupted()
        raise
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the work is done: let the exit finish
        # The interpreter's exit collects garbage over every object left, a good share of a short
        # scan's exit time (see docs/benchmarks.md, "Design measurements"); nothing left needs a
        # collection to be closed: the commands closed what they opened.
        gc.freeze()


if __name__ == "__main__":
    main()
