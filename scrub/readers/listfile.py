"""The line format of an image list file: Caffe's ``path label`` (split on the last whitespace),
or CSV/TSV ``path,label`` rows with or without a header.

Which one is decided from the file's name and first lines, never a full read: ``.csv`` and
``.tsv`` files (or lines that the standard library's `csv.Sniffer` finds ``,``, ``;``, ``\\t`` or
``|`` in consistently, where Caffe's format cannot be meant) are read with `csv`, one row per
line. A first row that names its columns (``path``, ``file``, ``filename``, ``image``, ...,
and ``label``, ``class``, ``target``, ...) is a header: the columns are taken by those names;
without one, the path is the first column and the label the second. The header is kept in the
outputs `fix` writes, and each kept row is written back as it was read.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scrub.checks.images import IMAGE_EXTENSIONS

PATH_COLUMNS = (
    "path",
    "filepath",
    "file_path",
    "file",
    "filename",
    "file_name",
    "image",
    "image_path",
    "img",
)
LABEL_COLUMNS = ("label", "labels", "class", "class_id", "target", "category", "category_id", "y")
CSV_SUFFIXES = {".csv": ",", ".tsv": "\t"}
SNIFF_BYTES = 16384


def has_image_extension(name: str) -> bool:
    return os.path.splitext(name.strip())[1].lower() in IMAGE_EXTENSIONS


@dataclass(frozen=True)
class ListFormat:
    """How to split a list file's lines: Caffe's (``delimiter`` None) or CSV's."""

    delimiter: str | None = None
    header: str | None = None  # the header line, verbatim (CSV with a header)
    path_column: int = 0
    label_column: int | None = 1
    columns: int = 0  # how many a CSV row has (0: Caffe's format)

    @property
    def name(self) -> str:
        if self.delimiter is None:
            return "caffe"
        return {",": "csv", "\t": "tsv"}.get(self.delimiter, f"csv ({self.delimiter!r})")

    def split(self, line: str) -> tuple[str, str | None]:
        """(path text, label text or None) of a data line."""
        if self.delimiter is None:
            return split_caffe_line(line)
        row = self._row(line)
        path = row[self.path_column] if self.path_column < len(row) else ""
        label = (
            row[self.label_column] if self.label_column is not None and self.label_column < len(row) else None
        )
        return path.strip(), None if label is None or label.strip() == "" else label.strip()

    def with_path(self, line: str, path: str) -> str:
        """The line with its path replaced (a path `fix` normalized), the rest as it was."""
        if self.delimiter is None:
            _, label = split_caffe_line(line)
            return path if label is None else f"{path} {label}"
        row = self._row(line)
        row[self.path_column] = path
        out = io.StringIO()
        csv.writer(out, delimiter=self.delimiter, lineterminator="").writerow(row)
        return out.getvalue()

    def _row(self, line: str) -> list[str]:
        return next(csv.reader([line], delimiter=self.delimiter or ","), [])

    def describe(self) -> dict[str, object]:
        """For the summary: how the lines were read."""
        facts: dict[str, object] = {"list_format": self.name}
        if self.delimiter is not None:
            facts["path_column"] = self.path_column
            facts["label_column"] = self.label_column
            facts["header"] = self.header is not None
        return facts


CAFFE = ListFormat()


def split_caffe_line(line: str) -> tuple[str, str | None]:
    """``path label`` split on the last whitespace (Caffe's rule); a lone path has no label."""
    stripped = line.strip()
    head, _, tail = stripped.rpartition(" ")
    if not head:
        head, _, tail = stripped.rpartition("\t")
    if not head or has_image_extension(tail):
        return stripped, None
    return head.rstrip(), tail


def detect(path: Path, lines: Sequence[str]) -> ListFormat:
    """The format of a list file from its name and first non-empty ``lines``."""
    if not lines:
        return CAFFE
    delimiter = CSV_SUFFIXES.get(path.suffix.lower())
    if delimiter is None:
        delimiter = _sniffed(lines)
    if delimiter is None:
        return CAFFE
    rows = [next(csv.reader([line], delimiter=delimiter), []) for line in lines]
    first = [cell.strip().lower() for cell in rows[0]]
    named_path = next((first.index(name) for name in PATH_COLUMNS if name in first), None)
    if named_path is not None and not has_image_extension(rows[0][named_path]):
        label = next((first.index(name) for name in LABEL_COLUMNS if name in first), None)
        return ListFormat(delimiter, lines[0], named_path, label, len(first))
    width = max((len(row) for row in rows), default=1)
    return ListFormat(delimiter, None, 0, 1 if width > 1 else None, width)


def _sniffed(lines: Sequence[str]) -> str | None:
    """A delimiter the lines use consistently, where Caffe's whitespace split cannot be meant:
    every line has the same number of cells (two or more) and the path cell an image name."""
    sample = "\n".join(lines)[:SNIFF_BYTES]
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        return None
    if dialect.delimiter == "\t" and all(len(line.split("\t")) == 2 for line in lines):
        return None  # Caffe's `path<TAB>label` is read by its own rule, the same way
    rows = [next(csv.reader([line], delimiter=dialect.delimiter), []) for line in lines]
    widths = {len(row) for row in rows}
    if len(widths) != 1 or widths.pop() < 2:
        return None
    data = rows[1:] if len(rows) > 1 and not has_image_extension(rows[0][0]) else rows
    if not data or not all(has_image_extension(row[0]) for row in data):
        return None
    return dialect.delimiter
