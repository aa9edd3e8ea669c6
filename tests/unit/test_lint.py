"""The code passes the linter as configured in pyproject.toml (pyflakes' checks, pycodestyle's
errors and warnings with the 100-character line length, sorted imports, the docstring rules), so
a mistake it finds fails the tests, not a review."""

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


def test_ruff_flags_a_long_line_and_a_missing_module_docstring_in_the_package() -> None:
    probe = "ANSWER = 42  # " + "far too long " * 7 + "\n"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--output-format",
            "concise",
            "--stdin-filename",
            "a2a_gateway/probe.py",
            "-",
        ],
        cwd=ROOT,
        input=probe,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "E501" in done.stdout and "D100" in done.stdout, done.stdout
