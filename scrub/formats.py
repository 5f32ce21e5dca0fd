"""The format table: every format scrub reads and writes, in one place (fsspec's registry is the
model). A row names the format's reader and writer (as ``module:Class``, imported on first use),
and the library it needs beyond scrub's own dependencies with the extra that installs it.

The readers' and the writers' registries are views of this table, so they cannot disagree; a
name registered twice is an error. Formats of other packages register through the
``scrub.formats`` entry point group (each entry point loads a `Format`), as ``--plugin`` modules
register checks. They are looked up only when needed (reading every installed package's metadata
is a noticeable share of a short run: see docs/benchmarks.md, "Design measurements"): a
``--format`` the table does not hold, or a path no built-in reader takes but the image reader's
last resort (any folder); see `scrub.readers.base.open_reader`.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType

from scrub.errors import UsageError
from scrub.options.key import Key

#: the entry point group third-party formats register in
ENTRY_POINTS = "scrub.formats"


@dataclass(frozen=True)
class Format:
    """One row of the table."""

    name: str  # what --format takes
    reader: str  # module:Class of its `scrub.readers.base.Reader`
    writer: str  # module:Class of its `scrub.writers.base.Writer`
    title: str = ""  # how messages name it ("Parquet"); default: the name
    library: str | None = None  # a module it needs that scrub does not depend on
    extra: str | None = None  # the extra of scrub's package that installs it
    #: what a dataset of the format is, for the commands' help ("an LMDB environment")
    holds: str = ""
    #: the format's own options (group "format"): flags of `scan` and `fix`, config keys and API
    #: keywords as every option is, read by its reader as ``self.options.<attribute>``; two
    #: formats may share one (the same `Key`)
    options: tuple[Key, ...] = ()
    #: the module that declares the format's own reader checks (`scrub.checks.base.reader_check`,
    #: beside the reader that raises them), where they are not scrub's own: imported when the
    #: catalogue is listed (`scrub checks`), as a scan imports it with the reader
    checks: str | None = None

    def install_hint(self) -> str | None:
        """How to install what it needs, for the one line a missing library gives."""
        if self.library is None:
            return None
        extra = f"pip install 'scrub[{self.extra}]' (or pip install {self.library})" if self.extra else ""
        return extra or f"pip install {self.library}"


FORMATS: dict[str, Format] = {}
#: name -> module:Class of the reader, and of the writer: the registries of `scrub.readers.base`
#: and `scrub.writers.base` (views kept with the table, in its order)
READERS: dict[str, str] = {}
WRITERS: dict[str, str] = {}
#: the formats' own options by name (`scrub.options.keys.KEYS` lists them after the shared ones)
FORMAT_KEYS: dict[str, Key] = {}


def register(row: Format, before: str | None = None) -> None:
    """Add a format to the table (``before``: ahead of that one, which readers' sniffing order
    needs for a format whose folders the image reader would also take)."""
    if row.name in FORMATS:
        raise ValueError(f"format {row.name!r} is registered twice")
    for key in row.options:
        if key.group != "format":
            raise ValueError(f"format {row.name!r}: option {key.name!r} must be of the group 'format'")
        if FORMAT_KEYS.get(key.name, key) != key:
            raise ValueError(f"format {row.name!r}: another format declares option {key.name!r} otherwise")
    FORMAT_KEYS.update((key.name, key) for key in row.options)
    rows = list(FORMATS.values())
    place = next((number for number, other in enumerate(rows) if other.name == before), len(rows))
    rows.insert(place, row)
    for table in (FORMATS, READERS, WRITERS):
        table.clear()
    for each in rows:
        FORMATS[each.name] = each
        READERS[each.name] = each.reader
        WRITERS[each.name] = each.writer


def needs(name: str) -> ModuleType:
    """The library format ``name`` needs, imported; a one-line error naming the extra that
    installs it when it cannot be (as the format is named directly or found in a folder)."""
    row = FORMATS[name]
    assert row.library is not None, f"{name} needs no library of its own"
    try:
        return importlib.import_module(row.library)
    except ImportError:
        raise UsageError(f"reading {row.title or name} needs {row.library}: {row.install_hint()}") from None


def format_names(plugins: bool = True) -> list[str]:
    """The formats' names, in the table's order: a list, since loading a plugin reorders the
    table (iterate this, not the table). ``plugins=False``: scrub's own only, without looking for
    plugins (finding them reads every installed package's metadata, a noticeable share of a run
    that scans a folder of images: the paths that run every time do without)."""
    if plugins:
        load_plugins()
        return list(FORMATS)
    return [name for name in FORMATS if name in BUILT_IN]


#: the import path the installed packages' formats were last looked up on (None: never)
_plugins_looked_up_on: tuple[str, ...] | None = None


def load_plugins() -> None:
    """Register the formats of installed packages (the ``scrub.formats`` entry points), once for
    an import path (a path added since, as a test's, is looked at again); a broken one is a
    one-line error naming it."""
    global _plugins_looked_up_on
    if _plugins_looked_up_on == tuple(sys.path):
        return
    _plugins_looked_up_on = tuple(sys.path)
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINTS):
        try:
            row = point.load()
        except Exception as error:  # any error of a third-party module: said, never a traceback
            raise UsageError(f"format plugin {point.name} ({point.value}) does not load: {error}") from None
        if not isinstance(row, Format):
            raise UsageError(f"format plugin {point.name} ({point.value}) is not a scrub.formats.Format")
        if FORMATS.get(row.name) == row:  # registered on an earlier look: not twice
            continue
        try:
            register(row, before="images")  # before the reader that takes any folder
        except ValueError as error:  # a name or an option another format holds
            raise UsageError(f"format plugin {point.name} ({point.value}): {error}") from None


def load_format_checks() -> None:
    """Import every format's own checks module (`Format.checks`), installed packages' included,
    so that the catalogue lists their checks; one that does not import is a one-line error."""
    for name in format_names():
        module = FORMATS[name].checks
        if module is None:
            continue
        try:
            importlib.import_module(module)
        except Exception as error:  # any error of a third-party module: said, never a traceback
            raise UsageError(f"format {name}: its checks ({module}) do not import: {error}") from None


BUILT_IN: frozenset[str] = frozenset()  # scrub's own formats (set below)

#: LMDB's and LevelDB's: how their values are decoded (`scrub.readers.values`)
VALUE_CODEC = Key(
    "lmdb-codec",
    "format",
    "str",
    choices=("datum", "image", "npy", "pickle"),
    per_path=True,
    help="LMDB/LevelDB: force the value codec: datum, image, npy, pickle (default: detect per record).",
)
ALLOW_PICKLE = Key(
    "allow-pickle",
    "format",
    "bool",
    per_path=True,
    help=(
        "LMDB/LevelDB/MDS: unpickle pickled values (MDS: pkl columns). Unpickling runs arbitrary code: "
        "only for data you trust."
    ),
    default=False,
)
NUMPY_LABELS = Key(
    "labels",
    "format",
    "path",
    per_path=True,
    help=(
        "NumPy: a .npy of labels aligned with the data file's rows (X.npy --labels y.npy): read, "
        "checked and split by fix together with the rows."
    ),
    companion="the labels",
)

for _row in (
    Format(
        "lmdb",
        "scrub.readers.lmdb:LMDBReader",
        "scrub.writers.lmdb:LMDBWriter",
        "LMDB",
        holds="an LMDB environment",
        options=(VALUE_CODEC, ALLOW_PICKLE),
    ),
    Format(
        "hdf5",
        "scrub.readers.hdf5:HDF5Reader",
        "scrub.writers.hdf5:HDF5Writer",
        "HDF5",
        holds="an HDF5 file, folder or HDF5Data list",
    ),
    Format(
        "numpy",
        "scrub.readers.numpy:NumpyReader",
        "scrub.writers.numpy:NumpyWriter",
        "NumPy",
        holds="a .npy or .npz file",
        options=(NUMPY_LABELS,),
    ),
    Format(
        "leveldb",
        "scrub.readers.leveldb:LevelDBReader",
        "scrub.writers.leveldb:LevelDBWriter",
        "LevelDB",
        library="plyvel",
        holds="a LevelDB database",
        options=(VALUE_CODEC, ALLOW_PICKLE),
        extra="leveldb",
    ),
    Format(
        "webdataset",
        "scrub.readers.webdataset:WebDatasetReader",
        "scrub.writers.webdataset:WebDatasetWriter",
        "WebDataset",
        holds="WebDataset .tar shards",
    ),
    Format(
        "parquet",
        "scrub.readers.parquet:ParquetReader",
        "scrub.writers.parquet:ParquetWriter",
        "Parquet",
        library="pyarrow",
        holds="a Parquet file or folder",
        extra="parquet",
    ),
    Format(
        "arrow",
        "scrub.readers.parquet:ArrowReader",
        "scrub.writers.parquet:ArrowWriter",
        "Arrow",
        library="pyarrow",
        holds="an Arrow file or folder (Hugging Face datasets)",
        extra="parquet",
    ),
    Format(
        "segmentation",
        "scrub.readers.segmentation:SegmentationReader",
        "scrub.writers.segmentation:PairsWriter",
        "segmentation pairs",
        holds="image and mask folders",
    ),
    Format(
        "yolo",
        "scrub.readers.yolo:YoloReader",
        "scrub.writers.segmentation:YoloWriter",
        "YOLO",
        holds="a YOLO dataset",
    ),
    # before COCO, which takes a .json that mentions "images" (a JSON Lines .json may)
    Format(
        "jsonl",
        "scrub.readers.jsonl:JsonLinesReader",
        "scrub.writers.jsonl:JsonLinesWriter",
        "JSON Lines",
        holds="a JSON Lines file (.jsonl, .jsonl.gz, .jsonl.zst) or folder",
    ),
    Format(
        "coco", "scrub.readers.coco:CocoReader", "scrub.writers.coco:CocoWriter", "COCO", holds="a COCO JSON"
    ),
    Format(
        "mds",
        "scrub.readers.mds:MDSReader",
        "scrub.writers.mds:MDSWriter",
        "MosaicML Streaming (MDS)",
        holds="a MosaicML Streaming folder (index.json and MDS shards)",
        options=(ALLOW_PICKLE,),
    ),
    Format(
        "megatron",
        "scrub.readers.megatron:MegatronReader",
        "scrub.writers.megatron:MegatronWriter",
        "Megatron",
        holds="a Megatron-LM indexed dataset (PREFIX.bin + PREFIX.idx, named by PREFIX or either file)",
    ),
    Format(
        "tokenbin",
        "scrub.readers.tokenbin:TokenBinReader",
        "scrub.writers.tokenbin:TokenBinWriter",
        "token file",
        holds="a flat token file (nanoGPT's uint16 .bin, llm.c's shards), read in --max-length windows",
    ),
    Format(
        "tfrecord",
        "scrub.readers.tfrecord:TFRecordReader",
        "scrub.writers.tfrecord:TFRecordWriter",
        "TFRecord",
        holds="a TFRecord file of tf.Example records (.tfrecord, TFDS shards, GZIP too) or a folder of them",
    ),
    # last: its reader takes any folder
    Format(
        "images",
        "scrub.readers.images:ImageReader",
        "scrub.writers.images:ImageWriter",
        holds="an image folder or list (Caffe ImageData or CSV)",
    ),
):
    register(_row)

BUILT_IN = frozenset(FORMATS)
