r"""Added latency of the Hermes bridge per streamed token.

Every token of a ``FAKE_SLOW`` reply is timestamped where the scripted LLM sends it
(``GET /_requests`` → ``chunks``). The same reply is then read two ways:

    direct   a plain consumer of Hermes' ``/v1/runs/{id}/events`` (what the bridge reads)
    gateway  the a2a-sdk client streaming through the gateway and the Hermes handler

Per token, latency = arrival time − LLM send time (one machine, one clock). The bridge's
added latency is the gateway figure minus the direct one. Needs the scripted LLM and
Hermes from ``.ci/services`` (or the same variables set by hand):

    A2A_TEST_LLM_URL=… A2A_TEST_HERMES_URL=… A2A_TEST_HERMES_KEY=… \
        python bench/hermes_bridge_latency.py --runs 5 --words 40 --delay 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import time
import uuid
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest
from aiohttp import web
from httpx_sse import aconnect_sse

from a2a_gateway.app import build_app
from a2a_gateway.observability.logs import configure_logging
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.state import GATEWAY
from a2a_gateway.stores.base import Endpoint

_WORD = re.compile(r"slow(\d+)")


def prompt(words: int, delay: float) -> str:
    return f"FAKE_SLOW words={words} delay={delay} bench-{uuid.uuid4().hex[:10]}"


async def llm_chunk_times(http: httpx.AsyncClient, llm_url: str, text: str) -> dict[int, float]:
    for _ in range(50):
        requests = (await http.get(f"{llm_url}/_requests")).json()
        match = [r for r in requests if r.get("text") == text and r.get("outcome") == "completed"]
        if match:
            return {int(m.group(1)): t for t, chunk in match[-1]["chunks"]
                    for m in _WORD.finditer(chunk)}
        await asyncio.sleep(0.1)
    raise RuntimeError("the scripted LLM did not log the request")


def stamp(arrivals: dict[int, float], text: str, now: float) -> None:
    for m in _WORD.finditer(text):
        arrivals.setdefault(int(m.group(1)), now)


async def direct_run(http: httpx.AsyncClient, hermes: str, key: str, text: str) -> dict[int, float]:
    headers = {"Authorization": f"Bearer {key}"}
    created = (await http.post(f"{hermes}/v1/runs", json={"input": text}, headers=headers)).json()
    arrivals: dict[int, float] = {}
    async with aconnect_sse(http, "GET", f"{hermes}/v1/runs/{created['run_id']}/events",
                            headers=headers, timeout=60) as source:
        async for sse in source.aiter_sse():
            event = json.loads(sse.data)
            if event.get("event") == "message.delta":
                stamp(arrivals, event.get("delta", ""), time.time())
            if event.get("event", "").startswith("run."):
                break
    return arrivals


async def gateway_run(client: Any, text: str) -> dict[int, float]:
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    arrivals: dict[int, float] = {}
    async for event in client.send_message(SendMessageRequest(message=message)):
        if event.HasField("artifact_update") and not event.artifact_update.last_chunk:
            stamp(
                arrivals, "".join(p.text for p in event.artifact_update.artifact.parts), time.time()
            )
    return arrivals


def latencies_ms(sent: dict[int, float], arrived: dict[int, float]) -> list[float]:
    return [(arrived[i] - sent[i]) * 1000 for i in sorted(sent) if i in arrived]


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered), 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
            "mean_ms": round(statistics.fmean(ordered), 2)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    configure_logging("warning", "console")
    app = build_app(GatewaySettings(store="memory://", log_level="warning"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    endpoint = Endpoint(id=str(uuid.uuid4()), name="hermes", metadata={
        "module_name": "handlers.hermes", "class_name": "HermesAgentHandler",
        "hermes_api_url": args.hermes_url, "hermes_api_key": args.hermes_key, "public": True})
    await app[GATEWAY].store.create_endpoint(endpoint)
    direct: list[float] = []
    bridged: list[float] = []
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            card = await A2ACardResolver(http, f"{base}/{endpoint.id}").get_agent_card()
            client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
            try:
                for _ in range(args.runs):
                    text = prompt(args.words, args.delay)
                    arrived = await direct_run(http, args.hermes_url, args.hermes_key, text)
                    direct += latencies_ms(await llm_chunk_times(http, args.llm_url, text), arrived)
                    text = prompt(args.words, args.delay)
                    arrived = await gateway_run(client, text)
                    bridged += latencies_ms(
                        await llm_chunk_times(http, args.llm_url, text), arrived
                    )
            finally:
                await client.close()
    finally:
        await runner.cleanup()
    d, g = summary(direct), summary(bridged)
    return {"runs": args.runs, "words": args.words, "delay_s": args.delay,
            "llm_to_hermes_consumer": d, "llm_to_a2a_client": g,
            "bridge_added_p50_ms": round(g["p50_ms"] - d["p50_ms"], 2),
            "bridge_added_p95_ms": round(g["p95_ms"] - d["p95_ms"], 2)}


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hermes-url", default=os.environ.get("A2A_TEST_HERMES_URL"))
    parser.add_argument("--hermes-key", default=os.environ.get("A2A_TEST_HERMES_KEY"))
    parser.add_argument("--llm-url", default=os.environ.get("A2A_TEST_LLM_URL"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds between tokens")
    args = parser.parse_args()
    if not (args.hermes_url and args.hermes_key and args.llm_url):
        parser.error("set A2A_TEST_HERMES_URL, A2A_TEST_HERMES_KEY and A2A_TEST_LLM_URL")
    print(json.dumps(asyncio.run(main(args)), indent=2))


if __name__ == "__main__":
    cli()
