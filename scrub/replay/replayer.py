"""The replay: one epoch of mini-batch SGD over feature vectors, fed strictly in record order.

The driver feeds vectors in record order, in chunks of any size; batches are cut from the fed
stream (fed records 0-63, 64-127, ...), so the batches, the weights and every issue depend only
on the data, the seed and the options: never on chunk sizes, partitions or workers.

Per batch:

1. Labels outside [0, C) are reported (`label-out-of-range`) and left out of the batch: the
   loss would index past the logits with them.
2. One forward and backward pass; logits, losses and gradients are checked for NaN and Inf.
3. A non-finite batch is localized: each record is replayed on its own at the same weights, in
   the company of the last clean batch (alone before there is one), so that a loss that needs
   its batch (per-class normalization) is judged in a healthy batch rather than in a batch of
   one; with the built-in model, whose losses are per record, this is the record alone. Records
   that go non-finite are reported: `loss-nonfinite` when the logits or the loss do,
   `grad-nonfinite` when only the gradient does. When no record does, or the others still go
   non-finite without them, the batch has a batch-level pathology: each of those records is
   reported `loss-nonfinite` with severity *warning* and ``batch_level: true`` (no record is
   at fault alone, so none is quarantined by default).
4. A finite batch is screened for `loss-outlier`: a loss above ``outlier_factor`` (100) times
   max(median of the batch's losses, ln C) (ln C, at least ln 2, is the loss of a uniform
   guess: it keeps a well-fit batch whose median is ~0 from flagging everything).
5. The update is applied only when nothing in the batch was reported (labels aside): a reported
   record never moves the weights, so it cannot poison the batches after it. A 1e30 record
   has a finite loss (~1e29, an outlier) whose step would leave weights ~1e26 behind and every
   later loss enormous.

The step is SGD on the batch's mean loss, with the learning rate divided by the batch's median
of ``|x|² + 1`` (normalized LMS; the 1 is the bias's input). The data are never normalized, so
every magnitude reaches the forward pass; only the step adapts, so that a clean dataset trains
stably in any units. User models (``config.model``) go through steps 1-4; scrub holds no
weights for them, so there is no update.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from scrub.checks import replay as _replay_checks  # noqa: F401 - registers the replay's check ids
from scrub.checks.base import Finding, make_issue
from scrub.records import Issue, Severity
from scrub.replay.features import Identity
from scrub.replay.model import PRECISIONS, LinearSoftmax, Pass, round_to_bfloat16
from scrub.replay.usermodel import call_loss, load_loss


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """The replay's options (the CLI's --batch-size, --lr, --seed, --precision, --model)."""

    batch_size: int = 64
    lr: float = 0.1  # per unit of the batch's median |x|² + 1 (see the module docstring)
    seed: int = 0
    precision: str = "float32"  # or "float16": the matmuls as mixed precision runs them
    model: str | None = None  # "module:function": a user loss instead of the linear model
    outlier_factor: float = 100.0
    init_std: float = 0.01

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}")
        if not (math.isfinite(self.lr) and self.lr >= 0):
            raise ValueError("lr must be a finite number >= 0")
        if not self.outlier_factor > 1:
            raise ValueError("outlier_factor must be > 1")


@dataclass
class ReplayStats:
    """What the replay did, for the summary."""

    batches: int = 0
    batches_applied: int = 0
    batches_skipped: int = 0  # not applied: a non-finite value, an outlier, or no label in range
    records: int = 0  # fed
    records_replayed: int = 0  # fed with a label in range
    label_out_of_range: int = 0
    loss_nonfinite: int = 0
    grad_nonfinite: int = 0
    batch_level: int = 0  # records of batches that go non-finite only together (warnings)
    loss_outlier: int = 0
    first_loss: float | None = None  # mean loss of the first applied batch
    final_loss: float | None = None  # mean loss of the last applied batch
    mean_loss: float | None = None  # mean of the applied batches' mean losses
    _total: float = field(default=0.0, repr=False)

    def applied(self, loss: float) -> None:
        self.batches_applied += 1
        self.first_loss = loss if self.first_loss is None else self.first_loss
        self.final_loss = loss
        self._total += loss
        self.mean_loss = self._total / self.batches_applied

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


@dataclass(frozen=True, slots=True)
class _Verdict:
    nonfinite: list[str]  # what went non-finite: "logits", "loss", "gradient"
    losses: np.ndarray  # (n,), or () for a user loss that returns the batch's scalar
    step: Pass | None = None  # the built-in model's pass, to apply


class Replayer:
    """Feed it (identities, X, y) in record order; it returns the issues each batch reveals."""

    def __init__(self, config: ReplayConfig, num_classes: int, dim: int) -> None:
        if num_classes < 1 or dim < 1:
            raise ValueError("num_classes and dim must be >= 1")
        self.config = config
        self.num_classes = num_classes
        self.dim = dim
        self.stats = ReplayStats()
        self._loss = load_loss(config.model) if config.model else None
        self.model = None if self._loss else LinearSoftmax(
            dim, num_classes, config.seed, config.init_std, config.precision
        )
        self._floor = math.log(max(num_classes, 2))
        self._company: tuple[np.ndarray, np.ndarray] | None = None  # the last clean batch
        self._ids: list[Identity] = []
        self._X: list[np.ndarray] = []
        self._y: list[np.ndarray] = []
        self._pending = 0
        self._finished = False

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, identities: Sequence[Identity], X: np.ndarray, y: np.ndarray) -> list[Issue]:
        """Add records (in record order) and run every batch that is now complete."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        X, y = np.asarray(X), np.asarray(y)
        n = len(identities)
        if X.shape != (n, self.dim) or y.shape != (n,):
            raise ValueError(f"expected X ({n}, {self.dim}) and y ({n},), got {X.shape} and {y.shape}")
        if n and not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"labels must be integers, not {y.dtype}")
        self.stats.records += n
        self._ids.extend(identities)
        self._X.append(np.array(X, np.float32))  # a copy: the caller may reuse its buffers
        self._y.append(y.astype(np.int64))
        self._pending += n
        size, issues = self.config.batch_size, []
        if self._pending >= size:
            X_all, y_all = _joined(self._X), _joined(self._y)
            done = 0
            while self._pending - done >= size:
                batch = slice(done, done + size)
                issues += self._run_batch(self._ids[batch], X_all[batch], y_all[batch])
                done += size
            self._ids, self._X, self._y = self._ids[done:], [X_all[done:].copy()], [y_all[done:].copy()]
            self._pending -= done
        return issues

    def finish(self) -> list[Issue]:
        """Run the last, partial batch. Call once, after the last feed()."""
        if self._finished:
            return []
        self._finished = True
        if not self._pending:
            return []
        issues = self._run_batch(self._ids, _joined(self._X), _joined(self._y))
        self._ids, self._X, self._y, self._pending = [], [], [], 0
        return issues

    # -- one batch ---------------------------------------------------------------------------

    def _run_batch(self, ids: list[Identity], X: np.ndarray, y: np.ndarray) -> list[Issue]:
        number = self.stats.batches
        self.stats.batches += 1
        in_range = (y >= 0) & (y < self.num_classes)
        issues = [self._label_issue(ids[i], int(y[i]), number) for i in np.flatnonzero(~in_range)]
        if not in_range.all():
            keep = np.flatnonzero(in_range)
            ids, X, y = [ids[i] for i in keep], X[keep], y[keep]
        self.stats.records_replayed += len(y)
        if len(y) == 0:
            self.stats.batches_skipped += 1
            return issues
        verdict = self._evaluate(X, y)
        if verdict.nonfinite:
            found = self._localize(number, ids, X, y, verdict)
        else:
            found = self._outliers(number, ids, verdict.losses)
        if found:  # a reported record never moves the weights
            self.stats.batches_skipped += 1
        else:
            self._apply(X, y, verdict)
        return issues + found

    def _evaluate(self, X: np.ndarray, y: np.ndarray) -> _Verdict:
        if self.model is not None:
            step = self.model.run(X, y)
            return _Verdict(step.nonfinite(), step.losses, step)
        with np.errstate(all="ignore"):
            if self.config.precision == "float16":
                inputs = X.astype(np.float16)
            elif self.config.precision == "bfloat16":  # NumPy has no bfloat16: its values, in float32
                inputs = round_to_bfloat16(X)
            else:
                inputs = X.copy()
            losses, gradient_finite = call_loss(self._loss, inputs, y.copy(), self.config.model)
        nonfinite = [] if np.isfinite(losses).all() else ["loss"]
        if gradient_finite is False:
            nonfinite.append("gradient")
        return _Verdict(nonfinite, losses)

    def _apply(self, X: np.ndarray, y: np.ndarray, verdict: _Verdict) -> None:
        self.stats.applied(float(np.mean(verdict.losses, dtype=np.float64)))
        if self.model is None:  # user losses are localized in this batch's company
            self._company = (X.copy(), y.copy())
        if verdict.step is not None and self.model is not None:
            norms = np.einsum("ij,ij->i", X, X, dtype=np.float64) + 1.0
            self.model.step(verdict.step, self.config.lr / float(np.median(norms)))

    def _localize(
        self, number: int, ids: list[Identity], X: np.ndarray, y: np.ndarray, batch: _Verdict
    ) -> list[Issue]:
        """Replay each record on its own (with the last clean batch as company); what fails
        only together is a batch-level pathology."""
        issues, culprits = [], set()
        for i in range(len(y)):
            alone = self._evaluate(*self._with_company(X[i : i + 1], y[i : i + 1]))
            if alone.nonfinite:
                culprits.add(i)
                issues.append(self._nonfinite_issue(ids[i], number, alone))
        rest = [i for i in range(len(y)) if i not in culprits]
        if rest:
            together = batch if not culprits else self._evaluate(X[rest], y[rest])
            if together.nonfinite:
                issues += [self._batch_level_issue(ids[i], number, together, len(rest)) for i in rest]
        return issues

    def _with_company(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # The built-in model's losses are per record: the record alone is exact, and cheaper.
        if self._company is None or self.model is not None:
            return X, y
        company_X, company_y = self._company
        return np.concatenate([company_X, X]), np.concatenate([company_y, y])

    def _outliers(self, number: int, ids: list[Identity], losses: np.ndarray) -> list[Issue]:
        if losses.ndim == 0:
            return []
        median = float(np.median(losses))
        reference = max(median, self._floor)
        threshold = self.config.outlier_factor * reference
        issues = []
        for i in np.flatnonzero(losses > threshold):
            loss = float(losses[i])
            self.stats.loss_outlier += 1
            details = {"batch": number, "loss": loss, "median": median, "ratio": loss / reference,
                       "threshold": threshold, **self._context()}
            message = (f"loss {loss:.4g} is {loss / reference:.3g}x the batch median {median:.4g} "
                       f"(or ln C; flagged above {self.config.outlier_factor:g}x; batch {number})")
            issues.append(make_issue("loss-outlier", *ids[i], Finding(message, details)))
        return issues

    # -- issues ------------------------------------------------------------------------------

    def _context(self) -> dict[str, Any]:
        return {"precision": self.config.precision, "model": self.config.model or "linear"}

    def _label_issue(self, identity: Identity, label: int, number: int) -> Issue:
        self.stats.label_out_of_range += 1
        high = self.num_classes
        details = {"label": label, "low": 0, "high": high, "batch": number, "replay": True}
        message = f"label {label} is outside [0, {high}): left out of replay batch {number}"
        return make_issue("label-out-of-range", *identity, Finding(message, details))

    def _nonfinite_issue(self, identity: Identity, number: int, alone: _Verdict) -> Issue:
        if "logits" in alone.nonfinite or "loss" in alone.nonfinite:
            check, self.stats.loss_nonfinite = "loss-nonfinite", self.stats.loss_nonfinite + 1
        else:
            check, self.stats.grad_nonfinite = "grad-nonfinite", self.stats.grad_nonfinite + 1
        loss = _number(alone.losses)
        details = {"batch": number, "nonfinite": alone.nonfinite, "loss": loss, **self._context()}
        message = (f"{', '.join(alone.nonfinite)} non-finite when the record is replayed on its own "
                   f"(loss {loss}; batch {number}, {self.config.precision})")
        return make_issue(check, *identity, Finding(message, details))

    def _batch_level_issue(self, identity: Identity, number: int, together: _Verdict, size: int) -> Issue:
        self.stats.batch_level += 1
        details = {"batch": number, "nonfinite": together.nonfinite, "batch_level": True, "records": size,
                   **self._context()}
        message = (f"batch {number}: {', '.join(together.nonfinite)} non-finite only with these {size} "
                   "records together, none on its own (a batch-level pathology of the loss)")
        return make_issue("loss-nonfinite", *identity, Finding(message, details, Severity.WARNING))


def _number(losses: np.ndarray) -> float | str:
    """The record's loss for the manifest (JSON has no NaN or Inf: those are written as text).

    The record is the last row of what was replayed (after its company)."""
    value = float(np.asarray(losses, np.float64).reshape(-1)[-1])
    return value if math.isfinite(value) else str(value)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
