"""A user's PyTorch language model in the replay of token data (``--model module:factory``).

The factory returns a ``torch.nn.Module`` that takes ``input_ids`` (and ``attention_mask``, when
its ``forward`` accepts it) and returns logits (B, T, V), or an object with ``.logits``, as
Hugging Face's models do. scrub computes the causal language model's loss itself, as those
models compute it: each batch right-padded (ids 0, attention 0, labels the ignore index),
``F.cross_entropy(logits, labels, ignore_index=-100)`` on the flattened batch (the mean over its
counted tokens) against the labels shifted by one position (`scrub.replay.tokens`), a real
``torch.optim.SGD`` step at ``--lr``, the forward pass under ``torch.autocast`` at
``--precision``, in train mode, seeded with ``--seed``.

A language model does not couple the rows of a batch (attention stays within a sequence), so each
record is judged by its own row of the batch's pass: its own loss, the mean over its own counted
tokens. A batch whose forward pass raises (an id beyond the model's own embedding: ``IndexError:
index out of range in self``; a target beyond its logits) is run again record by record: those
that raise alone are `loss-nonfinite`, the exception in their details; the rest is the batch.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scrub.errors import UsageError, first_line
from scrub.replay.tokens import LanguagePass, Sequences
from scrub.replay.torchmodel import TorchModel

IGNORE = -100  # what the padded labels hold: F.cross_entropy's default ignore_index


@dataclass
class TorchTokenPass(LanguagePass):
    """One forward and backward pass of the module over a batch of sequences."""

    losses: np.ndarray  # (n,) float32: each record's mean over its counted tokens
    mean_loss: float  # the batch's loss, as the step is taken on it
    bad_logits: np.ndarray  # (n,) bool
    counted: np.ndarray
    lengths: np.ndarray
    attended: np.ndarray
    grads: list  # the batch loss's gradient per parameter (tensors)
    buffers: list
    errors: dict[int, str] = field(default_factory=dict)  # record -> what its forward pass raised

    def gradient_finite(self) -> bool:
        return all(bool(g.isfinite().all()) for g in self.grads)

    def why(self, i: int) -> dict[str, Any]:
        if i in self.errors:
            return {"error": self.errors[i], "why": "the model's forward pass raises on it"}
        return LanguagePass.why(self, i)


class TorchLanguageModel(TorchModel):
    """Adapts a language model ``torch.nn.Module`` to the replay's model interface."""

    per_record = True  # rows of a batch do not see each other
    standardized = False

    def __init__(self, module: Any, spec: str, vocab_size: int, config: Any) -> None:
        super().__init__(module, spec, (1,), vocab_size, config)
        try:
            accepted = list(inspect.signature(self.module.forward).parameters.values())
        except (TypeError, ValueError):
            accepted = []
        #: whether forward takes the attention mask (by name, or as one of its **keywords)
        self._mask = any(p.name == "attention_mask" or p.kind is p.VAR_KEYWORD for p in accepted)

    def run(self, X: Sequences, y: np.ndarray | None = None) -> TorchTokenPass:  # type: ignore[override]
        saved = self._buffers()
        n = len(X)
        errors: dict[int, str] = {}
        found: tuple[np.ndarray, float, np.ndarray] | None
        try:
            try:
                found = self._pass(X)
            except UsageError:
                raise
            except Exception as error:
                errors = {0: first_line(error)} if n == 1 else self._raising(X)
                if not errors:  # it fails only together: not the data's fault that scrub can name
                    raise
                rest = [i for i in range(n) if i not in errors]
                found = self._pass(X[rest]) if rest else None
        except UsageError:
            raise
        except Exception as error:
            raise UsageError(
                f"--model {self.spec}: the module failed on a batch of {n}: {first_line(error)}"
            ) from None
        after = self._buffers()
        self._restore(saved)
        losses = np.full(n, np.nan, np.float32)
        bad = np.zeros(n, bool)
        mean_loss = float("nan")
        grads = [self.torch.zeros_like(p) for p in self.parameters]
        if found is not None:
            rest_rows = np.array([i for i in range(n) if i not in errors], np.int64)
            losses[rest_rows], mean_loss, bad[rest_rows] = found
            grads = [
                p.grad.detach().clone() if p.grad is not None else self.torch.zeros_like(p)
                for p in self.parameters
            ]
        return TorchTokenPass(
            losses, mean_loss, bad, X.counted(), X.lengths(), X.attended(), grads, after, errors
        )

    def _raising(self, X: Sequences) -> dict[int, str]:
        """The records whose forward pass raises on their own, and what it raises."""
        errors = {}
        for i in range(len(X)):
            why = self._raises(X[[i]])
            if why is not None:
                errors[i] = why
        return errors

    def _raises(self, X: Sequences) -> str | None:
        """What the forward pass raises on these sequences alone (None: nothing)."""
        try:
            with self.torch.no_grad():
                self._forward_tokens(X)
        except Exception as error:
            return first_line(error)
        return None

    def _pass(self, X: Sequences) -> tuple[np.ndarray, float, np.ndarray]:
        """Forward and backward: (per-record losses, the batch's loss, per-record bad logits)."""
        self.optimizer.zero_grad(set_to_none=False)
        logits, token_losses, loss = self._forward_tokens(X)
        loss.backward()
        lengths = X.lengths()
        counted = X.counted()
        with np.errstate(all="ignore"):
            sums = token_losses.detach().double().sum(dim=1).numpy()
            losses = (sums / counted).astype(np.float32)  # 0/0 = NaN: nothing counted
        values = logits.detach().float()
        finite = values.sum(dim=2).isfinite()  # a finite sum has finite terms: no (B, T, V) mask
        if not bool(finite.all()):  # a sum that overflows: look closer
            finite[~finite] = values[~finite].isfinite().all(dim=1)
        finite = finite.numpy()
        bad = np.array([not finite[i, : lengths[i]].all() for i in range(len(X))], bool)
        return losses, float(loss.detach()), bad

    def _forward_tokens(self, X: Sequences):
        torch = self.torch
        n = len(X)
        lengths = X.lengths()
        width = max(1, int(lengths.max()) if n else 1)
        ids = np.zeros((n, width), np.int64)
        mask = np.zeros((n, width), np.int64)
        labels = np.full((n, width), IGNORE, np.int64)
        for i in range(n):
            length = lengths[i]
            ids[i, :length] = X.ids[i]
            own = X.masks[i]
            mask[i, :length] = 1 if own is None else own
            labels[i, :length] = np.where(X.targets[i] >= 0, X.targets[i], IGNORE)
        inputs = torch.from_numpy(ids)
        keywords = {"attention_mask": torch.from_numpy(mask)} if self._mask else {}
        if self.precision == "float32":
            output = self.module(inputs, **keywords)
        else:
            dtype = torch.float16 if self.precision == "float16" else torch.bfloat16
            with torch.autocast("cpu", dtype=dtype):
                output = self.module(inputs, **keywords)
        logits = getattr(output, "logits", None)
        if logits is None:
            logits = output[0] if isinstance(output, (tuple, list)) else output
        if not hasattr(logits, "shape") or logits.ndim != 3 or tuple(logits.shape[:2]) != (n, width):
            shape = tuple(getattr(logits, "shape", ()))
            raise UsageError(
                f"--model {self.spec}: the module returned logits of shape {shape}, not ({n}, {width}, V)"
            )
        flat = logits.float().reshape(n * width, -1)
        target = torch.from_numpy(labels.reshape(-1))
        token_losses = torch.nn.functional.cross_entropy(flat, target, ignore_index=IGNORE, reduction="none")
        # the mean over the counted tokens, as the trainer's F.cross_entropy(ignore_index=-100)
        # reduces (0/0 = NaN for none), from the same per-token losses: a second full-vocabulary
        # log-softmax cost a third of a pass and as much memory as the logits
        loss = token_losses.sum() / (target != IGNORE).sum()
        return logits, token_losses.reshape(n, width), loss
