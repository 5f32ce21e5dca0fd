"""The replay: one epoch of mini-batch SGD over feature vectors, fed strictly in record order.

The driver feeds vectors in record order, in chunks of any size; batches are cut from the fed
stream (fed records 0-63, 64-127, ...), so the batches, the weights and every issue depend only
on the data, the seed and the options: never on chunk sizes, partitions or workers.

What a batch goes through (labels out of range left out; one forward and backward pass; a
non-finite batch localized record by record; the L2 probe; every finite record screened for
`loss-outlier` and `grad-outlier`; reported records never move the weights) is documented step
by step, with the reasons for each limit, in docs/replay.md ("Per batch").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scrub.checks import replay as _replay_checks  # noqa: F401 - registers the replay's check ids
from scrub.checks.base import Finding, make_issue
from scrub.checks.numeric import F32_OVERFLOW
from scrub.records import Issue, Severity
from scrub.replay.config import ReplayConfig, ReplayStats
from scrub.replay.features import Identity
from scrub.replay.findings import batch_level_issue, label_issue, nonfinite_issue
from scrub.replay.model import BUILT_IN, round_to_bfloat16
from scrub.replay.standardize import typical
from scrub.replay.tokens import joined
from scrub.replay.usermodel import LossFunction, call_loss, load_model, token_model


@dataclass(frozen=True, slots=True)
class _Verdict:
    nonfinite: list[str]  # what went non-finite: "logits", "loss", "gradient"
    losses: np.ndarray  # (n,), or () for a user loss that returns the batch's scalar
    step: Any = None  # the model's pass, to apply
    rows_finite: np.ndarray | None = None  # per record, for models whose losses are per record
    why: dict[str, Any] | None = None  # a record's own: what its issue's details explain


class Replayer:
    """Feed it (identities, X, y) in record order; it returns the issues each batch reveals.

    ``standardize`` maps raw inputs to what the model sees (None: raw, as ``--no-normalize``);
    ``input_shape`` is a record's shape, for PyTorch models (D for the built-in ones).

    With ``tokens=True`` the data is token sequences (`scrub.replay.tokens`): X is a `Sequences`,
    y is not used, ``num_classes`` is the vocabulary size V, ``dim`` the built-in language
    model's embedding width and ``input_shape`` ``(longest sequence,)``, for a PyTorch factory.
    """

    def __init__(
        self,
        config: ReplayConfig,
        num_classes: int,
        dim: int,
        standardize: Callable[[np.ndarray], np.ndarray] | None = None,
        input_shape: tuple[int, ...] | None = None,
        tokens: bool = False,
    ) -> None:
        if num_classes < 1 or dim < 1:
            raise ValueError("num_classes and dim must be >= 1")
        self.config = config
        self.num_classes = num_classes
        self.dim = dim
        self.stats = ReplayStats()
        self._loss: LossFunction | None = None  # a user's loss function, where there is no model
        self.model: Any = None
        self.tokens = tokens
        #: what the issues' details call the model
        self.model_name = "lm" if tokens and ":" not in config.model else config.model
        if tokens:
            self.model = token_model(config, num_classes, dim, (input_shape or (1,))[0])
        elif config.model in BUILT_IN:
            self.model = BUILT_IN[config.model](
                dim, num_classes, config.seed, config.init_std, config.precision
            )
        else:
            loaded = load_model(config.model, input_shape or (dim,), num_classes, config)
            if callable(loaded) and not hasattr(loaded, "run"):
                self._loss = loaded
            else:
                self.model = loaded
        takes_standardized = self.model is not None and self.model.standardized
        self._standardize = standardize if config.normalize and takes_standardized else None
        #: whether the model sees standardized inputs (the summary says which)
        self.standardizes = self._standardize is not None
        #: the absolute step limit means something only on inputs of a known scale: standardized,
        #: or normalized by the model itself (on raw pixels at lr 0.01, a linear layer's first
        #: step multiplies its norm by ~45 on clean photos)
        self._guarded = self.standardizes or getattr(self.model, "normalizes_input", False)
        self._probe = config.model == "linear" and not tokens  # the L2 probe beside the default model
        #: ln C: a model's loss at chance (a hashed output layer's classes, where it has one)
        self._floor = math.log(max(getattr(self.model, "classes", num_classes), 2))
        self._company: tuple[np.ndarray, np.ndarray] | None = None  # the last clean batch
        self._ids: list[Identity] = []
        self._X: list[Any] = []  # arrays, or token `Sequences`
        self._y: list[np.ndarray] = []
        self._pending = 0
        self._finished = False

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, identities: Sequence[Identity], X: Any, y: Any) -> list[Issue]:
        """Add records (in record order) and run every batch that is now complete."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        n = len(identities)
        if self.tokens:
            y = np.zeros(n, np.int64) if y is None else np.asarray(y)
            if len(X) != n or y.shape != (n,):
                raise ValueError(f"expected {n} sequences and y ({n},), got {len(X)} and {y.shape}")
        else:
            X, y = np.asarray(X), np.asarray(y)
            if X.shape != (n, self.dim) or y.shape != (n,):
                raise ValueError(f"expected X ({n}, {self.dim}) and y ({n},), got {X.shape} and {y.shape}")
        if n and not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"labels must be integers, not {y.dtype}")
        self.stats.records += n
        self._ids.extend(identities)
        # a copy: the caller may reuse its buffers (sequences are never modified)
        self._X.append(X if self.tokens else np.array(X, np.float32))
        self._y.append(y.astype(np.int64))
        self._pending += n
        size, issues = self.config.batch_size, []
        if self._pending >= size:
            X_all, y_all = joined(self._X), joined(self._y)
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
        issues = self._run_batch(self._ids, joined(self._X), joined(self._y))
        self._ids, self._X, self._y, self._pending = [], [], [], 0
        return issues

    # -- one batch ---------------------------------------------------------------------------

    def _run_batch(self, ids: list[Identity], raw: np.ndarray, y: np.ndarray) -> list[Issue]:
        number = self.stats.batches
        self.stats.batches += 1
        in_range = (y >= 0) & (y < self.num_classes)
        issues = [self._label_issue(ids[i], int(y[i]), number) for i in np.flatnonzero(~in_range)]
        if not in_range.all():
            keep = np.flatnonzero(in_range)
            ids, raw, y = [ids[i] for i in keep], raw[keep], y[keep]
        self.stats.records_replayed += len(y)
        if len(y) == 0:
            self.stats.batches_skipped += 1
            return issues
        X = self._standardize(raw) if self._standardize is not None else raw
        verdict = self._evaluate(X, y)
        reported: dict[int, Issue] = {}
        if verdict.nonfinite:
            reported.update(self._localize(number, ids, X, y, verdict))
        if self._probe:
            for i, issue in self._normalization_probe(number, ids, raw):
                reported.setdefault(i, issue)
        for i, issue in self._screen(number, ids, verdict, [i for i in range(len(y)) if i not in reported]):
            reported.setdefault(i, issue)
        issues += [reported[i] for i in sorted(reported)]
        return issues + self._update(number, ids, X, y, verdict, set(reported))

    def _update(
        self,
        number: int,
        ids: list[Identity],
        X: np.ndarray,
        y: np.ndarray,
        verdict: _Verdict,
        reported: set[int],
    ) -> list[Issue]:
        """Apply the step of the records nothing was reported on (see the module docstring, 6);
        the issues of an absurd step, if it is one."""
        keep = np.array([i for i in range(len(y)) if i not in reported], dtype=np.int64)
        if len(keep) == 0:
            self.stats.batches_skipped += 1
            return []
        if len(keep) < len(y):
            ids, X, y = [ids[i] for i in keep], X[keep], y[keep]
            verdict = self._evaluate(X, y)
        if verdict.nonfinite:  # the rest fails in a new company (a batch norm): nothing to learn
            self.stats.batches_skipped += 1
            return []
        if self.model is not None:
            before = self.model.norm()
            after = self.model.step_norm(verdict.step, self.config.lr)
            factor = after / before if before > 0 else (math.inf if after > 0 else 1.0)
            if self._guarded and not factor <= self.config.step_limit:
                self.stats.batches_skipped += 1
                return self._dominating(number, ids, X, y, verdict, factor)
            self.model.step(verdict.step, self.config.lr)
        self._company = (X.copy(), y.copy())  # a user loss has no weights: its clean batches keep company
        loss = getattr(verdict.step, "mean_loss", None)  # a language model's: over the batch's tokens
        self.stats.applied(float(np.mean(verdict.losses, dtype=np.float64)) if loss is None else loss, len(y))
        return []

    def _evaluate(self, X: np.ndarray, y: np.ndarray) -> _Verdict:
        if self.model is not None:
            step = self.model.run(X, y)
            rows = step.rows_finite() if self.model.per_record else None
            return _Verdict(step.nonfinite(), step.losses, step, rows)
        assert self._loss is not None  # no model: a loss was loaded instead
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

    def _localize(
        self, number: int, ids: list[Identity], X: np.ndarray, y: np.ndarray, batch: _Verdict
    ) -> dict[int, Issue]:
        """Judge each record on its own; what fails only together is a batch-level pathology."""
        found: dict[int, Issue] = {}
        if batch.rows_finite is not None:  # per-record losses: each record's own row of the pass
            step = batch.step
            for i in np.flatnonzero(~batch.rows_finite):
                if hasattr(step, "own"):  # a language model: its pass knows each record's part
                    broken, why = step.own(int(i)), step.why(int(i))
                else:
                    own = [("logits", step.logits[i]), ("loss", batch.losses[i])]
                    if step.statistic is not None:  # the L2 model's norm (per record)
                        own.insert(0, (step.statistic[0], step.statistic[1][i]))
                    broken, why = [name for name, values in own if not np.isfinite(values).all()], None
                found[int(i)] = self._nonfinite_issue(
                    ids[i], number, _Verdict(broken, batch.losses[i : i + 1], why=why)
                )
        else:
            company = self._company_for(X, y)
            for culprit, alone in self._culprits(X, y, list(range(len(y))), company):
                found[culprit] = self._nonfinite_issue(ids[culprit], number, alone)
        rest = [i for i in range(len(y)) if i not in found]
        if rest:
            together = batch if not found else self._evaluate(X[rest], y[rest])
            if together.nonfinite:
                found.update({i: self._batch_level_issue(ids[i], number, together, len(rest)) for i in rest})
        return found

    def _culprits(
        self, X: np.ndarray, y: np.ndarray, group: list[int], company: tuple[np.ndarray, np.ndarray] | None
    ) -> list[tuple[int, _Verdict]]:
        """The records of ``group`` that go non-finite each in the company, by halving: a group
        that stays finite in the company holds none (a NaN or an Inf spreads through whatever
        couples the records), so k culprits among n cost ~2k log2(n) passes instead of n (each
        a slow one for a float16 PyTorch model on the CPU). Each culprit is judged alone at the
        end."""
        rows = np.array(group)
        if company is None and len(group) > 1:  # alone, one by one: a group may fail only together
            return [item for i in group for item in self._culprits(X, y, [i], None)]
        inputs = (
            (X[rows], y[rows])
            if company is None
            else (np.concatenate([company[0], X[rows]]), np.concatenate([company[1], y[rows]]))
        )
        verdict = self._evaluate(*inputs)
        if not verdict.nonfinite:
            return []
        if len(group) == 1:
            return [(group[0], verdict)]
        middle = len(group) // 2
        return self._culprits(X, y, group[:middle], company) + self._culprits(X, y, group[middle:], company)

    def _company_for(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The company a record of this batch is judged in: the last clean batch, or before
        there is one, the typical rows of its own batch (finite, at most 1000x the median of its
        non-zero row magnitudes) if they are clean together; else none (the record alone)."""
        if self._company is not None:
            return self._company
        with np.errstate(all="ignore"):
            magnitudes = np.abs(X).max(axis=1).astype(np.float64)
        keep = np.flatnonzero(typical(magnitudes, min_rows=1))
        if len(keep) == 0 or self._evaluate(X[keep], y[keep]).nonfinite:
            return None
        return X[keep], y[keep]

    def _normalization_probe(
        self, number: int, ids: list[Identity], raw: np.ndarray
    ) -> list[tuple[int, Issue]]:
        """Records that an L2 normalization of the raw input turns into NaN (see 4 above)."""
        with np.errstate(all="ignore"):
            squares = np.einsum("ij,ij->i", raw, raw, dtype=np.float64)
        found = []
        for i in np.flatnonzero(~(squares > 0) | (squares >= F32_OVERFLOW)):
            if not np.isfinite(raw[i]).all():
                continue  # NaN or Inf: the model itself reports it
            zero = squares[i] == 0
            self.stats.normalization += 1
            confirms = "zero-norm" if zero else "square-overflow"
            if zero:
                what = (
                    "0/0 = NaN: the row is all zero (only a model that normalizes its input goes NaN on it)"
                )
            else:
                what = (
                    "an Inf norm: the sum of its squares overflows float32, and the normalized row is all "
                    "zeros"
                )
            details = {
                "batch": number,
                "nonfinite": ["logits" if zero else "norm"],
                "normalization": True,
                "confirms": confirms,
                "precision": self.config.precision,
                "model": "l2",
            }
            severity = Severity.WARNING if zero else Severity.ERROR
            message = f"an L2 normalization of the input gives {what}; batch {number}"
            found.append((int(i), make_issue("loss-nonfinite", *ids[i], Finding(message, details, severity))))
        return found

    def _screen(
        self, number: int, ids: list[Identity], verdict: _Verdict, rows: list[int]
    ) -> list[tuple[int, Issue]]:
        """`grad-outlier` and `loss-outlier` among the records that stayed finite (see 5 above);
        one issue a record, the gravest: an absurd step, then a loss outlier, then a large step."""
        if not rows or verdict.losses.ndim == 0:
            return []
        losses = verdict.losses[rows].astype(np.float64)
        median = float(np.median(losses))
        reference = max(median, self._floor)
        threshold = self.config.outlier_factor * reference
        step = verdict.step
        potentials = step.potentials[rows] if step is not None and hasattr(step, "potentials") else None
        if potentials is not None:
            median_potential = float(np.median(potentials))
            weights = self.model.norm()
            bounded = self._guarded and getattr(self.model, "bounded", True)  # potentials bound the gradient
        found: list[tuple[int, Issue]] = []
        for k, i in enumerate(rows):
            factor = ratio = 0.0
            if potentials is not None:
                factor = self.config.lr * potentials[k] / weights if weights > 0 and bounded else 0.0
                ratio = potentials[k] / median_potential if median_potential > 0 else 0.0
            if factor > self.config.step_limit:
                assert potentials is not None  # else factor is 0, and step_limit > 1
                why = (
                    f"one step on it alone could move the parameters by {factor:.3g}x their norm "
                    f"(limit {self.config.step_limit:g}x)"
                )
                found.append(
                    (
                        i,
                        self._grad_outlier(
                            ids[i], number, potentials[k], median_potential, ratio, factor, why, None
                        ),
                    )
                )
            elif losses[k] > threshold:
                self.stats.loss_outlier += 1
                loss = float(losses[k])
                details = {
                    "batch": number,
                    "loss": loss,
                    "median": median,
                    "ratio": loss / reference,
                    "threshold": threshold,
                    **self._context(),
                }
                message = (
                    f"loss {loss:.4g} is {loss / reference:.3g}x the batch median {median:.4g} "
                    f"(or ln C; flagged above {self.config.outlier_factor:g}x; batch {number})"
                )
                found.append((i, make_issue("loss-outlier", *ids[i], Finding(message, details))))
            elif ratio > self.config.outlier_factor:
                assert potentials is not None  # else ratio is 0, and outlier_factor > 1
                why = f"{ratio:.3g}x the batch's median (flagged above {self.config.outlier_factor:g}x)"
                found.append(
                    (
                        i,
                        self._grad_outlier(
                            ids[i],
                            number,
                            potentials[k],
                            median_potential,
                            ratio,
                            factor,
                            why,
                            Severity.WARNING,
                        ),
                    )
                )
        return found

    def _grad_outlier(
        self,
        identity: Identity,
        number: int,
        potential: float,
        typical: float,
        ratio: float,
        factor: float,
        why: str,
        severity: Severity | None,
    ) -> Issue:
        self.stats.grad_outlier += 1
        details = {
            "batch": number,
            "potential": float(potential),
            "median": typical,
            "ratio": float(ratio),
            "factor": float(factor),
            **self._context(),
        }
        message = f"its share of the gradient can reach {potential:.4g}: {why}; batch {number}"
        return make_issue("grad-outlier", *identity, Finding(message, details, severity))

    def _dominating(
        self, number: int, ids: list[Identity], X: np.ndarray, y: np.ndarray, verdict: _Verdict, factor: float
    ) -> list[Issue]:
        """The records whose shares of an absurd step make up half of it: `grad-outlier` errors."""
        shares = self._contributions(X, y, verdict)
        total = float(np.sum(shares)) or 1.0
        order = np.argsort(-shares, kind="stable")
        chosen = order[: int(np.searchsorted(np.cumsum(shares[order]), total / 2)) + 1]
        issues = []
        rows: list[int] = sorted(chosen.tolist())
        for i in rows:
            self.stats.grad_outlier += 1
            details = {
                "batch": number,
                "factor": factor,
                "share": float(shares[i]) / total,
                **self._context(),
            }
            message = (
                f"the batch's step would change the parameters' norm {factor:.3g}x (limit "
                f"{self.config.step_limit:g}x); this record's gradient is {shares[i] / total:.0%} of it; "
                f"batch {number}, not applied"
            )
            issues.append(make_issue("grad-outlier", *ids[i], Finding(message, details)))
        return issues

    def _contributions(self, X: np.ndarray, y: np.ndarray, verdict: _Verdict) -> np.ndarray:
        step = verdict.step
        if hasattr(step, "contributions"):
            return np.nan_to_num(step.contributions, nan=np.inf)
        return np.array([self.model.record_gradient_norm(X, y, i) for i in range(len(y))])

    # -- issues ------------------------------------------------------------------------------

    def _context(self) -> dict[str, Any]:
        return {"precision": self.config.precision, "model": self.model_name}

    def _label_issue(self, identity: Identity, label: int, number: int) -> Issue:
        self.stats.label_out_of_range += 1
        return label_issue(identity, label, number, self.num_classes)

    def _nonfinite_issue(self, identity: Identity, number: int, alone: _Verdict) -> Issue:
        issue = nonfinite_issue(
            identity, number, alone.nonfinite, alone.losses, alone.why or {}, self._context()
        )
        if issue.check == "loss-nonfinite":
            self.stats.loss_nonfinite += 1
        else:
            self.stats.grad_nonfinite += 1
        return issue

    def _batch_level_issue(self, identity: Identity, number: int, together: _Verdict, size: int) -> Issue:
        self.stats.batch_level += 1
        return batch_level_issue(identity, number, together.nonfinite, size, self._context())
