"""The format table (`scrub.formats`): readers and writers are its views, a name is registered
once, and a package's own format registers through the ``scrub.formats`` entry point group."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO

from scrub.formats import FORMATS, Format, register
from scrub.readers.base import REGISTRY as READERS
from scrub.writers.base import REGISTRY as WRITERS


def test_readers_and_writers_are_views_of_one_table_and_a_name_is_registered_once():
    assert list(READERS) == list(WRITERS) == list(FORMATS)
    assert list(FORMATS)[-1] == "images"  # last: its reader takes any folder
    assert FORMATS["leveldb"].install_hint() == "pip install 'scrub[leveldb]' (or pip install plyvel)"
    assert FORMATS["hdf5"].install_hint() is None
    with pytest.raises(ValueError, match="registered twice"):
        register(Format("hdf5", "x:Y", "x:Z"))


def test_a_formats_own_options_are_keys_and_options_like_the_shared_ones():
    """--lmdb-codec, --allow-pickle (LMDB's and LevelDB's) and --labels (NumPy's) are declared
    with their formats' rows, not in ReadOptions' fields; they read, record and default as the
    shared ones do, and a format cannot redeclare another's option otherwise."""
    from scrub.options.key import Key
    from scrub.options.keys import KEYS
    from scrub.options.model import ScanOptions, default_of
    from scrub.readers.base import ReadOptions

    assert {"lmdb-codec", "allow-pickle", "labels"} <= set(KEYS)
    assert KEYS["lmdb-codec"] in FORMATS["lmdb"].options and KEYS["lmdb-codec"] in FORMATS["leveldb"].options
    assert "lmdb_codec" not in {f.name for f in dataclasses.fields(ReadOptions)}
    assert default_of(KEYS["allow-pickle"]) is False
    read = ScanOptions.build(lmdb_codec="npy", labels="y.npy").read
    assert (read.lmdb_codec, str(read.labels), read.allow_pickle) == ("npy", "y.npy", False)
    assert read.recorded("lmdb") == {
        "format": "lmdb", "root": None, "data_key": None, "label_key": None,
        "lmdb_codec": "npy", "allow_pickle": False, "labels": "y.npy",
    }  # fmt: skip
    with pytest.raises(ValueError, match="declares option 'labels' otherwise"):
        register(Format("other", "x:Y", "x:Z", options=(Key("labels", "format", "int"),)))
    assert "other" not in FORMATS


PLUGIN = '''
from scrub.formats import Format
from scrub.options.key import Key
from scrub.readers.numpy import NumpyReader
from scrub.writers.numpy import NumpyWriter

SPEC = Key("rows-spec", "format", "str", per_path=True, help="Rows: the spec they follow.", default="v1")


class RowsReader(NumpyReader):
    """.rows files: NumPy's .npy format under another name (a package's own format)."""

    format = "rows"
    file_suffixes = (".rows",)
    options_used = NumpyReader.options_used | {"rows_spec"}

    @classmethod
    def sniff(cls, path):
        return path.suffix == ".rows" and super().sniff(path)

    def open(self, partition_size):
        info, partitions = super().open(partition_size)
        info.notes.append(f"rows spec {self.options.rows_spec}")
        return info, partitions


class RowsWriter(NumpyWriter):
    format = "rows"


ROWS = Format("rows", "rows_format:RowsReader", "rows_format:RowsWriter", "row files", options=(SPEC,))
'''


@pytest.mark.slow
def test_a_package_registers_its_own_format_through_an_entry_point(tmp_path):
    """A real distribution on the path (its dist-info with an entry_points.txt): `--format rows`
    finds the format through the table, for `scrub scan` and `scrub fix`. (Its files hold NumPy's
    format, which the NumPy reader would take by itself: the built-in readers sniff first, and a
    package's readers only after them and before the image reader's last resort, so that a scan
    of a folder of images never pays for looking up installed packages' formats.)"""
    (tmp_path / "rows_format.py").write_text(PLUGIN)
    info = tmp_path / "rows_format-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rows-format\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[scrub.formats]\nrows = rows_format:ROWS\n")
    data = np.ones((12, 3), np.float32)
    data[4, 1] = np.nan
    with open(tmp_path / "train.rows", "wb") as file:
        np.save(file, data)
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    scan = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", "train.rows", "--format", "rows", "-q", "--json", "s.json"],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert scan.returncode == 1, scan.stderr
    assert '"format": "rows"' in (tmp_path / "s.json").read_text()
    assert "rows spec v1" in (tmp_path / "s.json").read_text()  # its own option's default
    # its own option, from a config file (the command line's flags are scrub's own formats')
    (tmp_path / "scrub.toml").write_text('rows-spec = "v2"\n')
    configured = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", "train.rows", "--format", "rows", "-q", "--json", "s.json"],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert configured.returncode == 1, configured.stderr
    assert "rows spec v2" in (tmp_path / "s.json").read_text()
    (tmp_path / "scrub.toml").unlink()
    fix = subprocess.run(
        [sys.executable, "-m", "scrub", "fix", "train.rows", "--format", "rows", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert fix.returncode == 0, fix.stderr
    assert np.load(tmp_path / "train.clean.rows").shape == (11, 3)
    (info / "entry_points.txt").write_text("[scrub.formats]\nrows = rows_format:NOPE\n")
    broken = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", "train.rows", "--format", "rows"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert broken.returncode == 2, broken.stderr
    assert textwrap.dedent(broken.stderr).startswith(
        "scrub: error: format plugin rows (rows_format:NOPE) does not load"
    )
