"""The check catalogue. Importing this package registers every built-in check.

See `scrub.checks.base` for the kinds of check and how to write one.
"""

from scrub.checks import (  # noqa: F401 - registration
    boxes,
    contract,
    dataset,
    drift,
    files,
    guard,
    images,
    labels,
    masks,
    numeric,
    replay,
    splits,
    tokenbatch,
    tokens,
)
from scrub.checks.base import REGISTRY, Check, CheckOptions, Finding, dataset_check, record_check

__all__ = ["REGISTRY", "Check", "CheckOptions", "Finding", "catalogue", "dataset_check", "record_check"]


def catalogue() -> list[Check]:
    """Every registered check, sorted by id."""
    return [REGISTRY[check_id] for check_id in sorted(REGISTRY)]
