"""The batches a guarded loop trains on: which records each holds (the loader rebuilt around a
batch sampler that records them), the state before each forward, and the finiteness check."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch


def by_device(
    tensors: Sequence[torch.Tensor | None],
) -> dict[tuple[torch.device, torch.dtype], list[torch.Tensor]]:
    """The floating-point tensors of ``tensors`` (a sparse one by its values) grouped by device
    and dtype: what one fused ``torch._foreach_*`` call takes."""
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for tensor in tensors:
        if tensor is None or not tensor.is_floating_point():
            continue
        if tensor.is_sparse:
            tensor = tensor.coalesce().values()
        groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    return groups


def all_finite(tensors: Sequence[torch.Tensor | None]) -> bool:
    """Whether every value of ``tensors`` is finite, in one fused pass per device (the check
    ``GradScaler`` makes of its gradients: ``_amp_foreach_non_finite_check_and_unscale_``, here
    with a scale of 1, which leaves every value as it is); a loop per tensor costs a kernel and
    a synchronization each."""
    for (device, _), group in by_device(tensors).items():
        found, one = _flags(device)
        found.zero_()
        try:
            if any(tensor.requires_grad for tensor in group):  # weights, not gradients: not in place
                raise RuntimeError("tensors that require grad")
            torch._amp_foreach_non_finite_check_and_unscale_(group, found, one)
        except (RuntimeError, AttributeError):  # a dtype or backend it does not take
            found = torch.stack([torch.logical_not(torch.isfinite(t).all()) for t in group]).any()
        if bool(found.item()):
            return False
    return True


_FLAGS: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _flags(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The found-flag and the scale of 1 `all_finite` hands the fused check, made once a device."""
    flags = _FLAGS.get(device)
    if flags is None:
        flags = _FLAGS[device] = (torch.zeros((), device=device), torch.ones((), device=device))
    return flags


class Receiver(Protocol):
    """What a `GuardedLoader` hands its batches to (the `NanGuard`)."""

    received: deque[tuple[list[int] | None, int]]
    deliver_on_iteration: bool

    def deliver(self, batch: Any, indices: list[int] | None = None, number: int | None = None) -> None: ...

    def screen(
        self, batch: Any, indices: list[int] | None = None, number: int | None = None
    ) -> tuple[Any, list[int] | None] | None: ...


class RecordingBatchSampler(torch.utils.data.Sampler):
    """The loader's own batch sampler, recording the indices of each batch as it issues them:
    a DataLoader delivers batches in the order it issued them (``in_order``, its default), with
    workers and prefetching, so the k-th batch the loop receives is the k-th recorded."""

    def __init__(self, batch_sampler: Any, issued: deque) -> None:
        self.batch_sampler = batch_sampler
        self.issued = issued

    def __iter__(self) -> Iterator[list[int]]:
        for indices in self.batch_sampler:
            self.issued.append(list(indices))
            yield indices

    def __len__(self) -> int:
        return len(self.batch_sampler)


class GuardedLoader:
    """The user's loader, rebuilt around a `RecordingBatchSampler`: the same batches in the same
    order (less the records whose token ids the guard's `screen` finds outside the model's input
    embedding); each one, as it is handed to the loop, is the guard's current batch. Other attributes
    are the original loader's (``loader.sampler.set_epoch(...)`` reaches its `DistributedSampler`,
    which the rebuilt one draws from)."""

    def __init__(
        self,
        loader: torch.utils.data.DataLoader,
        guard: Receiver,
        issued: deque | None,
        original: torch.utils.data.DataLoader | None = None,
    ) -> None:
        self.loader = loader
        self.guard = guard
        self.issued = issued
        self.original = original if original is not None else loader

    def __iter__(self) -> Iterator[Any]:
        if self.issued is not None:
            self.issued.clear()  # what a loop left of an earlier epoch (prefetched) is not this one's
        self.guard.received.clear()
        for number, batch in enumerate(self.loader):
            indices = self.issued.popleft() if self.issued is not None else None
            # token ids past the input embedding: named and dropped before the loop's forward
            screened = self.guard.screen(batch, indices, number)
            if screened is None:  # no record of the batch left to train on
                continue
            batch, indices = screened
            self.guard.received.append((indices, number))
            if self.guard.deliver_on_iteration:  # a plain loop runs each batch as it receives it
                self.guard.deliver(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


@dataclass
class Current:
    """The batch being trained on: what the loop received, its records, and the state before
    its forward pass (the random state, the buffers: BatchNorm statistics)."""

    batch: Any
    indices: list[int] | None
    keys: list[str] | None  # an iterable dataset's keys (``__key__``), carried through collation
    number: int | None
    rng: torch.Tensor
    buffers: list[torch.Tensor] | None


def batch_size_of(batch: Any) -> int:
    """The number of records of a collated batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    values = (
        batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else []
    )
    for value in values:
        if isinstance(value, (torch.Tensor, Mapping, list, tuple)):
            try:
                return batch_size_of(value)
            except ValueError:
                continue
    raise ValueError(f"cannot tell the records of a batch of {type(batch).__name__}")


def take(batch: Any, positions: list[int], size: int) -> Any:
    """The records at ``positions`` of a collated batch (every tensor of ``size`` rows indexed,
    every mapping and field tuple taken apart, a list of ``size`` values picked)."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() and batch.shape[0] == size:
            return batch[torch.as_tensor(positions, dtype=torch.long, device=batch.device)]
        return batch
    if isinstance(batch, Mapping):  # a plain dict: models take it as keywords, whatever held it
        return {k: take(v, positions, size) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        fields = all(isinstance(v, (torch.Tensor, Mapping, list, tuple)) for v in batch)
        if fields:
            taken = [take(v, positions, size) for v in batch]
            return type(batch)(taken) if not hasattr(batch, "_fields") else type(batch)(*taken)
        if len(batch) == size:
            return type(batch)(batch[p] for p in positions)
    return batch
