"""The format table (`scrub.formats`): readers and writers are its views, a name is registered
once, and a package's own format registers through the ``scrub.formats`` entry point group."""

from __future__ import annotations

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


PLUGIN = '''
from scrub.formats import Format
from scrub.readers.numpy import NumpyReader
from scrub.writers.numpy import NumpyWriter


class RowsReader(NumpyReader):
    """.rows files: NumPy's .npy format under another name (a package's own format)."""

    format = "rows"
    file_suffixes = (".rows",)

    @classmethod
    def sniff(cls, path):
        return path.suffix == ".rows" and super().sniff(path)


class RowsWriter(NumpyWriter):
    format = "rows"


ROWS = Format("rows", "rows_format:RowsReader", "rows_format:RowsWriter", "row files")
'''


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
