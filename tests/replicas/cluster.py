"""Gateway replicas as separate processes on one PostgreSQL database.

    async with replica_set(tmp_path, ["a", "b", "c"], lease_seconds=2) as replicas:
        ep = await replicas.add_endpoint("handlers.echo:EchoHandler", delay=0.05)
        async with replicas.client("a", ep) as on_a: ...
        replicas.kill("a")          # SIGKILL

Each replica is ``python -m a2a_gateway serve --store <url> --port <free port>`` with
``A2A_GATEWAY_REPLICA_ID`` set to its name, started from the repository root so the
``tests.`` handlers import; the database is a new empty one migrated with
``python -m a2a_gateway migrate``; endpoints are added with ``endpoints add``.
``PgControl`` stops and restarts the test cluster itself (for outage tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from a2a.client import Client

from tests.stores.pg_support import admin_dsn, database_url
from tests.support.harness import RunningGateway
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def cli(*args: str, env: dict[str, str], timeout: float = 60.0) -> str:
    """Run ``python -m a2a_gateway ARGS``; its stdout (fails the test on a non-zero exit)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "a2a_gateway", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"a2a_gateway {args[0]} did not finish in {timeout}s") from None
    if proc.returncode != 0:
        raise AssertionError(
            f"a2a_gateway {' '.join(args[:2])} failed ({proc.returncode}): {err.decode()[-2000:]}"
        )
    return out.decode()


@dataclass
class Replica:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class ReplicaSet:
    def __init__(self, store_url: str, env: dict[str, str], workdir: Path) -> None:
        self.store_url = store_url
        self.env = env
        self.workdir = workdir
        self.replicas: dict[str, Replica] = {}

    def __getitem__(self, name: str) -> Replica:
        return self.replicas[name]

    async def add_endpoint(self, handler: str, *, name: str = "agent", **settings: Any) -> str:
        args = [
            "endpoints",
            "add",
            "--store",
            self.store_url,
            "--name",
            name,
            "--handler",
            handler,
            "--public",
        ]
        for key, value in settings.items():
            args += ["--set", f"{key}={json.dumps(value)}"]
        out = await cli(*args, env=self.env)
        return out.strip().splitlines()[-1]

    def start(self, name: str) -> Replica:
        port = free_port()
        log_path = self.workdir / f"replica-{name}.log"
        env = {**self.env, "A2A_GATEWAY_REPLICA_ID": name}
        with log_path.open("ab") as log_file:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "a2a_gateway",
                    "serve",
                    "--store",
                    self.store_url,
                    "--port",
                    str(port),
                ],
                cwd=ROOT,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        replica = Replica(name, port, proc, log_path)
        self.replicas[name] = replica
        return replica

    async def wait_ready(self, name: str, timeout: float = 30.0) -> None:
        replica = self.replicas[name]
        async with httpx.AsyncClient(timeout=2.0) as http:
            async def ready() -> bool:
                if replica.proc.poll() is not None:
                    raise RuntimeError(f"replica {name} exited:\n{replica.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    return (await http.get(f"{replica.base_url}/readyz")).status_code == 200
                return False

            try:
                await eventually(ready, timeout=timeout, interval=0.1, what=f"replica {name} ready")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{replica.log_tail()}") from None

    def kill(self, name: str) -> None:
        """SIGKILL: no cleanup, no lease release."""
        proc = self.replicas[name].proc
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        running = [r for r in self.replicas.values() if r.proc.poll() is None]
        for replica in running:
            replica.proc.send_signal(signal.SIGTERM)
        for replica in running:
            try:
                replica.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                replica.proc.kill()
                replica.proc.wait(timeout=5)

    def logs(self) -> str:
        return "\n".join(f"--- replica {r.name}\n{r.log_tail()}" for r in self.replicas.values())

    @asynccontextmanager
    async def client(self, name: str, endpoint_id: str, **options: Any) -> AsyncIterator[Client]:
        """An a2a-sdk client of ``endpoint_id`` on replica ``name`` (built from its card)."""
        # the harness's client builder only needs the base URL
        async with RunningGateway(self.replicas[name].base_url, None).client(  # type: ignore[arg-type]
            endpoint_id, **options
        ) as client:
            yield client


@asynccontextmanager
async def empty_database() -> AsyncIterator[str]:
    """The URL of a new empty database, dropped afterwards. Unlike ``fresh_database``
    it holds no admin connection in between, so the cluster may restart meanwhile."""
    dsn = admin_dsn()
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    finally:
        await admin.close()
    try:
        yield database_url(dsn, name)
    finally:
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@asynccontextmanager
async def replica_set(
    workdir: Path,
    names: list[str],
    *,
    lease_seconds: float,
    remote_poll_seconds: float,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[ReplicaSet]:
    """A fresh migrated database and one gateway process per name, all ready."""
    async with empty_database() as url:
        env = {
            **os.environ,
            "A2A_GATEWAY_LEASE_SECONDS": str(lease_seconds),
            "A2A_GATEWAY_REMOTE_POLL_SECONDS": str(remote_poll_seconds),
            "A2A_GATEWAY_PUSH_ALLOW_PRIVATE_URLS": "true",
            "A2A_GATEWAY_LOG_LEVEL": "warning",
            "A2A_GATEWAY_HANDLER_ALLOWLIST": '["handlers.","tests."]',
            **(extra_env or {}),
        }
        env.pop("A2A_GATEWAY_STORE", None)
        await cli("migrate", "--store", url, env=env)
        replicas = ReplicaSet(url, env, workdir)
        try:
            for name in names:
                replicas.start(name)
            await asyncio.gather(*(replicas.wait_ready(name) for name in names))
            yield replicas
        except BaseException:
            sys.stderr.write(replicas.logs())
            raise
        finally:
            replicas.stop_all()


class PgControl:
    """Stop and start the test cluster (``pg_ctl`` as the data directory's owner).

    The data directory and binaries come from the server itself; a stopped server is
    started again by ``pg_ctl restart``, which reuses the options it was started with
    (``postmaster.opts``), port included."""

    def __init__(self, pg_ctl: str, data_dir: str, owner: str) -> None:
        self.pg_ctl = pg_ctl
        self.data_dir = data_dir
        self.owner = owner

    @classmethod
    async def discover(cls) -> PgControl | None:
        """None when this process cannot control the cluster (not local, no rights)."""
        conn = await asyncpg.connect(admin_dsn())
        try:
            data_dir = await conn.fetchval("SHOW data_directory")
            bindir = await conn.fetchval("SELECT setting FROM pg_config WHERE name = 'BINDIR'")
        except asyncpg.PostgresError:
            return None
        finally:
            await conn.close()
        pg_ctl = os.path.join(bindir or "", "pg_ctl")
        try:
            owner_uid = os.stat(data_dir).st_uid
        except OSError:
            return None
        if not os.access(pg_ctl, os.X_OK) or (os.geteuid() not in (0, owner_uid)):
            return None
        return cls(pg_ctl, data_dir, pwd.getpwuid(owner_uid).pw_name)

    def _run(self, *args: str, timeout: float = 60.0) -> None:
        argv = [self.pg_ctl, "-D", self.data_dir, *args]
        if os.geteuid() == 0 and self.owner != "root":
            argv = ["runuser", "-u", self.owner, "--", *argv]
        # the server inherits pg_ctl's output: never a pipe this process would wait on
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout, check=True)

    def stop(self) -> None:
        self._run("-m", "fast", "-w", "-t", "30", "stop")

    def start(self) -> None:
        self._run("-w", "-t", "30", "restart")
