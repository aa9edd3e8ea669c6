"""Hermes Agent handler: A2A tasks as Hermes API server runs (``/v1/runs``).

Task mode posts ``/v1/runs`` and follows ``/v1/runs/{id}/events`` (falling back to
polling ``/v1/runs/{id}`` when the single-consumer stream is lost); approvals are
answered with ``/approval``, cancels with ``/stop``. Message mode answers with one
``/v1/chat/completions`` call (Hermes raises no approvals there). Event mapping:
``handlers.hermes_events``; the full table is in HERMES_INTEGRATION.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import httpx
import structlog
from httpx_sse import SSEError, aconnect_sse
from pydantic import Field, SecretStr

from handlers.base import (
    Canceled,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRejectedError,
    Reply,
    RunStarted,
    SessionUpdate,
)
from handlers.hermes_events import (
    BACKEND,
    TERMINAL_EVENTS,
    TERMINAL_STATUSES,
    RunEventMapper,
    narrow_choices,
)
from handlers.openai_stream import (
    Deadline,
    Retry,
    RunLimits,
    RunTimedOut,
    SSEFrame,
    UnexpectedFrame,
    shown_url,
)

__all__ = ["HermesAgentHandler", "HermesSettings"]

log = structlog.get_logger(__name__)

RUN = "the Hermes run"
NO_RETRY = Retry(0, 0.0, 0.0)

_TEXT_CHOICES = {
    "once": "once", "approve": "once", "approved": "once", "allow": "once", "yes": "once",
    "y": "once", "ok": "once", "session": "session", "always": "always",
    "deny": "deny", "denied": "deny", "no": "deny", "n": "deny", "reject": "deny",
}


class HermesSettings(RunLimits):
    """Hermes' settings; ``run_timeout_seconds`` and the 429 retries come from ``RunLimits``."""

    hermes_api_url: str = "http://127.0.0.1:8642"
    """Base URL of the Hermes API server (with or without a trailing ``/v1``)."""
    hermes_api_key: SecretStr | None = None
    """``API_SERVER_KEY`` of that server; write ``env:NAME`` in endpoint rows."""
    hermes_model: str = "hermes-agent"
    hermes_timeout: float = Field(30.0, gt=0)
    """Seconds for connecting and for each non-streaming call."""
    hermes_stream_idle_timeout: float = Field(90.0, gt=0)
    """Longest silence on the event stream (Hermes sends a keepalive every 30 s)."""
    response_mode: Literal["task", "message"] = "task"
    instructions: str | None = None
    """Extra system prompt sent with every run."""
    approval_choices: list[Literal["once", "session", "always", "deny"]] = ["once", "deny"]
    """Approval choices remote callers may use; ``session``/``always`` widen the grant."""
    approval_wait_seconds: float | None = Field(None, gt=0)
    """Answer ``deny`` if no caller answered an approval within this time (None: Hermes'
    own ``approvals.timeout`` applies)."""
    stop_wait_seconds: float = Field(15.0, gt=0)
    """After a stop, how long to wait for Hermes to confirm before ending the task CANCELED."""
    poll_interval_seconds: float = Field(0.5, gt=0)


class HermesCallError(Exception):
    """A Hermes API call failed; ``reason`` is safe to show (no key, no headers)."""

    def __init__(self, reason: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.code = code


@dataclass(slots=True)
class _RunState:
    """What ``cancel`` tells the iterator following a run in this process."""

    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    stop_deadline: float | None = None


_FOLLOWED: dict[str, _RunState] = {}
"""Runs followed in this process, by Hermes run id (shared by handler instances, since
the registry may rebuild a handler while its runs go on)."""


class HermesAgentHandler(Handler):
    Settings: ClassVar[type[HandlerSettings]] = HermesSettings
    supports_reattach: ClassVar[bool] = True
    settings: HermesSettings

    def __init__(self, settings: HandlerSettings, http: httpx.AsyncClient) -> None:
        super().__init__(settings, http)
        self._base = self.settings.hermes_api_url.rstrip("/").removesuffix("/v1")
        key = self.settings.hermes_api_key
        self._secret = key.get_secret_value() if key is not None else ""
        self._headers = {"Authorization": f"Bearer {self._secret}"} if self._secret else {}

    # -- the contract --------------------------------------------------------------

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        if self.settings.response_mode == "message":
            yield await self._reply(request)
            return
        # one Hermes session per caller's context (context ids are chosen by clients)
        session_id = request.session.get("hermes_session_id") or request.backend_user(per_context=True)
        body: dict[str, Any] = {
            "input": _input_text(request),
            "session_id": session_id,
            "conversation_history": _history(request),
            "model": self.settings.hermes_model,
        }
        if self.settings.instructions:
            body["instructions"] = self.settings.instructions
        deadline = self.settings.deadline(RUN)
        try:
            created = await self._call("POST", "/v1/runs", body, retry=True, deadline=deadline)
        except HermesCallError as exc:
            yield Failed(exc.reason)
            return
        run_id = str(created.get("run_id") or "")
        if not run_id:
            yield Failed("Hermes accepted the run but returned no run id")
            return
        log.info("hermes_run_started", run_id=run_id, task_id=request.task_id)
        yield RunStarted(run_id)
        if request.session.get("hermes_session_id") != session_id:
            yield SessionUpdate({"hermes_session_id": session_id})
        # aclosing: closing this iterator (cancel) closes the follower, and its stream, now
        async with contextlib.aclosing(self._follow(run_id, deadline, stream=True)) as events:
            async for event in events:
                yield event

    async def resume(self, request: HandlerRequest) -> bool:
        run_id = request.run_ref
        pending = request.pending_input or {}
        if not run_id:
            raise InputRejectedError("No Hermes run is waiting for this answer.")
        choices = narrow_choices(pending.get("choices"), self.settings.approval_choices)
        choice = _choice(request)
        if choice not in choices:
            raise InputRejectedError(
                f"Not a valid answer to the approval request. Valid choices: {', '.join(choices)} "
                "(send a data part {\"choice\": ...} or one of those words; approve/yes = once, "
                "no = deny).", {**pending, "choices": choices})
        try:
            await self._call("POST", f"/v1/runs/{run_id}/approval", {"choice": choice})
        except HermesCallError as exc:
            raise InputRejectedError(_approval_problem(exc), pending or None) from None
        log.info("hermes_approval_answered", run_id=run_id, choice=choice)
        return True

    async def cancel(self, request: HandlerRequest) -> bool:
        run_id = request.run_ref
        if not run_id:
            return False
        try:
            await self._call("POST", f"/v1/runs/{run_id}/stop")
        except HermesCallError as exc:
            log.warning("hermes_stop_failed", run_id=run_id, reason=exc.reason)
            return False
        state = _FOLLOWED.get(run_id)
        if state is not None:
            state.stop_deadline = time.monotonic() + self.settings.stop_wait_seconds
            state.queue.put_nowait(("wake", None))
        return True

    async def reattach(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        # The event stream has a single consumer and no replay: a second subscriber may
        # wait forever, so a re-attached run is followed by polling its state. Its time
        # bound counts again from here (how long it ran before is not known here).
        if not request.run_ref:
            yield Failed("no Hermes run to re-attach to")
            return
        deadline = self.settings.deadline(RUN)
        async with contextlib.aclosing(self._follow(request.run_ref, deadline,
                                                    stream=False)) as events:
            async for event in events:
                yield event

    # -- message mode --------------------------------------------------------------

    async def _reply(self, request: HandlerRequest) -> HandlerEvent:
        messages = []
        if self.settings.instructions:
            messages.append({"role": "system", "content": self.settings.instructions})
        messages += _history(request)
        messages.append({"role": "user", "content": _input_text(request)})
        body = {"model": self.settings.hermes_model, "messages": messages, "stream": False}
        try:
            answer = await self._call("POST", "/v1/chat/completions", body, retry=True,
                                      deadline=self.settings.deadline(RUN))
        except HermesCallError as exc:
            return Failed(exc.reason)
        try:
            text = answer["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            return Failed("Hermes returned a chat completion without a message")
        if not isinstance(text, str):
            return Failed(UnexpectedFrame(BACKEND, "a message content that is not text").reason)
        metadata = {"usage": answer["usage"]} if isinstance(answer.get("usage"), dict) else {}
        return Reply(text=text, metadata=metadata)

    # -- following a run -----------------------------------------------------------

    async def _follow(self, run_id: str, deadline: Deadline, *,
                      stream: bool) -> AsyncIterator[HandlerEvent]:
        """Events of one run until its terminal event, from the stream or by polling;
        a run past ``deadline`` or one whose events make no sense is stopped and fails."""
        mapper = RunEventMapper(run_id, self.settings.approval_choices)
        state = _RunState()
        _FOLLOWED[run_id] = state
        pump = asyncio.create_task(self._pump(run_id, state.queue, stream))
        approval_deadline: float | None = None
        try:
            while mapper.terminal is None:
                deadlines = [d for d in (state.stop_deadline, approval_deadline) if d is not None]
                timeout = max(0.0, min(deadlines + [deadline.at]) - time.monotonic())
                try:
                    kind, item = await asyncio.wait_for(state.queue.get(), timeout)
                except TimeoutError:
                    now = time.monotonic()
                    # a cancel under way ends CANCELED, even when the run's bound passes first
                    if state.stop_deadline is not None and now >= min(state.stop_deadline,
                                                                      deadline.at):
                        log.warning("hermes_stop_unconfirmed", run_id=run_id)
                        yield Canceled("stopped; Hermes did not confirm the stop in time")
                        return
                    if now >= deadline.at:
                        yield await self._abandon(run_id, deadline.reason)
                        return
                    if approval_deadline is not None and now >= approval_deadline:
                        approval_deadline = None
                        await self._deny_unanswered(run_id)
                    continue
                if kind == "fail":
                    yield Failed(item)
                    return
                if kind == "unexpected":
                    yield await self._abandon(run_id, item)
                    return
                try:
                    if kind == "event":
                        events = mapper.feed(item)
                    elif kind == "status":
                        events = mapper.feed_status(item)
                    else:
                        continue
                except UnexpectedFrame as exc:
                    yield await self._abandon(run_id, exc.reason)
                    return
                for event in events:
                    yield event
                if not mapper.awaiting_approval:
                    approval_deadline = None
                elif approval_deadline is None and self.settings.approval_wait_seconds:
                    approval_deadline = time.monotonic() + self.settings.approval_wait_seconds
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            if _FOLLOWED.get(run_id) is state:
                del _FOLLOWED[run_id]

    async def _abandon(self, run_id: str, reason: str) -> Failed:
        """Stop a run the bridge gives up on (best effort) and fail its task."""
        log.warning("hermes_run_abandoned", run_id=run_id, reason=reason)
        try:
            await self._call("POST", f"/v1/runs/{run_id}/stop")
        except HermesCallError as exc:
            log.warning("hermes_stop_failed", run_id=run_id, reason=exc.reason)
        return Failed(reason)

    async def _pump(self, run_id: str, queue: asyncio.Queue[tuple[str, Any]], stream: bool) -> None:
        """Feed ``queue`` with the run's events; poll its state once the stream is gone."""
        if stream and await self._stream_events(run_id, queue):
            return
        await self._poll(run_id, queue)

    async def _stream_events(self, run_id: str, queue: asyncio.Queue[tuple[str, Any]]) -> bool:
        """Queue the stream's events; True when the terminal event was among them."""
        timeout = httpx.Timeout(self.settings.hermes_timeout,
                                read=self.settings.hermes_stream_idle_timeout)
        try:
            async with aconnect_sse(self.http, "GET", f"{self._base}/v1/runs/{run_id}/events",
                                    headers=self._headers, timeout=timeout) as source:
                if source.response.status_code != 200:
                    log.warning("hermes_events_refused", run_id=run_id,
                                status=source.response.status_code)
                    return False
                async for sse in source.aiter_sse():
                    if not sse.data:
                        continue
                    try:
                        event = SSEFrame(sse.event, sse.data).object(BACKEND)
                    except UnexpectedFrame as exc:
                        queue.put_nowait(("unexpected", exc.reason))
                        return True
                    queue.put_nowait(("event", event))
                    if event.get("event") in TERMINAL_EVENTS:
                        return True
        except (httpx.HTTPError, SSEError) as exc:
            log.warning("hermes_events_lost", run_id=run_id, error=type(exc).__name__)
            return False
        log.warning("hermes_events_ended_early", run_id=run_id)
        return False

    async def _poll(self, run_id: str, queue: asyncio.Queue[tuple[str, Any]]) -> None:
        """Queue each change of the run's state until it ends (the follower bounds how long)."""
        interval = self.settings.poll_interval_seconds
        failing_since: float | None = None
        last: tuple[Any, Any] | None = None
        while True:
            try:
                run = await self._call("GET", f"/v1/runs/{run_id}")
            except HermesCallError as exc:
                if exc.status == 404:
                    queue.put_nowait(("fail", f"Hermes no longer knows run {run_id} "
                                              "(it ended over an hour ago or Hermes restarted)"))
                    return
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > max(self.settings.hermes_timeout, 30.0):
                    queue.put_nowait(("fail", f"lost track of Hermes run {run_id}: {exc.reason}"))
                    return
            else:
                failing_since = None
                seen = (run.get("status"), run.get("last_event"))
                if seen != last:
                    last = seen
                    queue.put_nowait(("status", run))
                if run.get("status") in TERMINAL_STATUSES:
                    return
            await asyncio.sleep(interval)

    async def _deny_unanswered(self, run_id: str) -> None:
        log.info("hermes_approval_unanswered", run_id=run_id)
        with contextlib.suppress(HermesCallError):
            await self._call("POST", f"/v1/runs/{run_id}/approval", {"choice": "deny"})

    # -- HTTP ----------------------------------------------------------------------

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                    retry: bool = False, deadline: Deadline | None = None) -> dict[str, Any]:
        """One Hermes API call (a 429 retried when ``retry``, all of it bounded by
        ``deadline``); every failure becomes a ``HermesCallError``."""
        request = self.http.build_request(method, f"{self._base}{path}", json=body,
                                          headers=self._headers,
                                          timeout=self.settings.hermes_timeout)
        policy = self.settings.retry if retry else NO_RETRY
        try:
            response, attempts = await policy.send(self.http, request, deadline)
        except RunTimedOut as exc:
            raise HermesCallError(exc.reason) from None
        except httpx.TimeoutException:
            raise HermesCallError(f"Hermes did not answer {method} {path} within "
                                  f"{self.settings.hermes_timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise HermesCallError(f"Hermes API server unreachable at {shown_url(self._base)} "
                                  f"({type(exc).__name__})") from None
        if response.status_code < 400:
            try:
                payload = response.json()
            except ValueError:
                raise HermesCallError(f"Hermes sent a non-JSON answer to {method} {path}",
                                      response.status_code) from None
            return payload if isinstance(payload, dict) else {}
        raise self._error(response, method, path, attempts)

    def _error(self, response: httpx.Response, method: str, path: str,
               attempts: int) -> HermesCallError:
        status = response.status_code
        message, code = _error_detail(response)
        message = self._redact(message)
        if status in (401, 403):
            reason = (f"Hermes rejected the API key (HTTP {status}); "
                      "check the endpoint's hermes_api_key")
        elif status == 429:
            reason = (f"Hermes is at its limit of concurrent runs (HTTP 429) after {attempts} "
                      f"attempt(s): {message}")
        elif status >= 500:
            reason = f"Hermes API server error (HTTP {status}) on {method} {path}: {message}"
        else:
            reason = f"Hermes refused {method} {path} (HTTP {status}, {code or 'no code'}): {message}"
        return HermesCallError(reason, status, code)

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text


def _error_detail(response: httpx.Response) -> tuple[str, str | None]:
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        return response.text[:300] or response.reason_phrase, None
    if not isinstance(error, dict):
        return str(error)[:300], None
    return str(error.get("message") or "")[:300], error.get("code")


def _approval_problem(exc: HermesCallError) -> str:
    if exc.code in ("approval_not_active", "approval_not_pending"):
        return (f"Hermes is no longer waiting for this approval ({exc.code}): it expired, was "
                "answered already, or the run ended. The task follows what Hermes does next.")
    if exc.status == 404:
        return "Hermes no longer knows this run; the approval cannot be answered."
    return f"The answer could not be delivered to Hermes: {exc.reason}"


def _input_text(request: HandlerRequest) -> str:
    parts = [request.text] if request.text else []
    parts += [json.dumps(d, ensure_ascii=False) for d in request.data]
    return "\n".join(parts)


def _history(request: HandlerRequest) -> list[dict[str, str]]:
    return [{"role": "user" if turn.role == "user" else "assistant", "content": turn.text}
            for turn in request.history if turn.text]


def _choice(request: HandlerRequest) -> str | None:
    for data in request.data:
        if "choice" in data:
            value = str(data["choice"]).strip().lower()
            return _TEXT_CHOICES.get(value, value)
    word = request.text.strip().lower().strip(".!\"' ")
    return _TEXT_CHOICES.get(word)
