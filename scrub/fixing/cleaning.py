"""`fix`: the cleaned copy and the quarantine, with nothing lost.

The flow is one way: open the dataset → verdicts (a fresh scan, or an earlier scan's manifest
whose fingerprint still matches) → the format's writer copies each record to the cleaned copy
or the quarantine → the outputs are read back and their per-record checksums compared with the
source's → only then are they renamed into place (see `scrub.fixing.outputs`). The source is only
ever opened read-only, and is fingerprinted again at the end to make sure it did not change
while `fix` ran.
"""

from __future__ import annotations

import math
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from scrub.checks.base import Finding, make_issue
from scrub.checks.contract import names_no_record
from scrub.errors import (
    ExitCode,
    OutputError,
    ScrubError,
    UnopenedDataset,
    UnusableDataset,
    UsageError,
    first_line,
)
from scrub.fixing.destinations import QUARANTINE_MANIFEST, FixOutputs, absolute, inside_folder
from scrub.fixing.outputs import free_bytes, scratch_directory, write_failure
from scrub.fixing.reuse import reused_verdicts, with_scan_reading
from scrub.manifest import (
    default_manifest,
    read_manifest,
    write_scan_record,
)
from scrub.options.model import FixOptions, ScanOptions, Selection, merged
from scrub.paths import EVALUATION, TRAINING, split_roles
from scrub.records import Issue, Severity
from scrub.scanning.cache import holds_results
from scrub.scanning.opening import OpenedDataset, load_plugins, open_dataset, worker_starter
from scrub.scanning.run import ScanResult, scan_dataset
from scrub.scanning.summary import Progress
from scrub.storage import Location, location, on_this_machine
from scrub.wording import counted, mebibytes
from scrub.writers.base import Tally, Verdicts, Writer, writer_class, writer_for


@dataclass
class FixResult:
    """A finished fix: where things went, and the verification."""

    clean: Location  # the cleaned copy (a `UPath` in object storage)
    dataset: Location  # what to scan inside it (a list layout's list file)
    quarantine: Location | None  # the quarantine folder, when one was written
    manifest: Location  # the manifest the verdicts came from (inside the quarantine when written)
    report: dict[str, Any]  # what fix.json and --json hold under "fix"
    scan_summary: dict[str, Any]  # the scan's summary (fresh, or from the reused scan record)
    scan: ScanResult | None = field(default=None, repr=False)

    @property
    def verified(self) -> bool:
        return bool(self.report["verification"]["verified"])

    def exit_code(self) -> ExitCode:
        """0: the outputs are written and verified (failures raise `ScrubError` instead)."""
        return ExitCode.CLEAN


# Over 80 lines by its docstring, the API's reference for fix's keywords: the body is the flow,
# a call a phase (options, open, writer, outputs, verdicts, write and verify, report, commit).
def fix(
    path: str | Path,
    options: FixOptions | None = None,
    *,
    progress: Callable[[Progress], None] | None = None,
    out_folder: Location | None = None,
    quarantine_folder: Location | None = None,
    extra_notes: Sequence[str] = (),
    found: Sequence[Issue] = (),
    splits: bool = False,
    **keywords: Any,
) -> FixResult:
    """Write a cleaned copy of the dataset at ``path`` without the records that have an issue at
    or above ``severity``, and (``quarantine``) those records, in the same format.

    Options come as a `FixOptions` or as keywords named as the flags are (``out=``,
    ``quarantine=True``, ``num_classes=10``, ...; keywords override ``options``). ``manifest``
    reuses an earlier scan instead of scanning: its fingerprint must match the dataset, and a
    checking option given here must be the one it was scanned with. Default outputs:
    ``NAME.clean`` (``STEM.clean.EXT`` for a single file) and ``NAME.quarantine`` beside the
    source. Raises `ScrubError` with a one-line message when the dataset, the options or the
    outputs are unusable, or when verification fails (then nothing is written).

    ``out_folder`` and ``quarantine_folder`` put the default-named outputs in those folders
    instead of beside the source (`fix_many` under ``--out DIR``); ``extra_notes`` go into the
    report's notes (`scrub.fixing.restoring` says what it restored); ``found``: issues of the dataset's
    records that its own scan cannot find (`fix_many` of a run's splits: `split-leak`);
    ``splits``: the dataset is one of such a run's splits (else ``--leak-side`` cannot apply).
    """
    started = time.perf_counter()
    if options is None or keywords:
        options = merged(options if options is not None else FixOptions(), keywords)
    options, scan_options, notes = _fix_options(path, options, splits)
    manifests = options.manifest
    load_plugins(scan_options.selection.plugins)
    early = not manifests and not holds_results(scan_options.cache)  # see `scrub.api.scan`
    dataset = open_dataset(
        path,
        scan_options,
        before_open=worker_starter(scan_options.run) if early else None,
        scanned=not manifests,  # fix --manifest compares the fingerprint before writing anything
        # a writer that copies the kept records from the source's files writes from a local copy
        needs_files=lambda format_name: not writer_class(format_name).reads_objects,
    )
    try:
        writer = writer_for(dataset, scan_options.run)
        _check_writable(dataset, writer, options)
        outputs = FixOutputs(
            dataset,
            writer,
            options.out or inside_folder(out_folder, writer.clean_name()),
            options.quarantine,
            options.quarantine_dir or inside_folder(quarantine_folder, f"{writer.base_name()}.quarantine"),
            options.force,
            scan_options.read.storage,
        )
        reused = reused_verdicts(manifests, dataset, scan_options) if manifests else None
        try:
            outputs.stage()
            assert outputs.clean_target is not None  # set by stage()
            source = _verdict_source(
                dataset,
                scan_options,
                outputs,
                reused,
                Severity(options.severity),
                notes,
                progress,
                started,
                found,
            )
            tally, verification = _write(dataset, writer, outputs, options, source, notes)
            report = _report(
                dataset,
                options,
                outputs,
                source,
                reused,
                tally,
                verification,
                notes + list(extra_notes),
                started,
            )
            if not verification["verified"]:
                raise ScrubError(
                    f"verification failed ({verification['reason']}); nothing was written; please report this"
                )
            outputs.commit(report)
        except BaseException as error:
            outputs.discard()
            failed = _write_failure(error, outputs, writer)
            if failed is not None:
                raise failed from None
            raise
    finally:
        dataset.close()
    return FixResult(
        clean=outputs.clean.destination,
        dataset=writer.dataset_in(outputs.clean.destination),
        quarantine=outputs.quarantine.destination if outputs.quarantine else None,
        manifest=location(report["manifest"], scan_options.read.storage)
        if source.scratch is None
        else Path(manifests[0]),
        report=report,
        scan_summary=source.summary,
        scan=source.scan,
    )


def _fix_options(
    path: str | Path, options: FixOptions, splits: bool
) -> tuple[FixOptions, ScanOptions, list[str]]:
    """The options a fix runs with, and the notes on those it cannot use: ``--leak-side`` off a
    run's splits; with ``--manifest``, the reading options taken from the reused scan's record
    (the records must be read as it read them, `with_scan_reading`), and a config file's
    ``cache``, which a fix that scans nothing passes over."""
    notes: list[str] = []
    if options.leak_side != FixOptions().leak_side and not splits:
        why = (
            f"the training copies of its leaks are kept in {options.scan.against}, which this fix does "
            "not hold: its leaked records are set aside from it"
            if options.scan.against is not None
            else "it is not one of a run's splits (a training and an evaluation split fixed together)"
        )
        notes.append(f"{options.scan.origin('leak-side')} {options.leak_side}: not used on {path}: {why}")
    if options.manifest:
        options, taken = with_scan_reading(options)
        notes += taken
    scan_options = options.scan
    if options.manifest and scan_options.cache is not None:
        # only a config file sets both (as flags they conflict, see `scrub.options.model.build`): the
        # file serves the nightly scans, and this fix scans nothing
        notes.append(
            f"{scan_options.origin('cache')} is not used: fix --manifest reuses "
            f"{' and '.join(map(str, options.manifest))} instead of scanning"
        )
        scan_options = replace(scan_options, cache=None)
    return options, scan_options, notes


def _check_writable(dataset: OpenedDataset, writer: Writer, options: FixOptions) -> None:
    """Refuse, before anything is written, ``--link`` where it cannot link."""
    places = [place for place in (options.out, options.quarantine_dir) if place]
    if options.link and not all(on_this_machine(place) for place in places):
        raise UsageError("--link: hard-links kept files on one disk; object storage holds no links")
    if options.link and not writer.links:
        raise UsageError(
            f"--link: hard-links the kept files of image folders and lists; {dataset.path} "
            f"({writer.format}) is rewritten record by record, never linked"
        )


@dataclass
class _VerdictSource:
    """Where a fix's verdicts come from: the manifest that holds them, the summary of the scan
    that made them, that scan where this fix ran it (None: an earlier scan's manifest is reused),
    and the scratch folder of verdicts merged from several manifests (None: none merged)."""

    manifest: Path
    summary: dict[str, Any]
    scan: ScanResult | None = None
    scratch: Any = None


def _verdict_source(
    dataset: OpenedDataset,
    scan_options: ScanOptions,
    outputs: FixOutputs,
    reused: Any,
    severity: Severity,
    notes: list[str],
    progress: Callable[[Progress], None] | None,
    started: float,
    found: Sequence[Issue],
) -> _VerdictSource:
    """Scan the dataset into the staged manifest (or the default one); or take the reused scan's
    manifest as it is, or merged with the guard's and the other scans' verdicts (into the
    staged manifest, else a scratch folder). Notes on what moved or merged go to ``notes``."""
    if reused is None:
        manifest = outputs.manifest_target
        if manifest is None:
            manifest, moved = default_manifest(dataset.path)
            notes += [moved] if moved else []
        try:
            scan = scan_dataset(
                dataset, scan_options, progress=progress, started=started, manifest=manifest, found=found
            )
        except OutputError as error:  # name the manifest where it would have been, not its staging
            final = outputs.final_manifest
            if final is None:
                raise
            raise OutputError(
                str(error).replace(str(manifest), str(final)), exit_at_once=error.exit_at_once
            ) from None
        scan.summary.manifest = str(outputs.final_manifest or manifest)
        summary = scan.summary.to_dict()
        write_scan_record(manifest, summary)
        return _VerdictSource(manifest, summary, scan)
    if reused.guards or outputs.manifest_target is not None and len(reused.scans) > 1:
        manifest = outputs.manifest_target
        scratch = None
        if manifest is None:
            scratch = scratch_directory("verdicts")
            manifest = Path(scratch.name) / QUARANTINE_MANIFEST
        notes += reused.merge(manifest, dataset, severity)
        return _VerdictSource(manifest, reused.summary, scratch=scratch)
    outputs.keep_manifest(reused.scans[0])
    return _VerdictSource(reused.scans[0], reused.summary)


def _write(
    dataset: OpenedDataset,
    writer: Writer,
    outputs: FixOutputs,
    options: FixOptions,
    source: _VerdictSource,
    notes: list[str],
) -> tuple[Tally, dict[str, Any]]:
    """Write the staged outputs from the verdicts, refuse a fix that would empty the dataset for
    one reason or that the dataset changed under, and read the outputs back: (the writer's
    tally, the verification)."""
    severity = Severity(options.severity)
    verdicts = Verdicts.from_issues(read_manifest(source.manifest), severity)
    notes += dataset_level_note(verdicts.not_records)
    _check_space(dataset, outputs, options.link and writer.links)
    assert outputs.clean_target is not None  # staged
    tally = writer.write(verdicts, outputs.clean_target, outputs.quarantine_target, link=options.link)
    _refuse_one_cause(dataset.path, source.manifest, verdicts, severity, tally, options.allow_majority)
    if dataset.take_fingerprint() != dataset.fingerprint:
        raise ScrubError(f"{dataset.path}: the dataset changed while fix ran; nothing was written")
    verification = _verify(
        writer, verdicts, tally, outputs.clean_target, outputs.quarantine_target, source.summary["records"]
    )
    return tally, verification


def _write_failure(error: BaseException, outputs: FixOutputs, writer: Writer) -> ScrubError | None:
    """A failure to write a local output as one line (a full disk, a read-only folder), or None
    for what is said as it is (scrub's own errors, Ctrl-C, object storage's)."""
    if not isinstance(error, Exception) or isinstance(error, ScrubError) or outputs.remote:
        return None
    return write_failure(
        error, outputs.clean.destination, "cleaned copy", exit_at_once=writer.unsafe_after_write_failure
    )


def _report(
    dataset: OpenedDataset,
    options: FixOptions,
    outputs: FixOutputs,
    source: _VerdictSource,
    reused: Any,
    tally: Tally,
    verification: dict[str, Any],
    notes: list[str],
    started: float,
) -> dict[str, Any]:
    """What ``fix.json`` and ``--json`` hold under ``fix`` (docs/outputs.md lists each field)."""
    manifests = options.manifest
    return {
        "schema": 1,
        "source": str(dataset.path),
        "source_path": absolute(dataset.path),  # restore finds it from anywhere
        "format": dataset.reader.format,
        **outputs.describe(),
        "clean_path": absolute(outputs.clean.destination),
        "manifest": str(
            outputs.final_manifest
            or (source.manifest if source.scratch is None else " and ".join(map(str, manifests)))
        ),
        "reused_manifest": None if reused is None else str(manifests[0]),
        "reused": None if reused is None else reused.describe(),
        "severity": options.severity,
        "link": options.link,
        "fingerprint": dataset.fingerprint,
        "records": source.summary["records"],
        "kept": tally.records_kept,
        "quarantined": tally.records_quarantined,
        "forced": tally.forced,
        "other_files": tally.other_files,
        "notes": notes + tally.notes,
        "verification": verification,
        "seconds": round(time.perf_counter() - started, 3),
    }


def fix_many(
    datasets: Sequence[tuple[str | Path, FixOptions]],
    options: FixOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
    on_fixed: Callable[[FixResult], None] | None = None,
) -> list[FixResult]:
    """`fix` each of several datasets (each with its own options), one after the other; each
    one's cleaned copy and quarantine go beside it, or into ``options.out`` and
    ``options.quarantine_dir`` (folders, then) under their default names. ``on_fixed`` gets
    each result as soon as it is committed. Every dataset is checked for a clash of outputs
    before the first is written; a dataset that fails stops the run (those before it stay
    written, each whole and verified), except one that cannot be opened at all: the others are
    fixed, and then `UnusableDataset` names it (as a scan reports it as ``unreadable-dataset``)."""
    if options.manifest:
        raise UsageError(
            f"{options.scan.origin('manifest')}: reuses the scan of one dataset; with several datasets, let "
            "fix "
            "scan them (or run fix once per dataset with its own manifest)"
        )
    names: dict[str, Path] = {}
    for path, _ in datasets:
        name = Path(path).resolve().name
        if (options.out or options.quarantine_dir) and name in names:
            raise UsageError(
                f"--out: {names[name]} and {path} would write outputs of the same name into one folder"
            )
        names[name] = Path(path)
    results = []
    unopened: list[str] = []
    storage = options.scan.read.storage
    leaks, leak_notes = split_leaks(datasets, options)
    for path, own in datasets:
        own = replace(
            own,
            out=None,
            quarantine_dir=None,
            quarantine=own.quarantine or options.quarantine_dir is not None,
            # the splits' pass compared them with the kept ones (--against): not once more alone
            scan=replace(own.scan, against=None) if str(path) in leaks else own.scan,
        )
        try:
            result = fix(
                path,
                own,
                progress=progress,
                out_folder=location(options.out, storage) if options.out else None,
                quarantine_folder=location(options.quarantine_dir, storage)
                if options.quarantine_dir
                else None,
                extra_notes=leak_notes.get(str(path), ()),
                found=leaks.get(str(path), ()),
                splits=str(path) in leaks,
            )
        except UnopenedDataset as error:
            if len(datasets) == 1:
                raise
            unopened.append(f"{path} ({error})")
            continue
        results.append(result)
        if on_fixed is not None:
            on_fixed(result)
    if unopened:
        fixed = f"the other {len(results):,} were fixed" if results else "none was fixed"
        raise UnusableDataset(
            f"{len(unopened):,} of the {len(datasets):,} datasets cannot be opened and "
            f"{'was' if len(unopened) == 1 else 'were'} not fixed "
            f"({fixed}): {'; '.join(unopened)}"
        )
    return results


def split_leaks(
    datasets: Sequence[tuple[str | Path, FixOptions]], options: FixOptions
) -> tuple[dict[str, list[Issue]], dict[str, list[str]]]:
    """Where the datasets are a run's splits (`scrub.paths.split_roles`): the `split-leak`
    findings of each evaluation split, by its path as given, and a note for its report. `fix`
    scans one dataset at a time, and no one of them alone holds what a leak is, so the splits
    are first read together in a pass of their own with that check alone."""
    from scrub.api import scan_many

    paths = [str(path) for path, _ in datasets]
    roles = split_roles(paths)
    if not any(roles) or any("split-leak" in own.scan.selection.ignored for _, own in datasets):
        return {}, {}
    if options.scan.selection.select is not None and "split-leak" not in options.scan.selection.select:
        return {}, {}
    alone = Selection(select=("split-leak",), plugins=options.scan.selection.plugins)
    passes = [
        (path, ScanOptions(read=own.scan.read, checks=own.scan.checks, selection=alone, profile=False))
        for path, own in datasets
    ]
    training = ", ".join(path for path, role in zip(paths, roles) if role == TRAINING)
    try:
        run = replace(options.scan, manifest=None, baseline=None, cache=None, profile=False)
        result = scan_many(passes, run)
    except ScrubError as error:  # a split that cannot be read: its own fix says so
        said = f"split-leak: not compared with the training splits ({training}): {first_line(error)}"
        return {}, {path: [said] for path, role in zip(paths, roles) if role == EVALUATION}
    leaks: dict[str, list[Issue]] = {path: [] for path in paths}
    #: by evaluation split, its leaks whose training copy only a kept split holds (--against):
    #: with --leak-side train no dataset of this fix holds the copy, so the leak is set aside
    #: from the evaluation split, as a fix of that split alone does
    elsewhere: Counter[str] = Counter()
    for issue in result.issues():
        if issue.check != "split-leak" or issue.dataset not in leaks:
            continue
        if options.leak_side == TRAINING:
            turned = _training_side(issue)
            if turned.dataset in leaks:
                issue = turned
            else:
                elsewhere[str(issue.dataset)] += 1
        leaks[str(issue.dataset)].append(issue)
    side = options.leak_side  # `scrub.options.keys.LEAK_SIDES`: the split names
    notes: dict[str, list[str]] = {
        path: [
            f"split-leak: compared with the training split{'s' if ',' in training else ''} ({training}) "
            f"in a pass of its own: {counted(len(leaks[path]), 'record')} set aside from this "
            f"{'training' if side == TRAINING else 'evaluation'} split (--leak-side {options.leak_side})"
        ]
        for path, role in zip(paths, roles)
        if role == side
    }
    for path, count in elsewhere.items():
        notes.setdefault(path, []).append(
            f"split-leak: {counted(count, 'record')} of this evaluation split copy records of "
            f"training splits kept in {options.scan.against}, which this fix does not hold: set "
            f"aside from this evaluation split (--leak-side {options.leak_side} applies to the "
            "training splits fixed with it)"
        )
    return leaks, notes


def _training_side(issue: Issue) -> Issue:
    """A leak found on an evaluation record, turned onto the training record it copies (``fix
    --leak-side train``): the training split loses the record, the evaluation split stays whole."""
    details = dict(issue.details)
    copy = details.pop("train")
    details["evaluation"] = {
        "dataset": issue.dataset,
        "source": issue.source,
        "key": issue.key,
        "index": issue.index,
    }
    found = make_issue(
        "split-leak",
        copy["source"],
        copy["key"],
        copy["index"],
        Finding(f"also in the evaluation split {Path(str(issue.dataset)).name}: {issue.key}", details),
    )
    found.dataset = copy["dataset"]
    return found


#: `fix` refuses a cleaned copy from which one check alone sets aside more than this share of
#: the records (unless --allow-majority)
MAJORITY = 0.5


#: what to ask when one of these checks sets most of a dataset aside
MAJORITY_HINTS = {
    "non-integer-label": " (are the labels regression targets? --label-kind value)",
    "label-out-of-range": " (is the class range right?)",
}


def _refuse_one_cause(
    path: Path, manifest: Path, verdicts: Verdicts, severity: Severity, tally: Tally, allow_majority: bool
) -> None:
    """Refuse a cleaned copy emptied, or more than half emptied, for one cause.

    When every record is set aside by the same check (every value pickled without
    --allow-pickle, a codec nothing decodes, every row of a shard NaN, a token file whose dtype
    cannot hold the vocabulary), the dataset is not bad record by record; an empty copy that
    "verifies" would hide that. A dataset whose records fail each for its own reason is emptied
    as asked. When one check sets aside more than half of the records (`MAJORITY`: regression
    targets judged as class ids, a wrong option), the cause is rarely the records either:
    refused unless ``allow_majority`` (--allow-majority). A dataset-level finding (key ``*``)
    sets aside every record of its file: those records count for its check (the records set
    aside beyond the record-level verdicts of the other files; several checks that set files
    aside whole are counted together)."""
    records = tally.records_kept + tally.records_quarantined
    if tally.records_quarantined < 2 or records == 0:
        return
    # a check may flag a record twice (a sample with two bad members): its records are counted
    # distinct, as 64-bit (source number, index) codes, 8 bytes a finding (a dense scan has millions)
    codes: dict[str, array[int]] = {}
    sources: dict[str, int] = {}
    first: dict[str, str] = {}
    whole_file: set[str] = set()  # the checks of dataset-level findings (key *) at the threshold
    for issue in read_manifest(manifest):
        if (
            issue.status == "resolved"
            or not issue.severity.at_least(severity)
            or names_no_record(issue.check, issue.key)
        ):
            continue  # a drift from the baseline names no record: it sets none aside (`Verdicts`)
        first.setdefault(issue.check, issue.message)
        if issue.index is None:  # the file as a whole (key `*`; a record keyed `*` has an index)
            whole_file.add(issue.check)
            continue
        source = sources.setdefault(issue.source, len(sources))
        codes.setdefault(issue.check, array("q")).append((source << 40) | issue.index)
    flagged: Counter[str] = Counter(
        {check: len(np.unique(np.frombuffer(found, dtype=np.int64))) for check, found in codes.items()}
    )
    if whole_file:
        own = sum(1 for source, _ in verdicts.records if source not in verdicts.files)
        cause = " and ".join(sorted(whole_file))
        flagged[cause] = max(flagged[cause], tally.records_quarantined - own)
        first.setdefault(cause, first[sorted(whole_file)[0]])
    if not flagged:
        return
    count, cause = max((count, cause) for cause, count in flagged.items())
    if count >= records and tally.records_kept == 0:
        raise UnusableDataset(
            f"{path}: every one of its {records:,} records would be set aside for {cause} "
            f"({first[cause]}): an empty cleaned copy is not a fix; nothing was written"
        )
    if count > MAJORITY * records and count > 1 and not allow_majority:
        share = math.floor(count * 1000 / records) / 10  # 4,094 of 4,096 is 99.9%, not 100%
        raise UnusableDataset(
            f"{path}: {cause} alone would set aside {count:,} of its {records:,} records "
            f"({share:.1f}%; {first[cause]}): more than half of a dataset is rarely bad record "
            f"by record{MAJORITY_HINTS.get(cause, ' (is an option wrong?)')}; nothing was written "
            "(--allow-majority writes it)"
        )


def dataset_level_note(found: dict[str, int]) -> list[str]:
    """Say the findings about the dataset as a whole that the cleaned copy still carries: a drift
    from the baseline names no record, so no copy without some records removes it."""
    if not found:
        return []
    named = ", ".join(f"{check} ({count:,})" for check, count in sorted(found.items()))
    return [
        f"not records: {named} concern the dataset as a whole, not a record: the cleaned copy "
        "cannot remove them and sets nothing aside for them (look at what changed upstream)"
    ]


def _check_space(dataset: OpenedDataset, outputs: "FixOutputs", linked: bool) -> None:
    """Refuse before writing when the destination cannot hold the outputs: together they hold
    each source record once, so they need about the source's size (a hard-linked image needs
    none). Failing half-way costs more (HDF5 cannot even close a file on a full disk)."""
    facts = dataset.fingerprint or {}
    needed = 0 if linked else int(facts.get("bytes") or 0)  # hard links need no room
    free = free_bytes(outputs.clean.written_in or Path(tempfile.gettempdir()))  # on this machine first
    if free is not None and needed > free:
        raise OutputError(
            f"no space left on device writing the cleaned copy {outputs.clean.destination}: the outputs need "
            "up to "
            f"{mebibytes(needed)} and {mebibytes(free)} are free there; nothing was written (--out elsewhere)"
        )


def _verify(
    writer: Writer, verdicts: Verdicts, tally: Tally, clean: Path, quarantine: Path | None, records: int
) -> dict[str, Any]:
    """Read the outputs back and compare their checksums with the source's, side by side."""
    clean_ledger = writer.tally_output(verdicts, clean, "clean")
    quarantine_ledger = writer.tally_output(verdicts, quarantine, "quarantine") if quarantine else None
    reasons = []
    if tally.records_kept + tally.records_quarantined != records:
        reasons.append(
            f"{tally.records_kept} kept + {tally.records_quarantined} quarantined != {records} scanned"
        )
    if clean_ledger != tally.kept:
        reasons.append("the cleaned copy does not match the kept source records")
    if quarantine_ledger is not None and quarantine_ledger != tally.quarantined:
        reasons.append("the quarantine does not match the quarantined source records")
    return {
        "verified": not reasons,
        "reason": "; ".join(reasons) or None,
        "records": records,
        "source": {"kept": tally.kept.to_dict(), "quarantined": tally.quarantined.to_dict()},
        "clean": clean_ledger.to_dict(),
        "quarantine": quarantine_ledger.to_dict() if quarantine_ledger is not None else None,
    }
