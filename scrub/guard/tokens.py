"""Token ids outside the model's input embedding, found in each batch before its forward pass.

An id at or beyond an embedding's rows (or a negative one) raises ``IndexError`` on the CPU; on
CUDA the lookup's kernel trips a device-side assert, which leaves the process's CUDA context
unusable: the run dies inside the forward, before `NanGuard.ok` could name anything. So where
the model has an input embedding (``get_input_embeddings()``, as Hugging Face models do, or the
``nn.Embedding`` given as ``NanGuard(..., embedding=...)``), each batch's ids are compared with
its rows before the loop gets the batch: one ``torch.aminmax`` over the ids and one read of its
two numbers. Only a batch that is out of range is looked at record by record. The records are
named with the scan's check, `token-out-of-range`, so that `scrub fix --manifest` sets them
aside, and dropped from the batch (or the guard raises: `NanGuard`'s ``on_nonfinite``).

Which tensor of a batch holds the ids (``token_ids``): a key of a mapping batch, a position in a
tuple batch, or a function of the batch; by default ``input_ids`` of a mapping batch (Hugging
Face), else the first tensor of a tuple batch, or the batch itself, when its dtype is an
integer one. A batch where none is found is said once in a warning, never passed over silently.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: the scan's check (`scrub.checks.tokens`): the guard names the same records the same way
CHECK = "token-out-of-range"

#: where the ids of a batch are (`NanGuard`'s ``token_ids``)
TokenIds = str | int | Callable[[Any], torch.Tensor] | None


@dataclass(frozen=True)
class OutOfRange:
    """A record of a batch holding an id outside the embedding: its first such id."""

    position: int  # in the batch
    value: int
    at: int  # the id's place in the record's sequence


class TokenScreen:
    """Finds the records of a batch whose ids fall outside the model's input embedding."""

    def __init__(self, embedding: nn.Module | None, token_ids: TokenIds) -> None:
        if embedding is not None and _rows(embedding) is None:
            raise TypeError(
                f"embedding takes the model's input nn.Embedding (num_embeddings rows), not "
                f"{type(embedding).__name__}"
            )
        if token_ids is not None and not isinstance(token_ids, (str, int)) and not callable(token_ids):
            raise TypeError("token_ids takes a key of the batch, a position in it, or a function of it")
        self.embedding = embedding
        self.token_ids = token_ids
        self.warned = False

    def rows(self, model: nn.Module) -> int | None:
        """The rows of the input embedding: the one given, else ``model.get_input_embeddings()``
        (read at each batch: ``resize_token_embeddings`` may change it); None without one."""
        if self.embedding is not None:
            return _rows(self.embedding)
        getter = getattr(model, "get_input_embeddings", None)
        if not callable(getter):
            return None
        try:
            embedding = getter()
        except (NotImplementedError, AttributeError):  # a model class that declares none
            return None
        return _rows(embedding) if isinstance(embedding, nn.Module) else None

    def ids(self, batch: Any, size: int | None) -> torch.Tensor | None:
        """The ids tensor of ``batch`` (``size`` records: its first dimension; None where the
        batch's records cannot be told), or None where it cannot be told (said once in a
        warning: the ids are then not checked)."""
        where = self.token_ids
        if where is None:
            found = _integer(batch.get("input_ids")) if isinstance(batch, Mapping) else None
            if found is None and isinstance(batch, (list, tuple)) and batch:
                found = _integer(batch[0])
            if found is None:
                found = _integer(batch)
            why = "no input_ids, no integer tensor first in the batch"
        else:
            try:
                found = where(batch) if callable(where) else batch[where]
            except (KeyError, IndexError, TypeError) as error:
                raise ValueError(f"token_ids={where!r}: the batch has no such tensor ({error})") from None
            if not isinstance(found, torch.Tensor) or found.is_floating_point() or found.is_complex():
                raise ValueError(f"token_ids={where!r} is not an integer tensor of the batch")
            why = ""
        if found is not None and size is None:
            why, found = "its records cannot be told", None
        elif found is not None and (found.dim() == 0 or found.shape[0] != size):
            why, found = f"the ids' first dimension is not the batch's {size} records", None
        if found is None:
            if not self.warned:
                self.warned = True
                warnings.warn(
                    f"NanGuard: the model has an input embedding, but the token ids of a "
                    f"{type(batch).__name__} batch cannot be told ({why}): ids are not checked "
                    "against it before the forward; give NanGuard token_ids= (a key, a position or "
                    "a function of the batch)",
                    stacklevel=4,
                )
            return None
        return found

    def out_of_range(self, ids: torch.Tensor, rows: int) -> list[OutOfRange]:
        """The records of ``ids`` (one a row) with an id < 0 or >= ``rows``: one reduction over
        the batch, and a look at each record only when it is out of range."""
        if ids.numel() == 0:
            return []
        low, high = torch.stack(torch.aminmax(ids)).tolist()  # one read: one synchronization
        if low >= 0 and high < rows:
            return []
        flat = ids.reshape(ids.shape[0], -1)
        outside = (flat < 0) | (flat >= rows)
        found = []
        for position in torch.nonzero(outside.any(dim=1)).flatten().tolist():
            at = int(torch.nonzero(outside[position])[0])
            found.append(OutOfRange(position, int(flat[position, at]), at))
        return found


def _rows(embedding: nn.Module) -> int | None:
    rows = getattr(embedding, "num_embeddings", None)
    return int(rows) if isinstance(rows, int) else None


def _integer(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex():
        return None if value.dtype is torch.bool else value
    return None
