"""`NanGuard`: the records behind a training step that goes non-finite, found while training.

A step's loss and gradients are checked with one fused reduction (`all_finite`). When they are
not finite, the batch is triaged, in this order, without touching the model, its gradients, its
BatchNorm statistics or the optimizer (every evaluation runs the model, as
`torch.func.functional_call` does, on its parameters, detached, and on copies of its buffers as
they were before the step):

1. weights already non-finite: an earlier finite but absurd step is the cause; the records of
   the last ``suspects`` batches are named (`training-suspect`), once for the steps that fail
   after them;
2. the batch run again with the same random state is finite: not the data's (`training-transient`);
3. per-sample losses (``reduction="none"`` where the loss takes it) name the records whose loss
   alone is non-finite in one pass (`training-nonfinite`); all finite while their reduction is
   not is a joint failure (`training-joint-nonfinite`);
4. otherwise the batch is bisected: a half that is non-finite is searched, and halves that are
   each finite while together they are not are a joint failure, never an invented culprit.

A finite step whose gradient norm is far above the norms of the steps before it (the spike rule,
`scrub.guard.spike`: a record of magnitude 1e19 whose loss, 1e36, is still a float32) is skipped
and triaged the same way, "non-finite" read as "over the rule's limit": the record is named
(`training-spike`) before its update makes every later step overflow.

Before the forward, where the model has an input embedding, each batch the wrapped loader hands
out has its token ids compared with the embedding's rows (`scrub.guard.tokens`): an id past them
kills a CUDA process in the forward, before any check after it. The records holding one are
named (`token-out-of-range`, the scan's check) and dropped from the batch, or the guard raises.

Each finding is a line of scrub's manifest, written whole to disk before the training goes on.
"""

from __future__ import annotations

import math
import os
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from scrub.guard.batches import Current, GuardedLoader, RecordingBatchSampler, all_finite, batch_size_of, take
from scrub.guard.manifest import GuardManifest, Named, RecordNames, record_names
from scrub.guard.ranks import agree, agree_with, distributed, gathered
from scrub.guard.spike import Spike, SpikeWatch, gradient_norm
from scrub.guard.tokens import CHECK as OUT_OF_RANGE
from scrub.guard.tokens import TokenIds, TokenScreen
from scrub.guard.triage import Joint, Search, Triage, module_of
from scrub.records import Issue, Severity
from scrub.wording import agreeing, counted

#: what ``on_nonfinite`` may be
POLICIES = ("skip", "raise")


#: steps after which the parameters the guard checks are listed again (parameters added to a model)
RELIST_STEPS = 1000


class NonFiniteStep(RuntimeError):
    """A training step went non-finite and the guard was told to raise (``on_nonfinite="raise"``),
    or too many steps in a row did (``max_skips``); ``issues`` are its findings."""

    def __init__(self, message: str, issues: Sequence[Issue]) -> None:
        super().__init__(message)
        self.issues = list(issues)


class TokenOutOfRange(NonFiniteStep):
    """A batch held token ids outside the model's input embedding and the guard was told to raise
    (``on_nonfinite="raise"``): raised before the forward, its records written to the manifest."""


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
    ``spike``: when a finite step is a spike, skipped and triaged as a non-finite one is
    (`scrub.guard.spike.Spike`); None turns the rule off.
    ``embedding``: the model's input ``nn.Embedding``, whose rows each batch's token ids are
    checked against before the forward (default: ``model.get_input_embeddings()`` where the model
    has one, as Hugging Face models do; none, no check); ``token_ids``: where a batch's ids are (a
    key, a position or a function of the batch; default ``input_ids``, else the first integer
    tensor). See `scrub.guard.tokens`.
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
        spike: Spike | None = Spike(),  # noqa: B008 - frozen: one shared default is safe
        embedding: nn.Module | None = None,
        token_ids: TokenIds = None,
    ) -> None:
        if on_nonfinite not in POLICIES:
            raise ValueError(f"on_nonfinite={on_nonfinite!r}: choose one of {', '.join(POLICIES)}")
        if suspects < 0 or max_skips < 1:
            raise ValueError("suspects must be at least 0 and max_skips at least 1")
        if spike is not None and not isinstance(spike, Spike):
            raise TypeError(f"spike takes a scrub.guard.Spike or None, not {type(spike).__name__}")
        self.model = model
        self.loss_fn = loss_fn
        self.step_fn = step
        self.on_nonfinite = on_nonfinite
        self.key = key
        self.max_skips = max_skips
        self.autocast = dict(autocast) if autocast is not None else None
        self.dataset = dataset
        self.manifest = GuardManifest(Path(manifest)) if manifest is not None else None
        if self.manifest is not None:  # the record's step count, right when the guard goes (exit too)
            weakref.finalize(self, self.manifest.close)
        self.spike = SpikeWatch(spike) if spike is not None else None
        self.tokens = TokenScreen(embedding, token_ids)
        self.dropped = 0  # records dropped from their batch before the forward (`screen`)
        self._pending: list[Issue] = []  # `screen`'s findings a distributed run gathers at `ok`
        self.issues: list[Issue] = []  # every finding of this run, as written to the manifest
        self.steps = 0  # `ok` calls: the steps guarded
        self.skipped = 0
        self.in_a_row = 0
        self.passes = 0  # extra forward/backward passes the triage has run, in all
        self.last_passes = 0  # ... for the last non-finite step
        #: (step, indices, keys) of the last batches applied: the suspects when weights go non-finite
        self.recent: deque[tuple[int, list[int] | None, list[str] | None]] = deque(maxlen=suspects)
        #: the suspects named last, and the step of the last batch applied when they were: the
        #: steps that fail after them, none applied between, name them no more
        self._suspected: tuple[int | None, list[Issue]] | None = None
        self.current: Current | None = None
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
            batch_sampler=RecordingBatchSampler(loader.batch_sampler, self._issued),
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
        self.current = Current(batch, indices, keys, number, torch.get_rng_state(), saved)

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
        gradients = [p.grad for p in self._trainable()[0]]
        # with the spike rule, its norm is the finiteness check too: a NaN or an Inf makes it
        # non-finite, and only then is the fused check asked whether it merely overflowed
        norm = gradient_norm(gradients) if self.spike is not None else math.nan
        finite, pending = agree_with(
            _finite_loss(loss) and (math.isfinite(norm) or all_finite(gradients)), bool(self._pending)
        )
        if pending:
            self._gather_screened()
        current = self.current
        spiked = self._spiked(norm) if finite else None
        if finite and spiked is None:
            self.in_a_row = 0
            if current is not None:
                self.recent.append((self.steps, current.indices, current.keys))
            if self.manifest is not None:
                self.manifest.count(self.steps, self.skipped)
            return True
        if current is None:
            raise RuntimeError(
                "NanGuard.ok: no batch to triage: wrap the loader (guard.wrap(loader)), or pass "
                "ok(loss, batch)"
            )
        search = Triage(self, current, scaler, spiked[1] if spiked is not None else None).run()
        if search is None:  # the loss scaler's own overflow: skipped as it would skip it
            return False
        restored = self._restore_buffers(current)
        issues = self._issues(search, current, restored, spiked)
        issues = gathered(issues)
        self.issues += issues
        if self.manifest is not None:
            self.manifest.add(issues, self.steps, self.skipped + 1)
        for parameter in self.model.parameters():
            parameter.grad = None
        self.skipped += 1
        self.in_a_row += 1
        if self.on_nonfinite == "raise" or self.in_a_row >= self.max_skips:
            went = "spiked" if spiked is not None else "went non-finite"
            why = (
                f"{counted(self.in_a_row, 'step')} in a row "
                f"{went if spiked is None else agreeing(self.in_a_row, 'was skipped', 'were skipped')} "
                f"(max_skips={self.max_skips})"
                if self.on_nonfinite != "raise"
                else "on_nonfinite='raise'"
            )
            named = issues or (self._suspected[1] if search.suspects and self._suspected else [])
            raise NonFiniteStep(_said(named, self.steps, went, why, self.manifest), issues)
        if restored is False:
            import warnings

            warnings.warn("NanGuard: non-finite BatchNorm statistics could not be put back", stacklevel=2)
        return False

    def screen(
        self, batch: Any, indices: list[int] | None = None, number: int | None = None
    ) -> tuple[Any, list[int] | None] | None:
        """``batch`` (and its dataset ``indices``) without the records whose token ids fall
        outside the model's input embedding, checked before the forward (`scrub.guard.tokens`);
        None when no record is left. The wrapped loader and the Hugging Face adapter call it.

        The records are named (`token-out-of-range`) and written to the manifest first. Then,
        with ``on_nonfinite="skip"``, they are dropped: the loop trains on the batch's other
        records, as `scrub fix` would leave it (the forward the user calls cannot be skipped,
        and an id past the embedding would kill a CUDA process in it); with ``"raise"``,
        `TokenOutOfRange` names them. In a distributed run the findings are gathered at the next
        `ok` (rank 0 writes them), where every rank raises together."""
        rows = self.tokens.rows(module_of(self.model))
        if rows is None:
            return batch, indices
        try:
            size: int | None = batch_size_of(batch)
        except ValueError:
            size = None  # no records to tell: `ids` says so
        ids = self.tokens.ids(batch, size)
        found = self.tokens.out_of_range(ids, rows) if ids is not None and size is not None else []
        if not found or size is None:
            return batch, indices
        issues = self._out_of_range_issues(batch, indices, number, found, rows)
        self.issues += issues
        if distributed():
            self._pending += issues
        else:
            if self.manifest is not None:
                self.manifest.add(issues, self.steps, self.skipped)
            if self.on_nonfinite == "raise":
                raise TokenOutOfRange(
                    _said(issues, self.steps + 1, "was stopped", _ids_why(rows), self.manifest), issues
                )
        self.dropped += len(found)
        outside = {record.position for record in found}
        keep = [position for position in range(size) if position not in outside]
        if not keep:
            return None
        return take(batch, keep, size), [indices[p] for p in keep] if indices is not None else None

    def _out_of_range_issues(
        self, batch: Any, indices: list[int] | None, number: int | None, found: Sequence[Any], rows: int
    ) -> list[Issue]:
        names = record_names(self.dataset, self.key)
        keys = (
            [str(k) for k in batch["__key__"]] if isinstance(batch, Mapping) and "__key__" in batch else None
        )
        issues = []
        for record in found:
            if indices is not None:
                named = names.of_index(indices[record.position])
            elif keys is not None:
                named = names.of_key(keys[record.position])
            else:  # no indices, no keys: `scrub fix` cannot find it, and says so
                where = f"batch {number}, record {record.position}"
                named = Named(where, where, None, "position")
            said = "is negative" if record.value < 0 else f">= the input embedding's {rows:,} rows"
            outcome = "dropped from it" if self.on_nonfinite == "skip" else "the run was stopped"
            issues.append(
                named.issue(
                    OUT_OF_RANGE,
                    Severity.ERROR,
                    f"token id {record.value} {said}, found in its batch before the forward of step "
                    f"{self.steps + 1}; {outcome}",
                    {
                        "what": "token id",
                        "value": record.value,
                        "position": record.at,
                        "vocab_size": rows,
                        "step": self.steps + 1,
                        "batch": number,
                        "found_by": "embedding-range",
                    },
                )
            )
        return issues

    def _gather_screened(self) -> None:
        """Every rank's `screen` findings, gathered (rank 0 writes them); raised with
        ``on_nonfinite="raise"``, on every rank alike."""
        issues = gathered(self._pending)
        self._pending = []
        if self.manifest is not None:
            self.manifest.add(issues, self.steps, self.skipped)
        if self.on_nonfinite == "raise" and issues:
            rows = issues[0].details.get("vocab_size", 0)
            raise TokenOutOfRange(
                _said(issues, self.steps, "was stopped", _ids_why(rows), self.manifest), issues
            )

    def close(self) -> None:
        """Write the manifest's record as the run leaves it (its ``steps`` and ``skipped``): it is
        written at each finding and every few seconds, and when the guard is collected or the
        interpreter exits; call it where a record read at once must be exact."""
        if self.manifest is not None:
            self.manifest.close()

    def _spiked(self, norm: float) -> tuple[float, float, float] | None:
        """``(norm, limit, median)`` when this finite step's gradient ``norm`` is over the spike
        rule's limit (on any rank); None when it is not, or no rule is set. The norm of a step
        applied joins the running median."""
        watch = self.spike
        if watch is None:
            return None
        median = watch.median()
        limit = math.inf if median is None else watch.rule.factor * median
        if not agree(not (norm > limit or norm == math.inf)):  # past float32: never a clean step's
            return norm, limit, median if median is not None else math.nan
        watch.add(norm)
        return None

    def _trainable(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The model's parameters (a frozen one has no gradient: `all_finite` passes it over)
        and floating-point buffers, listed again only when the model is another or every
        `RELIST_STEPS` steps: walking the module tree every step cost more than the check."""
        cached = self._parameters
        if cached is None or cached[0] is not self.model or self.steps % RELIST_STEPS == 0:
            buffers = [b for b in module_of(self.model).buffers() if b.is_floating_point()]
            cached = self._parameters = (self.model, list(self.model.parameters()), buffers)
        return cached[1], cached[2]

    def _restore_buffers(self, current: Current) -> bool | None:
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

    def _issues(
        self,
        search: Search,
        current: Current,
        restored: bool | None,
        spiked: tuple[float, float, float] | None = None,
    ) -> list[Issue]:
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
            **(_spike_details(*spiked) if spiked is not None else {}),
        }
        went = (
            f"step {self.steps} spiked ({_spike_said(*spiked)})"
            if spiked is not None
            else f"step {self.steps} went non-finite"
        )
        if search.suspects:
            return self._suspect_issues(names, step)
        issues: list[Issue] = []
        size = len(current.indices) if current.indices is not None else len(current.keys or [])
        if search.transient:
            for position in range(size):
                issues.append(
                    name(position).issue(
                        "training-transient",
                        Severity.WARNING,
                        f"{went}, and its batch run again with the same state "
                        f"{'does not' if spiked is not None else 'is finite'}: not the data's",
                        step,
                    )
                )
            return issues
        if spiked is not None:
            return issues + self._spike_issues(search, name, step, went)
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
            said = _joint_said(group, f"non-finite at step {self.steps}")
            issues += [
                name(position).issue(
                    "training-joint-nonfinite", Severity.WARNING, said, _joint_details(step, group)
                )
                for position in group.positions
            ]
        return issues

    def _suspect_issues(self, names: RecordNames, step: dict[str, Any]) -> list[Issue]:
        """The records trained on in the recent window (`training-suspect`), when the weights
        themselves were found non-finite: named once a window, at the first step that failed
        after them."""
        window = self.recent[-1][0] if self.recent else None
        if self._suspected is not None and self._suspected[0] == window:
            return []
        issues: list[Issue] = []
        for trained_at, indices, keys in self.recent:
            named = (
                [names.of_index(i) for i in indices] if indices is not None else map(names.of_key, keys or [])
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
        self._suspected = (window, issues)
        return issues

    def _spike_issues(
        self, search: Search, name: Callable[[int], Named], step: dict[str, Any], went: str
    ) -> list[Issue]:
        """The records a spike's triage found: alone (`training-spike`), or only together."""
        issues = [
            name(position).issue(
                "training-spike",
                Severity.ERROR,
                f"{went}; its share of the batch's gradient alone is over the limit (found by {how})",
                {**step, "found_by": how},
            )
            for position, how in search.culprits
        ]
        for group in search.joints:
            said = _joint_said(group, went)
            issues += [
                name(position).issue(
                    "training-joint-spike", Severity.WARNING, said, _joint_details(step, group)
                )
                for position in group.positions
            ]
        return issues


def _joint_said(group: Joint, went: str) -> str:
    """A joint finding's message: the records it fails with, and why no fewer where it says."""
    others = counted(len(group.positions) - 1, "other record")
    if group.unnarrowed is not None:
        return f"{went} with {others} of its batch, not narrowed further: {group.unnarrowed}"
    return f"{went} only together with {others} of its batch, never with one of them left out"


def _joint_details(step: dict[str, Any], group: Joint) -> dict[str, Any]:
    return {
        **step,
        "group_size": len(group.positions),
        "found_by": group.found_by,
        **({"unnarrowed": group.unnarrowed} if group.unnarrowed is not None else {}),
    }


def _spike_details(norm: float, limit: float, median: float) -> dict[str, Any]:
    """A spike's numbers, for its findings' details (JSON: an overflowed norm is null)."""
    return {
        "grad_norm": norm if math.isfinite(norm) else None,
        "median_grad_norm": median if math.isfinite(median) else None,
        "spike_limit": limit if math.isfinite(limit) else None,
    }


def _spike_said(norm: float, limit: float, median: float) -> str:
    if not math.isfinite(norm):
        shown = "gradient norm past float32's range"
        return shown if not math.isfinite(median) else f"{shown}, against a running median of {median:.3g}"
    if not math.isfinite(median):  # another rank's spike
        return f"gradient norm {norm:.3g}"
    return f"gradient norm {norm:.3g}, {norm / median:,.0f}x its running median {median:.3g}"


def _ids_why(rows: int) -> str:
    return (
        f"token ids outside the input embedding's {rows:,} rows, found before the forward; "
        "on_nonfinite='raise'"
    )


def _finite_loss(loss: torch.Tensor) -> bool:
    """Whether the loss is finite (a scalar read as one number: cheaper than a tensor test)."""
    if loss.numel() == 1:
        return math.isfinite(loss.item())
    return bool(torch.isfinite(loss.detach()).all())


def _said(issues: Sequence[Issue], step: int, went: str, why: str, manifest: GuardManifest | None) -> str:
    """One line naming a failed step's records, for `NonFiniteStep`."""
    culprits = [issue for issue in issues if issue.severity is Severity.ERROR]
    shown = culprits or list(issues)
    names = ", ".join(issue.key for issue in shown[:5]) + (
        f" and {len(shown) - 5} more" if len(shown) > 5 else ""
    )
    kind = "records" if culprits else (shown[0].check if shown else "no record")
    where = f"; see {manifest.path}" if manifest is not None else ""
    return f"step {step} {went} ({why}): {kind}: {names or 'none'}{where}"
