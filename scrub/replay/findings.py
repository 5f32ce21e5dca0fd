"""The replay's findings as manifest issues: a label left out of the replay, a record whose loss
or gradient goes non-finite on its own, and records non-finite only together."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scrub.checks.base import Finding, make_issue
from scrub.records import Issue, Severity
from scrub.replay.features import Identity

#: What the forward pass computes: non-finite there is `loss-nonfinite`; else `grad-nonfinite`.
FORWARD = frozenset({"norm", "variance", "logits", "loss"})


def label_issue(identity: Identity, label: int, number: int, high: int) -> Issue:
    details = {"label": label, "low": 0, "high": high, "batch": number, "replay": True}
    message = f"label {label} is outside [0, {high}): left out of replay batch {number}"
    return make_issue("label-out-of-range", *identity, Finding(message, details))


def nonfinite_issue(
    identity: Identity,
    number: int,
    nonfinite: list[str],
    losses: np.ndarray,
    why: dict[str, Any],
    context: dict[str, Any],
) -> Issue:
    """`loss-nonfinite` when the forward pass broke, else `grad-nonfinite`; ``why`` holds what
    the model knows of the record's own cause (a language model's counted tokens, an error)."""
    check = "loss-nonfinite" if set(nonfinite) & FORWARD else "grad-nonfinite"
    loss = loss_value(losses)
    details = {"batch": number, "nonfinite": nonfinite, "loss": loss, **context} | why
    precision = context["precision"]
    message = (
        f"{', '.join(nonfinite)} non-finite when the record is replayed on its own "
        f"(loss {loss}; batch {number}, {precision})"
    )
    if "error" in why:
        message = f"the model raises on it: {why['error']} (batch {number}, {precision})"
    elif "why" in why:
        message += f": {why['why']}"
    return make_issue(check, *identity, Finding(message, details))


def batch_level_issue(
    identity: Identity, number: int, nonfinite: list[str], size: int, context: dict[str, Any]
) -> Issue:
    details = {"batch": number, "nonfinite": nonfinite, "batch_level": True, "records": size, **context}
    message = (
        f"batch {number}: {', '.join(nonfinite)} non-finite only with these {size} "
        "records together, none on its own (a batch-level pathology of the loss)"
    )
    return make_issue("loss-nonfinite", *identity, Finding(message, details, Severity.WARNING))


def loss_value(losses: np.ndarray) -> float | str:
    """The record's loss for the manifest (JSON has no NaN or Inf: those are written as text).

    The record is the last row of what was replayed (after its company)."""
    value = float(np.asarray(losses, np.float64).reshape(-1)[-1])
    return value if math.isfinite(value) else str(value)
