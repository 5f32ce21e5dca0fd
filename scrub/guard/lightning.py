"""The NaN guard as a PyTorch Lightning callback (``pip install lightning``).

```python
from scrub.guard.lightning import NanGuardCallback

guard = NanGuardCallback(manifest="guard.scrub.jsonl")
trainer = lightning.Trainer(callbacks=[guard])
trainer.fit(model, train_dataloaders=guard.wrap(loader))  # wrapped: the records of each batch
```

Lightning fetches the next batch before the current step (to know the last one), so the wrapped
loader only hands out each batch's records, and the callback makes a batch the guard's current
one as its step starts (`on_train_batch_start`). After the backward (and the mixed-precision
plugin's ``unscale_``), `on_before_optimizer_step` asks the guard: a non-finite step is triaged
by running the module's own ``training_step`` on subsets of the batch (its logging silenced),
and its gradients are cleared, so the optimizer step that follows changes nothing.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from lightning.pytorch import Callback

from scrub.guard.batches import GuardedLoader
from scrub.guard.core import NanGuard


class NanGuardCallback(Callback):
    """Guards a Lightning training (see the module's docstring); ``options`` are `NanGuard`'s
    (``on_nonfinite``, ``max_skips``, ``suspects``, ``key``, ``autocast``). The loss is the
    ``training_step``'s (a tensor, or the ``"loss"`` of the mapping it returns); under 16-bit
    mixed precision the triage runs under the same autocast unless ``autocast`` is given."""

    def __init__(self, manifest: str | os.PathLike | None = "guard.scrub.jsonl", **options: Any) -> None:
        super().__init__()
        self.manifest = manifest
        self.options = options
        self.guard: NanGuard | None = None
        self.loss: torch.Tensor | None = None
        self._loader_guard: NanGuard | None = None

    def wrap(self, loader: torch.utils.data.DataLoader) -> GuardedLoader:
        """``loader`` with the records of each batch remembered (give it to ``trainer.fit``)."""
        guard = self._guard(None)
        return guard.wrap(loader)

    def _guard(self, pl_module: Any) -> NanGuard:
        if self.guard is None:
            self.guard = NanGuard(
                torch.nn.Module() if pl_module is None else pl_module,
                step=_training_step,
                manifest=self.manifest,
                **self.options,
            )
            self.guard.deliver_on_iteration = False  # Lightning fetches ahead: a step starts it
        if pl_module is not None:
            self.guard.model = pl_module
        return self.guard

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        guard = self._guard(pl_module)
        if guard.autocast is None and "autocast" not in self.options:
            guard.autocast = _autocast_of(trainer)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._guard(pl_module).deliver(batch, number=batch_idx)
        self.loss = None

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        self.loss = loss

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.loss is None:
            return  # manual optimization, or a skipped backward: nothing of this step to judge
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self._guard(pl_module).ok(self.loss, scaler=scaler)


def _training_step(module: Any, batch: Any) -> torch.Tensor:
    """A LightningModule's loss of ``batch``, as its ``training_step`` gives it, with its
    ``log`` and ``log_dict`` silenced (the triage's subsets are not the training's metrics)."""
    saved = module.__dict__.get("log"), module.__dict__.get("log_dict")
    module.log = module.log_dict = lambda *args, **kwargs: None
    try:
        output = module.training_step(batch, 0)
    finally:
        for name, value in zip(("log", "log_dict"), saved):
            if value is None:
                del module.__dict__[name]
            else:
                module.__dict__[name] = value
    return output["loss"] if isinstance(output, dict) else output


def _autocast_of(trainer: Any) -> dict[str, Any] | None:
    """The autocast of a Lightning mixed-precision plugin (``precision="16-mixed"`` or
    ``"bf16-mixed"``), for the triage to run the forward as the training does."""
    plugin = getattr(trainer, "precision_plugin", None)
    device = getattr(plugin, "device", None)
    precision = str(getattr(plugin, "precision", ""))
    if device is None or "mixed" not in precision:
        return None
    return {"device_type": device, "dtype": torch.bfloat16 if precision.startswith("bf16") else torch.float16}
