"""The spike rule: a training step whose gradient norm is far above its running median.

A record of magnitude 1e19 gives a finite loss and finite gradients (1e36 is a float32), so the
non-finite check lets its step through; the optimizer then moves the weights to 1e34 and every
later step overflows, with the record long gone from the batch. The step itself is the one to
catch: its gradient norm is some 1e30 times the steps' before it. The gradient norm, not the
loss: it is what the update is made of, it is never negative (a loss may be), and it is one
fused reduction over the gradients the guard reads anyway (`torch._foreach_norm`, as
``clip_grad_norm_`` takes it).

The rule is a ratio to the median of the last ``window`` applied steps, not a z-score: the
spread of gradient norms changes by orders of magnitude over a run (a median absolute deviation
near zero on a plateau makes any wobble an outlier), while the ratio of a clean step to the
median stays within a small factor: over the same clean runs the robust z-score of a step reached
15.9 while its ratio stayed under 11 (docs/guard.md gives the measurements behind the default).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from scrub.guard.batches import by_device

#: the default ``factor``: over 36,000 clean steps of the test models (an MLP regressor and
#: classifier, the conv + BatchNorm net, the tiny transformer; shuffled, three seeds, lr schedules)
#: a step's gradient norm was at most 10.9 times its running median (docs/guard.md), some 9 times
#: under this; the 1e19 record of issue 38 is 1e38 times over it
FACTOR = 100.0


@dataclass(frozen=True)
class Spike:
    """When a finite step is a spike: its gradient norm over ``factor`` times the median of the
    last ``window`` steps applied, once ``warmup`` steps have been (none judged before: the
    first steps of a run move fast)."""

    factor: float = FACTOR
    window: int = 100
    warmup: int = 20

    def __post_init__(self) -> None:
        if not self.factor > 1 or self.window < 1 or self.warmup < 1:
            raise ValueError(
                f"spike: factor must be over 1, window and warmup at least 1 (got factor={self.factor}, "
                f"window={self.window}, warmup={self.warmup})"
            )


class SpikeWatch:
    """The gradient norms of the steps applied lately, and the limit a step's must stay under."""

    def __init__(self, rule: Spike) -> None:
        self.rule = rule
        self.norms: deque[float] = deque(maxlen=rule.window)
        self.seen = 0  # steps applied (their norms taken), all told

    def median(self) -> float | None:
        """The median of the recent norms; None before ``warmup`` steps, or when it is 0 (a run
        whose gradients are all zero: any step would be infinitely many times it)."""
        if self.seen < self.rule.warmup:
            return None
        ordered = sorted(self.norms)
        middle = len(ordered) // 2
        median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        return median if median > 0 else None

    def limit(self) -> float | None:
        median = self.median()
        return None if median is None else self.rule.factor * median

    def add(self, norm: float) -> None:
        """An applied step's norm (a spike's is never added: it would raise the median)."""
        self.norms.append(norm)
        self.seen += 1


def gradient_norm(tensors: Sequence[torch.Tensor | None]) -> float:
    """The L2 norm of all of ``tensors`` together, one fused reduction per device and dtype
    (``torch._foreach_norm``, in float32 at least); infinite when it overflows float32 (a
    gradient of 1e20 squares past it), which only an absurd step does."""
    squares = 0.0
    for group in by_device(tensors).values():
        wide = group[0].dtype if group[0].dtype.itemsize >= 4 else torch.float32  # float16 holds 65,504
        norm = float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(group, 2, dtype=wide))).item())
        squares += norm * norm
    return math.sqrt(squares)
