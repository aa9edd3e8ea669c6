"""``serve`` refuses an unmigrated PostgreSQL database with a clear message."""

from __future__ import annotations

import subprocess
import sys

from tests.stores import pg_support
from tests.support.harness import require_env


async def test_serve_refuses_an_unmigrated_database_then_runs_after_migrate():
    require_env("A2A_TEST_POSTGRES_DSN")
    async with pg_support.fresh_database(template=None) as url:
        refused = subprocess.run(
            [sys.executable, "-m", "a2a_gateway", "serve", "--store", url, "--port", "0"],
            capture_output=True, text=True, timeout=60,
        )
        assert refused.returncode != 0
        output = refused.stdout + refused.stderr
        assert "a2a-gateway migrate" in output
        assert "Traceback" not in output
        migrated = subprocess.run(
            [sys.executable, "-m", "a2a_gateway", "migrate", "--store", url],
            capture_output=True, text=True, timeout=60, check=True,
        )
        assert "0001" in migrated.stdout
