"""The endpoint event feed through a running gateway: ``GET /{endpoint_id}/events`` read as
SSE while the real a2a-sdk client runs tasks, on every store and across two replicas on one
PostgreSQL; ``Last-Event-ID`` resume and the snapshot; operator credentials (gateway keys,
endpoint operators by API key principal and by a JWT group claim) and what is refused."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import jwt
import orjson
import pytest
from a2a.types import CancelTaskRequest, TaskState
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from httpx_sse import aconnect_sse
from structlog.testing import capture_logs

from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.shutdown import drain
from tests.stores.pg_support import admin_dsn, fresh_database
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.cli_process import run_cli, serving
from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import send_body, send_request
from tests.support.waiting import eventually

OPERATOR_KEY = "op-" + uuid.uuid4().hex + uuid.uuid4().hex
WORKING, INPUT, DONE, CANCELED = (
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_CANCELED",
)
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}


class FeedReader:
    """One feed connection read in the background: every event (``id``, parsed data, SSE
    event name), until closed."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers
        self.events: list[dict[str, Any]] = []
        self.status: int | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> FeedReader:
        self._task = asyncio.create_task(self._read())
        await eventually(
            lambda: self.status is not None or self._task.done(), what="the feed's response"
        )
        if self._task.done():
            self._task.result()
        return self

    async def _read(self) -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as http:
            async with aconnect_sse(http, "GET", self.url, headers=self.headers) as source:
                self.status = source.response.status_code
                source.response.raise_for_status()
                assert source.response.headers["content-type"].startswith("text/event-stream")
                async for sse in source.aiter_sse():
                    if not sse.data:
                        continue  # httpx-sse reports the blank line after a keepalive comment
                    self.events.append({"id": sse.id, "event": sse.event, **orjson.loads(sse.data)})

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
            await self._task

    def of_task(self, task_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("taskId") == task_id]

    def states(self, task_id: str) -> list[str]:
        return [e["state"] for e in self.of_task(task_id) if e["kind"] == "status"]

    async def until_state(self, task_id: str, state: str) -> list[dict[str, Any]]:
        await eventually(
            lambda: state in self.states(task_id),
            timeout=60,
            what=f"{state} of {task_id} on the feed",
        )
        return self.of_task(task_id)


def feed_url(gw: RunningGateway, endpoint_id: str, query: str = "") -> str:
    return f"{gw.endpoint_url(endpoint_id)}/events{query}"


@pytest.fixture(params=STORE_KINDS)
async def gw(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RunningGateway]:
    async with fresh_store_url(request.param, tmp_path, monkeypatch) as url:
        async with running_gateway(url, operator_keys=[OPERATOR_KEY]) as running:
            yield running


async def streamed_task(gw: RunningGateway, endpoint_id: str, text: str) -> str:
    """The id of a task the a2a-sdk client streamed to its end."""
    async with gw.client(endpoint_id) as client:
        events = [event async for event in client.send_message(send_request(text))]
    return events[0].task.id


async def test_feed_sees_every_lifecycle_event_of_tasks_run_by_the_a2a_sdk_client(gw):
    endpoint_id = await gw.add_endpoint(settings={"delay": 0})
    async with FeedReader(feed_url(gw, endpoint_id), AS_OPERATOR) as feed:
        await eventually(lambda: feed.events, what="the snapshot")
        assert feed.events[0]["kind"] == "snapshot" and feed.events[0]["tasks"] == []

        task_id = await streamed_task(gw, endpoint_id, "hello feed")
        events = await feed.until_state(task_id, DONE)
        assert [(e["kind"], e["state"]) for e in events] == [
            ("status", WORKING), ("artifact", WORKING), ("status", DONE)]
        working, artifact, done = events
        assert working["principal"] == "anonymous" and working["endpointId"] == endpoint_id
        assert working["contextId"] == done["contextId"] != ""
        assert working["statusUpdate"]["taskId"] == task_id
        assert done["statusUpdate"]["status"]["state"] == DONE and done["timestamp"].endswith("Z")
        assert artifact["artifactUpdate"]["artifact"]["parts"][0]["text"] == "echo: hello feed"
        assert artifact["artifactUpdate"]["lastChunk"] is True

        # input-required, then canceled by the client
        async with gw.client(endpoint_id, streaming=False) as client:
            asked = [e async for e in client.send_message(send_request("please ?input"))][-1].task
            assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            await feed.until_state(asked.id, INPUT)
            await client.cancel_task(CancelTaskRequest(id=asked.id))
        assert (await feed.until_state(asked.id, CANCELED)) and feed.states(asked.id) == [
            WORKING,
            INPUT,
            CANCELED,
        ]
        ids = [e["id"] for e in feed.events]
        assert all(ids) and len(set(ids)) == len(ids)


async def test_filters_by_state_and_context_and_refuses_an_unknown_state():
    async with running_gateway(operator_keys=[OPERATOR_KEY]) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        url = feed_url(gw, endpoint_id, "?state=input-required,completed")
        async with FeedReader(url, AS_OPERATOR) as feed:
            task_id = await streamed_task(gw, endpoint_id, "filtered")
            await feed.until_state(task_id, DONE)
            assert [e["kind"] for e in feed.of_task(task_id)] == ["status"]  # WORKING ones left out
        async with FeedReader(
            feed_url(gw, endpoint_id, "?contextId=ctx-watched"), AS_OPERATOR
        ) as feed:
            other = await streamed_task(gw, endpoint_id, "elsewhere")
            async with gw.client(endpoint_id) as client:
                watched = [
                    e
                    async for e in client.send_message(
                        send_request("here", context_id="ctx-watched")
                    )
                ]
            await feed.until_state(watched[0].task.id, DONE)
            assert {e.get("taskId") for e in feed.events[1:]} == {watched[0].task.id} != {other}
        async with httpx.AsyncClient() as http:
            bad = await http.get(feed_url(gw, endpoint_id, "?state=sleepy"), headers=AS_OPERATOR)
        assert bad.status_code == 400 and "sleepy" in bad.json()["error"]["message"]


async def test_last_event_id_inside_the_log_replays_just_the_missed_events_outside_it_a_snapshot():
    async with running_gateway(operator_keys=[OPERATOR_KEY]) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        async with gw.client(endpoint_id, streaming=False) as client:
            waiting = [e async for e in client.send_message(send_request("wait ?input"))][-1].task
        async with FeedReader(feed_url(gw, endpoint_id), AS_OPERATOR) as first:
            before = await streamed_task(gw, endpoint_id, "seen")
            await first.until_state(before, DONE)
            last_seen = first.events[-1]["id"]
        missed = await streamed_task(gw, endpoint_id, "missed while away")

        async with FeedReader(
            feed_url(gw, endpoint_id), {**AS_OPERATOR, "Last-Event-ID": last_seen}
        ) as resumed:
            await resumed.until_state(missed, DONE)
            later = await streamed_task(gw, endpoint_id, "live after the resume")
            await resumed.until_state(later, DONE)
        kinds = [(e["taskId"], e["kind"], e["state"]) for e in resumed.events]
        assert kinds == [
            (missed, "status", WORKING),
            (missed, "artifact", WORKING),
            (missed, "status", DONE),
            (later, "status", WORKING),
            (later, "artifact", WORKING),
            (later, "status", DONE),
        ]

        async with FeedReader(
            feed_url(gw, endpoint_id), {**AS_OPERATOR, "Last-Event-ID": "not-in-any-log.3"}
        ) as fresh:
            await eventually(lambda: fresh.events, what="the snapshot")
        snapshot = fresh.events[0]
        assert snapshot["kind"] == "snapshot" and snapshot["truncated"] is False
        assert [(t["taskId"], t["state"], t["principal"]) for t in snapshot["tasks"]] == [
            (waiting.id, INPUT, "anonymous")]
        assert snapshot["tasks"][0]["task"]["status"]["state"] == INPUT
        assert "history" not in snapshot["tasks"][0]["task"]


async def test_feed_of_a_second_replica_shows_tasks_run_on_the_first(postgres_dsn):
    big = "x" * 9000  # its final artifact is over the NOTIFY payload limit: sent as a reference
    async with fresh_database() as url, \
            running_gateway(url, replica_id="a", operator_keys=[OPERATOR_KEY]) as a, \
            running_gateway(url, replica_id="b", operator_keys=[OPERATOR_KEY]) as b:
        endpoint_id = await a.add_endpoint(settings={"delay": 0})
        async with FeedReader(feed_url(b, endpoint_id), AS_OPERATOR) as feed, \
                FeedReader(f"{b.base_url}/events", AS_OPERATOR) as everything:
            await eventually(lambda: feed.events and everything.events, what="the snapshots")
            task_id = await streamed_task(a, endpoint_id, "across replicas")
            events = await feed.until_state(task_id, DONE)
            assert [(e["kind"], e["state"]) for e in events] == [
                ("status", WORKING), ("artifact", WORKING), ("status", DONE)]
            assert [e["id"] for e in await everything.until_state(task_id, DONE)] != [
                e["id"] for e in events
            ]
            assert [e["kind"] for e in everything.of_task(task_id)] == [
                "status",
                "artifact",
                "status",
            ]
            large = await streamed_task(a, endpoint_id, big)
            events = await feed.until_state(large, DONE)
        artifact = next(e for e in events if e["kind"] == "artifact")
        assert artifact["artifactUpdate"]["artifact"]["parts"][0]["text"] == f"echo: {big}"
        assert [e["kind"] for e in events] == ["status", "artifact", "status"]
        assert a.gateway.hub.feed_relay.stats["references"] >= 1


@pytest.fixture
def postgres_dsn() -> str:
    return admin_dsn()


# credentials ------------------------------------------------------------------------------

def _es256() -> tuple[Any, str]:
    private = ec.generate_private_key(ec.SECP256R1())
    public = private.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


def _token(private: Any, sub: str, **claims: Any) -> str:
    body = {
        "iss": "https://idp.example",
        "aud": "a2a",
        "sub": sub,
        "exp": int(time.time()) + 300,
        **claims,
    }
    return jwt.encode(body, private, algorithm="ES256")


async def test_only_operators_of_that_endpoint_may_watch_it():
    private, public = _es256()
    jwt_decl = {
        "issuer": "https://idp.example",
        "audience": "a2a",
        "keys": [public],
        "algorithms": ["ES256"],
    }
    async with running_gateway(
        operator_keys=[OPERATOR_KEY], allow_unauthenticated_endpoints=False
    ) as gw:
        x = await gw.add_endpoint(
            settings={
                "delay": 0,
                "auth": {
                    "api_key": {},
                    "jwt": jwt_decl,
                    "operators": {
                        "principals": ["ops-x"],
                        "jwt_claim": "groups",
                        "jwt_values": ["a2a-operators"],
                    },
                },
            }
        )
        y = await gw.add_endpoint(settings={"delay": 0, "auth": {
            "api_key": {}, "jwt": jwt_decl, "operators": {"principals": ["ops-y"]}}})
        secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
        keys = {}
        for name, endpoint_id, principal in [
            ("caller", x, "caller-1"),
            ("ops_x", x, "ops-x"),
            ("ops_y", y, "ops-y"),
        ]:
            row, keys[name] = make_key(
                secret, endpoint_id=endpoint_id, tenant="default", principal=principal
            )
            await gw.store.create_api_key(row)
        group_token = _token(private, "dana", groups=["staff", "a2a-operators"])
        plain_token = _token(private, "erin", groups=["staff"])

        async def status(endpoint_id: str, headers: dict[str, str]) -> httpx.Response:
            async with httpx.AsyncClient(timeout=30) as http:
                async with http.stream(
                    "GET", feed_url(gw, endpoint_id), headers=headers
                ) as response:
                    if response.status_code == 200:
                        async for line in response.aiter_lines():
                            if line.startswith("data:"):  # the snapshot: the feed is open
                                break
                    else:
                        await response.aread()
                    return response

        with capture_logs() as logs:
            none = await status(x, {})
            assert none.status_code == 401 and none.headers["WWW-Authenticate"].startswith("Bearer")
            assert (await status(x, {"X-API-Key": keys["caller"]})).status_code == 403
            assert (await status(x, {"Authorization": f"Bearer {plain_token}"})).status_code == 403
            assert (await status(x, {"X-API-Key": keys["ops_x"]})).status_code == 200
            assert (await status(x, {"Authorization": f"Bearer {group_token}"})).status_code == 200
            assert (
                await status(y, {"X-API-Key": keys["ops_x"]})
            ).status_code == 401  # X's key is nothing on Y
            assert (await status(y, {"Authorization": f"Bearer {group_token}"})).status_code == 403
            assert (await status(y, {"X-API-Key": keys["ops_y"]})).status_code == 200
            for endpoint_id in (x, y):
                assert (await status(endpoint_id, AS_OPERATOR)).status_code == 200
            wrong = await status(x, {"Authorization": f"Bearer {OPERATOR_KEY}x"})
            assert wrong.status_code == 401
            unknown = await status(str(uuid.uuid4()), AS_OPERATOR)
            assert unknown.status_code == 404
            disabled = await gw.add_endpoint(enabled=False)
            assert (await status(disabled, AS_OPERATOR)).status_code == 404
        for response in (none, wrong, unknown):
            assert OPERATOR_KEY not in response.text and OPERATOR_KEY not in str(response.headers)
        assert logs and OPERATOR_KEY not in repr(logs)


async def test_operator_keys_given_as_digests_work_and_a_short_key_stops_startup():
    digest = "sha256:" + hashlib.sha256(OPERATOR_KEY.encode()).hexdigest()
    async with running_gateway(operator_keys=[digest]) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        async with FeedReader(feed_url(gw, endpoint_id), AS_OPERATOR) as feed:
            await eventually(lambda: feed.events, what="the snapshot")
        assert repr(gw.gateway.operators._keys) == "OperatorKeys(1 keys)"
        assert OPERATOR_KEY not in repr(gw.gateway.settings)
    with pytest.raises(ValueError, match="operator_keys entry 0") as refused:
        async with running_gateway(operator_keys=["short"]):
            pass
    assert "short" not in str(refused.value).replace("operator_keys", "")


async def test_a_feed_client_that_stops_reading_is_dropped_and_the_others_go_on():
    async with running_gateway(
        operator_keys=[OPERATOR_KEY], event_feed_client_max_bytes=1_000_000
    ) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        feed = gw.gateway.hub.feed
        host, port = gw.base_url.removeprefix("http://").split(":")
        silent = socket.socket()
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # its window fills at once
        with capture_logs() as logs, contextlib.closing(silent):
            silent.connect((host, int(port)))
            silent.sendall(f"GET /{endpoint_id}/events HTTP/1.1\r\nHost: gw\r\n"
                           f"Authorization: Bearer {OPERATOR_KEY}\r\n\r\n".encode())
            async with FeedReader(feed_url(gw, endpoint_id), AS_OPERATOR) as reader:
                await eventually(
                    lambda: feed.subscriber_count(endpoint_id) == 2, what="both feed clients"
                )
                done = []
                for n in range(
                    200
                ):  # the silent client reads none: socket buffers fill, then its backlog
                    done.append(await streamed_task(gw, endpoint_id, f"task {n} " + "y" * 100_000))
                    if feed.subscriber_count(endpoint_id) == 1:
                        break
                assert feed.subscriber_count(endpoint_id) == 1, (
                    "the silent client was never dropped"
                )
                last = await streamed_task(gw, endpoint_id, "after the drop")
                await reader.until_state(last, DONE)
                assert all(DONE in reader.states(t) for t in done)
            silent.close()  # gone while a write of its response waits: that response ends quietly
            await eventually(
                lambda: (
                    sum(
                        log["event"] == "request" and log.get("path", "").endswith("/events")
                        for log in logs
                    )
                    >= 1
                ),
                what="the silent client's request log line",
            )
        assert not [log for log in logs if log["event"] == "request_failed"]


async def test_an_open_feed_does_not_hold_up_a_graceful_shutdown():
    async with running_gateway(operator_keys=[OPERATOR_KEY], shutdown_grace_seconds=300) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        async with FeedReader(feed_url(gw, endpoint_id), AS_OPERATOR) as feed:
            await eventually(lambda: feed.events, what="the snapshot")
            draining = asyncio.create_task(drain(gw.app))
            await eventually(draining.done, what="the drain (its grace period is 300 s)")
            await eventually(feed._task.done, what="the feed's end")
        async with httpx.AsyncClient() as http:
            refused = await http.get(feed_url(gw, endpoint_id), headers=AS_OPERATOR)
        assert refused.status_code == 503


async def test_a_replica_that_lost_its_listener_starts_its_feed_clients_over_from_a_snapshot(
    postgres_dsn,
):
    async with fresh_database() as url, \
            running_gateway(url, replica_id="a", operator_keys=[OPERATOR_KEY]) as a, \
            running_gateway(url, replica_id="b", operator_keys=[OPERATOR_KEY]) as b:
        endpoint_id = await a.add_endpoint(settings={"delay": 0})
        async with a.client(endpoint_id, streaming=False) as client:
            waiting = [e async for e in client.send_message(send_request("wait ?input"))][-1].task
        async with FeedReader(feed_url(b, endpoint_id), AS_OPERATOR) as feed:
            await eventually(lambda: feed.events, what="the snapshot")
            connects = b.gateway.hub.stats["connects"]
            admin = await asyncpg.connect(postgres_dsn)
            try:  # every connection of the test database: both replicas' listeners among them
                await admin.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = $1 AND pid <> pg_backend_pid()",
                    url.rsplit("/", 1)[-1],
                )
            finally:
                await admin.close()
            await eventually(
                lambda: b.gateway.hub.stats["connects"] > connects, what="B listening again"
            )
            await eventually(feed._task.done, what="the feed's end on B")
            last = feed.events[-1]["id"]
        async with FeedReader(
            feed_url(b, endpoint_id), {**AS_OPERATOR, "Last-Event-ID": last}
        ) as again:
            await eventually(lambda: again.events, what="the new snapshot")
            assert again.events[0]["kind"] == "snapshot"
            assert [t["taskId"] for t in again.events[0]["tasks"]] == [waiting.id]
            task_id = await streamed_task(a, endpoint_id, "after the reconnect")
            await again.until_state(task_id, DONE)


async def test_a_gateway_process_never_writes_an_operator_key_it_was_given_or_shown(tmp_path):
    added = run_cli(
        "endpoints",
        "add",
        "--name",
        "watched",
        "--handler",
        "handlers.echo:EchoHandler",
        "--set",
        "delay=0",
        "--public",
        cwd=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    endpoint_id = added.stdout.strip().splitlines()[-1]
    output: list[str] = []
    async with serving(
        "serve",
        cwd=tmp_path,
        output=output,
        A2A_GATEWAY_OPERATOR_KEYS=f"{OPERATOR_KEY},{'z' * 20}",
        A2A_GATEWAY_LOG_LEVEL="debug",
    ) as listening:
        base = listening.group(1)
        async with FeedReader(f"{base}/{endpoint_id}/events", AS_OPERATOR) as feed:
            async with httpx.AsyncClient(timeout=30) as http:
                v10 = {"A2A-Version": "1.0"}
                sent = await http.post(
                    f"{base}/{endpoint_id}/a2a", json=send_body("watched task"), headers=v10
                )
                as_caller = await http.post(f"{base}/{endpoint_id}/a2a", json=send_body("x"),
                                            headers={**AS_OPERATOR, **v10})
                wrong = await http.get(f"{base}/{endpoint_id}/events",
                                       headers={"Authorization": f"Bearer {OPERATOR_KEY[:-1]}"})
            task_id = sent.json()["result"]["task"]["id"]
            await feed.until_state(task_id, DONE)
        assert as_caller.status_code == 401 and wrong.status_code == 401
    shown = (
        "".join(output) + as_caller.text + wrong.text + str(as_caller.headers) + str(wrong.headers)
    )
    assert "request" in shown  # the debug log was written
    assert OPERATOR_KEY not in shown and OPERATOR_KEY[:-1] not in shown and "z" * 20 not in shown


async def test_gateway_operators_watch_every_endpoint_at_once():
    async with running_gateway(
        operator_keys=[OPERATOR_KEY], allow_unauthenticated_endpoints=False
    ) as gw:
        first = await gw.add_endpoint(settings={"delay": 0, "public": True})
        second = await gw.add_endpoint(settings={"delay": 0, "public": True})
        async with gw.client(second, streaming=False) as client:
            waiting = [e async for e in client.send_message(send_request("wait ?input"))][-1].task
        async with FeedReader(f"{gw.base_url}/events", AS_OPERATOR) as everything, \
                FeedReader(f"{gw.base_url}/events?endpointId={first}", AS_OPERATOR) as narrowed:
            await eventually(lambda: everything.events and narrowed.events, what="the snapshots")
            snapshot = everything.events[0]
            assert snapshot["kind"] == "snapshot" and snapshot["endpointId"] is None
            assert [(t["endpointId"], t["taskId"]) for t in snapshot["tasks"]] == [
                (second, waiting.id)
            ]
            assert narrowed.events[0]["tasks"] == []
            on_first = await streamed_task(gw, first, "one")
            on_second = await streamed_task(gw, second, "two")
            await everything.until_state(on_second, DONE)
            await everything.until_state(on_first, DONE)
            await narrowed.until_state(on_first, DONE)
        assert {e["endpointId"] for e in everything.events[1:]} == {first, second}
        assert {e["taskId"] for e in narrowed.events[1:]} == {on_first}

        secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
        row, caller_key = make_key(secret, endpoint_id=first, tenant="default", principal="someone")
        await gw.store.create_api_key(row)
        async with httpx.AsyncClient(timeout=30) as http:
            for headers in (
                {},
                {"X-API-Key": caller_key},
                {"Authorization": f"Bearer {caller_key}"},
            ):
                refused = await http.get(f"{gw.base_url}/events", headers=headers)
                assert refused.status_code == 401 and "WWW-Authenticate" in refused.headers
