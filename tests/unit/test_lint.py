"""The code passes the linter as configured in pyproject.toml (pyflakes' checks, pycodestyle's
errors and warnings, sorted imports), so a mistake it finds fails the tests, not a review."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "a2a_gateway",
            "handlers",
            "tests",
            "bench",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
