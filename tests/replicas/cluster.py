"""Gateway replicas as separate processes on one store: a PostgreSQL database or DynamoDB
tables (on moto), optionally linked through Redis.

    async with replica_set(tmp_path, ["a", "b", "c"], lease_seconds=2) as replicas:
        ep = await replicas.add_endpoint("handlers.echo:EchoHandler", delay=0.05)
        async with replicas.client("a", ep) as on_a: ...
        replicas.kill("a")          # SIGKILL

    async with replica_set(tmp_path, ["a", "b"], lease_seconds=60, remote_poll_seconds=30,
                           store="dynamodb", redis_url=redis_url()) as replicas: ...

Each replica is ``python -m a2a_gateway serve --store <url> --port <free port>`` with
``A2A_GATEWAY_REPLICA_ID`` set to its name, started from the repository root so the
``tests.`` handlers import; the store is a new empty one (a database, or tables under a prefix
of their own) migrated with ``python -m a2a_gateway migrate``; endpoints are added with
``endpoints add``. With ``redis_url`` every replica gets ``A2A_GATEWAY_REDIS_URL`` and a key
prefix of the set's own (``A2A_GATEWAY_REDIS_PREFIX``), whose keys are deleted afterwards.
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

from tests.stores import dynamo_support
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
    def __init__(
        self, store_url: str, env: dict[str, str], workdir: Path, redis_prefix: str | None = None
    ) -> None:
        self.store_url = store_url
        self.env = env
        self.workdir = workdir
        self.redis_prefix = redis_prefix
        """The replicas' Redis key prefix; None without Redis."""
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


STORES = ("postgres", "dynamodb")
"""The stores ``replica_set`` makes a fresh one of."""


@asynccontextmanager
async def empty_tables() -> AsyncIterator[tuple[str, dict[str, str]]]:
    """The URL of DynamoDB tables not made yet (under a new prefix, on moto) and the environment
    a process needs to open them: moto's dummy credentials, never real ones. The tables are
    deleted afterwards."""
    url = dynamo_support.store_url(dynamo_support.moto_endpoint(), dynamo_support.unique_prefix())
    env = {
        "AWS_ACCESS_KEY_ID": dynamo_support.CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": dynamo_support.CREDENTIALS["aws_secret_access_key"],
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    try:
        yield url, env
    finally:
        await dynamo_support.drop_tables(url)


@asynccontextmanager
async def empty_store(kind: str) -> AsyncIterator[tuple[str, dict[str, str]]]:
    """A new empty store of ``kind`` (one of ``STORES``): its URL and the environment variables
    a process needs besides (none for PostgreSQL)."""
    if kind == "postgres":
        async with empty_database() as url:
            yield url, {}
    elif kind == "dynamodb":
        async with empty_tables() as (url, env):
            yield url, env
    else:
        raise ValueError(f"unknown store {kind!r} (one of {', '.join(STORES)})")


def base_env(
    lease_seconds: float, remote_poll_seconds: float, store_env: dict[str, str],
    redis: tuple[str, str] | None, extra_env: dict[str, str] | None,
) -> dict[str, str]:
    """The replicas' environment: this process's, without AWS credentials, a store or a Redis
    of its own; then the store's and Redis's (URL, prefix) variables and ``extra_env``."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    for name in ("A2A_GATEWAY_STORE", "A2A_GATEWAY_REDIS_URL", "A2A_GATEWAY_REDIS_PREFIX"):
        inherited.pop(name, None)
    env = {
        **inherited,
        "A2A_GATEWAY_LEASE_SECONDS": str(lease_seconds),
        "A2A_GATEWAY_REMOTE_POLL_SECONDS": str(remote_poll_seconds),
        "A2A_GATEWAY_PUSH_ALLOW_PRIVATE_URLS": "true",
        "A2A_GATEWAY_LOG_LEVEL": "warning",
        "A2A_GATEWAY_HANDLER_ALLOWLIST": '["handlers.","tests."]',
        **store_env,
    }
    if redis is not None:
        env["A2A_GATEWAY_REDIS_URL"], env["A2A_GATEWAY_REDIS_PREFIX"] = redis
    return {**env, **(extra_env or {})}


async def drop_redis_keys(url: str, prefix: str) -> None:
    """Deletes the keys under ``prefix``; a Redis that is gone (a fault test) is left alone."""
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError

    client = aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
    except (RedisError, OSError):
        pass
    finally:
        await client.aclose()


@asynccontextmanager
async def replica_set(
    workdir: Path,
    names: list[str],
    *,
    lease_seconds: float,
    remote_poll_seconds: float,
    extra_env: dict[str, str] | None = None,
    store: str = "postgres",
    redis_url: str | None = None,
) -> AsyncIterator[ReplicaSet]:
    """A fresh migrated store (``store``: a PostgreSQL database or DynamoDB tables) and one
    gateway process per name, all ready; with ``redis_url``, linked through that Redis under
    a key prefix of their own."""
    redis = (redis_url, f"t{uuid.uuid4().hex[:12]}:") if redis_url else None
    async with empty_store(store) as (url, store_env):
        env = base_env(lease_seconds, remote_poll_seconds, store_env, redis, extra_env)
        await cli("migrate", "--store", url, env=env)
        replicas = ReplicaSet(url, env, workdir, redis[1] if redis else None)
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
            if redis is not None:
                await drop_redis_keys(*redis)


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
