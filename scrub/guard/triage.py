"""The triage of one non-finite step: the records behind it, found without touching the model,
its gradients, its BatchNorm statistics or the optimizer (see `scrub.guard.core`).

Records that fail only together are narrowed to the smallest group that still fails on its own
(`Triage.narrow`): a pair of rows whose squared errors are each a float32 but overflow once
summed is named as that pair, not as the batch or the half of it bisection stopped at. Where
per-sample losses are at hand, the records are tried in the order of their own loss, largest
first: the records that overflow a reduction together are the largest, so the smallest failing
prefix of that order holds them, found in log2(B) passes.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn.utils.stateless import _reparametrize_module

from scrub.guard.batches import Current, all_finite, batch_size_of, take
from scrub.guard.ranks import agree_any
from scrub.guard.spike import gradient_norm

#: what one evaluation of some records of a batch gives (`Triage.evaluate`); `SPIKE`: finite, with
#: a gradient norm over the spike rule's limit (a triage of a spike, ``limit`` given)
FINITE, LOSS, GRADIENT, SPIKE, UNRUNNABLE = "finite", "loss", "gradient", "spike", "unrunnable"


class Recipe(Protocol):
    """How the training computes a batch's loss (the `NanGuard`'s settings), and where the triage
    counts its passes."""

    model: nn.Module
    loss_fn: Callable[[Any, Any], torch.Tensor] | None
    step_fn: Callable[[Any, Any], torch.Tensor] | None
    autocast: dict[str, Any] | None
    passes: int
    last_passes: int


@dataclass
class Joint:
    """Records of a batch that fail together, none alone: ``positions`` in the batch, found by
    ``found_by``; ``unnarrowed`` says why the group could not be narrowed to fewer records where
    that was not tried to the end (None: no record of it can be left out and the rest still fail)."""

    positions: list[int]
    found_by: str
    unnarrowed: str | None = None


#: why a group is the whole set it was found in (`Joint.unnarrowed`)
UNRUNNABLE_APART = "its records cannot be run apart (a part of it raises when run alone)"
ANY_RECORD = (
    "every record's own loss is finite, and the record whose loss is the smallest is non-finite "
    "alone too: the reduction fails whichever records it holds (a weighted mean with nothing to "
    "weigh: 0/0), not a group of them"
)


@dataclass
class Search:
    """What the triage of one step found."""

    culprits: list[tuple[int, str]] = field(default_factory=list)  # (position in the batch, how)
    joints: list[Joint] = field(default_factory=list)
    transient: bool = False
    suspects: bool = False
    tried: list[str] = field(default_factory=list)


class Triage:
    """The search for the records behind one non-finite step (the module's docstring); with a
    ``limit``, behind a finite step whose gradient norm went over it (a spike): the same search,
    where a set of records fails when the gradient of its share of the batch's loss is over the
    limit (or non-finite)."""

    def __init__(self, guard: Recipe, current: Current, scaler: Any, limit: float | None = None) -> None:
        self.guard = guard
        self.limit = limit
        self.current = current
        self.scaler = scaler
        self.module = module_of(guard.model)
        self.parameters = {
            name: parameter.detach().requires_grad_(parameter.requires_grad)
            for name, parameter in self.module.named_parameters()
        }
        self.trainable = [p for p in self.parameters.values() if p.requires_grad]
        self.buffer_names = [name for name, b in self.module.named_buffers() if b.is_floating_point()]
        self.size = batch_size_of(current.batch)
        self.passes = 0

    def run(self) -> Search | None:
        search = Search()
        try:
            return self._run(search)
        finally:
            self.guard.last_passes = self.passes
            self.guard.passes += self.passes

    def _run(self, search: Search) -> Search | None:
        if not all_finite(list(self.module.parameters())):
            search.tried.append("weights")
            search.suspects = True
            return search
        everyone = list(range(self.size))
        whole = self.evaluate(everyone)
        search.tried.append("rerun")
        elsewhere = agree_any(whole != FINITE)  # every rank asks: a collective
        if whole == FINITE:
            if elsewhere:  # another rank's batch is the cause: it names it (every rank gathers)
                return search
            if self.scaler is not None and self.limit is None:
                return None  # finite unscaled everywhere: the scaler's scale was too large, as expected
            search.transient = True
            return search
        if whole == UNRUNNABLE:  # the batch cannot be run again here
            search.joints.append(Joint(everyone, "rerun", "the batch raises when run again here"))
            return search
        rest, verdict = everyone, whole
        # a per-sample loss tells a non-finite record in one pass; whether a record's gradient
        # spikes takes its gradient, which the bisection measures
        per_sample = self.per_sample_losses(everyone) if self.limit is None else None
        if per_sample is not None:
            search.tried.append("per-sample-loss")
            bad = [position for position in everyone if not math.isfinite(per_sample[position])]
            if len(bad) == self.size > 1:  # records coupled in the batch (a BatchNorm): bisect
                bad, per_sample = [], None
            search.culprits += [(position, "per-sample-loss") for position in bad]
            named = set(bad)
            rest = [position for position in everyone if position not in named]
            if bad and rest:
                verdict = self.evaluate(rest)
            if not rest or verdict == FINITE:
                return self._weights_or_records(search)
        if per_sample is not None and verdict == LOSS:
            # every record's own loss finite, their reduction not: records that overflow it
            # together, found among the largest losses (or a reduction no record can pass)
            search.tried.append("loss-order")
            order = sorted(rest, key=lambda position: -per_sample[position])
            self.narrow(order, search, "loss-order", ordered=True)
            return self._weights_or_records(search)
        search.tried.append("bisection")
        self.bisect(rest, search)
        return self._weights_or_records(search)

    def _weights_or_records(self, search: Search) -> Search:
        """Every record of a batch failing on its own is the weights' doing (finite, but an
        earlier step made them absurd: each record's loss overflows), not every record's."""
        if self.size > 1 and len(search.culprits) == self.size:
            search.culprits = []
            search.tried.append("weights")
            search.suspects = True
        return search

    def bisect(self, positions: list[int], search: Search) -> None:
        """``positions`` (a non-finite set): its culprits and joint groups, into ``search``."""
        if len(positions) == 1:
            search.culprits.append((positions[0], "bisection"))
            return
        half = len(positions) // 2
        first, second = positions[:half], positions[half:]
        verdicts = [self.evaluate(first), self.evaluate(second)]
        if UNRUNNABLE in verdicts:
            search.joints.append(Joint(positions, "bisection", UNRUNNABLE_APART))
            return
        if all(v == FINITE for v in verdicts):  # each half fine alone: records of both, together
            self.narrow(positions, search, "bisection", ordered=False)
            return
        for part, verdict in zip((first, second), verdicts):
            if verdict != FINITE:
                self.bisect(part, search)

    def narrow(self, positions: list[int], search: Search, how: str, ordered: bool) -> None:
        """``positions`` fail together: name the smallest groups of them that fail on their own
        (a group of one is a culprit), until what is left of them passes.

        ``ordered``: ``positions`` are in the order of the records' own losses, largest first,
        and each group is looked for in the smallest failing prefix of that order (a binary
        search) before it is shrunk; else the whole set is shrunk. Shrinking leaves out halves,
        then quarters, ... then single records, keeping each leaving-out after which the rest
        still fails: no record of the group it ends with can be left out (under the usual
        monotony: a set that holds a failing set fails). A record that fails alone while the
        record of the smallest loss fails alone too is the reduction's doing (`ANY_RECORD`):
        the set is named whole, with that reason."""
        remaining = list(positions)
        budget = self.passes + 4 * len(positions) + 8  # a bound, whatever the loss does
        while remaining:
            if self.passes >= budget:
                search.joints.append(Joint(remaining, how, f"the search stopped after {self.passes} passes"))
                return
            candidate = remaining[: self._smallest_failing_prefix(remaining)] if ordered else remaining
            group = self._shrink(candidate, first_chunk=len(candidate) // (2 if ordered else 4))
            if ordered and len(group) == 1 and group[0] != remaining[-1] and self._fails([remaining[-1]]):
                search.joints.append(Joint(remaining, how, ANY_RECORD))
                return
            if len(group) == 1:
                search.culprits.append((group[0], how))
            else:
                search.joints.append(Joint(group, how))
            left = set(group)
            remaining = [position for position in remaining if position not in left]
            if remaining and not self._fails(remaining):
                return

    def _fails(self, positions: list[int]) -> bool:
        """Whether these records fail by themselves (one that cannot be run apart does not:
        a group is never narrowed by leaving out what could not be tried)."""
        return self.evaluate(positions) not in (FINITE, UNRUNNABLE)

    def _smallest_failing_prefix(self, order: list[int]) -> int:
        """The length of the shortest prefix of ``order`` (a failing set) that fails, by a
        binary search (the prefixes of a growing sum fail from some length on)."""
        low, high = 1, len(order)
        while low < high:
            middle = (low + high) // 2
            if self._fails(order[:middle]):
                high = middle
            else:
                low = middle + 1
        return high

    def _shrink(self, group: list[int], first_chunk: int) -> list[int]:
        """``group`` (a failing set) with every run of records left out after which it still
        fails: runs of ``first_chunk`` records, then of half as many, down to one."""
        chunk = max(first_chunk, 1)
        while True:
            start = 0
            while start < len(group) and len(group) > 1:
                left_out = group[:start] + group[start + chunk :]
                if left_out and self._fails(left_out):
                    group = left_out
                else:
                    start += chunk
            if chunk == 1:
                return group
            chunk //= 2

    # -- evaluations on the detached weights and copies of the buffers ----------------------------

    def _call(self, positions: list[int], reduce: bool = True) -> torch.Tensor:
        """The loss of the records at ``positions`` of the batch, as the training computes it."""
        self.passes += 1
        buffers = dict(zip(self.buffer_names, (b.clone() for b in self.current.buffers or []), strict=False))
        for name, buffer in self.module.named_buffers():
            if name not in buffers:
                buffers[name] = buffer.clone()
        state = {**self.parameters, **buffers}
        batch = take(self.current.batch, positions, self.size)
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.current.rng)
            context = torch.autocast(**self.guard.autocast) if self.guard.autocast else _nothing()
            # the module itself, its tensors swapped for these for the call (what
            # `torch.func.functional_call` does around `forward`): a step function may call more
            # of it than `forward` (a LightningModule's `training_step`)
            with context, _reparametrize_module(self.module, state):
                return _loss(self.guard, self.module, batch, reduce)

    def evaluate(self, positions: list[int]) -> str:
        """One forward/backward pass of these records: `FINITE`; `LOSS` when their loss is
        non-finite, `GRADIENT` when only a gradient is, `SPIKE` when the gradient's norm is over
        the spike's ``limit``; `UNRUNNABLE` when they cannot be run alone (a BatchNorm over one
        record).

        The gradient is that of the loss times ``len(positions) / batch size``: under the usual
        mean reduction, these records' share of the batch's gradient. Unscaled, a record's
        gradient alone is the batch size times its share, and a large but finite share (one that
        float16 holds in the batch) would overflow alone: an invented culprit."""
        try:
            loss = self._call(positions)
        except (RuntimeError, ValueError, IndexError):
            if len(positions) != 1:
                return UNRUNNABLE
            # one record alone: a BatchNorm1d refuses a batch of one (no variance); the record
            # twice is a batch it takes, whose mean loss and gradient are the record's own
            return self.evaluate(positions * 2) if self.size > 1 else UNRUNNABLE
        try:
            if not bool(torch.isfinite(loss.detach()).all()):
                return LOSS
            if not loss.requires_grad or not self.trainable:
                return FINITE
            records = len(set(positions))  # a record run twice (above) is one record's share
            share = loss * (records / self.size) if records != self.size else loss
            grads = torch.autograd.grad(share, self.trainable, allow_unused=True)
        except (RuntimeError, ValueError, IndexError):
            return UNRUNNABLE
        if not all_finite(list(grads)):
            return GRADIENT
        return SPIKE if self.limit is not None and gradient_norm(list(grads)) > self.limit else FINITE

    def per_sample_losses(self, positions: list[int]) -> list[float] | None:
        """Each record's own loss, in one pass, where the loss takes ``reduction="none"`` and
        gives one value (or row) per record: the sum of its row's magnitudes (in float64: a row
        of float32s each finite may sum past float32), non-finite where one of them is; else None."""
        if (
            self.guard.loss_fn is None
            or self.guard.step_fn is not None
            or not _takes_reduction(self.guard.loss_fn)
        ):
            return None
        try:
            losses = self._call(positions, reduce=False)
        except (RuntimeError, ValueError, IndexError, TypeError):
            return None
        if losses is None or losses.dim() == 0 or losses.shape[0] != len(positions):
            return None
        rows = losses.detach().reshape(len(positions), -1)
        finite = torch.isfinite(rows).all(dim=1)
        sizes = rows.double().abs().nan_to_num(0.0).sum(dim=1)  # the non-finite ones: told apart below
        return [size if bool(ok) else math.inf for size, ok in zip(sizes.tolist(), finite, strict=True)]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _loss(guard: Recipe, model: Callable[..., Any], batch: Any, reduce: bool) -> torch.Tensor:
    """The training's loss of ``batch`` (``reduce=False``: per record, where the loss takes it)."""
    if guard.step_fn is not None:
        if not reduce:
            raise TypeError("a step function gives no per-sample losses")
        return guard.step_fn(model, batch)
    if guard.loss_fn is None:
        if not isinstance(batch, Mapping):
            raise TypeError("give NanGuard a loss_fn or a step function for this batch")
        if not reduce:
            raise TypeError("no per-sample losses without a loss_fn")
        outputs = model(**batch)
        return outputs["loss"] if isinstance(outputs, Mapping) else outputs.loss
    if isinstance(batch, Mapping) or not isinstance(batch, Sequence) or len(batch) != 2:
        raise TypeError("loss_fn(outputs, targets) needs (inputs, targets) batches; give a step function")
    inputs, targets = batch
    outputs = model(inputs)
    if reduce:
        return guard.loss_fn(outputs, targets)
    return _unreduced(guard.loss_fn)(outputs, targets)


def _unreduced(loss_fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``loss_fn`` giving a loss per record: a loss module with its ``reduction`` set to none, or
    a function called with ``reduction="none"`` (a TypeError when it takes none)."""
    if isinstance(loss_fn, nn.Module) and hasattr(loss_fn, "reduction"):
        unreduced = copy.copy(loss_fn)
        setattr(unreduced, "reduction", "none")  # noqa: B010 - a loss module's plain attribute
        return unreduced
    return lambda outputs, targets: loss_fn(outputs, targets, reduction="none")


def _takes_reduction(loss_fn: Callable[..., Any]) -> bool:
    """Whether ``loss_fn`` can give a loss per record: a loss module with a ``reduction``, or a
    function with a ``reduction`` parameter (``F.cross_entropy``) or ``**kwargs``."""
    if isinstance(loss_fn, nn.Module):
        return hasattr(loss_fn, "reduction")
    import inspect

    try:
        parameters = inspect.signature(loss_fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "reduction" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def module_of(model: nn.Module) -> nn.Module:
    """The model a wrapper holds (``DistributedDataParallel.module``): the triage runs it alone,
    without the wrapper's collectives."""
    return getattr(model, "module", model)
