"""Record the wire of a running AgentOS (.ci/services/60-agno.sh) into tests/fixtures/agno/,
as the Agno handler calls it (background streamed runs, /continue, /cancel, GET of a run).

    python tests/backends/agno/record_fixtures.py   # needs A2A_TEST_AGNO_URL, A2A_TEST_AGNO_KEY
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

import httpx

OUT = Path(__file__).resolve().parents[2] / "fixtures" / "agno"
RUNS = "/agents/assistant/runs"


async def stream(http: httpx.AsyncClient, path: str, form: dict[str, str], name: str,
                 cancel_after: int | None = None) -> bytes:
    """The raw SSE body of one call, saved as ``name``; ``cancel_after``: cancel the run after
    that many RunContent frames and read the stream to its end."""
    raw = b""
    async with http.stream(
        "POST", path, data={"stream": "true", "background": "true", **form}
    ) as r:
        r.raise_for_status()
        async for chunk in r.aiter_bytes():
            raw += chunk
            if cancel_after is not None and raw.count(b"event: RunContent\n") > cancel_after:
                run_id = json.loads(raw.split(b"data: ", 1)[1].split(b"\n", 1)[0])["run_id"]
                await http.post(
                    f"{RUNS}/{run_id}/cancel", params={"session_id": form["session_id"]}
                )
                cancel_after = None
    (OUT / name).write_bytes(raw)
    return raw


def last(raw: bytes, event: str) -> dict:
    block = raw.split(f"event: {event}\n".encode())[-1]
    return json.loads(block.split(b"data: ", 1)[1].split(b"\n", 1)[0])


async def get_run(http: httpx.AsyncClient, run_id: str, session_id: str, name: str) -> None:
    response = await http.get(f"{RUNS}/{run_id}", params={"session_id": session_id})
    response.raise_for_status()
    (OUT / name).write_text(json.dumps(response.json(), indent=1) + "\n")


async def record_resumes(http: httpx.AsyncClient) -> None:
    """``/resume`` of a run going on (after its third event), of the same run ended (all of its
    events), and of a run the server does not know."""
    session = f"fixture-{uuid.uuid4().hex[:8]}"
    async with http.stream("POST", RUNS, data={
            "message": "FAKE_SLOW words=8 delay=0.2 rejoined", "stream": "true",
            "background": "true", "session_id": session}) as r:
        head = b""
        async for chunk in r.aiter_bytes():
            head += chunk
            if head.count(b"event_index") >= 3:
                break
    run_id = json.loads(head.split(b"data: ", 1)[1].split(b"\n", 1)[0])["run_id"]
    await stream(http, f"{RUNS}/{run_id}/resume", {"session_id": session, "last_event_index": "2"},
                 "resume_running.txt")
    await stream(http, f"{RUNS}/{run_id}/resume", {"session_id": session}, "resume_ended.txt")
    await stream(http, f"{RUNS}/nope/resume", {"session_id": session}, "resume_unknown_run.txt")


async def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    headers = {"Authorization": f"Bearer {os.environ['A2A_TEST_AGNO_KEY']}"}
    async with httpx.AsyncClient(base_url=os.environ["A2A_TEST_AGNO_URL"], headers=headers,
                                 timeout=60) as http:
        session = f"fixture-{uuid.uuid4().hex[:8]}"
        raw = await stream(http, RUNS, {"message": "FAKE_SLOW words=5 delay=0.05 hello agno",
                                        "session_id": session}, "stream_plain.txt")
        await get_run(http, last(raw, "RunCompleted")["run_id"], session, "run_completed.json")

        for confirmed, name in ((True, "stream_continue_confirmed.txt"),
                                (False, "stream_continue_rejected.txt")):
            session = f"fixture-{uuid.uuid4().hex[:8]}"
            raw = await stream(http, RUNS, {"message": "FAKE_TOOL_DANGER path=scratch/fixture",
                                            "session_id": session}, "stream_paused.txt")
            run_id = last(raw, "RunPaused")["run_id"]
            await get_run(http, run_id, session, "run_paused.json")
            tools = [{"tool_call_id": t["tool_call_id"], "tool_name": t["tool_name"],
                      "tool_args": t["tool_args"], "requires_confirmation": True,
                      "confirmed": confirmed} for t in last(raw, "RunPaused")["tools"]]
            await stream(http, f"{RUNS}/{run_id}/continue",
                         {"tools": json.dumps(tools), "session_id": session}, name)

        session = f"fixture-{uuid.uuid4().hex[:8]}"
        raw = await stream(http, RUNS, {"message": "FAKE_SLOW words=30 delay=0.1 stop me",
                                        "session_id": session}, "stream_cancelled.txt",
                           cancel_after=3)
        await get_run(http, last(raw, "RunCancelled")["run_id"], session, "run_cancelled.json")

        session = f"fixture-{uuid.uuid4().hex[:8]}"
        raw = await stream(http, RUNS, {"message": "FAKE_HTTP_400 broken", "session_id": session},
                           "stream_error.txt")
        await get_run(http, last(raw, "RunError")["run_id"], session, "run_error.json")

        session = f"fixture-{uuid.uuid4().hex[:8]}"
        async with http.stream("POST", RUNS, data={
                "message": "FAKE_SLOW words=20 delay=0.1 running", "stream": "true",
                "background": "true", "session_id": session}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    run_id = json.loads(line[6:])["run_id"]
                    break
        await asyncio.sleep(0.5)
        await get_run(http, run_id, session, "run_running.json")

        for name, path, auth in (("error_unknown_agent.json", "/agents/nope/runs", headers),
                                 ("error_no_key.json", RUNS, {"Authorization": "Bearer wrong"})):
            response = await http.post(path, data={"message": "x"}, headers=auth)
            (OUT / name).write_text(json.dumps(
                {"status": response.status_code, "body": response.json()}) + "\n")
        await record_resumes(http)
        response = await http.get(f"{RUNS}/nope", params={"session_id": "x"})
        (OUT / "error_unknown_run.json").write_text(json.dumps(
            {"status": response.status_code, "body": response.json()}) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
