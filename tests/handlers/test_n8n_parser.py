"""N8nHandler on recorded n8n chat streams (no server needed), the JSON-lines reader, and
cancel's REST calls against a fake of n8n's REST API."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from handlers.base import Completed, Failed, HandlerRequest, Progress, Rejected, Reply, TextDelta
from handlers.n8n import N8nHandler, N8nSettings
from handlers.upstream import EventTooLarge
from handlers.upstream.json_lines import JSONLinesReader
from tests.handlers.openai_mock import Backend, TrackedStream, collect
from tests.support.messages import handler_request

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "n8n"
CHAT_URL = "http://n8n.test/webhook/fw2chat/chat"
ANSWER = "Hello from fakellm. You said: hello there"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def lines_response(chunks: list[bytes], *, content_type: str = "application/json; charset=utf-8",
                   status: int = 200, hang: bool = False) -> httpx.Response:
    return httpx.Response(status, headers={"content-type": content_type},
                          stream=TrackedStream(chunks, hang=hang))


def handler(http: httpx.AsyncClient, **settings: object) -> N8nHandler:
    return N8nHandler(N8nSettings(n8n_chat_url=CHAT_URL, **settings), http)


async def run_with(chunks: list[bytes], text: str = "hello there", **options: object):
    settings = {k: v for k, v in options.items() if k != "content_type"}
    content_type = str(options.get("content_type", "application/json; charset=utf-8"))
    backend = Backend(lambda request: lines_response(list(chunks), content_type=content_type))
    async with backend.client() as http:
        events = await collect(handler(http, **settings).run(handler_request(text)))
    return events, backend


async def test_recorded_stream_maps_to_progress_deltas_and_the_joined_answer() -> None:
    events, backend = await run_with(fixture("a.txt").splitlines(keepends=True))
    assert events[0] == Progress("working")
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["Hello", " from", " fakellm.", " You", " said:", " hello", " there"]
    assert events[-1] == Completed(text=ANSWER)
    [request] = backend.requests
    assert str(request.url) == CHAT_URL and request.method == "POST"
    body = backend.bodies[0]
    assert set(body) == {"action", "sessionId", "chatInput"}
    assert body["action"] == "sendMessage" and body["chatInput"] == "hello there"


async def test_lines_split_anywhere_across_chunks_read_the_same() -> None:
    raw = fixture("a.txt").replace(b"\n", b"\r\n")
    chunks = [raw[i:i + 7] for i in range(0, len(raw), 7)]
    events, _ = await run_with(chunks)
    assert events[-1] == Completed(text=ANSWER)


async def test_session_id_is_one_per_caller_and_context() -> None:
    backend = Backend(lambda request: lines_response(fixture("a.txt").splitlines(True)))
    async with backend.client() as http:
        n8n = handler(http)
        for context, principal in (("c1", "alice"), ("c1", "alice"), ("c2", "alice"),
                                   ("c1", "bob")):
            await collect(n8n.run(handler_request("hi", context_id=context, principal=principal)))
    first, again, other_context, other_caller = (b["sessionId"] for b in backend.bodies)
    assert first == again and first.startswith("a2a-")
    assert len({first, other_context, other_caller}) == 3
    assert "alice" not in first and "c1" not in first


async def test_an_error_line_fails_the_task_with_n8n_reason() -> None:
    events, _ = await run_with([fixture("e_llm500.txt")])
    assert events[-1] == Failed("the n8n execution failed: fakellm scripted server error")
    assert not any(isinstance(e, Completed) for e in events)


async def test_the_abort_after_a_stop_is_a_failure_when_it_comes_unasked() -> None:
    events, _ = await run_with([fixture("d_stop_stream.txt")])
    assert events[-1] == Failed("the n8n execution failed: Original error: AbortError")


@pytest.mark.parametrize(("line", "detail"), [
    (b"not json at all\n", "data that is not JSON"),
    (b"[1, 2]\n", "data that is not a JSON object"),
    (b'{"content": "x"}\n', "a line without a type"),
    (b'{"type": "item", "content": 5}\n', "an item without text"),
])
async def test_a_bad_line_fails_the_task_naming_what_was_wrong(line: bytes, detail: str) -> None:
    begin = fixture("a.txt").splitlines(True)[0]
    events, _ = await run_with([begin, line])
    assert events[-1] == Failed(f"n8n sent an unexpected frame ({detail})")


async def test_unknown_line_types_are_skipped() -> None:
    lines = fixture("a.txt").splitlines(True)
    events, _ = await run_with([lines[0], b'{"type": "metrics", "n": 1}\n', *lines[1:]])
    assert events[-1] == Completed(text=ANSWER)


async def test_a_stream_cut_before_the_end_line_fails() -> None:
    events, _ = await run_with(fixture("a.txt").splitlines(True)[:4])
    assert events[-1] == Failed("n8n closed the stream before the execution finished")


async def test_two_streaming_nodes_answer_one_after_the_other() -> None:
    def node(name: str, *texts: str) -> list[bytes]:
        meta = {"nodeName": name}
        return [json.dumps(line).encode() + b"\n" for line in (
            {"type": "begin", "metadata": meta},
            *({"type": "item", "content": t, "metadata": meta} for t in texts),
            {"type": "end", "metadata": meta})]

    events, _ = await run_with(node("A", "one", " two") + node("B", "three"))
    assert events[-1] == Completed(text="one two\n\nthree")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "one two\n\nthree"


async def test_a_line_over_max_event_bytes_fails_the_task() -> None:
    events, _ = await run_with([b'{"type":"begin"}\n', b'{"type":"item","content":"'
                                + b"x" * 3000], max_event_bytes=1024)
    assert events[-1] == Failed("n8n sent an event larger than 1024 bytes")


async def test_an_answer_that_is_not_json_lines_fails() -> None:
    events, _ = await run_with([b"<html>login</html>"], content_type="text/html")
    assert events == [Failed("n8n did not answer with JSON lines")]


async def test_an_http_error_fails_with_its_status() -> None:
    backend = Backend(lambda request: httpx.Response(
        404, json={"code": 404, "message": "The requested webhook is not registered."}))
    async with backend.client() as http:
        events = await collect(handler(http, retry_attempts=0).run(handler_request("hi")))
    [failed] = events
    assert isinstance(failed, Failed) and "404" in failed.reason
    assert "not registered" in failed.reason


async def test_message_mode_reads_the_stream_and_replies_once() -> None:
    events, _ = await run_with(fixture("a.txt").splitlines(True), response_mode="message")
    assert events == [Reply(text=ANSWER)]


async def test_a_message_without_text_is_rejected_before_any_call() -> None:
    events, backend = await run_with([], text="")
    assert len(events) == 1 and isinstance(events[0], Rejected)
    assert backend.requests == []


async def test_cancel_without_owner_credentials_only_closes_the_stream() -> None:
    backend = Backend(lambda request: httpx.Response(500))
    async with backend.client() as http:
        assert await handler(http).cancel(handler_request("hi")) is False
    assert backend.requests == []


def test_settings_need_http_urls_and_derive_the_rest_url() -> None:
    assert N8nSettings(n8n_chat_url=CHAT_URL).rest_url == "http://n8n.test"
    assert N8nSettings(n8n_chat_url="https://h.test/n8n/webhook/x/chat").rest_url == \
        "https://h.test/n8n"
    assert N8nSettings(n8n_chat_url=CHAT_URL, n8n_api_url="http://api.test/").rest_url == \
        "http://api.test"
    for bad in ({"n8n_chat_url": "ftp://x/chat"}, {}, {"n8n_chat_url": ""}):
        with pytest.raises(ValueError, match="n8n_chat_url"):
            N8nSettings(**bad)


def test_json_lines_reader_skips_blank_lines_and_keeps_a_last_unended_line() -> None:
    reader = JSONLinesReader()
    assert [f.data for f in reader.feed(b'{"a":1}\r\n\n  \n{"b"')] == ['{"a":1}']
    assert reader.feed(b":2}") == []
    assert [f.data for f in reader.finish()] == ['{"b":2}']
    assert reader.finish() == []


def test_json_lines_reader_bounds_a_line_growing_over_many_chunks() -> None:
    reader = JSONLinesReader(max_event_bytes=10)
    reader.feed(b"12345")
    with pytest.raises(EventTooLarge):
        reader.feed(b"678901")


# -- cancel: the REST calls, against a fake n8n REST API ---------------------------------

class FakeRest:
    """n8n's login, executions list, execution and stop routes, as far as cancel uses them."""

    def __init__(self, running: dict[str, str], listing: object = None) -> None:
        self.running = running  # execution id -> the sessionId in its data
        self.listing = listing
        self.stopped: list[str] = []
        self.calls: list[str] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/rest/login", self.login)
        app.router.add_get("/rest/executions", self.executions)
        app.router.add_get("/rest/executions/{id}", self.execution)
        app.router.add_post("/rest/executions/{id}/stop", self.stop)
        return app

    def authorized(self, request: web.Request) -> None:
        self.calls.append(f"{request.method} {request.path}")
        if request.cookies.get("n8n-auth") != "session-token":
            raise web.HTTPUnauthorized()

    async def login(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body != {"emailOrLdapLoginId": "owner@n8n.test", "password": PASSWORD}:
            raise web.HTTPUnauthorized()
        response = web.json_response({"data": {}})
        response.set_cookie("n8n-auth", "session-token", secure=True, httponly=True)
        return response

    async def executions(self, request: web.Request) -> web.Response:
        self.authorized(request)
        assert json.loads(request.query["filter"]) == {"status": ["running"]}
        if self.listing is not None:
            return web.json_response(self.listing)
        return web.json_response({"data": {"results": [{"id": i} for i in self.running]}})

    async def execution(self, request: web.Request) -> web.Response:
        self.authorized(request)
        session = self.running[request.match_info["id"]]
        data = json.dumps([{"sessionId": session, "action": "sendMessage"}])
        return web.json_response({"data": {"id": request.match_info["id"], "data": data}})

    async def stop(self, request: web.Request) -> web.Response:
        self.authorized(request)
        self.stopped.append(request.match_info["id"])
        return web.json_response({"data": {"status": "canceled"}})


PASSWORD = "n8n-owner-password-0123"


async def cancel_against(rest: FakeRest, request: HandlerRequest, password: str = PASSWORD,
                         ) -> bool:
    runner = web.AppRunner(rest.app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        async with httpx.AsyncClient() as http:
            n8n = handler(http, n8n_api_url=f"http://127.0.0.1:{port}",
                          n8n_owner_email="owner@n8n.test", n8n_owner_password=password)
            return await n8n.cancel(request)
    finally:
        await runner.cleanup()


async def test_cancel_stops_the_newest_running_execution_of_the_context() -> None:
    request = handler_request("hi", context_id="mine")
    async with httpx.AsyncClient() as http:
        mine = handler(http).session_id(request)
    other = handler_request("hi", context_id="other")
    async with httpx.AsyncClient() as http:
        theirs = handler(http).session_id(other)
    rest = FakeRest({"9": mine, "12": theirs, "10": mine})
    assert await cancel_against(rest, request) is False  # the gateway closes the stream
    assert rest.stopped == ["10"]
    assert rest.calls[:3] == ["GET /rest/executions", "GET /rest/executions/12",
                              "GET /rest/executions/10"]


async def test_a_failed_stop_is_logged_never_raised_and_without_the_password(capsys) -> None:
    assert await cancel_against(FakeRest({}), handler_request("hi"), "wrong-" + PASSWORD) is False
    out = capsys.readouterr().out
    assert "n8n_stop_failed" in out and "HTTP 401 to POST login" in out
    assert PASSWORD not in out
    rest = FakeRest({}, listing={"data": ["not", "objects"]})
    assert await cancel_against(rest, handler_request("hi")) is False
    assert "listed the executions in an unexpected shape" in capsys.readouterr().out
    assert rest.stopped == []
