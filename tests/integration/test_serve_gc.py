"""``a2a-gateway serve`` tunes the garbage collector for serving (``cli.tune_gc_for_serving``):
start-up's objects frozen, the youngest generation collected every ``gc_young_threshold``
allocations. Read from the served process's own ``/metrics`` (prometheus_client's
``python_gc_collections_total``)."""

from __future__ import annotations

import re
import uuid

import httpx

from tests.support.cli_process import serving

ENDPOINT_ID = "00000000-0000-4000-8000-000000000c01"
ENDPOINTS = f"""endpoints:
  - id: {ENDPOINT_ID}
    name: echo
    description: echo
    handler: handlers.echo:EchoHandler
    public: true
    settings: {{delay: 0}}
"""
YOUNG = re.compile(r'^python_gc_collections_total\{generation="0"\} (\S+)$', re.M)


async def _young_collections(http: httpx.AsyncClient, base: str) -> float:
    found = YOUNG.search((await http.get(f"{base}/metrics")).text)
    assert found, "no python_gc_collections_total in /metrics"
    return float(found[1])


async def _collections_per_sends(tmp_path, sends: int, **env: str) -> float:
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(ENDPOINTS)
    async with serving(
        "serve", "--store", "memory://", "--endpoints", str(endpoints), **env
    ) as listening:
        base = listening[1]
        async with httpx.AsyncClient(timeout=30) as http:
            before = await _young_collections(http, base)
            for _ in range(sends):
                reply = await http.post(
                    f"{base}/{ENDPOINT_ID}/a2a",
                    headers={"A2A-Version": "1.0"},
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "SendMessage",
                        "params": {
                            "message": {
                                "messageId": str(uuid.uuid4()),
                                "role": "ROLE_USER",
                                "parts": [{"text": "hi"}],
                            }
                        },
                    },
                )
                assert reply.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            return await _young_collections(http, base) - before


async def test_serve_collects_the_youngest_generation_rarely(tmp_path):
    tuned = await _collections_per_sends(tmp_path, 400)
    python_default = await _collections_per_sends(
        tmp_path, 400, A2A_GATEWAY_GC_YOUNG_THRESHOLD="700"
    )
    assert python_default >= 4 * max(tuned, 1), (tuned, python_default)
