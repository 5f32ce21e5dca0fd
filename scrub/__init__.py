"""scrub: find and remove the training data that makes a model's loss go NaN.

The Python API (see the README):

* `scan(path, **options)` runs every check and returns a `ScanResult` with the summary and an
  iterator over the issues.
* `checks.catalogue()` lists the checks; `Issue` and `Record` are the data model.
"""

__version__ = "0.1.0"

from scrub.api import ScanResult, scan  # noqa: E402
from scrub.errors import ExitCode, ScrubError, UnusableDataset, UsageError  # noqa: E402
from scrub.records import Issue, Record, Severity  # noqa: E402

__all__ = [
    "ExitCode",
    "Issue",
    "Record",
    "ScanResult",
    "ScrubError",
    "Severity",
    "UnusableDataset",
    "UsageError",
    "__version__",
    "scan",
]
