"""Redis for the tests: the service's URL (``A2A_TEST_REDIS_URL``, from .ci/services/08-redis.sh,
a user with a password) and a redis-server of a test's own (``A2A_TEST_REDIS_SERVER``, the
binary), for fault tests that kill it with SIGKILL and start it again on the same port.
Both skip the test when their variable is unset (a failure when ``CI=true``).

    async with own_redis(tmp_path) as server:
        ...server.url...
        server.kill()
        await server.start()       # the same port, empty (no persistence)
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.replicas.cluster import free_port
from tests.support.harness import require_env
from tests.support.waiting import eventually


def redis_url() -> str:
    """The test Redis's URL (with its user and password)."""
    return require_env("A2A_TEST_REDIS_URL")


class OwnRedis:
    """A redis-server on a loopback port of its own: no password, no persistence."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.directory / f"redis-{self.port}.log"

    async def start(self) -> None:
        """Starts the server (again, on the same port) and waits until it answers PING."""
        self.process = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.directory),
             "--logfile", str(self.log_path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        await eventually(self.answers, timeout=10, interval=0.05,
                         what=f"redis-server on port {self.port} answers PING")

    async def answers(self) -> bool:
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError

        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"redis-server exited: {self.log_tail()}")
        client = aioredis.Redis.from_url(self.url, socket_connect_timeout=1, socket_timeout=1)
        try:
            return bool(await client.ping())
        except (RedisError, OSError):
            return False
        finally:
            await client.aclose()

    def kill(self) -> None:
        """SIGKILL: no shutdown, every connection dropped at once."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@asynccontextmanager
async def own_redis(directory: Path) -> AsyncIterator[OwnRedis]:
    """A running redis-server of the test's own, killed afterwards."""
    server = OwnRedis(require_env("A2A_TEST_REDIS_SERVER"), directory)
    await server.start()
    try:
        yield server
    finally:
        server.kill()
