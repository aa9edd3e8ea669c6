"""A webhook receiver for push notification tests: an aiohttp app on 127.0.0.1, port 0.

``webhook_receiver`` gives a ``Receiver``, which records every POST:

    async with webhook_receiver() as hooks:
        url = hooks.url("/a2a")       # POSTs to any path are recorded
        hooks.statuses["/a2a"] = [500, 503]   # the next answers there, then 204
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import orjson
from aiohttp import web

from tests.support.local_server import serve_locally
from tests.support.waiting import eventually

DELIVERY_ID = "X-A2A-Notification-Id"


class Receiver:
    """Records every POST. It answers 204, or the next of ``statuses[path]`` while there is
    one, or a redirect to ``redirects[path]``; with ``fail_every = n`` every n-th POST is
    answered 500. ``before(request)``, if set, is awaited first (e.g. to hang)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict, bytes]] = []
        self.answered: list[int] = []
        self.statuses: dict[str, list[int]] = {}
        self.redirects: dict[str, str] = {}
        self.fail_every = 0
        self.before: Callable[[web.Request], Awaitable[None]] | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        if self.before is not None:
            await self.before(request)
        self.posts.append((request.path, dict(request.headers), await request.read()))
        status = self._status(request.path)
        self.answered.append(status)
        if status == 307:
            return web.Response(status=307, headers={"Location": self.redirects[request.path]})
        return web.Response(status=status)

    def _status(self, path: str) -> int:
        if path in self.redirects:
            return 307
        pending = self.statuses.get(path)
        if pending:
            return pending.pop(0)
        if self.fail_every and len(self.posts) % self.fail_every == 0:
            return 500
        return 204

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.posts]

    def posts_to(self, path: str) -> list[tuple[dict, dict]]:
        """``(headers, JSON body)`` of each POST to ``path``."""
        return [(headers, orjson.loads(body)) for p, headers, body in self.posts if p == path]

    def delivered_ids(self) -> list[str]:
        """The delivery id of every POST answered 2xx, in order."""
        return [
            headers[DELIVERY_ID]
            for (_, headers, _), status in zip(self.posts, self.answered, strict=True)
            if status < 300
        ]

    async def wait_for(self, path: str, count: int = 1, timeout: float = 30.0) -> None:
        await eventually(self.paths, until=lambda paths: paths.count(path) >= count,
                         timeout=timeout, what=f"{count} POSTs to {path}")


@asynccontextmanager
async def webhook_receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", receiver.handle)
    async with serve_locally(app) as base_url:
        receiver.port = int(base_url.rsplit(":", 1)[1])
        yield receiver


def fake_dns(mapping: dict[str, str]):
    """A resolver over ``mapping`` (name → address) for ``WebhookGuard``; the test may change
    the mapping while the gateway runs."""

    async def resolve(host: str, port: int) -> list[str]:
        if host not in mapping:
            raise OSError("no such host")
        return [mapping[host]]

    return resolve
