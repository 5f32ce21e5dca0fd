"""Every user-facing option, once (a format's own options are declared with its row of the
format table, `scrub.formats`): its name (the flag, the config key and, with ``_`` for
``-``, the API keyword), the option group it lands in, its kind, its limits, its help and the
commands that take it. The commands are built from `KEYS` (`scrub.options.flags`), config files
are read by it (`scrub.options.config`), and every value goes through `scrub.options.values.coerce`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from scrub.checks.labels import LABEL_KINDS
from scrub.checks.numeric import NORMALIZATIONS, PRECISIONS
from scrub.formats import FORMAT_KEYS, load_plugins
from scrub.options.key import Key
from scrub.paths import EVALUATION, TRAINING

FAIL_ON = ("error", "warning", "new", "never")
FIX_SEVERITIES = ("error", "warning")
#: which split `fix` sets a leaked record aside from (`scrub.fixing.cleaning.split_leaks`)
LEAK_SIDES = (EVALUATION, TRAINING)
#: what --check-severity may set a check to
SEVERITY_LEVELS = ("error", "warning", "ignore")


#: the options every format shares, and the other commands' options
SHARED: dict[str, Key] = {
    key.name: key
    for key in [
        Key(
            "format",
            "read",
            "str",
            per_path=True,
            help="Force the reader: {formats} (default: the first that takes the path).",
        ),
        Key(
            "storage-options",
            "read",
            "mapping",
            help=(
                "Object storage (s3://, gs://, az://, hf://...): fsspec's options as a JSON object, "
                'e.g. \'{"endpoint_url": "http://127.0.0.1:9000"}\' (a table in scrub.toml; '
                '{"s3": {...}} for one protocol). Credentials come from the SDKs\' usual places; '
                "never recorded."
            ),
        ),
        Key(
            "root",
            "read",
            "path",
            per_path=True,
            help=(
                "Folder that list-file paths are relative to (default: the list's folder), or that holds "
                "a COCO JSON's images."
            ),
        ),
        Key(
            "data-key",
            "read",
            "str",
            per_path=True,
            help=(
                "HDF5 or .npz: the dataset or array whose rows are records (default: data, x, ...); "
                "WebDataset: the data member's extension (default: the first image, else npy); Parquet: "
                "the data column; LMDB/LevelDB: the field of pickled dicts (with --allow-pickle)."
            ),
        ),
        Key(
            "label-key",
            "read",
            "str",
            per_path=True,
            help=(
                "HDF5 or .npz: the labels dataset or array (default: label, y, ...); WebDataset: the "
                "label member's extension (default: cls, ...); Parquet: the label column; LMDB/LevelDB: "
                "the label field of pickled dicts."
            ),
        ),
        Key(
            "num-classes",
            "checks",
            "int",
            minimum=1,
            per_path=True,
            help="Number of classes: labels must lie in [0, N).",
        ),
        Key(
            "label-range",
            "checks",
            "range",
            per_path=True,
            help="Valid labels LO:HI (HI exclusive), instead of --num-classes.",
        ),
        Key(
            "label-kind",
            "checks",
            "str",
            choices=LABEL_KINDS,
            per_path=True,
            help=(
                "What the labels are: class ids, or continuous values (regression targets: checked for "
                "NaN, overflow and magnitude outliers, not as classes). auto: values when more than half "
                "of the float labels sampled are not integers."
            ),
        ),
        Key(
            "max-pixels",
            "checks",
            "int",
            minimum=1,
            per_path=True,
            help="Decompression-bomb limit in pixels (default: Pillow's, ~89.5 M).",
        ),
        Key(
            "mask-palette",
            "checks",
            "palette",
            per_path=True,
            help=(
                "Segmentation: read RGB masks through these colours by class id: voc (Pascal VOC's), or a"
                " JSON file (a list of [r, g, b], or an object of id -> [r, g, b])."
            ),
        ),
        Key(
            "ignore-index",
            "checks",
            "index",
            per_path=True,
            help=(
                "The label value the loss ignores, as cross_entropy(ignore_index=...): by default 255 for "
                "segmentation masks and -100 for token labels ('none': every value counts)."
            ),
        ),
        Key(
            "vocab-size",
            "checks",
            "int",
            minimum=1,
            per_path=True,
            help="Token data: token ids and labels must lie in [0, N) (default: from --tokenizer).",
        ),
        Key(
            "max-length",
            "checks",
            "int",
            minimum=1,
            per_path=True,
            help=(
                "Token data: the length the trainer truncates to; longer sequences are warned of, and "
                "supervised tokens are counted within it. Also the window of flat token files."
            ),
        ),
        Key(
            "max-positions",
            "checks",
            "int",
            minimum=1,
            per_path=True,
            help="Token data: the model's positions; a longer sequence is an error (default: --tokenizer's).",
        ),
        Key(
            "tokenizer",
            "checks",
            "path",
            per_path=True,
            help=(
                "Token data: a local tokenizer.json, config.json or model folder (nothing is downloaded): "
                "the vocabulary size and positions, and texts tokenized as the trainer will (with "
                "scrub[text])."
            ),
        ),
        Key(
            "precision",
            "checks",
            "str",
            choices=PRECISIONS,
            per_path=True,
            help=(
                "The training precision: float32; float16 (mixed precision / AMP: values that overflow "
                "float16 are errors, and the replay runs its matmuls in float16); bfloat16 (float32's "
                "range)."
            ),
        ),
        Key(
            "normalization",
            "checks",
            "str",
            choices=NORMALIZATIONS,
            per_path=True,
            help=(
                "How training normalizes each record: per-record (per-image or per-row standardization, "
                "dividing by the record's own standard deviation) makes a constant image or row (all "
                "zero included) an error; none: a warning."
            ),
        ),
        Key(
            "contract",
            "checks",
            "path",
            help=(
                "A contract file (TOML, written by `scrub contract`): each rule the data breaks is a "
                "finding naming the file's line; records outside its class set or image size bounds "
                "are named (docs/contract.md)."
            ),
        ),
        Key(
            "min-image-side",
            "checks",
            "int",
            minimum=1,
            per_path=True,
            help="An image with a side shorter than this many pixels is a tiny-image (error).",
        ),
        Key(
            "near-distance",
            "checks",
            "int",
            minimum=0,
            help=(
                "Images whose perceptual hashes are within this many bits (of 64) are copies (re-encoded, "
                "resized, brightened): a near-duplicate in a dataset, a split-leak from a training to an "
                "evaluation split; 0: exact copies only (default 6)."
            ),
        ),
        Key(
            "near-text",
            "checks",
            "float",
            minimum=0,
            maximum=1,
            help=(
                "split-leak: a text of an evaluation split whose estimated Jaccard similarity (MinHash of "
                "5-word shingles) to a training text is at least this is a leak (0: off, the default; "
                "0.8 is usual)."
            ),
        ),
        Key(
            "max-aspect-ratio",
            "checks",
            "float",
            minimum=1,
            per_path=True,
            help=(
                "An image whose long side is more than this many times its short side is an "
                "extreme-aspect-ratio (warning)."
            ),
        ),
        Key(
            "select",
            "selection",
            "ids",
            per_path=True,
            help="Run only these checks (comma-separated ids).",
        ),
        Key(
            "ignore",
            "selection",
            "ids",
            per_path=True,
            help="Skip these checks (comma-separated ids).",
        ),
        Key(
            "check-severity",
            "selection",
            "severities",
            per_path=True,
            help="Set a check's severity: ID=error, ID=warning or ID=ignore (repeatable).",
        ),
        Key(
            "plugin",
            "selection",
            "paths",
            help="Import this module first, to run the checks it registers (repeatable).",
        ),
        Key(
            "scheduler",
            "run",
            "str",
            help=(
                "threads, processes, sync, or a dask.distributed address tcp://host:port (default: "
                "measured best for the format; sync for tiny jobs)."
            ),
        ),
        Key(
            "workers",
            "run",
            "int",
            minimum=1,
            help="Local workers (default: all cores).",
        ),
        Key(
            "timeout",
            "run",
            "float",
            minimum=0.001,
            help="Seconds one record may take before its decoder is deemed hung.",
        ),
        Key(
            "partition-size",
            "run",
            "int",
            minimum=1,
            help=(
                "Most records per task (default: per format, ~0.2 s of work); a small dataset is split "
                "finer, into up to 4 tasks per core of at least 25 records."
            ),
        ),
        Key(
            "cluster-wait",
            "run",
            "float",
            minimum=0.001,
            help=(
                "With --scheduler tcp://host:port: seconds the cluster may have no worker (none joined "
                "yet, or every one left) before the scan ends, incomplete (exit 3); raise it for clusters"
                " that scale up from zero."
            ),
        ),
        Key(
            "dummy-loss",
            "replay",
            "bool",
            help=(
                "Train a seeded dummy model (--model) on the data in record order after the checks, with "
                "plain SGD; report records whose loss or gradient goes non-finite or whose step is "
                "absurd."
            ),
        ),
        Key(
            "batch-size",
            "replay",
            "int",
            minimum=1,
            help="Replay: records per SGD step.",
        ),
        Key(
            "lr",
            "replay",
            "float",
            help="Replay: the SGD learning rate.",
        ),
        Key(
            "seed",
            "replay",
            "int",
            help="Replay: seed of the initial weights.",
        ),
        Key(
            "scale",
            "replay",
            "float",
            help="Replay: multiply every input value by this (nothing else is done to the data).",
        ),
        Key(
            "model",
            "replay",
            "str",
            help=(
                "Replay: linear (default), l2 (L2-normalized input), batchnorm, or module:function: your "
                "loss f(X, y), or a factory of a torch.nn.Module (needs scrub[torch])."
            ),
        ),
        Key(
            "normalize",
            "replay",
            "bool",
            switch="--normalize/--no-normalize",
            help=(
                "Replay: standardize the inputs as a data pipeline does (ImageNet statistics for 8-bit "
                "images, the scan's per-feature statistics for arrays), or replay the raw values."
            ),
        ),
        Key(
            "manifest",
            "scan",
            "path",
            help=(
                "Where to write the JSON Lines manifest (default: NAME.scrub.jsonl here, NAME the "
                "dataset's; its scan record goes beside it)."
            ),
            fix_kind="paths",
            fix_help=(
                "Reuse this manifest from an earlier `scrub scan` instead of scanning (refused if the "
                "dataset changed since, or if a checking option given differs from the scan's), or a NaN "
                "guard's (its records found by their names); repeat it to merge a scan's and a guard's."
            ),
        ),
        Key(
            "json",
            "scan",
            "path",
            help="Also write the summary as JSON to this path.",
        ),
        Key(
            "fail-on",
            "scan",
            "str",
            choices=FAIL_ON,
            scan_only=True,
            help=(
                "Exit 1 when an issue at or above this severity is found; new: only errors the baseline "
                "does not hold (new and reappeared)."
            ),
        ),
        Key(
            "baseline",
            "scan",
            "path",
            scan_only=True,
            help=(
                "An earlier manifest: class every issue new, persisting or reappeared, and count the "
                "baseline's issues no longer found as resolved."
            ),
        ),
        Key(
            "drift-threshold",
            "scan",
            "thresholds",
            scan_only=True,
            help=(
                "With --baseline: how far a family of the profile may move before it is a drift "
                "finding, FAMILY=VALUE: records (relative change), label, value, size, length, token "
                "(distances; docs/drift.md); repeatable."
            ),
        ),
        Key(
            "cache",
            "scan",
            "path",
            each_dataset=True,
            help=(
                "Keep per-record results in this folder and reuse them for records that did not change "
                "(incremental rescans)."
            ),
        ),
        Key(
            "against",
            "scan",
            "path",
            help=(
                "Compare the evaluation splits with the training splits kept in this folder by earlier "
                "runs as well (split-leak), then keep this run's training splits there."
            ),
        ),
        Key(
            "profile",
            "scan",
            "bool",
            switch="--profile/--no-profile",
            help=(
                "Profile the dataset in the same pass (counts, classes, quantiles of values, image "
                "sizes, token lengths) into the scan record; `scrub profile` prints it."
            ),
        ),
        Key(
            "quiet",
            "scan",
            "bool",
            short="-q",
            help="No progress bar and no table.",
        ),
        Key(
            "show",
            "scan",
            "int",
            minimum=0,
            help="After the table, name this many records with errors (0: none).",
        ),
        Key(
            "junit",
            "scan",
            "path",
            scan_only=True,
            help=(
                "Also write a JUnit XML report (one testcase per check) for GitLab, Jenkins and other CI "
                "pages."
            ),
        ),
        Key(
            "html",
            "scan",
            "path",
            scan_only=True,
            help="Also write a self-contained HTML report (offline, under 5 MB).",
        ),
        Key(
            "summary-md",
            "scan",
            "path",
            scan_only=True,
            help=(
                "Also write a short Markdown summary (default: appended to $GITHUB_STEP_SUMMARY when it "
                "is set)."
            ),
        ),
        Key(
            "out",
            "fix",
            "path",
            help=(
                "Where to write the cleaned copy (default: NAME.clean beside the source; STEM.clean.EXT "
                "for a single file)."
            ),
        ),
        Key(
            "quarantine",
            "fix",
            "bool",
            help=(
                "Also write the quarantined records, in the same format, with the manifest, to the "
                "quarantine folder."
            ),
        ),
        Key(
            "quarantine-dir",
            "fix",
            "path",
            help=(
                "The quarantine folder (default: NAME.quarantine beside the cleaned copy); implies "
                "--quarantine."
            ),
        ),
        Key(
            "severity",
            "fix",
            "str",
            choices=FIX_SEVERITIES,
            help="Quarantine records with an issue at or above this severity.",
        ),
        Key(
            "leak-side",
            "fix",
            "str",
            choices=LEAK_SIDES,
            help=(
                "Fixing a run's splits: set a leaked record (split-leak) aside from the evaluation split "
                "(default: its metric is what the leak falsifies) or from the training split (train: "
                "the evaluation split stays whole, as published)."
            ),
        ),
        Key(
            "allow-majority",
            "fix",
            "bool",
            help=(
                "Write the cleaned copy even when one check alone sets more than half of the records "
                "aside (refused by default: a cause that large is the dataset's or an option's, not "
                "its records')."
            ),
        ),
        Key(
            "force",
            "fix",
            "bool",
            help="Replace existing outputs.",
        ),
        Key(
            "link",
            "fix",
            "bool",
            help="Images: hard-link kept files instead of copying them, where the file system allows.",
        ),
    ]
}


class _Keys(Mapping[str, Key]):
    """`SHARED`, then the options of the formats of the table (`scrub.formats.FORMAT_KEYS`,
    which grows as a plugin's format registers): a live view, in that order."""

    def __getitem__(self, name: str) -> Key:
        return SHARED[name] if name in SHARED else FORMAT_KEYS[name]

    def __iter__(self) -> Iterator[str]:
        yield from SHARED
        yield from (name for name in FORMAT_KEYS if name not in SHARED)

    def __len__(self) -> int:
        return len(SHARED) + sum(name not in SHARED for name in FORMAT_KEYS)


#: every option by name
KEYS: Mapping[str, Key] = _Keys()


def key_named(name: str) -> Key | None:
    """The option ``name``, or None; a name scrub's own formats and commands do not know may be
    a plugin format's option, so the plugins are loaded before saying no (they are loaded only
    when needed: see `scrub.formats`)."""
    if name not in KEYS:
        load_plugins()
    return KEYS.get(name)


#: Keys only one command uses; a config file may hold both (it serves both commands).
SCAN_ONLY = frozenset(k.name for k in KEYS.values() if k.commands == ("scan",))
FIX_ONLY = frozenset(k.name for k in KEYS.values() if k.commands == ("fix",))
#: Keys that cannot come from a config file (they act on the outputs of one run).
COMMAND_LINE_ONLY = frozenset({"force"})
