"""scrub: find and remove the training data that makes a model's loss go NaN.

The Python API (see the README):

* `scan(path, **options)` runs every check and returns a `ScanResult` with the summary and an
  iterator over the issues.
* `fix(path, **options)` writes the cleaned copy (and the quarantine) and returns a `FixResult`.
* `scrub.checks.catalogue()` lists the checks; `Issue`, `Record` and `Batch` are the data model.

Names are imported on first use, so that ``scrub --help`` and the start of a scan do not wait
for NumPy, Pillow and Dask.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "scan": "scrub.api",
    "ScanResult": "scrub.api",
    "fix": "scrub.fixing.cleaning",
    "FixResult": "scrub.fixing.cleaning",
    "ExitCode": "scrub.errors",
    "ScrubError": "scrub.errors",
    "UnusableDataset": "scrub.errors",
    "UsageError": "scrub.errors",
    "Batch": "scrub.records",
    "Issue": "scrub.records",
    "Record": "scrub.records",
    "Severity": "scrub.records",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'scrub' has no attribute {name!r}")
