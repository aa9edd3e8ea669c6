"""How many generated examples a property-based test runs: all of them in the full run
(``CI=true``, every service), half in the run without services.

CI runs the suite twice and both runs share one time budget; the fuzz tests' examples are
most of the first run's wall time, and the full run tries every one of them anyway.
"""

from __future__ import annotations

import os


def full_run() -> bool:
    """Whether this is the full run (``CI=true``), which tries every example."""
    return os.environ.get("CI") == "true"


def examples(count: int) -> int:
    """``count`` in the full run, half of it (at least one) otherwise."""
    return count if full_run() else max(1, count // 2)
