"""A scripted OpenAI-compatible LLM for tests and CI: real agent frameworks
(Hermes, OpenClaw) run against it offline and deterministically.

Run it standalone (``python scripted_llm.py --port 0 --port-file F``) or import
``ScriptedLLM`` and use it as an async context manager in a test.

The reply is decided from the last meaningful message (OpenClaw's wrapping
stripped; a trailing user message that is empty after stripping is skipped):

=====================================  =============================================
last message / trigger                 reply
=====================================  =============================================
``role: "tool"``                       ``TOOL_RESULT_SEEN: <first 120 chars>``
``FAKE_TOOL_DANGER [path=P]``          shell tool call ``rm -rf P`` (default
                                       ``--danger-path``) when a shell tool is offered
``FAKE_TOOL_SAFE``                     shell tool call ``echo fake-safe-ok``
``FAKE_HTTP_400`` (any ``FAKE_HTTP_NNN``)  that HTTP status with an OpenAI error body
``FAKE_SLOW [words=N] [delay=S]``      N words (default 40), S seconds apart (0.5)
``FAKE_HANG``                          nothing at all, not even headers, until the
                                       client goes away (a hung model)
``FAKE_RATE_LIMIT [times=N]``          HTTP 429 with ``Retry-After: S`` to the first N
``[retry_after=S] [retry_date=1]``     requests with this text (default 1 and 1 s;
                                       ``retry_date=1``: as an HTTP date), then the echo
anything else                          ``Hello from fakellm. You said: <text[:80]>``
=====================================  =============================================

Test-control routes: ``GET /_requests`` (JSON list of the requests received:
model, stream, messages, tools, trigger, outcome, content chunk timestamps, and the
request's headers, lower-cased, credentials left out) and
``POST /_reset`` (clears that list).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
import uuid
from collections import Counter
from email.utils import formatdate
from pathlib import Path
from typing import Any

from aiohttp import web

MODEL = "fake-model"
SHELL_TOOLS = ("terminal", "exec", "bash", "shell", "run_command")
DEFAULT_DANGER_PATH = "/tmp/scripted-llm-danger-target"

_TRIGGER = re.compile(
    r"\b(FAKE_TOOL_DANGER|FAKE_TOOL_SAFE|FAKE_SLOW|FAKE_HANG|FAKE_RATE_LIMIT|FAKE_HTTP_(\d{3}))\b")
_OPTION = re.compile(r"\b([a-z_]+)=(\S+)")
_OC_TIMESTAMP = re.compile(r"^\[[A-Z][a-z]{2} \d{4}-\d{2}-\d{2} [^\]\n]{1,40}\]\s*")
_OC_RUNTIME = re.compile(r"\n\nRuntime: agent=.*\Z", re.DOTALL)
_OC_INTERNAL = re.compile(
    r"<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>.*?<<<END_OPENCLAW_INTERNAL_CONTEXT>>>", re.DOTALL
)
_OC_CURRENT = "[Current message - respond to this]"


def content_text(content: Any) -> str:
    """The text of an OpenAI message ``content`` (a string or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    return str(content)


def strip_wrapping(text: str) -> str:
    """Remove what OpenClaw wraps around the user's text."""
    text = _OC_INTERNAL.sub("", text)
    if _OC_CURRENT in text:
        text = text.rsplit(_OC_CURRENT, 1)[1]
    text = _OC_RUNTIME.sub("", text.strip())
    text = _OC_TIMESTAMP.sub("", text.strip())
    return text.strip()


def deciding_message(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """(role, text) of the message the reply is decided from."""
    for message in reversed(messages):
        role = message.get("role")
        if role == "tool":
            return "tool", content_text(message.get("content"))
        if role == "user":
            text = strip_wrapping(content_text(message.get("content")))
            if text:
                return "user", text
    return "user", ""


def offered_tools(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            if isinstance(fn.get("name"), str):
                names.append(fn["name"])
    return names


class Plan:
    """What to answer: text (optionally paced), a tool call, an HTTP error, nothing
    (``hang``), or ``rate_limit`` = (times, Retry-After value) 429s before the text."""

    def __init__(self, trigger: str, words: list[str], delay: float = 0.0,
                 tool: tuple[str, str] | None = None, status: int = 200, hang: bool = False,
                 rate_limit: tuple[int, str] | None = None) -> None:
        self.trigger = trigger
        self.text = ""
        self.words = words
        self.delay = delay
        self.tool = tool
        self.status = status
        self.hang = hang
        self.rate_limit = rate_limit


def split_words(text: str) -> list[str]:
    """``"a b c"`` → ``["a", " b", " c"]``: concatenating the chunks gives the text back."""
    parts = text.split(" ")
    return [parts[0]] + [" " + p for p in parts[1:]]


def plan_reply(body: dict[str, Any], danger_path: str) -> Plan:
    messages = body.get("messages") or []
    role, text = deciding_message(messages)
    if role == "tool":
        return Plan("tool_result", split_words("TOOL_RESULT_SEEN: " + text[:120]))
    match = _TRIGGER.search(text)
    options = dict(_OPTION.findall(text))
    shell = next((t for t in offered_tools(body) if t in SHELL_TOOLS), None)
    trigger = match.group(1) if match else "echo"
    plan = _plan(trigger, match, options, shell, text, danger_path)
    plan.text = text
    return plan


def _plan(trigger: str, match: re.Match[str] | None, options: dict[str, str],
          shell: str | None, text: str, danger_path: str) -> Plan:
    if match and match.group(2):
        return Plan(trigger, [], status=int(match.group(2)))
    if trigger == "FAKE_SLOW":
        count = int(options.get("words", 40))
        delay = float(options.get("delay", 0.5))
        return Plan(trigger, split_words(" ".join(f"slow{i}" for i in range(count))), delay)
    if trigger == "FAKE_HANG":
        return Plan(trigger, [], hang=True)
    if trigger == "FAKE_RATE_LIMIT":
        wait = int(options.get("retry_after", 1))
        value = (formatdate(time.time() + wait, usegmt=True)
                 if options.get("retry_date") == "1" else str(wait))
        return Plan(trigger, split_words("Hello from fakellm. You said: " + text[:80]),
                    rate_limit=(int(options.get("times", 1)), value))
    if trigger == "FAKE_TOOL_DANGER" and shell:
        return Plan(trigger, [], tool=(shell, f"rm -rf {options.get('path', danger_path)}"))
    if trigger == "FAKE_TOOL_SAFE" and shell:
        return Plan(trigger, [], tool=(shell, "echo fake-safe-ok"))
    return Plan("echo", split_words("Hello from fakellm. You said: " + text[:80]))


CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key",
                                "api-key"})


def recorded_headers(request: web.Request) -> dict[str, str]:
    """The request's headers as ``/_requests`` shows them: names lower-cased, repeated ones
    joined with ``, ``, credentials left out."""
    headers: dict[str, str] = {}
    for name, value in request.headers.items():
        name = name.lower()
        if name not in CREDENTIAL_HEADERS:
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


class ScriptedLLM:
    """The scripted LLM as an aiohttp app; ``async with ScriptedLLM() as llm: llm.url``."""

    def __init__(self, *, danger_path: str = DEFAULT_DANGER_PATH,
                 log_path: str | None = None) -> None:
        self.danger_path = danger_path
        self.log_path = Path(log_path) if log_path else None
        self.requests: list[dict[str, Any]] = []
        self.rate_limited: Counter[str] = Counter()
        """How many 429s each ``FAKE_RATE_LIMIT`` text got so far."""
        self.app = web.Application()
        self.app.router.add_get("/health", self._health)
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_post("/v1/chat/completions", self._chat)
        self.app.router.add_get("/_requests", self._requests)
        self.app.router.add_post("/_reset", self._reset)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """Base URL of the OpenAI API (ends in ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedLLM:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": MODEL, "object": "model", "created": 0, "owned_by": "scripted"}]})

    async def _requests(self, request: web.Request) -> web.Response:
        return web.json_response(self.requests)

    async def _reset(self, request: web.Request) -> web.Response:
        self.requests.clear()
        return web.json_response({"ok": True})

    def _record(self, body: dict[str, Any], plan: Plan, auth: bool,
                headers: dict[str, str]) -> dict[str, Any]:
        messages = [{"role": m.get("role"), "content": content_text(m.get("content")),
                     **({"tool_calls": m["tool_calls"]} if m.get("tool_calls") else {})}
                    for m in body.get("messages") or [] if isinstance(m, dict)]
        entry = {
            "ts": time.time(), "model": body.get("model"), "stream": bool(body.get("stream")),
            "stream_options": body.get("stream_options"), "authorization": auth,
            "n_messages": len(messages), "messages": messages,
            "last_role": messages[-1]["role"] if messages else None,
            "last_text": messages[-1]["content"] if messages else None,
            "tools": offered_tools(body), "trigger": plan.trigger, "text": plan.text,
            "outcome": "in_progress", "chunks": [], "headers": headers,
        }
        self.requests.append(entry)
        return entry

    def _finish(self, entry: dict[str, Any], outcome: str) -> None:
        entry["outcome"] = outcome
        entry["ended"] = time.time()
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as log:
                log.write(json.dumps(entry) + "\n")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "body is not JSON", "invalid_json")
        plan = plan_reply(body, self.danger_path)
        entry = self._record(body, plan, "authorization" in request.headers,
                             recorded_headers(request))
        if plan.status != 200:
            self._finish(entry, f"http_{plan.status}")
            return _error(plan.status, "fakellm scripted bad request"
                          if plan.status == 400 else f"fakellm scripted HTTP {plan.status}",
                          f"fake_{plan.status}")
        if plan.rate_limit and self.rate_limited[plan.text] < plan.rate_limit[0]:
            self.rate_limited[plan.text] += 1
            self._finish(entry, "http_429")
            refusal = _error(429, "fakellm scripted rate limit", "rate_limit_exceeded")
            refusal.headers["Retry-After"] = plan.rate_limit[1]
            return refusal
        if plan.hang:
            return await self._hang(request, entry)
        usage = {"prompt_tokens": 20 if entry["last_role"] == "tool" else 10,
                 "completion_tokens": max(1, len(plan.words)),
                 "total_tokens": 0}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if not body.get("stream"):
            self._finish(entry, "completed")
            return web.json_response(_completion(plan, usage))
        return await self._stream(request, body, plan, usage, entry)

    async def _hang(self, request: web.Request, entry: dict[str, Any]) -> web.Response:
        """Answer nothing until the client closes the connection (polled: aiohttp does
        not cancel a handler when its client leaves)."""
        try:
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.1)
        finally:
            self._finish(entry, "client_disconnected")
        return web.Response(status=499)

    async def _stream(self, request: web.Request, body: dict[str, Any], plan: Plan,
                      usage: dict[str, int], entry: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        chunk_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())

        async def send(delta: dict[str, Any], finish: str | None = None,
                       extra: dict[str, Any] | None = None) -> None:
            chunk = {"id": chunk_id, "object": "chat.completion.chunk", "created": created,
                     "model": body.get("model") or MODEL,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            chunk.update(extra or {})
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        try:
            await send({"role": "assistant", "content": ""})
            if plan.tool:
                name, command = plan.tool
                call_id = "call_" + uuid.uuid4().hex[:16]
                await send({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                            "function": {"name": name, "arguments": ""}}]})
                await send({"tool_calls": [{"index": 0, "function": {
                    "arguments": json.dumps({"command": command})}}]})
                finish = "tool_calls"
            else:
                for i, word in enumerate(plan.words):
                    if plan.delay and i:
                        await asyncio.sleep(plan.delay)
                    await send({"content": word})
                    entry["chunks"].append([time.time(), word])
                finish = "stop"
            await send({}, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk = {"id": chunk_id, "object": "chat.completion.chunk", "created": created,
                         "model": body.get("model") or MODEL, "choices": [], "usage": usage}
                await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self._finish(entry, "client_disconnected")
            raise
        self._finish(entry, "completed")
        return response


def _error(status: int, message: str, code: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error",
                                        "param": None, "code": code}}, status=status)


def _completion(plan: Plan, usage: dict[str, int]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(plan.words)}
    finish = "stop"
    if plan.tool:
        name, command = plan.tool
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_" + uuid.uuid4().hex[:16], "type": "function",
            "function": {"name": name, "arguments": json.dumps({"command": command})}}]}
        finish = "tool_calls"
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion",
            "created": int(time.time()), "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage}


async def _serve(args: argparse.Namespace) -> None:
    llm = ScriptedLLM(danger_path=args.danger_path, log_path=args.log)
    await llm.start(args.host, args.port)
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(str(llm.port))
        tmp.replace(args.port_file)
    print(f"scripted LLM listening on {llm.url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await llm.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080, help="0 picks a free port")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    parser.add_argument("--log", help="append one JSON line per request to this file")
    parser.add_argument("--danger-path", default=DEFAULT_DANGER_PATH,
                        help="target of FAKE_TOOL_DANGER when the message names no path=")
    args = parser.parse_args()
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
