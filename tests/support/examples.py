"""How many generated examples a property-based test runs: all of them in the full run
(``CI=true``, every service), half in the run without services, or the share
``A2A_TEST_EXAMPLES_SHARE`` names (a fraction).

CI runs the suite twice and both runs share one time budget; the fuzz tests' examples are
most of the first run's wall time, and the full run tries every one of them anyway, so CI's
first run (which proves the suite passes without services) takes a tenth.
"""

from __future__ import annotations

import os


def full_run() -> bool:
    """Whether this is the full run (``CI=true``), which tries every example."""
    return os.environ.get("CI") == "true"


def examples(count: int) -> int:
    """``count`` in the full run, half of it or ``A2A_TEST_EXAMPLES_SHARE`` of it (at least
    one) otherwise."""
    if full_run():
        return count
    share = float(os.environ.get("A2A_TEST_EXAMPLES_SHARE") or 0.5)
    return max(1, int(count * share))
