"""Hermes Agent handler: A2A tasks as Hermes API server runs (``/v1/runs``).

Task mode posts ``/v1/runs`` and follows ``/v1/runs/{id}/events`` (falling back to
polling ``/v1/runs/{id}`` when the single-consumer stream is lost); approvals are
answered with ``/approval``, cancels with ``/stop``. Message mode answers with one
``/v1/chat/completions`` call (Hermes raises no approvals there). Inbound images go
with the message as ``image_url`` content parts on both paths. Event mapping:
``handlers.hermes_events``; the full table is in HERMES_INTEGRATION.md. Following the run,
the stop's wait, re-attach and message mode are ``RunBridge``'s; this module supplies the hooks.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import structlog
from pydantic import Field, SecretStr

from handlers.approvals import ApprovalAnswerError, card_extension, decisions, structured_answer
from handlers.base import HandlerEvent, HandlerRequest, HandlerSettings, InputRejectedError
from handlers.chat import build_messages, history_messages, read_completion, user_content
from handlers.hermes_events import BACKEND, RunEventMapper, narrow_choices
from handlers.run_bridge import RunBridge, RunSettings
from handlers.upstream import Deadline, SSEFrame, Upstream, UpstreamCall, UpstreamError

__all__ = ["HermesAgentHandler", "HermesSettings"]

log = structlog.get_logger(__name__)

RUN = "the Hermes run"

_TEXT_CHOICES = {
    "once": "once", "approve": "once", "approved": "once", "allow": "once", "yes": "once",
    "y": "once", "ok": "once", "session": "session", "always": "always",
    "deny": "deny", "denied": "deny", "no": "deny", "n": "deny", "reject": "deny",
}


class HermesSettings(RunSettings):
    """Hermes' settings; the response mode, ``run_timeout_seconds``, the retries and
    ``poll_interval_seconds`` come from ``RunSettings``."""

    hermes_api_url: str = "http://127.0.0.1:8642"
    """Base URL of the Hermes API server (with or without a trailing ``/v1``)."""
    hermes_api_key: SecretStr | None = None
    """``API_SERVER_KEY`` of that server; write ``env:NAME`` in endpoint rows."""
    hermes_model: str = "hermes-agent"
    """The model name sent to Hermes."""
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


@dataclass(slots=True)
class HermesRun:
    """One Hermes run as the bridge follows it: the mapper of its events, and how reading its
    state goes once the single-consumer event stream is gone."""

    mapper: RunEventMapper
    failing_since: float | None = None
    """Since when reading the run's state fails (Hermes restarting, the network)."""
    seen: tuple[Any, Any] | None = None
    """The last ``(status, last_event)`` read: the same again says nothing new."""

    @property
    def run_id(self) -> str:
        return self.mapper.run_id

    @property
    def terminal(self) -> HandlerEvent | None:
        return self.mapper.terminal

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """Hermes sends each event as one bare ``data:`` frame (keepalives have no data)."""
        return self.mapper.feed(frame.object(BACKEND)) if frame.data else []


class HermesAgentHandler(RunBridge[HermesRun]):
    """Runs of a Hermes Agent API server (``/v1/runs``)."""

    Settings: ClassVar[type[HandlerSettings]] = HermesSettings
    supports_reattach: ClassVar[bool] = True
    accepted_file_types: ClassVar[tuple[str, ...]] = ("image/*",)
    """Hermes takes images (``image_url`` parts: a ``data:image/…`` or http(s) URL) in runs
    and chat completions, and describes them with its vision tool; no other files."""
    settings: HermesSettings
    run_name = RUN
    log_name = "hermes"
    failure_log = "hermes_request_failed"
    """As ``StreamingBridge.failure_log`` of the chat bridge."""
    session_key = "hermes_session_id"  # one Hermes session per caller's context

    def make_upstream(self) -> Upstream:
        s = self.settings
        return Upstream.for_backend(self.http, BACKEND, s, url=s.hermes_api_url,
                                    drop_suffix="/v1", timeout=s.hermes_timeout,
                                    api_key=s.hermes_api_key)

    async def resume(self, request: HandlerRequest) -> bool:
        run_id = request.run_ref
        pending = request.pending_input or {}
        if not run_id:
            raise InputRejectedError("No Hermes run is waiting for this answer.")
        choices = narrow_choices(pending.get("choices"), self.settings.approval_choices)
        try:
            choice = _choice(request)
        except ApprovalAnswerError as exc:
            raise InputRejectedError(f"Not a valid answer to the approval request: {exc}.",
                                     {**pending, "choices": choices}) from None
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

    def card_fields(self) -> dict[str, Any]:
        return {"extensions": [card_extension(editable=False)]}

    # -- the hooks of RunBridge -------------------------------------------------------

    def needs_input(self, request: HandlerRequest) -> bool:
        return False  # the message goes to Hermes as it is

    async def reply(self, request: HandlerRequest, deadline: Deadline) -> HandlerEvent:
        """Message mode: one chat completion (Hermes raises no approvals there)."""
        body = {"model": self.settings.hermes_model, "stream": False,
                "messages": build_messages(request, self.settings.instructions)}
        answer = await self.upstream.json("POST", "/v1/chat/completions", body, request=request,
                                          deadline=deadline)
        return read_completion(answer, BACKEND)

    async def start(self, session_id: str, request: HandlerRequest,
                    deadline: Deadline) -> tuple[HermesRun, UpstreamCall]:
        """``POST /v1/runs``, then its event stream (one consumer, no replay)."""
        body: dict[str, Any] = {
            "input": run_input(request),
            "session_id": session_id,
            "conversation_history": history_messages(request),
            "model": self.settings.hermes_model,
        }
        if self.settings.instructions:
            body["instructions"] = self.settings.instructions
        created = await self.upstream.json("POST", "/v1/runs", body, request=request,
                                           deadline=deadline)
        run_id = str(created.get("run_id") or "")
        if not run_id:
            raise UpstreamError("Hermes accepted the run but returned no run id")
        log.info("hermes_run_started", run_id=run_id, task_id=request.task_id)
        return self._run(run_id), self.upstream.call(
            "GET", f"/v1/runs/{run_id}/events", request=request, retry=False, events=True,
            timeout=self.settings.hermes_stream_idle_timeout)

    async def status(self, run: HermesRun, request: HandlerRequest,
                     deadline: Deadline) -> list[HandlerEvent]:
        """The events of a change of the run's state; reading it may fail for a while
        (``hermes_timeout``, at least 30 s) before the task fails."""
        try:
            state = await self.upstream.json("GET", f"/v1/runs/{run.run_id}", request=request,
                                             retry=False)
        except UpstreamError as exc:
            if exc.status == 404:
                raise UpstreamError(f"Hermes no longer knows run {run.run_id} (it ended over an "
                                    "hour ago or Hermes restarted)") from None
            run.failing_since = run.failing_since or time.monotonic()
            if time.monotonic() - run.failing_since > max(self.settings.hermes_timeout, 30.0):
                raise UpstreamError(
                    f"lost track of Hermes run {run.run_id}: {exc.reason}"
                ) from None
            return []
        run.failing_since = None
        seen = (state.get("status"), state.get("last_event"))
        if seen == run.seen:
            return []
        run.seen = seen
        return run.mapper.feed_status(state)

    def run_of(self, request: HandlerRequest) -> HermesRun | None:
        # The event stream has a single consumer and no replay: a second subscriber may wait
        # forever, so a re-attached run is followed by reading its state (join is None).
        return self._run(request.run_ref) if request.run_ref else None

    async def cancel_run(self, run: HermesRun, request: HandlerRequest) -> None:
        await self._post(f"/v1/runs/{run.run_id}/stop", request)

    @property
    def stop_wait_seconds(self) -> float:
        return self.settings.stop_wait_seconds

    def next_wake(self, run: HermesRun, current: float | None) -> float | None:
        """An approval nobody answers is denied after ``approval_wait_seconds``."""
        if not run.mapper.awaiting_approval:
            return None
        if current is None and self.settings.approval_wait_seconds:
            return time.monotonic() + self.settings.approval_wait_seconds
        return current

    async def wake(self, run: HermesRun, request: HandlerRequest) -> None:
        log.info("hermes_approval_unanswered", run_id=run.run_id)
        with contextlib.suppress(UpstreamError):
            await self._post(f"/v1/runs/{run.run_id}/approval", request, {"choice": "deny"})

    def _run(self, run_id: str) -> HermesRun:
        return HermesRun(RunEventMapper(run_id, self.settings.approval_choices))

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
    """The Hermes choice the answer makes: a structured approval (approved: once, denied:
    deny; Hermes keeps no rejection reason), a data part ``{"choice": ...}``, or a word."""
    if structured_answer(request) is not None:
        decided = decisions(request) or {}
        return "once" if decided and all(d.approved for d in decided.values()) else "deny"
    for data in request.data:
        if "choice" in data:
            value = str(data["choice"]).strip().lower()
            return _TEXT_CHOICES.get(value, value)
    word = request.text.strip().lower().strip(".!\"' ")
    return _TEXT_CHOICES.get(word)
