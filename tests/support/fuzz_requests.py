"""Generated hostile requests for a gateway endpoint that needs an API key, and the rules
every reply must keep (used by tests/integration/test_fuzz.py and bench/fuzz_gateway.py; its
value strategies, body encodings, server-error check and thread runner also by
tests/integration/test_fuzz_operator.py).

A case is one HTTP request: a JSON-RPC or REST call, or a path that exists nowhere, with
bodies built from the A2A field names and random values (huge and negative integers,
deep nesting, wrong types, bytes that are not JSON), random protocol headers, content
encodings (true and false), and a valid key, a wrong key or none. Every reply must be
below 500 and well formed: a JSON-RPC 2.0 envelope echoing the request's id on the
JSON-RPC URL (whenever the body could be read), an AIP-193 error elsewhere, or an SSE
stream of such envelopes. The gateway runs in its own thread, so hypothesis drives it
with a plain blocking client.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
import orjson
from a2a.types import Task
from hypothesis import strategies as st

from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.stores.base import Scope
from a2a_gateway.stores.memory import MemoryStore
from tests.support.harness import running_gateway

PRINCIPAL = "fuzz-caller"
T = TypeVar("T")
R = TypeVar("R")

METHODS = [
    "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask",
    "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard",
    "message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe",
    "tasks/pushNotificationConfig/set", "tasks/pushNotificationConfig/get",
    "agent/getAuthenticatedExtendedCard",
]
FIELDS = [
    "message", "messageId", "role", "parts", "text", "data", "file", "raw", "url", "bytes", "uri",
    "mimeType", "mediaType", "kind", "id", "taskId", "contextId", "metadata", "configuration",
    "historyLength", "pageSize", "pageToken", "status", "includeArtifacts", "acceptedOutputModes",
    "returnImmediately", "blocking", "extensions", "referenceTaskIds", "name", "token",
    "authentication", "scheme", "credentials", "tenant", "statusTimestampAfter", "state",
    "currentGeneration", "ifGenerationMatch",
]
ENUM_LIKE = [
    "ROLE_USER",
    "ROLE_AGENT",
    "user",
    "agent",
    "text",
    "file",
    "data",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_BOGUS",
    "2.0",
    "1.0",
    "0.3",
    "",
]
REST_PATHS = [
    "/message:send", "/message:stream", "/tasks", "/tasks/{t}", "/tasks/{t}:cancel",
    "/tasks/{t}:subscribe", "/tasks/{t}/pushNotificationConfigs",
    "/tasks/{t}/pushNotificationConfigs/{c}", "/extendedAgentCard",
]
QUERY_KEYS = ["pageSize", "historyLength", "status", "includeArtifacts", "contextId", "pageToken",
              "statusTimestampAfter", "A2A-Version", "tenant", "x"]

ints = st.one_of(
    st.integers(-3, 200),
    st.sampled_from(
        [2**31 - 1, 2**31, -(2**31) - 1, 2**32, 2**53, 2**63 - 1, -(2**63), 99999999999]
    ),
    st.integers(-(2**63), 2**64 - 1),
)
texts = st.one_of(
    st.sampled_from(ENUM_LIKE), st.text(max_size=20), st.sampled_from(["?input", "hi"])
)
_scalars = st.one_of(
    st.none(), st.booleans(), ints, st.floats(allow_nan=False, allow_infinity=False), texts
)


def _nested(levels: int) -> Any:
    value: Any = {}
    for i in range(levels):
        value = {"a": value} if i % 3 else [value]
    return value


deep_json = st.integers(20, 700).map(_nested)
json_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), inner, max_size=5),
    ),
    max_leaves=25,
)
_part = st.one_of(
    st.fixed_dictionaries({"text": texts}),
    st.fixed_dictionaries({"kind": st.just("text"), "text": texts}),
    st.fixed_dictionaries({"kind": st.just("file"), "file": st.fixed_dictionaries(
        {"bytes": st.one_of(st.text(max_size=12), st.just("aGk=")), "mimeType": texts})}),
    st.fixed_dictionaries({"kind": st.just("data"), "data": st.one_of(json_values, deep_json)}),
    st.fixed_dictionaries({"raw": st.text(max_size=12)}),
    json_values,
)
_message = st.fixed_dictionaries(
    {
        "messageId": st.one_of(st.uuids().map(str), texts),
        "role": st.sampled_from(ENUM_LIKE),
        "parts": st.lists(_part, max_size=3),
    },
    optional={
        "kind": st.just("message"),
        "metadata": st.one_of(json_values, deep_json),
        "taskId": texts,
        "contextId": texts,
    },
)
_params = st.one_of(
    st.fixed_dictionaries({"message": _message}, optional={"configuration": st.dictionaries(
        st.sampled_from(["historyLength", "blocking", "returnImmediately", "acceptedOutputModes",
                         "ifGenerationMatch"]),
        _scalars, max_size=3)}),
    st.dictionaries(st.sampled_from(FIELDS), st.one_of(_scalars, json_values), max_size=5),
    json_values,
)
_text_part = st.fixed_dictionaries({"text": texts})
_valid_calls = st.one_of(
    st.tuples(
        st.just("SendMessage"),
        st.fixed_dictionaries(
            {
                "message": st.fixed_dictionaries(
                    {
                        "messageId": st.uuids().map(str),
                        "role": st.just("ROLE_USER"),
                        "parts": st.lists(_text_part, min_size=1, max_size=2),
                    },
                    optional={
                        "metadata": st.dictionaries(st.text(max_size=5), json_values, max_size=3)
                    },
                )
            },
            optional={"configuration": st.fixed_dictionaries({"historyLength": ints})},
        ),
        st.just("1.0"),
    ),
    st.tuples(
        st.just("message/send"),
        st.fixed_dictionaries(
            {
                "message": st.fixed_dictionaries(
                    {
                        "kind": st.just("message"),
                        "messageId": st.uuids().map(str),
                        "role": st.just("user"),
                        "parts": st.lists(
                            st.fixed_dictionaries({"kind": st.just("text"), "text": texts}),
                            min_size=1,
                            max_size=2,
                        ),
                    }
                )
            }
        ),
        st.just("0.3"),
    ),
    st.tuples(
        st.sampled_from(["ListTasks", "GetTask"]),
        st.fixed_dictionaries(
            {},
            optional={
                "pageSize": ints,
                "historyLength": ints,
                "status": st.sampled_from(ENUM_LIKE),
                "id": texts,
                "currentGeneration": st.one_of(ints, _scalars),
            },
        ),
        st.sampled_from(["1.0", "1.1"]),
    ),
)
"""A call a client would send, but for its values: these reach the agent with a valid key."""
_request_id = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=12), st.none(),
                        st.booleans(), st.lists(st.integers(), max_size=2))


@dataclass
class Case:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    jsonrpc: bool
    credential: str
    """``valid``, ``wrong`` or ``none``."""
    request_id: Any = None
    id_readable: bool = False
    """The body is JSON whose ``id`` the gateway can read, so errors must echo it."""


@dataclass
class Outcome:
    """Counts over many cases."""

    cases: int = 0
    server_errors: int = 0
    malformed: int = 0
    timeouts: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, case: Case, problems: list[str]) -> None:
        self.cases += 1
        if any(p.startswith("5xx") for p in problems):
            self.server_errors += 1
        elif any(p.startswith("timeout") for p in problems):
            self.timeouts += 1
        elif problems:
            self.malformed += 1
        if problems and len(self.examples) < 20:
            self.examples.append(
                f"{case.method} {case.path} {problems[0]} body={case.body[:120]!r}"
            )


@st.composite
def _headers(draw: st.DrawFn, key: str) -> tuple[dict[str, str], str]:
    headers: dict[str, str] = {}
    version = draw(st.sampled_from(["1.0", "0.3", "1.0.1", "1.1", "", "2.0", "x", None]))
    if version is not None:
        headers["A2A-Version"] = version
    content_type = draw(
        st.sampled_from(
            [
                "application/json",
                "application/a2a+json",
                "text/plain",
                "application/json; charset=latin-1",
                None,
            ]
        )
    )
    if content_type is not None:
        headers["Content-Type"] = content_type
    if draw(st.booleans()):
        headers["Accept"] = draw(st.sampled_from(["text/event-stream", "*/*", "application/json"]))
    if draw(st.integers(0, 9)) == 0:
        headers["A2A-Extensions"] = draw(
            st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30)
        )
    if draw(st.integers(0, 9)) == 0:
        headers["X-Request-Id"] = draw(
            st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=70)
        )
    credential = draw(st.sampled_from(["valid", "valid", "wrong", "none"]))
    presented = key if credential == "valid" else draw(st.sampled_from(
        [key[:-1] + ("A" if key[-1] != "A" else "B"), "a2a_nope", "", "Bearer", key + "x"]))
    if credential != "none":
        if draw(st.booleans()):
            headers["X-API-Key"] = presented
        else:
            headers["Authorization"] = f"Bearer {presented}"
    return {
        name: value.strip() for name, value in headers.items()
    }, credential  # as HTTP sends them


@st.composite
def encoded_body(draw: st.DrawFn, value: Any, headers: dict[str, str]) -> tuple[bytes, bool]:
    """The encoded body and whether the gateway can read it as sent."""
    raw = json.dumps(value).encode() if value is not None else b""  # orjson stops at 255 levels
    shape = draw(
        st.sampled_from(
            ["plain"] * 6
            + ["bytes", "truncated", "gzip", "deflate", "false-gzip", "bogus-encoding"]
        )
    )
    if shape == "bytes":
        return draw(st.binary(max_size=64)), False
    if shape == "truncated" and raw:
        return raw[: draw(st.integers(0, len(raw) - 1))], False
    if shape in ("gzip", "deflate"):
        headers["Content-Encoding"] = shape
        return (gzip.compress(raw) if shape == "gzip" else zlib.compress(raw)), True
    if shape == "false-gzip":
        headers["Content-Encoding"] = draw(st.sampled_from(["gzip", "deflate"]))
        return raw, False
    if shape == "bogus-encoding":
        headers["Content-Encoding"] = draw(
            st.sampled_from(["compress", "gzip, gzip", "x-bogus", "br", "zstd"])
        )
        return raw, False
    return raw, True


def path_segment(draw: st.DrawFn) -> str:
    return quote(draw(st.one_of(st.uuids().map(str), st.text(min_size=1, max_size=12))), safe="")


@st.composite
def cases(draw: st.DrawFn, endpoint_id: str, key: str) -> Case:
    """One hostile request for ``endpoint_id`` (``key`` is its valid API key)."""
    headers, credential = draw(_headers(key))
    kind = draw(st.sampled_from(["jsonrpc"] * 5 + ["rest"] * 4 + ["path"]))
    if kind == "jsonrpc":
        envelope: dict[str, Any] = {}
        if draw(st.integers(0, 9)):
            envelope["jsonrpc"] = "2.0" if draw(st.integers(0, 5)) else draw(_scalars)
        request_id = draw(_request_id)
        if draw(st.integers(0, 9)):
            envelope["id"] = request_id
        if draw(st.integers(0, 9)):
            envelope["method"] = draw(st.one_of(st.sampled_from(METHODS), texts))
        if draw(st.integers(0, 5)):
            envelope["params"] = draw(_params)
        if draw(st.integers(0, 2)) == 0:
            envelope["jsonrpc"] = "2.0"
            envelope["method"], envelope["params"], version = draw(_valid_calls)
            headers["A2A-Version"] = version
        value = envelope if draw(st.integers(0, 9)) else draw(json_values)
        body, readable = draw(encoded_body(value, headers))
        read_id = value.get("id") if isinstance(value, dict) else None
        id_readable = (
            readable and headers.get("Content-Type") != "text/plain"
            and (isinstance(read_id, str) or type(read_id) is int)
        )
        request_id = read_id
        path = draw(st.sampled_from([f"/{endpoint_id}/a2a", f"/{endpoint_id}/a2a/"]))
        return Case("POST", path, headers, body, True, credential, request_id, id_readable)
    if kind == "rest":
        template = draw(st.sampled_from(REST_PATHS))
        path = f"/{endpoint_id}/a2a/rest" + template.replace("{t}", path_segment(draw)).replace(
            "{c}", path_segment(draw)
        )
        query = draw(
            st.dictionaries(
                st.sampled_from(QUERY_KEYS), st.one_of(ints.map(str), texts), max_size=3
            )
        )
        if query:
            path += "?" + "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in query.items())
        method = draw(st.sampled_from(["GET", "POST", "DELETE", "PUT"]))
        body, _ = draw(encoded_body(draw(_params) if method == "POST" else None, headers))
        return Case(method, path, headers, body, False, credential)
    junk = "/".join(path_segment(draw) for _ in range(draw(st.integers(1, 4))))
    path = draw(st.sampled_from([f"/{endpoint_id}/{junk}", f"/{junk}", f"/{junk}/a2a/rest/tasks"]))
    method = draw(st.sampled_from(["GET", "POST", "DELETE", "PATCH"]))
    body, _ = draw(encoded_body(draw(json_values) if method != "GET" else None, headers))
    return Case(
        method,
        path,
        headers,
        body,
        method == "POST" and path.rstrip("/").endswith("/a2a"),
        credential,
    )


# --- checking replies -------------------------------------------------------------------


def _envelope_problems(case: Case, reply: Any) -> list[str]:
    if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
        return ["not a JSON-RPC 2.0 envelope"]
    if ("result" in reply) == ("error" in reply):
        return ["needs exactly one of result and error"]
    if "error" in reply:
        error = reply["error"]
        if not isinstance(error, dict) or not isinstance(error.get("code"), int) or not isinstance(
            error.get("message"), str
        ):
            return ["error without an integer code and a message"]
    if case.id_readable and reply.get("id") != case.request_id:
        return [f"id {reply.get('id')!r} does not echo {case.request_id!r}"]
    if "id" not in reply:
        return ["no id member"]
    return []


def _rest_problems(status: int, reply: Any) -> list[str]:
    if status < 400:
        return [] if isinstance(reply, dict) else ["result is not a JSON object"]
    error = reply.get("error") if isinstance(reply, dict) else None
    if not isinstance(error, dict):
        return ["not an AIP-193 error body"]
    if error.get("code") != status or not isinstance(error.get("status"), str) or not isinstance(
        error.get("message"), str
    ):
        return [f"AIP-193 error without code {status}, status and message"]
    return []


def _sse_events(text: str) -> list[Any]:
    events = []
    for block in text.split("\n\n"):
        data = [line[6:] for line in block.splitlines() if line.startswith("data: ")]
        if data:
            events.append(orjson.loads("\n".join(data)))
    return events


def server_error_of(
    response: httpx.Response, text: str, *, allowed: tuple[int, ...] = (503,)
) -> str:
    """What is wrong with ``response`` (whose body is ``text``) as a server error ("" when it is
    none): a 5xx other than ``allowed`` ones, a 503 without Retry-After, or a traceback."""
    status = response.status_code
    if status >= 500 and status not in allowed:
        return f"5xx {status}: {text[:200]}"
    if status == 503 and "Retry-After" not in response.headers:
        return f"5xx 503 without Retry-After: {text[:200]}"
    if "Traceback (most recent call last)" in text:
        return f"5xx-like traceback in a {status} body: {text[:200]}"
    return ""


def problems(case: Case, response: httpx.Response) -> list[str]:
    """What is wrong with ``response`` as the answer to ``case`` (empty: nothing)."""
    if server_error := server_error_of(response, response.text):
        return [server_error]
    content_type = response.headers.get("Content-Type", "")
    try:
        if content_type.startswith("text/event-stream"):
            replies = _sse_events(response.text)
            if not replies:
                return ["an event stream without events"]
        elif content_type.startswith("application/"):
            replies = [orjson.loads(response.content)]
        else:
            return [f"{response.status_code} {content_type!r} body: {response.text[:100]!r}"]
    except orjson.JSONDecodeError:
        return [f"{response.status_code} body is not JSON: {response.text[:100]!r}"]
    found: list[str] = []
    for reply in replies:
        if case.jsonrpc:
            found += _envelope_problems(case, reply)
        elif not content_type.startswith("text/event-stream"):
            found += _rest_problems(response.status_code, reply)
    return found


# --- the gateway under test -------------------------------------------------------------


class RecordingStore(MemoryStore):
    """The memory store, noting the scope of every task created."""

    def __init__(self) -> None:
        super().__init__(page_token_key=b"fuzz-page-token-key")
        self.created: list[Scope] = []

    async def create_task(self, scope: Scope, task: Task, **kwargs: Any) -> int:
        self.created.append(scope)
        return await super().create_task(scope, task, **kwargs)


@dataclass
class Target:
    base_url: str
    endpoint_id: str
    key: str
    store: RecordingStore


class Served(Generic[T]):
    """What an async context manager yields, kept open on an event loop in a thread of its own."""

    def __init__(self, value: T, loop: asyncio.AbstractEventLoop) -> None:
        self.value = value
        self._loop = loop

    def run(self, coroutine: Coroutine[Any, Any, R], timeout: float = 60) -> R:
        """``coroutine``'s result, run on the served loop (from the test's thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)


@contextmanager
def served_in_thread(opened: Callable[[], AbstractAsyncContextManager[T]]) -> Iterator[Served[T]]:
    """``opened()`` entered on an event loop in a thread of its own, so that hypothesis drives
    what it serves with a plain blocking client; left when the block ends."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: list[Any] = []

    async def serve() -> None:
        stop = asyncio.Event()
        try:
            async with opened() as value:
                box.extend([value, stop])
                ready.set()
                await stop.wait()
        except BaseException as exc:
            box[:] = [exc]
            ready.set()
            raise

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    if not ready.wait(60) or len(box) != 2:
        thread.join(60)
        if (
            not thread.is_alive()
        ):  # else the loop's sockets are collected, and fail, in a later test
            loop.close()
        raise RuntimeError(f"it did not start: {box}")
    value, stop = box
    try:
        yield Served(value, loop)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(60)
        loop.close()


@contextmanager
def gateway_thread(**settings: Any) -> Iterator[Target]:
    """A gateway with one echo endpoint that needs an API key, served by a thread of its own."""

    @asynccontextmanager
    async def opened() -> AsyncIterator[Target]:
        store = RecordingStore()
        options = {"allow_unauthenticated_endpoints": False, "log_level": "critical", **settings}
        async with running_gateway(store=store, **options) as gw:
            endpoint_id = await gw.add_endpoint(
                settings={"delay": 0}, card={"capabilities": {"pushNotifications": False}}
            )
            secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
            row, key = make_key(
                secret, endpoint_id=endpoint_id, tenant="default", principal=PRINCIPAL
            )
            await store.create_api_key(row)
            yield Target(gw.base_url, endpoint_id, key, store)

    with served_in_thread(opened) as served:
        yield served.value


def send(client: httpx.Client, target: Target, case: Case) -> list[str]:
    try:
        response = client.request(case.method, target.base_url + case.path, headers=case.headers,
                                  content=case.body)
    except httpx.TimeoutException:
        return ["timeout: no answer"]
    except httpx.RemoteProtocolError as exc:
        return [f"malformed: connection closed without an answer ({exc})"]
    return problems(case, response)


def stray_tasks(target: Target) -> list[Scope]:
    """Tasks created under any scope but the valid key's."""
    return [s for s in target.store.created
            if (s.principal, s.endpoint_id) != (PRINCIPAL, target.endpoint_id)]
