"""The end of a test run names each optional library whose absence skipped tests, with how to
install it: the README's test command installs the test extra only, which leaves some out on
purpose (torch, mosaicml-streaming), and a skip should never be silent about its cause."""

from __future__ import annotations

import re
from collections import Counter

# What to install for the tests that skip without an optional library, by the module they import:
# the README's test command installs the test extra only, which leaves these out on purpose.
OPTIONAL_INSTALLS = {
    "torch": "pip install torch (a CPU build is enough)",
    "streaming": "pip install --no-deps mosaicml-streaming (it pins numpy<2.2; .ci/run shows how)",
    "megatron": "pip install --no-deps megatron-core",
    "lightning": "pip install lightning",
    "transformers": "pip install transformers accelerate",
    "accelerate": "pip install transformers accelerate",
}


def skipped_for_missing_modules(reports) -> Counter:
    """How many skipped tests name each missing top-level module in their reason: importorskip
    says "could not import 'torch.nn'", a test's own skip "mosaicml-streaming is not installed"."""
    missing: Counter = Counter()
    for report in reports:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        quoted = re.search(r"could not import '([\w.]+)'", reason)
        if quoted:
            missing[quoted.group(1).split(".")[0]] += 1
        elif "mosaicml-streaming is not installed" in reason:
            missing["streaming"] += 1
    return missing


def pytest_terminal_summary(terminalreporter) -> None:
    """One line per optional library whose absence skipped tests, with the install that runs them,
    so that a skip is never silent about its cause."""
    missing = skipped_for_missing_modules(terminalreporter.stats.get("skipped", []))
    if not missing:
        return
    terminalreporter.section("skipped for optional libraries")
    for module, number in missing.most_common():
        how = OPTIONAL_INSTALLS.get(module, f"pip install {module}")
        tests = f"{number} tests need" if number != 1 else "1 test needs"
        terminalreporter.line(f"{tests} {module}: {how}")
