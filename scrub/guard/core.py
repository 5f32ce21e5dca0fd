"""`NanGuard`: the records behind a training step that goes non-finite, found while training.

A step's loss and gradients are checked with one fused reduction (`all_finite`). When they are
not finite, the batch is triaged, in this order, without touching the model, its gradients, its
BatchNorm statistics or the optimizer (every evaluation runs the model, as
`torch.func.functional_call` does, on its parameters, detached, and on copies of its buffers as
they were before the step):

1. weights already non-finite: an earlier finite but absurd step is the cause; the records of
   the last ``suspects`` batches are named (`training-suspect`);
2. the batch run again with the same random state is finite: not the data's (`training-transient`);
3. per-sample losses (``reduction="none"`` where the loss takes it) name the records whose loss
   alone is non-finite in one pass (`training-nonfinite`); all finite while their reduction is
   not is a joint failure (`training-joint-nonfinite`);
4. otherwise the batch is bisected: a half that is non-finite is searched, and halves that are
   each finite while together they are not are a joint failure, never an invented culprit.

Each finding is a line of scrub's manifest, written whole to disk before the training goes on.
"""

from __future__ import annotations

import copy
import math
import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.utils.stateless import _reparametrize_module

from scrub.guard.manifest import GuardManifest, Named, record_names
from scrub.records import Issue, Severity

#: what ``on_nonfinite`` may be
POLICIES = ("skip", "raise")
#: steps after which the parameters the guard checks are listed again (parameters added to a model)
RELIST_STEPS = 1000
#: what one evaluation of some records of a batch gives (`_Triage.evaluate`)
FINITE, LOSS, GRADIENT, UNRUNNABLE = "finite", "loss", "gradient", "unrunnable"


class NonFiniteStep(RuntimeError):
    """A training step went non-finite and the guard was told to raise (``on_nonfinite="raise"``),
    or too many steps in a row did (``max_skips``); ``issues`` are its findings."""

    def __init__(self, message: str, issues: Sequence[Issue]) -> None:
        super().__init__(message)
        self.issues = list(issues)


def all_finite(tensors: Sequence[torch.Tensor | None]) -> bool:
    """Whether every value of ``tensors`` is finite, in one fused pass per device (the check
    ``GradScaler`` makes of its gradients: ``_amp_foreach_non_finite_check_and_unscale_``, here
    with a scale of 1, which leaves every value as it is); a loop per tensor costs a kernel and
    a synchronization each."""
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for tensor in tensors:
        if tensor is None or not tensor.is_floating_point():
            continue
        if tensor.is_sparse:
            tensor = tensor.coalesce().values()
        groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    for (device, _), group in groups.items():
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


class _RecordingBatchSampler(torch.utils.data.Sampler):
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
    """The user's loader, rebuilt around a `_RecordingBatchSampler`: the same batches in the same
    order; each one, as it is handed to the loop, is the guard's current batch. Other attributes
    are the original loader's (``loader.sampler.set_epoch(...)`` reaches its `DistributedSampler`,
    which the rebuilt one draws from)."""

    def __init__(
        self,
        loader: torch.utils.data.DataLoader,
        guard: NanGuard,
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
            self.guard.received.append((self.issued.popleft() if self.issued is not None else None, number))
            if self.guard.deliver_on_iteration:  # a plain loop runs each batch as it receives it
                self.guard.deliver(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


@dataclass
class _Current:
    """The batch being trained on: what the loop received, its records, and the state before
    its forward pass (the random state, the buffers: BatchNorm statistics)."""

    batch: Any
    indices: list[int] | None
    keys: list[str] | None  # an iterable dataset's keys (``__key__``), carried through collation
    number: int | None
    rng: torch.Tensor
    buffers: list[torch.Tensor] | None


@dataclass
class _Search:
    """What the triage of one step found."""

    culprits: list[tuple[int, str]] = field(default_factory=list)  # (position in the batch, how)
    joints: list[list[int]] = field(default_factory=list)
    transient: bool = False
    suspects: bool = False
    tried: list[str] = field(default_factory=list)


class NanGuard:
    """Guards a PyTorch training loop (see the package's docstring and docs/guard.md).

    ``loss_fn(outputs, targets)`` computes the loss of an ``(inputs, targets)`` batch; for other
    batches give ``step(model, batch) -> loss`` (a mapping batch without either calls
    ``model(**batch).loss``, as Hugging Face models take it). ``manifest``: where findings go
    (scrub's manifest; `scrub fix DATASET --manifest` takes it); None keeps them in ``issues``
    only. ``on_nonfinite``: ``"skip"`` (`ok` returns False, the loop skips the step) or
    ``"raise"`` (`NonFiniteStep`, naming the records); ``max_skips`` steps in a row raise too (a
    run broken for another reason stops).
    ``suspects``: the batches named when the weights are found non-finite already. ``key``:
    names a record by its dataset index (``(source, key)`` or a key), where the dataset does not
    name its records itself (torchvision's ``ImageFolder``, a ``record_key(index)`` method).
    ``autocast``: the ``torch.autocast`` arguments the training's forward runs under, so that the
    triage runs it the same way (``{"device_type": "cpu", "dtype": torch.float16}``).
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
        *,
        manifest: str | os.PathLike | None = "guard.scrub.jsonl",
        on_nonfinite: str = "skip",
        step: Callable[[Any, Any], torch.Tensor] | None = None,
        key: Callable[[int], str | tuple[str, str]] | None = None,
        suspects: int = 4,
        max_skips: int = 10,
        autocast: Mapping[str, Any] | None = None,
        dataset: Any = None,
    ) -> None:
        if on_nonfinite not in POLICIES:
            raise ValueError(f"on_nonfinite={on_nonfinite!r}: choose one of {', '.join(POLICIES)}")
        if suspects < 0 or max_skips < 1:
            raise ValueError("suspects must be at least 0 and max_skips at least 1")
        self.model = model
        self.loss_fn = loss_fn
        self.step_fn = step
        self.on_nonfinite = on_nonfinite
        self.key = key
        self.max_skips = max_skips
        self.autocast = dict(autocast) if autocast is not None else None
        self.dataset = dataset
        self.manifest = GuardManifest(Path(manifest)) if manifest is not None else None
        self.issues: list[Issue] = []  # every finding of this run, as written to the manifest
        self.steps = 0  # `ok` calls: the steps guarded
        self.skipped = 0
        self.in_a_row = 0
        self.passes = 0  # extra forward/backward passes the triage has run, in all
        self.last_passes = 0  # ... for the last non-finite step
        #: (step, indices, keys) of the last batches applied: the suspects when weights go non-finite
        self.recent: deque[tuple[int, list[int] | None, list[str] | None]] = deque(maxlen=suspects)
        self.current: _Current | None = None
        self._parameters: tuple[nn.Module, list[torch.Tensor], list[torch.Tensor]] | None = None
        self._issued: deque[list[int]] = deque()
        #: (indices, number in the epoch) of the batches the wrapped loader handed out and no step
        #: has started on yet: one, in a plain loop; two, where a trainer fetches the next batch
        #: ahead (Lightning), which then calls `deliver` as it starts each (`deliver_on_iteration`)
        self.received: deque[tuple[list[int] | None, int]] = deque()
        self.deliver_on_iteration = True

    # -- tracking ----------------------------------------------------------------------------

    def wrap(self, loader: torch.utils.data.DataLoader) -> GuardedLoader:
        """The same batches, in the same order, each remembered with its dataset indices (an
        iterable dataset's samples are named by their ``__key__``, carried through collation)."""
        from torch.utils.data import DataLoader, IterableDataset

        if not isinstance(loader, DataLoader):
            raise TypeError(f"wrap takes a torch DataLoader, not {type(loader).__name__}")
        if not getattr(loader, "in_order", True):
            raise ValueError(
                "the loader has in_order=False: its batches may arrive out of the order they were "
                "issued in, so their records cannot be told; build it with in_order=True"
            )
        self.dataset = self.dataset if self.dataset is not None else loader.dataset
        if isinstance(loader.dataset, IterableDataset):
            return GuardedLoader(loader, self, None)
        if loader.batch_sampler is None:
            raise ValueError("wrap needs a loader that makes batches (batch_size or batch_sampler)")
        rebuilt = DataLoader(
            loader.dataset,
            batch_sampler=_RecordingBatchSampler(loader.batch_sampler, self._issued),
            num_workers=loader.num_workers,
            collate_fn=loader.collate_fn,
            pin_memory=loader.pin_memory,
            timeout=loader.timeout,
            worker_init_fn=loader.worker_init_fn,
            multiprocessing_context=loader.multiprocessing_context,
            generator=loader.generator,
            prefetch_factor=loader.prefetch_factor if loader.num_workers else None,
            persistent_workers=loader.persistent_workers,
            pin_memory_device=loader.pin_memory_device,
        )
        return GuardedLoader(rebuilt, self, self._issued, loader)

    def deliver(self, batch: Any, indices: list[int] | None = None, number: int | None = None) -> None:
        """Make ``batch`` the current one, before its forward pass (`GuardedLoader` and the
        adapters call it): its records (``indices``, else the oldest the wrapped loader handed
        out), the random state and the buffers as they are now."""
        if indices is None and self.received:
            indices, number = self.received.popleft()
        keys = None
        if indices is None and isinstance(batch, Mapping) and "__key__" in batch:
            keys = [str(k) for k in batch["__key__"]]
        buffers = self._trainable()[1]
        saved = self.current.buffers if self.current is not None else None
        if not buffers:
            saved = None
        elif saved is not None and len(saved) == len(buffers):
            torch._foreach_copy_(saved, buffers)  # the last step's copies, reused: one fused copy
        else:
            saved = [b.detach().clone() for b in buffers]
        self.current = _Current(batch, indices, keys, number, torch.get_rng_state(), saved)

    # -- the check ---------------------------------------------------------------------------

    def ok(self, loss: torch.Tensor, batch: Any = None, scaler: Any = None) -> bool:
        """Whether the step may be applied: True when the loss and every gradient are finite.

        Call it after ``loss.backward()`` (after ``scaler.unscale_(optimizer)`` under AMP: pass
        the ``scaler``, whose own expected overflows are not the data's). When False, the
        culprits are found and written to the manifest, non-finite BatchNorm statistics are put
        back as they were before the step, and the gradients are cleared (None), so that an
        optimizer step would change nothing; with ``on_nonfinite="raise"`` `NonFiniteStep` is
        raised instead. ``batch``: the step's batch where the loader was not `wrap`-ped."""
        self.steps += 1
        if batch is not None and (self.current is None or self.current.batch is not batch):
            self.deliver(batch)
            assert self.current is not None
            self.current.buffers = None  # taken after the forward: not what the step started from
        finite = _finite_loss(loss) and all_finite([p.grad for p in self._trainable()[0]])
        finite = _agree(finite)
        current = self.current
        if finite:
            self.in_a_row = 0
            if current is not None:
                self.recent.append((self.steps, current.indices, current.keys))
            return True
        if current is None:
            raise RuntimeError(
                "NanGuard.ok: no batch to triage: wrap the loader (guard.wrap(loader)), or pass "
                "ok(loss, batch)"
            )
        search = _Triage(self, current, scaler).run()
        if search is None:  # the loss scaler's own overflow: skipped as it would skip it
            return False
        restored = self._restore_buffers(current)
        issues = self._issues(search, current, restored)
        issues = _gathered(issues)
        self.issues += issues
        if self.manifest is not None:
            self.manifest.add(issues, self.steps, self.skipped + 1)
        for parameter in self.model.parameters():
            parameter.grad = None
        self.skipped += 1
        self.in_a_row += 1
        if self.on_nonfinite == "raise" or self.in_a_row >= self.max_skips:
            why = (
                f"{self.in_a_row} steps in a row went non-finite (max_skips={self.max_skips})"
                if self.on_nonfinite != "raise"
                else "on_nonfinite='raise'"
            )
            raise NonFiniteStep(_said(issues, self.steps, why, self.manifest), issues)
        if restored is False:
            import warnings

            warnings.warn("NanGuard: non-finite BatchNorm statistics could not be put back", stacklevel=2)
        return False

    def _trainable(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The model's parameters (a frozen one has no gradient: `all_finite` passes it over)
        and floating-point buffers, listed again only when the model is another or every
        `RELIST_STEPS` steps: walking the module tree every step cost more than the check."""
        cached = self._parameters
        if cached is None or cached[0] is not self.model or self.steps % RELIST_STEPS == 0:
            buffers = [b for b in _module(self.model).buffers() if b.is_floating_point()]
            cached = self._parameters = (self.model, list(self.model.parameters()), buffers)
        return cached[1], cached[2]

    def _restore_buffers(self, current: _Current) -> bool | None:
        """Put back buffers the failing forward made non-finite (BatchNorm's statistics); None
        when none did, False when no finite copy from before the step is at hand."""
        buffers = self._trainable()[1]  # in the order of the copies `deliver` took
        if not buffers or all_finite(buffers):
            return None
        if current.buffers is None or len(current.buffers) != len(buffers) or not all_finite(current.buffers):
            return False
        with torch.no_grad():
            torch._foreach_copy_(buffers, current.buffers)
        return True

    # -- findings ----------------------------------------------------------------------------

    def _issues(self, search: _Search, current: _Current, restored: bool | None) -> list[Issue]:
        names = record_names(self.dataset, self.key)

        def name(position: int) -> Named:
            if current.keys is not None:
                return names.of_key(current.keys[position])
            assert current.indices is not None
            return names.of_index(current.indices[position])

        step = {
            "step": self.steps,
            "batch": current.number,
            **({"buffers_restored": restored} if restored is not None else {}),
            "tried": search.tried,
            "passes": self.last_passes,
        }
        issues: list[Issue] = []
        if search.suspects:
            for trained_at, indices, keys in self.recent:
                named = (
                    [names.of_index(i) for i in indices]
                    if indices is not None
                    else map(names.of_key, keys or [])
                )
                for record in named:
                    issues.append(
                        record.issue(
                            "training-suspect",
                            Severity.WARNING,
                            f"trained on at step {trained_at}, before the weights were found non-finite at "
                            f"step {self.steps}",
                            {**step, "trained_at": trained_at},
                        )
                    )
            return issues
        size = len(current.indices) if current.indices is not None else len(current.keys or [])
        if search.transient:
            for position in range(size):
                issues.append(
                    name(position).issue(
                        "training-transient",
                        Severity.WARNING,
                        f"step {self.steps} went non-finite, and its batch run again with the same state "
                        "is finite: not the data's",
                        step,
                    )
                )
            return issues
        for position, how in search.culprits:
            issues.append(
                name(position).issue(
                    "training-nonfinite",
                    Severity.ERROR,
                    f"its {'loss' if how == 'per-sample-loss' else 'loss or gradient'} is non-finite on its "
                    f"own at step {self.steps} (found by {how})",
                    {**step, "found_by": how},
                )
            )
        for group in search.joints:
            for position in group:
                issues.append(
                    name(position).issue(
                        "training-joint-nonfinite",
                        Severity.WARNING,
                        f"non-finite at step {self.steps} only together with {len(group) - 1} other records "
                        "of its batch, never alone",
                        {**step, "group_size": len(group)},
                    )
                )
        return issues


class _Triage:
    """The search for the records behind one non-finite step (the module's docstring)."""

    def __init__(self, guard: NanGuard, current: _Current, scaler: Any) -> None:
        self.guard = guard
        self.current = current
        self.scaler = scaler
        self.module = _module(guard.model)
        self.parameters = {
            name: parameter.detach().requires_grad_(parameter.requires_grad)
            for name, parameter in self.module.named_parameters()
        }
        self.trainable = [p for p in self.parameters.values() if p.requires_grad]
        self.buffer_names = [name for name, b in self.module.named_buffers() if b.is_floating_point()]
        self.size = _batch_size(current.batch)
        self.passes = 0

    def run(self) -> _Search | None:
        search = _Search()
        try:
            return self._run(search)
        finally:
            self.guard.last_passes = self.passes
            self.guard.passes += self.passes

    def _run(self, search: _Search) -> _Search | None:
        if not all_finite(list(self.module.parameters())):
            search.tried.append("weights")
            search.suspects = True
            return search
        everyone = list(range(self.size))
        whole = self.evaluate(everyone)
        search.tried.append("rerun")
        elsewhere = _agree_any(whole != FINITE)  # every rank asks: a collective
        if whole == FINITE:
            if elsewhere:  # another rank's batch is the cause: it names it (every rank gathers)
                return search
            if self.scaler is not None:
                return None  # finite unscaled everywhere: the scaler's scale was too large, as expected
            search.transient = True
            return search
        if whole == UNRUNNABLE:  # the batch cannot be run again here
            search.joints.append(everyone)
            return search
        rest = everyone
        per_sample = self.per_sample_losses(everyone)
        if per_sample is not None:
            search.tried.append("per-sample-loss")
            bad = [position for position in everyone if per_sample[position]]
            if not bad and whole == LOSS:  # every record's loss finite, their reduction not
                search.joints.append(everyone)
                return search
            if len(bad) == self.size > 1:  # records coupled in the batch (a BatchNorm): bisect
                bad = []
                per_sample = [False] * self.size
            search.culprits += [(position, "per-sample-loss") for position in bad]
            rest = [position for position in everyone if not per_sample[position]]
            if not rest or (bad and self.evaluate(rest) == FINITE):
                return self._weights_or_records(search)
        search.tried.append("bisection")
        self.bisect(rest, search)
        return self._weights_or_records(search)

    def _weights_or_records(self, search: _Search) -> _Search:
        """Every record of a batch failing on its own is the weights' doing (finite, but an
        earlier step made them absurd: each record's loss overflows), not every record's."""
        if self.size > 1 and len(search.culprits) == self.size:
            search.culprits = []
            search.tried.append("weights")
            search.suspects = True
        return search

    def bisect(self, positions: list[int], search: _Search) -> None:
        """``positions`` (a non-finite set): its culprits and joint groups, into ``search``."""
        if len(positions) == 1:
            search.culprits.append((positions[0], "bisection"))
            return
        half = len(positions) // 2
        first, second = positions[:half], positions[half:]
        verdicts = [self.evaluate(first), self.evaluate(second)]
        if UNRUNNABLE in verdicts or all(v == FINITE for v in verdicts):  # each fine alone: together
            search.joints.append(positions)
            return
        for part, verdict in zip((first, second), verdicts):
            if verdict != FINITE:
                self.bisect(part, search)

    # -- evaluations on the detached weights and copies of the buffers ----------------------------

    def _call(self, positions: list[int], reduce: bool = True) -> torch.Tensor:
        """The loss of the records at ``positions`` of the batch, as the training computes it."""
        self.passes += 1
        buffers = dict(zip(self.buffer_names, (b.clone() for b in self.current.buffers or []), strict=False))
        for name, buffer in self.module.named_buffers():
            if name not in buffers:
                buffers[name] = buffer.clone()
        state = {**self.parameters, **buffers}
        batch = _take(self.current.batch, positions, self.size)
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
        non-finite, `GRADIENT` when only a gradient is; `UNRUNNABLE` when they cannot be run
        alone (a BatchNorm over one record).

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
        return FINITE if all_finite(list(grads)) else GRADIENT

    def per_sample_losses(self, positions: list[int]) -> list[bool] | None:
        """Which records' own loss is non-finite, in one pass, where the loss takes
        ``reduction="none"`` and gives one value (or row) per record; else None."""
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
        finite = torch.isfinite(losses.detach().reshape(len(positions), -1)).all(dim=1)
        return [not bool(value) for value in finite]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _loss(guard: NanGuard, model: Callable[..., Any], batch: Any, reduce: bool) -> torch.Tensor:
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


def _module(model: nn.Module) -> nn.Module:
    """The model a wrapper holds (``DistributedDataParallel.module``): the triage runs it alone,
    without the wrapper's collectives."""
    return getattr(model, "module", model)


def _batch_size(batch: Any) -> int:
    """The number of records of a collated batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    values = (
        batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else []
    )
    for value in values:
        if isinstance(value, (torch.Tensor, Mapping, list, tuple)):
            try:
                return _batch_size(value)
            except ValueError:
                continue
    raise ValueError(f"cannot tell the records of a batch of {type(batch).__name__}")


def _take(batch: Any, positions: list[int], size: int) -> Any:
    """The records at ``positions`` of a collated batch (every tensor of ``size`` rows indexed,
    every mapping and field tuple taken apart, a list of ``size`` values picked)."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() and batch.shape[0] == size:
            return batch[torch.as_tensor(positions, dtype=torch.long, device=batch.device)]
        return batch
    if isinstance(batch, Mapping):  # a plain dict: models take it as keywords, whatever held it
        return {k: _take(v, positions, size) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        fields = all(isinstance(v, (torch.Tensor, Mapping, list, tuple)) for v in batch)
        if fields:
            taken = [_take(v, positions, size) for v in batch]
            return type(batch)(taken) if not hasattr(batch, "_fields") else type(batch)(*taken)
        if len(batch) == size:
            return type(batch)(batch[p] for p in positions)
    return batch


def _finite_loss(loss: torch.Tensor) -> bool:
    """Whether the loss is finite (a scalar read as one number: cheaper than a tensor test)."""
    if loss.numel() == 1:
        return math.isfinite(loss.item())
    return bool(torch.isfinite(loss.detach()).all())


def _distributed() -> bool:
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and (torch.distributed.get_world_size() > 1)
    )


def _agree(finite: bool) -> bool:
    """Every rank of a distributed run sees the same verdict (any rank's failure skips the step
    on all: their gradients are averaged together)."""
    if not _distributed():
        return finite
    flag = torch.tensor([0 if finite else 1])
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return not bool(flag.item())


def _agree_any(bad: bool) -> bool:
    """Whether any rank's own batch, run again alone, is non-finite (else the failure was
    transient everywhere)."""
    if not _distributed():
        return bad
    flag = torch.tensor([1 if bad else 0])
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return bool(flag.item())


def _gathered(issues: list[Issue]) -> list[Issue]:
    """Every rank's findings, on every rank (rank 0 writes them)."""
    if not _distributed():
        return issues
    everyone: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, [issue.to_dict() for issue in issues])
    return [Issue.from_dict(line) for lines in everyone for line in lines]


def _said(issues: Sequence[Issue], step: int, why: str, manifest: GuardManifest | None) -> str:
    """One line naming a failed step's records, for `NonFiniteStep`."""
    culprits = [issue for issue in issues if issue.severity is Severity.ERROR]
    shown = culprits or list(issues)
    names = ", ".join(issue.key for issue in shown[:5]) + (
        f" and {len(shown) - 5} more" if len(shown) > 5 else ""
    )
    kind = "records" if culprits else (shown[0].check if shown else "no record")
    where = f"; see {manifest.path}" if manifest is not None else ""
    return f"step {step} went non-finite ({why}): {kind}: {names or 'none'}{where}"
