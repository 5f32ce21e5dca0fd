"""The replay's configuration and what it reports of its run."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from scrub.replay.model import BUILT_IN, PRECISIONS


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """The replay's options (the CLI's --batch-size, --lr, --seed, --precision, --model, ...)."""

    batch_size: int = 64
    lr: float = 0.01  # plain SGD, as users train
    seed: int = 0
    precision: str = "float32"  # float16 / bfloat16: the matmuls as mixed precision runs them
    model: str = "linear"  # linear, l2, batchnorm, or module:function (a loss, or a PyTorch factory)
    normalize: bool = True  # standardize the inputs (see scrub.replay.standardize)
    outlier_factor: float = 100.0
    step_limit: float = 10.0
    init_std: float = 0.01

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}")
        if not (math.isfinite(self.lr) and self.lr >= 0):
            raise ValueError("lr must be a finite number >= 0")
        if not self.outlier_factor > 1 or not self.step_limit > 1:
            raise ValueError("outlier_factor and step_limit must be > 1")
        if self.model not in BUILT_IN and ":" not in self.model:
            raise ValueError(
                f"model must be one of {', '.join(BUILT_IN)} or module:function, not {self.model!r}"
            )


@dataclass
class ReplayStats:
    """What the replay did, for the summary."""

    batches: int = 0
    batches_applied: int = 0
    batches_skipped: int = 0  # nothing applied: every record reported, a non-finite rest, an absurd step
    records: int = 0  # fed
    records_replayed: int = 0  # fed with a label in range
    records_applied: int = 0  # that moved the weights
    label_out_of_range: int = 0
    loss_nonfinite: int = 0
    grad_nonfinite: int = 0
    batch_level: int = 0  # records of batches that go non-finite only together (warnings)
    normalization: int = 0  # records only the L2 probe found
    loss_outlier: int = 0
    grad_outlier: int = 0
    first_loss: float | None = None  # mean loss of the first applied batch
    final_loss: float | None = None  # mean loss of the last applied batch
    mean_loss: float | None = None  # mean of the applied batches' mean losses
    _total: float = field(default=0.0, repr=False)

    def applied(self, loss: float, records: int) -> None:
        self.batches_applied += 1
        self.records_applied += records
        self.first_loss = loss if self.first_loss is None else self.first_loss
        self.final_loss = loss
        self._total += loss
        self.mean_loss = self._total / self.batches_applied

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}
