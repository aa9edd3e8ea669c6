"""How many generated examples a property-based test runs: all of them in the full run
(``CI=true``, every service), half in a developer's run without services, which is long
enough as it is; the full run tries every one of them.
"""

from __future__ import annotations

import os


def full_run() -> bool:
    """Whether this is the full run (``CI=true``), which tries every example."""
    return os.environ.get("CI") == "true"


def examples(count: int) -> int:
    """``count`` in the full run, half of it (at least one) otherwise."""
    return count if full_run() else max(1, count // 2)
