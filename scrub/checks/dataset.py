"""Whole-dataset checks: each collects one small value per record, then judges the column.

Memory: the columns are the only per-record state scrub keeps (16 bytes per record for
`duplicate`, 2 bytes for `shape-mismatch`, plus 8 for the position; each can be switched off
with `--ignore`). `label-outlier` keeps a label histogram and the positions of rare labels only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from scrub.checks.base import (
    CheckOptions,
    Column,
    Finding,
    Locate,
    Position,
    batch_collector,
    dataset_check,
)
from scrub.checks.labels import integer_label, integral_labels
from scrub.checks.minhash import NO_SIGNATURE, band_keys, near_text_pairs
from scrub.checks.perceptual import NO_HASH, near_pairs
from scrub.checks.splits import (
    IDENTITY_BYTES,
    SIGNATURE_BYTES,
    collect_split,
    content_identity,
    identity_parts,
    image_identity,
    pack_identities,
    pack_split,
    row_identities,
)
from scrub.records import Batch, Carries, Record, Severity

Judgement = list[tuple[Position, Finding]]


def _positions(column: Column, indices: Sequence[int] | np.ndarray) -> list[Position]:
    rows = column.positions[np.asarray(indices, dtype=np.intp)].tolist()
    return [(partition, offset) for partition, offset in rows]


@dataset_check("duplicate", Severity.WARNING, collect=content_identity, dtype="S16")
def duplicate(column: Column, options: CheckOptions, locate: Locate) -> Judgement:
    """A record that holds what an earlier record of the dataset holds, under another key;
    details name the first one.

    What it finds:
        Records whose content identity (a 128-bit XXH3 digest of what they hold) equals an
        earlier record's: the same bytes for encoded files (images, LMDB and LevelDB values,
        WebDataset samples, TFRecord examples), the same values (dtype, shape and bytes) for
        array values and the rows of HDF5, NumPy and Parquet arrays, the same ids for token
        sequences (JSON Lines, token columns, MDS, a Megatron or nanoGPT store's documents or
        windows), the same normalized text (Unicode NFC, case folded, whitespace collapsed) for
        texts. The first occurrence, in dataset order, is not flagged; every later copy is,
        with the first (`first`). Empty records (`empty-record`) are not compared.
    Why it breaks training:
        Duplicates over-weight some samples (a document repeated a thousand times in a corpus
        is memorized), and a copy that sits in both the training and the validation split
        leaks the answer and inflates the validation score (`split-leak`).
    Example:
        `cat/0100.jpg` has the same content as `cat/0007.jpg`; row 5120 of `train.h5` holds
        the values of row 17.
    What fix does:
        Nothing by default (a warning); with `--severity warning` (or `--check-severity
        duplicate=error`) the later copies are quarantined and the first kept.
    """
    if len(column.values) == 0:
        return []
    order = column.in_dataset_order()
    copies, firsts = later_copies(column.values[order])
    if not len(copies):
        return []
    first_identities = locate(_positions(column, order[firsts]))
    return [
        (position, same_content(first))
        for position, first in zip(_positions(column, order[copies]), first_identities)
    ]


def later_copies(identities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of ``identities`` (``S16``) in dataset order: the index of each that an earlier one
    equals, grouped by identity, and the index of its identity's first. `duplicate`'s grouping,
    here and on a cluster (`scrub.scanning.joins`)."""
    by_identity = _grouping_order(identities)
    sorted_values = identities[by_identity]
    same_as_previous = np.zeros(len(sorted_values), dtype=bool)
    same_as_previous[1:] = sorted_values[1:] == sorted_values[:-1]
    group_starts = np.flatnonzero(~same_as_previous)
    group_ids = np.cumsum(~same_as_previous) - 1
    duplicates = np.flatnonzero(same_as_previous)
    return by_identity[duplicates], by_identity[group_starts[group_ids[duplicates]]]


def same_content(first: tuple[str, str, int]) -> Finding:
    """`duplicate`'s finding on a later copy of the record ``first`` (source, key, index)."""
    source, key, index = first
    return Finding(f"same content as {key}", {"first": {"source": source, "key": key, "index": index}})


def _grouping_order(identities: np.ndarray) -> np.ndarray:
    """A stable order that puts equal identities (``S16``) next to each other, in their given
    order inside each group: a stable sort of their first 8 bytes as integers (a radix sort,
    several times faster than sorting the byte strings), or of the whole identities where two
    different ones share those 8 bytes (a chance of ~n^2 / 2^65)."""
    halves = np.ascontiguousarray(identities, "S16").view("<u8").reshape(-1, 2)
    order = np.argsort(halves[:, 0], kind="stable")
    ordered = halves[order]
    same_first = ordered[1:, 0] == ordered[:-1, 0]
    if (same_first & (ordered[1:, 1] != ordered[:-1, 1])).any():
        return np.argsort(identities, kind="stable")
    return order


@batch_collector("duplicate")
def _row_identities(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Each row's identity (`row_identities`); a row of nothing has none."""
    identities = row_identities(batch)
    rows = np.flatnonzero(identities != b"")
    return rows, identities[rows]


@dataset_check(
    "near-duplicate",
    Severity.WARNING,
    collect=image_identity,
    dtype=f"S{IDENTITY_BYTES}",
    needs=Carries.IMAGE,
    pack=pack_identities,
)
def near_duplicate(column: Column, options: CheckOptions, locate: Locate) -> Judgement:
    """An image that is nearly another image of the dataset: a re-encoded, resized or
    brightened copy; details name the group's first image.

    What it finds:
        Images whose perceptual hashes (pHash, from the decode that judges each image) are
        within `--near-distance` bits (default 6) of an earlier image's, in dataset order, and
        whose bytes differ (copies with the same bytes are `duplicate`'s). Each is flagged with
        the nearest earlier image (`first`, the first of equals) and the hashes' `distance` in
        bits; the images linked this way form a group (`group`: its `first` image, never
        flagged, and its `size`). Constant images have no hash and are not compared;
        `--near-distance 0` turns the check off.
    Why it breaks training:
        Copies over-weight some samples, and the same picture under two labels teaches the
        model a contradiction; within an evaluation split they count one answer several times.
        A copy across the splits is `split-leak`, an error.
    Example:
        `cat/0100.jpg` is `cat/0007.png` saved as a JPEG at quality 75, resized to half.
    What fix does:
        Nothing by default (a warning); with `--check-severity near-duplicate=error` (or
        `fix --severity warning`) the later images of each group are quarantined and the first
        kept.
    """
    if not options.near_distance or not len(column.values):
        return []
    order = column.in_dataset_order()
    identities, hashes, _, _ = identity_parts(column.values[order])
    firsts = np.unique(identities, return_index=True)[1]
    compared = np.full(len(hashes), NO_HASH, np.uint64)
    compared[firsts] = hashes[firsts]  # a later copy of the same bytes is `duplicate`'s
    rows, earlier, apart = near_pairs(compared, compared, options.near_distance, earlier=True)
    return near_images(column, locate, order, (rows, earlier), apart.tolist())


def near_images(
    column: Column, locate: Locate, order: np.ndarray, pairs: tuple[np.ndarray, np.ndarray], distances: list
) -> Judgement:
    """`near-duplicate`'s findings from its pairs (`_near_copies`), however they were found (here,
    or on a cluster: `scrub.scanning.joins`)."""
    return _near_copies(
        column,
        locate,
        order,
        pairs,
        {"distance": distances},
        lambda near, distance: f"nearly the same image as {near} ({distance} bits apart",
    )


def _text_signing(record: Record) -> Any:
    """What `near-duplicate-text` collects of a text: its identity and its parts' text (the
    signatures are made a partition at a time: `pack_split`); nothing of another record."""
    return collect_split(record, texts=True) if record.meta.get("kind") == "text" else None


@dataset_check(
    "near-duplicate-text",
    Severity.WARNING,
    collect=_text_signing,
    dtype=f"S{IDENTITY_BYTES + SIGNATURE_BYTES}",
    needs=Carries.NEAR_TEXTS,
    pack=partial(pack_split, texts=True),
)
def near_duplicate_text(column: Column, options: CheckOptions, locate: Locate) -> list:
    """With `--near-text J`: a text that is nearly another text of the dataset, an edited copy;
    details name the group's first text.

    What it finds:
        Texts (JSON Lines `text`, chat messages, prompt and completion) whose estimated Jaccard
        similarity (MinHash of 5-word shingles of the normalized text, as `split-leak` compares
        texts) to an earlier text of the dataset, in dataset order, is at least J, and whose
        normalized texts differ (the same text is `duplicate`'s). Each is flagged with the most
        similar earlier text (`first`, the first of equals) and the `similarity`; the texts
        linked this way form a group (`group`: its `first` text, never flagged, and its
        `size`). It runs with `--near-text` only (signing a text costs ~0.25 ms); a dataset
        without texts (token ids only) says so in a note.
    Why it breaks training:
        Near copies over-weight what they repeat (a page mirrored with a changed header, a
        template filled alike), which a language model memorizes; inside an evaluation split
        they count one answer several times. A near copy across the splits is `split-leak`,
        an error.
    Example:
        line 812 of `sft.jsonl` is line 40 with two words changed (similarity 0.91).
    What fix does:
        Nothing by default (a warning); with `--check-severity near-duplicate-text=error` (or
        `fix --severity warning`) the later texts of each group are quarantined and the first
        kept.
    """
    if not options.near_text:
        return []
    if not len(column.values):
        said = "no record is a text (JSON Lines text, chat, prompt and completion): --near-text compared none"
        return [(None, Finding(said, {}))]
    order = column.in_dataset_order()
    identities, _, _, signed = identity_parts(column.values[order])
    assert signed is not None  # the column's values hold signatures
    firsts = np.unique(identities, return_index=True)[1]
    compared = np.full_like(signed, NO_SIGNATURE)
    compared[firsts] = signed[firsts]  # a later copy of the same text is `duplicate`'s
    keys = band_keys(compared)
    rows, earlier, similarity = near_text_pairs(
        keys, compared, keys, compared, options.near_text, earlier=True
    )
    return _near_copies(
        column,
        locate,
        order,
        (rows, earlier),
        {"similarity": [round(float(value), 3) for value in similarity]},
        lambda near, value: f"nearly the same text as {near} (estimated Jaccard similarity {value:g}",
    )


def _near_copies(
    column: Column,
    locate: Locate,
    order: np.ndarray,
    pairs: tuple[np.ndarray, np.ndarray],
    measured: dict[str, list],
    describe: Callable[[str, Any], str],
) -> Judgement:
    """The findings of near copies: ``pairs`` (rows in dataset order ``order``, ascending, and
    the nearest earlier row of each), how near each is (``measured``: its one detail's name and
    values), and ``describe`` (the message's start, from the nearest record's key and the
    value). Records linked this way form groups, each led by its first record."""
    rows, earlier = pairs
    if not len(rows):
        return []
    ((name, values),) = measured.items()
    leader_of = np.arange(len(order))
    for row, nearest in zip(rows.tolist(), earlier.tolist()):  # ascending: an earlier row's is final
        leader_of[row] = leader_of[nearest]
    leaders = leader_of[rows]
    sizes = (np.bincount(leaders, minlength=len(order)) + 1)[leaders].tolist()
    nearest_named = locate(_positions(column, order[earlier]))
    leaders_named = locate(_positions(column, order[leaders]))
    judgement: Judgement = []
    for position, near, leader, value, size in zip(
        _positions(column, order[rows]), nearest_named, leaders_named, values, sizes
    ):
        first = dict(zip(("source", "key", "index"), near))
        group = {"first": dict(zip(("source", "key", "index"), leader)), "size": size}
        led = "" if leader == near else f" led by {leader[1]}"
        message = f"{describe(near[1], value)}; a group of {size}{led})"
        judgement.append((position, Finding(message, {"first": first, name: value, "group": group})))
    return judgement


def _image_mode(record: Record) -> str | None:
    """``image|<mode>`` for an image, ``array|<shape dtype>`` for an array value (LMDB)."""
    facts = record.meta.get("image")
    if facts is None:
        shape = record.meta.get("shape")
        return None if shape is None else f"array|{shape}"
    if facts.mode is None or facts.error is not None or facts.bomb:
        return None
    return f"image|{facts.mode}"


@dataset_check("shape-mismatch", Severity.WARNING, collect=_image_mode, dtype="category", needs=Carries.IMAGE)
def shape_mismatch(column: Column, options: CheckOptions, locate: Locate) -> Judgement:
    """Channels or mode differ from the dataset's dominant one.

    What it finds:
        A CMYK, grayscale, palette or RGBA image among RGB images (Pillow's mode), judged
        against the mode most of the dataset's decodable images have; an array value (LMDB
        `.npy` or raw Datum) whose shape or dtype differs from most arrays'; and, as an error,
        a raw Datum whose `len(data)` is not channels x height x width.
    Why it breaks training:
        A loader that does not convert every image stacks a 1- or 4-channel tensor into an RGB
        batch and crashes, or (CMYK) feeds inverted colours; a normalization with per-channel
        statistics then sees the wrong channel count.
    Example:
        `dog/0031.jpg` is CMYK; 99% of the dataset is RGB.
    What fix does:
        Nothing by default (a warning); with `--severity warning` the record is quarantined.
    """
    judgement: Judgement = []
    codes, names = column.factorized()
    counts = np.bincount(codes, minlength=len(names))
    kinds: dict[str, list[int]] = {}  # images against images, arrays against arrays
    for code, name in enumerate(names):
        if counts[code]:
            kinds.setdefault(name.partition("|")[0], []).append(code)
    for kind, members in sorted(kinds.items()):
        # the most frequent; among equals, the first in sorted order
        dominant = min(members, key=lambda code: (-counts[code], names[code]))
        share = round(float(counts[dominant] / counts[members].sum()), 4)
        what = "mode" if kind == "image" else "shape"
        differs = np.zeros(len(names), dtype=bool)
        differs[[code for code in members if code != dominant]] = True
        rows = np.flatnonzero(differs[codes])
        common = names[dominant].partition("|")[2]
        for position, code in zip(_positions(column, rows), codes[rows].tolist()):
            value = names[code].partition("|")[2]
            judgement.append(
                (
                    position,
                    Finding(
                        f"{what} {value} differs from the dataset's dominant {common}",
                        {what: value, "dominant": common, "dominant_share": share},
                    ),
                )
            )
    return judgement


def _class_index(record: Record) -> float | None:
    value = integer_label(record.label)
    return None if value is None else float(value)


#: A gap between two consecutive distinct labels a < b is "far" when b > FAR_FACTOR * a + FAR_MARGIN.
FAR_FACTOR = 2
FAR_MARGIN = 10
#: Labels above a far gap are outliers only when they are rare: at most this many distinct values
#: (or 1% of the distinct labels) and this many records (or 1% of the records).
RARE_VALUES = 3
RARE_RECORDS = 3
#: ...and never more than this many records, so that only the positions of rare labels need
#: keeping (see `scrub.scanning.columnstores.RareValueStore`): memory stays bounded however many rows.
RARE_RECORDS_MAX = 1000


def far_labels(distinct: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The label values above the first far gap, when they are rare; else none.

    ``distinct`` (sorted) and ``counts`` are the histogram of every labelled record.
    """
    total = int(counts.sum())
    keep = distinct >= 0
    distinct, counts = distinct[keep], counts[keep]
    if len(distinct) < 2:
        return distinct[:0]
    far_gaps = np.flatnonzero(distinct[1:] > FAR_FACTOR * distinct[:-1] + FAR_MARGIN)
    if len(far_gaps) == 0:
        return distinct[:0]
    above = far_gaps[0] + 1
    rare_values = len(distinct) - above <= max(RARE_VALUES, len(distinct) // 100)
    rare_records = counts[above:].sum() <= max(RARE_RECORDS, min(total // 100, RARE_RECORDS_MAX))
    return distinct[above:] if rare_values and rare_records else distinct[:0]


@dataset_check(
    "label-outlier", Severity.WARNING, collect=_class_index, dtype="rare", needs=Carries.CLASS_LABELS
)
def label_outlier(column: Column, options: CheckOptions, locate: Locate) -> Judgement:
    """Without a declared class range: a label far outside the rest (8000 among 0..9).

    What it finds:
        Negative labels (no class index is negative), and labels above a far gap: sorting the
        distinct labels, the first place where the next label b exceeds 2 x a + 10 (a being the
        label below it); the labels above are outliers when they are rare (at most 3 distinct
        values and 3 records, or 1% of either, and never more than 1000 records), so sparse or
        long-tailed class ids are not flagged. Runs only when neither `--num-classes` nor
        `--label-range` is given; with one, `label-out-of-range` is exact.
    Why it breaks training:
        Cross-entropy indexes the logits with the label; a label past the last class reads
        out of bounds (garbage loss, NaN, or a device-side assert). Tools that re-index labels
        silently turn 8000 into one more class instead.
    Example:
        One record labelled 8000 in a dataset whose other labels are 0..9.
    What fix does:
        Nothing by default (a warning); pass `--num-classes` to make it an exact error.
    """
    if options.declared_range is not None or len(column.values) == 0:
        return []
    labels = column.values
    distinct, counts = column.histogram or np.unique(labels, return_counts=True)
    far = far_labels(distinct, counts)
    outliers = np.flatnonzero(np.isin(labels, far) | (labels < 0))
    judgement: Judgement = []
    for i, position in zip(outliers, _positions(column, outliers)):
        value = int(labels[i])
        reason = "negative" if value < 0 else "far above the other labels"
        judgement.append((position, Finding(f"label {value} is {reason}", {"label": value})))
    return judgement


@batch_collector("label-outlier")
def _class_indices(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    if batch.labels is None or np.ndim(batch.labels) == 2:  # label vectors have no class ids
        return np.empty(0, int), np.empty(0)
    rows = np.flatnonzero(integral_labels(batch.labels))
    return rows, batch.labels[rows].astype(np.float64)
