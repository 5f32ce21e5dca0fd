"""The benchmark data the other scripts share, generated on first use (each once, then reused)."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent


def images(workdir: Path, python: str) -> Path:
    """The 20,000-JPEG class-folder tree of ``bench_images.py``."""
    folder = workdir / "images" / "data"
    if not folder.exists():
        subprocess.run([python, str(HERE / "bench_images.py"), "--generate-only"], check=True)
    return folder


def plain_hdf5(workdir: Path, gib: float) -> Path:
    """A plain chunked float32 file of ``gib`` GiB from ``bench_hdf5.py``."""
    from bench_hdf5 import ROW, generate

    path = workdir / "hdf5" / f"plain-{gib:g}gib.h5"
    path.parent.mkdir(parents=True, exist_ok=True)
    generate(path, int(gib * 2**30 / (ROW * 4)), None)
    return path


def timed(command: list[str]) -> float:
    """Wall seconds of one command (a scan's exit 1, "issues found", is a success here)."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(map(str, command[:5]))} failed: {done.stderr.strip()[-400:]}")
    return seconds


def report(lines: list[str], markdown_out: Path | None) -> None:
    """Print a benchmark's Markdown table, and write it to ``markdown_out`` when given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if markdown_out:
        markdown_out.write_text(text)


def warm(path: Path) -> None:
    """Read every file under ``path`` (or the file itself) once: a warm page cache."""
    subprocess.run(
        ["find", str(path), "-type", "f", "-exec", "cat", "{}", "+"], stdout=subprocess.DEVNULL, check=True
    )


def medians(
    repeat: int, commands: dict[str, Callable[[], float]], before: Callable[[], None] | None = None
) -> dict[str, float]:
    """Median seconds of each command, run ``repeat`` times, interleaved (``before`` each run)."""
    return {name: statistics.median(times) for name, times in runs(repeat, commands, before).items()}


def runs(
    repeat: int, commands: dict[str, Callable[[], float]], before: Callable[[], None] | None = None
) -> dict[str, list[float]]:
    """Seconds of each run of each command, ``repeat`` rounds of all of them in order (``before``
    each run): the n-th runs of two commands ran side by side in time, for paired differences."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            if before is not None:
                before()
            times[name].append(command())
    return times


def naive_and_scrub(
    python: str, naive: str, path: Path, manifest: Path, repeat: int, *options: str
) -> tuple[float, float]:
    """Median seconds of the naive loop (a ``python -c`` script given ``path``) and of
    ``scrub scan path``, run ``repeat`` times each, interleaved."""
    scan = [python, "-m", "scrub", "scan", str(path), "-q", "--manifest", str(manifest), *options]
    found = medians(
        repeat,
        {"naive": lambda: timed([python, "-c", naive, str(path)]), "scrub": lambda: timed(scan)},
    )
    return found["naive"], found["scrub"]
