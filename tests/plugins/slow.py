"""A check and a loss that take their time, so that a test can press Ctrl-C in the middle of a
scan, a replay or a fix."""

import time

import numpy as np

from scrub.checks.base import record_check
from scrub.records import Severity


@record_check("test-slow", Severity.WARNING)
def slow(record, options):
    """Sleeps 20 ms on every record.

    What it finds:
        Nothing; it exists for tests.
    Why it breaks training:
        It does not.
    Example:
        Any record.
    What fix does:
        Nothing.
    """
    time.sleep(0.02)
    return None


def slow_loss(X, y):
    """A user loss for `--model` that takes 20 ms a batch."""
    time.sleep(0.02)
    return np.zeros(len(y))
