"""The NaN guard in a Hugging Face ``Trainer`` (``pip install transformers``).

```python
from scrub.guard.huggingface import NanGuardTrainer

guard = {"manifest": "guard.scrub.jsonl"}  # NanGuard's options
trainer = NanGuardTrainer(model=model, args=args, train_dataset=train, nan_guard=guard)
trainer.train()
```

`NanGuardMixin` does the same for another ``Trainer`` subclass (``class MyTrainer(NanGuardMixin,
SFTTrainer)``). The train sampler the Trainer makes is wrapped to record each index as it is drawn
(a DataLoader's batches are consecutive runs of its sampler's indices, delivered in order), and
each micro-batch's ``input_ids`` are compared with the model's input embedding before its forward
(`scrub.guard.tokens`: records holding an id past it are named and dropped), and each micro-batch
is guarded after its backward: a non-finite one is triaged on the model itself
(``model(**batch).loss``), its findings written, and the gradients cleared, so that the
optimizer step that follows changes nothing (with gradient accumulation, the micro-batches of that
step before it are dropped with it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from transformers import Trainer

from scrub.guard.batches import batch_size_of
from scrub.guard.core import NanGuard


class _RecordingSampler(torch.utils.data.Sampler):
    """The Trainer's own sampler, each index recorded as it is drawn (the queue starts anew with
    each epoch: what ``drop_last`` left of the one before is not this one's)."""

    def __init__(self, sampler: Any, drawn: deque) -> None:
        self.sampler = sampler
        self.drawn = drawn

    def __iter__(self) -> Iterator[int]:
        self.drawn.clear()
        for index in self.sampler:
            self.drawn.append(int(index))
            yield index

    def __len__(self) -> int:
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)


class NanGuardMixin:
    """Guards a ``Trainer``'s training steps; ``nan_guard`` holds `NanGuard`'s options
    (``manifest``, ``on_nonfinite``, ``max_skips``, ``suspects``, ``key``, ``autocast``)."""

    def __init__(self, *args: Any, nan_guard: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = dict(nan_guard or {})
        trainer: Any = self
        if "autocast" not in options and (trainer.args.fp16 or trainer.args.bf16):
            options["autocast"] = {
                "device_type": trainer.args.device.type,
                "dtype": torch.bfloat16 if trainer.args.bf16 else torch.float16,
            }
        self.nan_guard = NanGuard(trainer.model, dataset=trainer.train_dataset, **options)
        self._drawn: deque[int] = deque()

    def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
        sampler = super()._get_train_sampler(*args, **kwargs)  # type: ignore[misc]
        if sampler is None or isinstance(sampler, torch.utils.data.BatchSampler):
            return sampler  # an iterable dataset, or batches made whole: records named by __key__
        return _RecordingSampler(sampler, self._drawn)

    def training_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        guard = self.nan_guard
        trainer: Any = self
        inputs = trainer._prepare_inputs(inputs)
        size = batch_size_of(inputs)
        indices = [self._drawn.popleft() for _ in range(size)] if len(self._drawn) >= size else None
        guard.model = model
        screened = guard.screen(inputs, indices)  # ids past the input embedding, before the forward
        if screened is None:  # no record left: no forward, no backward; the gradients stay as they are
            return torch.zeros((), device=trainer.args.device)
        inputs, indices = screened
        guard.deliver(inputs, indices=indices)
        loss = super().training_step(model, inputs, *args, **kwargs)  # type: ignore[misc]
        guard.ok(loss)
        return loss


class NanGuardTrainer(NanGuardMixin, Trainer):
    """A ``transformers.Trainer`` whose training steps the NaN guard watches (`NanGuardMixin`)."""
