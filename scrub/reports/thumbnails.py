"""Thumbnails for the HTML report, decoded in a child process under the scan's limits.

A quarantined image is one that broke a decoder, so decoding it again in the process that
writes the reports would let a crash or a hang take the report (and the exit code) with it;
and showing what a truncated image holds takes Pillow's ``ImageFile.LOAD_TRUNCATED_IMAGES``,
a process-wide switch under which `scrub.checks.imagedecode` refuses to run. So thumbnails are
made the way a scan re-checks the records of a worker that died (`scrub.execution.isolation`): in a
child forked from the worker server, which says which image it is on before it opens it; an
image that kills the child or takes longer than the scan's ``--timeout`` gets no preview, and
the rest go on in a new child. An image larger than the scan's ``max_pixels`` (read from its
header) is not decoded.
"""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

THUMBNAIL = 96  # pixels, the longer side


@dataclass(frozen=True)
class Thumbnail:
    """A small JPEG of an image (base64), and why only part of the image is in it, if so."""

    jpeg: str
    partial: str | None = None  # the decoder's complaint where only what was there decoded


def make_thumbnails(paths: Sequence[str], max_pixels: int | None, timeout: float) -> list[Thumbnail | None]:
    """A thumbnail (or None: nothing decodes, too large, crashed or hung) of each image file
    in ``paths``, made in a child process; ``max_pixels`` None means Pillow's default, as in
    the scan. Raises ScrubError when no child process can start."""
    if not paths:
        return []
    from scrub import pipeline
    from scrub.execution.isolation import run_isolated

    pipeline.prepare(pipeline.Plan("processes", 1, timeout))  # the worker server, tied to this process
    made: list[Thumbnail | None] = [None] * len(paths)
    for piece in run_isolated(ThumbnailWork(max_pixels), 0, list(paths), timeout, _no_preview):
        for offset, thumbnail in piece:
            made[offset] = thumbnail
    return made


@dataclass(frozen=True)
class ThumbnailWork:
    """`make_thumbnails`' work in the child: a `scrub.pipeline.Work` over a list of paths."""

    max_pixels: int | None

    def __call__(
        self, partition_no: int, paths: list[str], start: int = 0, stop: int | None = None, on_record=None
    ) -> list[tuple[int, Thumbnail | None]]:
        made = []
        for offset in range(start, len(paths) if stop is None else stop):
            if on_record is not None:
                on_record(offset)
            made.append((offset, thumbnail(paths[offset], self.max_pixels)))
        return made


def _no_preview(partition_no: int, paths: Any, offset: int, reason: str) -> list[tuple[int, None]]:
    return [(offset, None)]  # the image crashed or hung the child


def thumbnail(path: str, max_pixels: int | None) -> Thumbnail | None:
    """The thumbnail of one image file: whole when it decodes, else what decodes of it (a
    truncated JPEG or PNG) marked partial with the decoder's complaint; None when nothing does
    or it has more than ``max_pixels`` pixels. Meant for a child process (see the module)."""
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS if max_pixels is None else max_pixels
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError:
        return None
    try:
        return Thumbnail(_jpeg(data, limit, truncated=False))
    except _TooLarge:
        return None
    except Exception as error:
        complaint = str(error) or type(error).__name__
    try:
        return Thumbnail(_jpeg(data, limit, truncated=True), partial=complaint)
    except Exception:
        return None


class _TooLarge(Exception):
    pass


def _jpeg(data: bytes, limit: int | None, truncated: bool) -> str:
    """A base64 JPEG thumbnail of ``data``; with ``truncated``, of what decodes of it."""
    from PIL import Image, ImageFile

    saved = ImageFile.LOAD_TRUNCATED_IMAGES, Image.MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ImageFile.LOAD_TRUNCATED_IMAGES = truncated
        Image.MAX_IMAGE_PIXELS = None  # the scan's limit decides, below, not Pillow's own
        try:
            with Image.open(io.BytesIO(data)) as image:
                if limit is not None and image.width * image.height > limit:
                    raise _TooLarge
                image.draft("RGB", (THUMBNAIL, THUMBNAIL))
                image.thumbnail((THUMBNAIL, THUMBNAIL))
                buffer = io.BytesIO()
                image.convert("RGB").save(buffer, "JPEG", quality=70)
        finally:
            ImageFile.LOAD_TRUNCATED_IMAGES, Image.MAX_IMAGE_PIXELS = saved
    return base64.b64encode(buffer.getvalue()).decode("ascii")
