"""Dummy-loss replay (``--dummy-loss``): train a small seeded model on the data, in record order,
with plain SGD, and name every record whose loss or gradient goes non-finite, or whose step
would throw the weights far away.

* `features`: records and rows as float32 vectors (workers, in parallel);
* `standardize`: ``(x - mean) / std`` as a data pipeline does, from the scan's own statistics;
* `model`: the built-in models (``linear``, ``l2``, ``batchnorm``), in NumPy, and float16 /
  bfloat16 rounding;
* `torchmodel` and `usermodel`: ``--model module:function``, a PyTorch model factory or a loss;
* `tokens` and `torchlm`: token data, as sequences, through an embedding language model or a
  PyTorch language model;
* `replayer`: the batches, the localization, the screens and the update (its docstring has the
  rules);
* `stage`: the pipeline stage that feeds the replayer in record order.

docs/replay.md documents all of it for users.
"""

import importlib
from typing import Any

_EXPORTS = {
    "FeatureSpec": "scrub.replay.features",
    "Features": "scrub.replay.features",
    "featurize_batch": "scrub.replay.features",
    "featurize_records": "scrub.replay.features",
    "record_vector": "scrub.replay.features",
    "LinearSoftmax": "scrub.replay.model",
    "Replayer": "scrub.replay.replayer",
    "ReplayConfig": "scrub.replay.config",
    "ReplayStats": "scrub.replay.config",
    "Standardizer": "scrub.replay.standardize",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # imported on first use: the scan's workers need only `standardize`
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'scrub.replay' has no attribute {name!r}")
