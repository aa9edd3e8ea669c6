"""Hermes Agent handler: A2A tasks as Hermes API server runs (``/v1/runs``).

Task mode posts ``/v1/runs`` and follows ``/v1/runs/{id}/events`` (falling back to
polling ``/v1/runs/{id}`` when the single-consumer stream is lost); approvals are
answered with ``/approval``, cancels with ``/stop``. Message mode answers with one
``/v1/chat/completions`` call (Hermes raises no approvals there). Inbound images go
with the message as ``image_url`` content parts on both paths. Event mapping:
``handlers.hermes_events``; the full table is in HERMES_INTEGRATION.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import httpx
import structlog
from pydantic import Field, SecretStr

from handlers.base import (
    Canceled,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRejectedError,
    RunStarted,
    SessionUpdate,
)
from handlers.chat import build_messages, history_messages, read_completion, user_content
from handlers.hermes_events import (
    BACKEND,
    TERMINAL_EVENTS,
    TERMINAL_STATUSES,
    RunEventMapper,
    narrow_choices,
)
from handlers.upstream import BridgeSettings, Deadline, UnexpectedFrame, Upstream, UpstreamError

__all__ = ["HermesAgentHandler", "HermesSettings"]

log = structlog.get_logger(__name__)

RUN = "the Hermes run"
FAILURE_LOG = "hermes_request_failed"
"""The log event of a failed call, as ``StreamingBridge.failure_log`` of the chat bridge."""

_TEXT_CHOICES = {
    "once": "once", "approve": "once", "approved": "once", "allow": "once", "yes": "once",
    "y": "once", "ok": "once", "session": "session", "always": "always",
    "deny": "deny", "denied": "deny", "no": "deny", "n": "deny", "reject": "deny",
}


class HermesSettings(BridgeSettings):
    """Hermes' settings; the response mode, ``run_timeout_seconds`` and the retries come
    from ``BridgeSettings``."""

    hermes_api_url: str = "http://127.0.0.1:8642"
    """Base URL of the Hermes API server (with or without a trailing ``/v1``)."""
    hermes_api_key: SecretStr | None = None
    """``API_SERVER_KEY`` of that server; write ``env:NAME`` in endpoint rows."""
    hermes_model: str = "hermes-agent"
    hermes_timeout: float = Field(30.0, gt=0)
    """Seconds Hermes may stay silent on a call that is not the event stream (connect: at
    most 10 s)."""
    hermes_stream_idle_timeout: float = Field(90.0, gt=0)
    """Longest silence on the event stream (Hermes sends a keepalive every 30 s)."""
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


@dataclass(slots=True)
class _RunState:
    """What ``cancel`` tells the iterator following a run of this handler."""

    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    stop_deadline: float | None = None


class HermesAgentHandler(Handler):
    Settings: ClassVar[type[HandlerSettings]] = HermesSettings
    supports_reattach: ClassVar[bool] = True
    accepted_file_types: ClassVar[tuple[str, ...]] = ("image/*",)
    """Hermes takes images (``image_url`` parts: a ``data:image/…`` or http(s) URL) in runs
    and chat completions, and describes them with its vision tool; no other files."""
    settings: HermesSettings

    def __init__(self, settings: HandlerSettings, http: httpx.AsyncClient) -> None:
        super().__init__(settings, http)
        s = self.settings
        self.upstream = Upstream.for_backend(http, BACKEND, s, url=s.hermes_api_url,
                                             drop_suffix="/v1", timeout=s.hermes_timeout,
                                             api_key=s.hermes_api_key)
        self._followed: dict[str, _RunState] = {}
        """The runs this instance follows, by Hermes run id: the gateway cancels a run
        through the instance whose ``run``/``reattach`` follows it."""

    # -- the contract --------------------------------------------------------------

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        if self.message_mode:
            yield self.answer(await self._reply(request))
            return
        # one Hermes session per caller's context (context ids are chosen by clients)
        session_id = (request.session.get("hermes_session_id")
                      or request.backend_user(per_context=True))
        body: dict[str, Any] = {
            "input": run_input(request),
            "session_id": session_id,
            "conversation_history": history_messages(request),
            "model": self.settings.hermes_model,
        }
        if self.settings.instructions:
            body["instructions"] = self.settings.instructions
        deadline = self.settings.deadline(RUN)
        try:
            created = await self.upstream.json("POST", "/v1/runs", body, request=request,
                                               deadline=deadline)
        except UpstreamError as exc:
            yield self._failed(request, exc.reason)
            return
        run_id = str(created.get("run_id") or "")
        if not run_id:
            yield self._failed(request, "Hermes accepted the run but returned no run id")
            return
        log.info("hermes_run_started", run_id=run_id, task_id=request.task_id)
        yield RunStarted(run_id)
        if request.session.get("hermes_session_id") != session_id:
            yield SessionUpdate({"hermes_session_id": session_id})
        # aclosing: closing this iterator (cancel) closes the follower, and its stream, now
        async with contextlib.aclosing(self._follow(run_id, request, deadline,
                                                    stream=True)) as events:
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
            await self._post(f"/v1/runs/{run_id}/approval", request, {"choice": choice})
        except UpstreamError as exc:
            raise InputRejectedError(_approval_problem(exc), pending or None) from None
        log.info("hermes_approval_answered", run_id=run_id, choice=choice)
        return True

    async def cancel(self, request: HandlerRequest) -> bool:
        run_id = request.run_ref
        if not run_id:
            return False
        try:
            await self._post(f"/v1/runs/{run_id}/stop", request)
        except UpstreamError as exc:
            log.warning("hermes_stop_failed", run_id=run_id, reason=exc.reason)
            return False
        state = self._followed.get(run_id)
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
        async with contextlib.aclosing(self._follow(request.run_ref, request, deadline,
                                                    stream=False)) as events:
            async for event in events:
                yield event

    # -- message mode --------------------------------------------------------------

    async def _reply(self, request: HandlerRequest) -> HandlerEvent:
        """One chat completion (Hermes raises no approvals there)."""
        body = {"model": self.settings.hermes_model, "stream": False,
                "messages": build_messages(request, self.settings.instructions)}
        try:
            answer = await self.upstream.json("POST", "/v1/chat/completions", body,
                                              request=request, deadline=self.settings.deadline(RUN))
            return read_completion(answer, BACKEND)
        except UpstreamError as exc:
            return self._failed(request, exc.reason)

    # -- following a run -----------------------------------------------------------

    async def _follow(self, run_id: str, request: HandlerRequest, deadline: Deadline, *,
                      stream: bool) -> AsyncIterator[HandlerEvent]:
        """Events of one run until its terminal event, from the stream or by polling;
        a run past ``deadline`` or one whose events make no sense is stopped and fails."""
        mapper = RunEventMapper(run_id, self.settings.approval_choices)
        state = self._followed[run_id] = _RunState()
        pump = asyncio.create_task(self._pump(run_id, request, state.queue, stream))
        approval_deadline: float | None = None
        try:
            while mapper.terminal is None:
                deadlines = [d for d in (state.stop_deadline, approval_deadline) if d is not None]
                timeout = max(0.0, min(deadlines + [deadline.at]) - time.monotonic())
                try:
                    if state.queue.empty():
                        async with asyncio.timeout(timeout):  # not wait_for: it can lose a cancel
                            kind, item = await state.queue.get()
                    else:  # an event waiting is taken as the timed wait would: no timer per event
                        kind, item = state.queue.get_nowait()
                except TimeoutError:
                    now = time.monotonic()
                    # a cancel under way ends CANCELED, even when the run's bound passes first
                    if state.stop_deadline is not None and now >= min(state.stop_deadline,
                                                                      deadline.at):
                        log.warning("hermes_stop_unconfirmed", run_id=run_id)
                        yield Canceled("stopped; Hermes did not confirm the stop in time")
                        return
                    if now >= deadline.at:
                        yield await self._abandon(run_id, request, deadline.reason)
                        return
                    if approval_deadline is not None and now >= approval_deadline:
                        approval_deadline = None
                        await self._deny_unanswered(run_id, request)
                    continue
                if kind == "fail":
                    yield self._failed(request, item)
                    return
                if kind == "unexpected":
                    yield await self._abandon(run_id, request, item)
                    return
                try:
                    if kind == "event":
                        events = mapper.feed(item)
                    elif kind == "status":
                        events = mapper.feed_status(item)
                    else:
                        continue
                except UnexpectedFrame as exc:
                    yield await self._abandon(run_id, request, exc.reason)
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
            if self._followed.get(run_id) is state:
                del self._followed[run_id]

    @staticmethod
    def _failed(request: HandlerRequest, reason: str) -> Failed:
        """A call to Hermes failed the task: logged as the other bridges log theirs."""
        log.warning(FAILURE_LOG, endpoint_id=request.endpoint_id, task_id=request.task_id,
                    reason=reason)
        return Failed(reason)

    async def _abandon(self, run_id: str, request: HandlerRequest, reason: str) -> Failed:
        """Stop a run the bridge gives up on (best effort) and fail its task."""
        log.warning("hermes_run_abandoned", run_id=run_id, task_id=request.task_id)
        try:
            await self._post(f"/v1/runs/{run_id}/stop", request)
        except UpstreamError as exc:
            log.warning("hermes_stop_failed", run_id=run_id, reason=exc.reason)
        return self._failed(request, reason)

    async def _pump(self, run_id: str, request: HandlerRequest,
                    queue: asyncio.Queue[tuple[str, Any]], stream: bool) -> None:
        """Feed ``queue`` with the run's events; poll its state once the stream is gone."""
        if stream and await self._stream_events(run_id, request, queue):
            return
        await self._poll(run_id, request, queue)

    async def _stream_events(self, run_id: str, request: HandlerRequest,
                             queue: asyncio.Queue[tuple[str, Any]]) -> bool:
        """Queue the stream's events; True when the terminal event was among them."""
        try:
            async with self.upstream.call("GET", f"/v1/runs/{run_id}/events", request=request,
                                          retry=False, events=True,
                                          timeout=self.settings.hermes_stream_idle_timeout) as call:
                async for frame in call.frames():
                    if not frame.data:
                        continue
                    try:
                        event = frame.object(BACKEND)
                    except UnexpectedFrame as exc:
                        queue.put_nowait(("unexpected", exc.reason))
                        return True
                    queue.put_nowait(("event", event))
                    if event.get("event") in TERMINAL_EVENTS:
                        return True
        except UpstreamError as exc:
            log.warning("hermes_events_lost", run_id=run_id, reason=exc.reason)
            return False
        log.warning("hermes_events_ended_early", run_id=run_id)
        return False

    async def _poll(self, run_id: str, request: HandlerRequest,
                    queue: asyncio.Queue[tuple[str, Any]]) -> None:
        """Queue each change of the run's state until it ends (the follower bounds how long)."""
        interval = self.settings.poll_interval_seconds
        failing_since: float | None = None
        last: tuple[Any, Any] | None = None
        while True:
            try:
                run = await self.upstream.json("GET", f"/v1/runs/{run_id}", request=request,
                                               retry=False)
            except UpstreamError as exc:
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

    async def _deny_unanswered(self, run_id: str, request: HandlerRequest) -> None:
        log.info("hermes_approval_unanswered", run_id=run_id)
        with contextlib.suppress(UpstreamError):
            await self._post(f"/v1/runs/{run_id}/approval", request, {"choice": "deny"})

    async def _post(self, path: str, request: HandlerRequest,
                    body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A control call (approval, stop): answered at once or failed, never retried."""
        return await self.upstream.json("POST", path, body, request=request, retry=False)


def _approval_problem(exc: UpstreamError) -> str:
    if exc.code in ("approval_not_active", "approval_not_pending"):
        return (f"Hermes is no longer waiting for this approval ({exc.code}): it expired, was "
                "answered already, or the run ended. The task follows what Hermes does next.")
    if exc.status == 404:
        return "Hermes no longer knows this run; the approval cannot be answered."
    return f"The answer could not be delivered to Hermes: {exc.reason}"


def run_input(request: HandlerRequest) -> str | list[dict[str, Any]]:
    """The ``input`` of ``POST /v1/runs``: the message's text, or one user message with
    content parts when it carries images."""
    content = user_content(request)
    return content if isinstance(content, str) else [{"role": "user", "content": content}]


def _choice(request: HandlerRequest) -> str | None:
    for data in request.data:
        if "choice" in data:
            value = str(data["choice"]).strip().lower()
            return _TEXT_CHOICES.get(value, value)
    word = request.text.strip().lower().strip(".!\"' ")
    return _TEXT_CHOICES.get(word)
