"""The Python API: what the CLI, notebooks, training scripts and nightly jobs call.

>>> import scrub
>>> result = scrub.scan("sample_data/images", num_classes=3)
>>> result.summary.records, result.summary.issues_by_check["corrupt-image"]
>>> for issue in result.issues():
...     print(issue.key, issue.check, issue.message)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from scrub.errors import (
    ScrubError,
    UnopenedDataset,
    UnusableDataset,
    UsageError,
)
from scrub.options.model import ReplayOptions, ScanOptions
from scrub.readers.base import Datasets, expand_datasets
from scrub.scanning.cache import holds_results
from scrub.scanning.opening import OpenedDataset, load_plugins, open_dataset, options_of, worker_starter
from scrub.scanning.run import ScanResult, Unopened, run_wide, scan_dataset, scan_opened
from scrub.scanning.summary import Progress
from scrub.storage import forget_listings, is_location, listings_of_this_run, location

__all__ = [
    "OpenedDataset",
    "ReplayOptions",
    "ScanOptions",
    "ScanResult",
    "load_plugins",
    "open_dataset",
    "scan",
    "scan_dataset",
    "scan_many",
    "scan_one",
    "worker_starter",
    "is_scan_record",
    "write_contract",
]


def scan(
    path: str | Path | Sequence[str | Path],
    options: ScanOptions | None = None,
    *,
    progress: Callable[[Progress], None] | None = None,
    **keywords: Any,
) -> ScanResult:
    """Run every check on every record of the dataset at ``path`` (or of several datasets).

    Options come as a `ScanOptions` (what the command line and config files build) or as
    keywords named as the flags are (``num_classes=10``, ``precision="float16"``,
    ``dummy_loss=True`` or a `ReplayOptions`, ``baseline=...``, ``cache=...``); keywords
    override ``options``. The manifest goes to ``manifest`` (a temporary file when None), and
    beside it the scan record (``NAME.scan.json``: the summary, with the dataset's fingerprint)
    that lets `fix` reuse it. Raises `ScrubError` subclasses with a one-line message when the
    dataset or the options are unusable.

    ``path`` may also be a list of paths, glob patterns and folders of datasets (see
    `scrub.readers.base.expand_datasets`; one path that names several, a folder of LMDB
    environments or a pattern, is expanded as on the command line): they are scanned together,
    their partitions sharing one pool of workers, into one manifest whose lines name their
    ``dataset``; the summary holds the totals and a section per dataset (``Summary.parts``).
    """
    started = time.perf_counter()
    options = options_of(options, keywords)
    with listings_of_this_run():  # its datasets share what it lists
        for named in [path] if is_location(path) else cast(Sequence[str | Path], path):
            forget_listings(location(named, options.read.storage))
        found = _several(path, options)
        if found is None:
            assert is_location(path)  # a list always names several
            return _reported(scan_one(path, options, progress=progress, started=started), options)
        note = found.note()
        scanned = scan_many(
            [(p, replace(options, read=found.sniffed_reading(p, options.read))) for p in found.paths],
            options,
            progress=progress,
            started=started,
            notes=[note] if note else [],
        )
    return _reported(scanned, options)


def _reported(result: ScanResult, options: ScanOptions) -> ScanResult:
    """Write the reports the options name (``json``, ``junit``, ``html``, ``summary_md``), as
    `scrub scan` does: an option given is acted on, never passed over."""
    if options.json is None and not (options.junit or options.html or options.summary_md):
        return result
    from scrub.console import write_json
    from scrub.reports import write_reports

    code = int(result.exit_code(options.fail_on))
    write_json(options.json, result.summary.to_dict() | {"fail_on": options.fail_on, "exit_code": code})
    if options.junit or options.html or options.summary_md:
        write_reports(result, options, code)
    return result


def scan_one(
    path: str | Path,
    options: ScanOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
    started: float | None = None,
) -> ScanResult:
    """`scan` of the one dataset at ``path`` as it is (a caller that expanded its paths already:
    the command line)."""
    started = time.perf_counter() if started is None else started
    load_plugins(options.selection.plugins)
    # With a cache, most nights need no worker at all: start them only for what is left to scan.
    early = not holds_results(options.cache)
    dataset = open_dataset(
        path, options, before_open=worker_starter(options.run) if early else None, scanned=True
    )
    try:
        return scan_dataset(dataset, options, progress=progress, started=started)
    finally:
        dataset.close()


def _several(path: str | Path | Sequence[str | Path], options: ScanOptions) -> Datasets | None:
    """The datasets ``path`` names, listed once (their formats found on the way are carried to
    their opening); None where it is one dataset path, opened as it is (as on the command
    line)."""
    if not is_location(path):
        return expand_datasets(cast(Sequence[str | Path], path), options.read)
    place = location(path, options.read.storage)
    if place.exists() and options.read.format not in (None, "auto"):
        return None
    found = expand_datasets([path], options.read)
    return found if [str(p) for p in found.paths] != [str(place)] or found.skipped else None


def scan_many(
    datasets: Sequence[tuple[str | Path, ScanOptions]],
    options: ScanOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
    started: float | None = None,
    notes: Sequence[str] = (),
) -> ScanResult:
    """Scan several datasets as one run, each with its own options (a config file's
    ``[paths."GLOB"]`` sections may differ per dataset); ``options`` gives what belongs to the
    run as a whole: the scheduler and workers, the manifest, the baseline and the reports."""
    started = time.perf_counter() if started is None else started
    if not datasets:
        raise UnusableDataset("no dataset to scan: the paths given name none")
    plugins = [module for _, own in datasets for module in own.selection.plugins]
    load_plugins(dict.fromkeys(plugins))
    opened: list[OpenedDataset] = []
    per_dataset: list[ScanOptions] = []
    unopened: list[Unopened] = []
    try:
        for position, (path, own) in enumerate(datasets):
            try:
                opened.append(open_dataset(path, own, scanned=True))
            except UnopenedDataset as error:
                if len(datasets) == 1:
                    raise
                unopened.append(Unopened(position, location(path, own.read.storage), error))
                continue
            per_dataset.append(replace(own, **run_wide(options)))
        if not opened:
            first = unopened[0].error
            raise UnusableDataset(f"none of the {len(unopened)} datasets can be read; the first: {first}")
        return scan_opened(
            opened, per_dataset, options, progress, started, list(notes), several=True, unopened=unopened
        )
    finally:
        for dataset in opened:
            dataset.close()


def is_scan_record(source: str | Path) -> bool:
    """Whether ``source`` names a scan record (``NAME.scan.json``, or the manifest beside one)
    rather than a dataset."""
    from scrub.manifest import scan_record_path

    source = Path(source)
    return source.is_file() and (
        source.name.endswith(".scan.json")
        # a manifest stands for the scan record beside it; a .jsonl without one is a dataset
        # (JSON Lines of records), to be scanned
        or (source.suffix == ".jsonl" and scan_record_path(source).is_file())
    )


def write_contract(
    source: str | Path,
    output: str | Path | None = None,
    force: bool = False,
    options: ScanOptions | None = None,
) -> tuple[Path, str]:
    """Infer the contract of ``source`` (a scan record, the manifest beside one, or a dataset,
    scanned here with ``options``, default ones when None: those that decide what a record is
    matter) and write it to ``output`` (default `DEFAULT_NAME`); return (where, what was
    written). An existing file is kept unless ``force``: a contract is edited by hand, and
    overwriting it would lose the edits."""
    from scrub.profile.contract import DEFAULT_NAME, infer
    from scrub.profile.render import profiles_in

    source = Path(source)
    target = Path(output) if output is not None else Path(DEFAULT_NAME)
    if target.exists() and not force:
        raise UsageError(f"{target}: exists (a contract is edited by hand): --force overwrites it")
    if is_scan_record(source):
        held = profiles_in(source)
    else:
        summary = (scan(source) if options is None else scan_one(source, options)).summary
        held = (
            [(part.path, part.profile) for part in summary.parts if part.profile is not None]
            if summary.parts
            else [(summary.path, summary.profile)]
            if summary.profile is not None
            else []
        )
    if len(held) != 1:
        raise ScrubError(
            f"{source}: holds {len(held)} datasets' profiles: a contract is of one dataset (scan it alone)"
        )
    dataset, profile = held[0]
    text = infer(profile, str(dataset))
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as error:
        raise ScrubError(f"{target}: cannot be written ({error.strerror or error})") from None
    return target, text
