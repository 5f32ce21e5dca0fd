"""The NaN guard: in the user's own PyTorch training run, name the records behind a step that
goes non-finite, skip that step, and write them to a manifest that `scrub fix` takes.

```python
from scrub.guard import NanGuard

guard = NanGuard(model, loss_fn, manifest="guard.scrub.jsonl")
loader = guard.wrap(loader)      # the same batches in the same order, each with its indices
for inputs, targets in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    if guard.ok(loss):           # False: the loss or a gradient non-finite, or a spike (culprits written)
        optimizer.step()
```

PyTorch is imported by this package only (it stays an optional extra of scrub): importing it
needs ``torch``. See docs/guard.md.
"""

from scrub.guard.core import NanGuard, NonFiniteStep, TokenOutOfRange
from scrub.guard.spike import Spike

__all__ = ["NanGuard", "NonFiniteStep", "Spike", "TokenOutOfRange"]
