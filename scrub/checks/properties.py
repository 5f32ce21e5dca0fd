"""Compute, once per record, the properties that checks judge (decode once, judge many times)."""

from __future__ import annotations

from collections import Counter

import xxhash

from scrub.checks.base import CheckOptions
from scrub.checks.imagedecode import inspect_image
from scrub.checks.labels import integer_label
from scrub.checks.masks import inspect_mask
from scrub.checks.tokens import tally_tokens, token_facts
from scrub.records import Record

BYTES_TYPES = (bytes, bytearray, memoryview)


def annotate(record: Record, options: CheckOptions, levels: bool = False) -> None:
    """Attach the record's content digest and, for encoded images, what decoding found (with
    ``levels``, the decode's pixel levels too, for the dataset's profile); for a language-model
    record, the sequence as the trainer sees it."""
    payload = record.payload
    if record.meta.get("kind") in ("tokens", "text"):
        token_facts(record, options)
        return
    if not isinstance(payload, BYTES_TYPES) or len(payload) == 0:
        return
    record.meta["digest"] = xxhash.xxh3_128_digest(payload)
    if record.meta.get("kind") == "image":
        record.meta["image"] = inspect_image(
            bytes(payload), options.max_pixels, levels, options.perceptual_hashes
        )
    mask = record.meta.get("mask")
    if mask is not None:
        record.meta["mask_facts"] = inspect_mask(mask, options.mask_palette)


def tally(record: Record, stats: dict[str, Counter], options: CheckOptions) -> None:
    """Add the record to the dataset statistics of the summary (formats, modes, shapes, labels)."""
    if record.meta.get("kind") == "array":
        stats["shapes"][record.meta["shape"]] += 1
    facts = record.meta.get("image")
    if facts is not None:
        stats["formats"][facts.format or "unrecognised"] += 1
        if facts.mode is not None and facts.error is None and not facts.bomb:
            stats["modes"][facts.mode] += 1
    masks = record.meta.get("mask_facts")
    if masks is not None:
        for value, count in masks.counts.items():
            stats["mask_pixels"][value] += count
    if "tokens" in record.meta:
        tally_tokens(record.meta["tokens"], stats)
    if options.labelled and options.label_kind != "value":  # a histogram of class ids, not of values
        label = integer_label(record.label)
        if label is not None:
            stats["labels"][label] += 1
