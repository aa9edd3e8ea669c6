"""Backend health is the same on every replica: two (then three) gateway processes on one
PostgreSQL database, behind which a real chat handler first cannot reach its backend, then
reaches the scripted LLM. A run that fails on replica A shows ``failing`` with its reason in
replica B's ``GET /admin/api/endpoints/<id>``; a success on B turns A's view ``ok``; a replica
started afterwards shows the same record; the counts add up across the replicas."""

from __future__ import annotations

import socket
import time
import uuid

import httpx
import pytest
from a2a.types import TaskState

from a2a_gateway.stores import open_store
from tests.replicas.cluster import ReplicaSet, replica_set
from tests.stores.pg_support import admin_dsn
from tests.support.harness import require_env
from tests.support.messages import send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)

OPERATOR_KEY = "op-" + uuid.uuid4().hex
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
SEEN_WITHIN = 15.0
"""The bound on a change reaching another replica's view: write interval (5 s, a change right
after a write waits for it) plus the read cache (0.5 s here), with room for a busy machine."""


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def health_on(rs: ReplicaSet, name: str, endpoint_id: str) -> dict:
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.get(
            f"{rs[name].base_url}/admin/api/endpoints/{endpoint_id}", headers=AS_OPERATOR
        )
    assert answer.status_code == 200, answer.text
    return answer.json()["health"]


async def send_on(rs: ReplicaSet, name: str, endpoint_id: str, text: str) -> int:
    async with rs.client(name, endpoint_id, streaming=False) as client:
        events = [event async for event in client.send_message(send_request(text))]
    return events[-1].task.status.state


async def test_every_replica_shows_the_backend_health_of_the_runs_of_all(tmp_path):
    admin_dsn()  # skips without PostgreSQL (fails under CI)
    llm = require_env("A2A_TEST_LLM_URL").rstrip("/").removesuffix("/v1") + "/v1"
    env = {
        "A2A_GATEWAY_OPERATOR_KEYS": OPERATOR_KEY,
        "A2A_GATEWAY_BACKEND_HEALTH_CACHE_SECONDS": "0.5",
        "A2A_GATEWAY_ENDPOINT_CACHE_SECONDS": "3600",
    }  # the row's change reaches B by the database's notice
    async with replica_set(
        tmp_path, ["a", "b"], lease_seconds=30, remote_poll_seconds=30, extra_env=env
    ) as rs:
        down = f"http://ops:pw-in-url@127.0.0.1:{closed_port()}/v1"
        endpoint_id = await rs.add_endpoint("handlers.openai_chat:OpenAIChatHandler", name="llm",
                                            base_url=down, model="m")
        for name in ("a", "b"):
            assert (await health_on(rs, name, endpoint_id))["status"] == "unknown"

        assert await send_on(rs, "a", endpoint_id, "hello") == TaskState.TASK_STATE_FAILED
        started = time.monotonic()
        on_b = await eventually(
            lambda: health_on(rs, "b", endpoint_id),
            until=lambda h: h["status"] == "failing",
            timeout=SEEN_WITHIN,
            what="A's failure in B's view",
        )
        failing_seen_after = time.monotonic() - started
        assert on_b["last_error"]["message"].startswith("cannot reach the chat backend at http://127.0.0.1:")
        assert "pw-in-url" not in str(on_b) and (on_b["successes"], on_b["errors"]) == (0, 1)
        assert on_b["last_success"] is None

        store = await open_store(rs.store_url)
        try:
            row = await store.get_endpoint(endpoint_id)
            row.metadata["base_url"] = llm
            await store.update_endpoint(row)  # the database tells both replicas
        finally:
            await store.aclose()
        assert await eventually(lambda: send_on(rs, "b", endpoint_id, "hello again"),
                                until=lambda state: state == TaskState.TASK_STATE_COMPLETED,
                                timeout=SEEN_WITHIN, what="a run on B reaching the LLM")
        started = time.monotonic()
        on_a = await eventually(
            lambda: health_on(rs, "a", endpoint_id),
            until=lambda h: h["status"] == "ok",
            timeout=SEEN_WITHIN,
            what="B's success in A's view",
        )
        ok_seen_after = time.monotonic() - started
        assert on_a["last_error"] == on_b["last_error"]  # when it last failed stays shown
        assert on_a["successes"] >= 1 and on_a["errors"] >= 1

        rs.start("c")  # a replica that starts later reads the same record
        await rs.wait_ready("c")
        await eventually(lambda: _views(rs, endpoint_id), until=lambda views: len(set(views)) == 1,
                         timeout=SEEN_WITHIN, what="one health on every replica")
    print(f"A's failure in B's view after {failing_seen_after * 1000:.0f} ms,"
          f" B's success in A's after {ok_seen_after * 1000:.0f} ms")


async def _views(rs: ReplicaSet, endpoint_id: str) -> list[str]:
    return [
        repr(sorted((await health_on(rs, name, endpoint_id)).items())) for name in ("a", "b", "c")
    ]
