"""A user's PyTorch model in the replay: ``--model module:factory`` (needs ``scrub[torch]``).

The factory builds a ``torch.nn.Module`` (see `scrub.replay.usermodel`); scrub seeds PyTorch
with ``--seed`` first, then trains the module on the CPU exactly as a user's loop would: train
mode, inputs standardized as the replay standardizes them and shaped ``(n, *input_shape)``,
``F.cross_entropy`` on its logits, ``loss.backward()``, a real ``torch.optim.SGD`` step at
``--lr``. Under ``--precision float16`` or ``bfloat16`` the forward pass runs in
``torch.autocast("cpu", dtype=...)``, as mixed-precision training runs it.

Judging a batch must not change the model: its buffers (BatchNorm's running statistics) are
restored after every evaluation, and only an applied step keeps what the batch's forward pass
did to them. A single record (localized before there is a clean batch to keep it company) is
evaluated in eval mode, since BatchNorm cannot train on a batch of one.

scrub imports PyTorch only here, and only when such a model is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scrub.errors import UsageError, first_line


@dataclass
class TorchPass:
    """One forward and backward pass of the module over a batch."""

    logits: np.ndarray  # (n, C) float32
    losses: np.ndarray  # (n,) float32
    grads: list  # the mean loss's gradient per parameter (tensors)
    buffers: list  # the module's buffers after this forward pass (tensors)
    potentials: np.ndarray  # ||(x_i, 1)|| of the standardized inputs: relative screen only

    def nonfinite(self) -> list[str]:
        found = []
        if not np.isfinite(self.logits).all():
            found.append("logits")
        if not np.isfinite(self.losses).all():
            found.append("loss")
        if not all(bool(g.isfinite().all()) for g in self.grads):
            found.append("gradient")
        return found


class TorchModel:
    """Adapts a ``torch.nn.Module`` to the replay's model interface (run, step, norm)."""

    name = "torch"
    per_record = False  # BatchNorm couples the records of a batch: localize in company
    standardized = True
    bounded = False  # no bound on a record's share of the gradient: only the relative screen

    def __init__(
        self, module: Any, spec: str, input_shape: tuple[int, ...], num_classes: int, config: Any
    ) -> None:
        import torch

        self.torch = torch
        self.module = module.float().train()
        self.spec = spec
        self.input_shape = tuple(input_shape)
        self.num_classes = num_classes
        self.precision = config.precision
        self.parameters = [p for p in self.module.parameters() if p.requires_grad]
        if not self.parameters:
            raise UsageError(f"--model {spec}: the module has no trainable parameters")
        self.optimizer = torch.optim.SGD(self.parameters, lr=config.lr)

    def run(self, X: np.ndarray, y: np.ndarray) -> TorchPass:
        torch = self.torch
        saved = self._buffers()
        single = len(y) == 1
        if single:
            self.module.eval()
        try:
            self.optimizer.zero_grad(set_to_none=False)
            logits, losses = self._forward(X, y)
            losses.mean().backward()
        except UsageError:
            raise
        except Exception as error:
            raise UsageError(
                f"--model {self.spec}: the module failed on a batch of {len(y)}: {first_line(error)}"
            ) from None
        finally:
            if single:
                self.module.train()
        grads = [
            p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in self.parameters
        ]
        after = self._buffers()
        self._restore(saved)
        with np.errstate(all="ignore"):
            potentials = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64) + 1.0)
        return TorchPass(
            logits.detach().float().numpy(), losses.detach().float().numpy(), grads, after, potentials
        )

    def step(self, result: TorchPass, lr: float) -> None:
        for parameter, grad in zip(self.parameters, result.grads):
            parameter.grad = grad.clone()
        self._restore(result.buffers)
        self.optimizer.step()

    def norm(self) -> float:
        return float(np.sqrt(sum(float(p.detach().double().square().sum()) for p in self.parameters)))

    def step_norm(self, result: TorchPass, lr: float) -> float:
        total = 0.0
        for parameter, grad in zip(self.parameters, result.grads):
            total += float((parameter.detach().double() - lr * grad.double()).square().sum())
        return float(np.sqrt(total))

    def record_gradient_norm(self, X: np.ndarray, y: np.ndarray, index: int) -> float:
        """The norm of record ``index``'s share of the batch's gradient (its loss / n)."""
        saved = self._buffers()
        self.optimizer.zero_grad(set_to_none=False)
        _, losses = self._forward(X, y)
        (losses[index] / len(y)).backward()
        self._restore(saved)
        total = sum(float(p.grad.double().square().sum()) for p in self.parameters if p.grad is not None)
        return float(np.sqrt(total)) if np.isfinite(total) else float("inf")

    def _forward(self, X: np.ndarray, y: np.ndarray):
        torch = self.torch
        inputs = torch.from_numpy(np.ascontiguousarray(X, np.float32)).reshape(len(X), *self.input_shape)
        labels = torch.from_numpy(np.asarray(y, np.int64))
        if self.precision == "float32":
            logits = self.module(inputs)
        else:
            dtype = torch.float16 if self.precision == "float16" else torch.bfloat16
            with torch.autocast("cpu", dtype=dtype):
                logits = self.module(inputs)
        if tuple(logits.shape) != (len(y), self.num_classes):
            raise UsageError(
                f"--model {self.spec}: the module returned logits of shape {tuple(logits.shape)}, "
                f"not ({len(y)}, {self.num_classes})"
            )
        losses = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
        return logits, losses

    def _buffers(self) -> list:
        return [b.detach().clone() for b in self.module.buffers()]

    def _restore(self, saved: list) -> None:
        with self.torch.no_grad():
            for buffer, value in zip(self.module.buffers(), saved):
                buffer.copy_(value)
