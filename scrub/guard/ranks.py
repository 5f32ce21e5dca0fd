"""What the ranks of a distributed run agree on: a step to skip, whether a batch is anyone's, and
every rank's findings (rank 0 writes them)."""

from __future__ import annotations

from typing import Any

import torch

from scrub.records import Issue


def distributed() -> bool:
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and (torch.distributed.get_world_size() > 1)
    )


def agree(finite: bool) -> bool:
    """Every rank of a distributed run sees the same verdict (any rank's failure skips the step
    on all: their gradients are averaged together)."""
    if not distributed():
        return finite
    flag = torch.tensor([0 if finite else 1])
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return not bool(flag.item())


def agree_with(finite: bool, pending: bool) -> tuple[bool, bool]:
    """`agree`, and whether any rank holds findings not yet gathered (`NanGuard.screen`'s), in
    the same all-reduce: a distributed step costs no second collective for them."""
    if not distributed():
        return finite, pending
    flags = torch.tensor([0 if finite else 1, 1 if pending else 0])
    torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
    return not bool(flags[0].item()), bool(flags[1].item())


def agree_any(bad: bool) -> bool:
    """Whether any rank's own batch, run again alone, is non-finite (else the failure was
    transient everywhere)."""
    if not distributed():
        return bad
    flag = torch.tensor([1 if bad else 0])
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return bool(flag.item())


def gathered(issues: list[Issue]) -> list[Issue]:
    """Every rank's findings, on every rank (rank 0 writes them)."""
    if not distributed():
        return issues
    everyone: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, [issue.to_dict() for issue in issues])
    return [Issue.from_dict(line) for lines in everyone for line in lines]
