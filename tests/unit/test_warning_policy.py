"""The suite's warning policy: a resource a test leaves open fails the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LEAKS_A_SOCKET = """
import socket


def test_leaves_a_socket_open():
    socket.socket()
"""


def test_an_unclosed_socket_fails_under_the_project_settings(tmp_path: Path) -> None:
    (tmp_path / "test_leak.py").write_text(LEAKS_A_SOCKET)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), "test_leak.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "ResourceWarning: unclosed <socket.socket" in run.stdout, run.stdout
