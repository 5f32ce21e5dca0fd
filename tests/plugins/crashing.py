"""A check that really kills or hangs its worker on chosen keys, to test crash isolation.

No decoder in today's Pillow or libjpeg-turbo is known to crash or hang on a file, so this
stands in for one: a real SIGABRT and a real endless sleep, in a real worker process.
"""

import os
import time

from scrub.checks.base import record_check
from scrub.records import Severity


@record_check("test-crash-or-hang", Severity.ERROR)
def crash_or_hang(record, options):
    """Aborts the process on keys ending in crash.jpg, hangs on keys ending in hang.jpg,
    raises (a bug in a check) on keys ending in bug.jpg.

    What it finds:
        Nothing; it exists for tests.
    Why it breaks training:
        It does not.
    Example:
        `x/crash.jpg`.
    What fix does:
        Nothing.
    """
    if record.key.endswith("crash.jpg"):
        os.abort()
    if record.key.endswith("hang.jpg"):
        time.sleep(3600)
    if record.key.endswith("bug.jpg"):
        raise ValueError("a bug in this check")
    return None
