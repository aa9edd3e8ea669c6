"""Hermes run events (``GET /v1/runs/{id}/events``) and run states → handler events.

Hermes sends each event as one bare ``data: {json}`` frame whose ``"event"`` key
names it; there are no ``event:`` or ``id:`` lines and no replay. ``RunEventMapper``
turns that sequence (or, after the stream is lost, the ``GET /v1/runs/{id}``
snapshots) into the events of ``handlers.base``. It does no I/O. A frame of a
shape it does not know raises ``UnexpectedFrame``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from handlers.approvals import HITL_URI, AskedCall, approval_request, asking_approval
from handlers.base import (
    Canceled,
    Completed,
    Failed,
    HandlerEvent,
    InputRequired,
    Progress,
    TextDelta,
)
from handlers.upstream import UnexpectedFrame

BACKEND = "Hermes"
HERMES_CHOICES = ("once", "session", "always", "deny")


def parse_frames(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Decode raw SSE lines the way Hermes frames them (``data:`` JSON, comments ignored).

    The live path reads frames with ``upstream.SSEReader``; this helper serves recorded streams.
    """
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield json.loads("\n".join(data))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield json.loads("\n".join(data))


def approval_prompt(command: str, description: str, choices: list[str]) -> str:
    words = ", ".join(choices)
    return (
        f"Hermes asks for approval to run a command flagged as {description or 'dangerous'}: "
        f"{command}\nReply with a data part {{\"choice\": ...}} or text, one of: {words} "
        "(\"approve\"/\"yes\" mean once, \"no\" means deny)."
    )


def narrow_choices(offered: list[str] | None, allowed: Iterable[str]) -> list[str]:
    """The approval choices Hermes offered that the endpoint lets remote callers use."""
    if offered is not None and not (isinstance(offered, list)
                                    and all(isinstance(c, str) for c in offered)):
        raise UnexpectedFrame(BACKEND, "approval choices that are not a list of names")
    return [c for c in (offered or HERMES_CHOICES) if c in allowed] or ["deny"]


class RunEventMapper:
    """Maps one run's Hermes events to handler events.

    ``allowed_choices`` narrows the approval choices Hermes offers to those the
    endpoint lets remote callers use (``session``/``always`` widen the grant).
    """

    def __init__(self, run_id: str, allowed_choices: Iterable[str] = HERMES_CHOICES) -> None:
        self.run_id = run_id
        self.allowed_choices = tuple(allowed_choices)
        self.streamed = False
        """True once any answer text went out (the first delta loses its leading newlines)."""
        self.awaiting_approval = False
        self.approvals = 0
        """How many approvals this run asked for (numbers each request's id)."""
        self.terminal: HandlerEvent | None = None

    def feed(self, event: dict[str, Any]) -> list[HandlerEvent]:
        """Handler events for one Hermes event (possibly none)."""
        name = event.get("event")
        if self.terminal is not None:
            return []
        if not isinstance(name, str):
            raise UnexpectedFrame(BACKEND, "an event without a name")
        if name == "message.delta":
            return self._delta(_text(event, "delta"))
        if name == "tool.started":
            data = {"tool": event.get("tool"), "preview": event.get("preview")}
            return [Progress("tool_started", f"{event.get('tool')}: {event.get('preview') or ''}"
                             .rstrip(": "), _clean(data))]
        if name == "tool.completed":
            return self._tool_completed(event)
        if name == "approval.request":
            return [self._approval(event)]
        if name == "approval.responded":
            self.awaiting_approval = False
            data = {"choice": event.get("choice"), "resolved": event.get("resolved")}
            return [Progress("approval_responded", f"approval answered: {event.get('choice')}",
                             _clean(data))]
        if name == "run.completed":
            return [self._finish(Completed(text=_text(event, "output"),
                                           metadata=self._result_metadata(event)))]
        if name == "run.failed":
            return [self._finish(Failed(f"Hermes run failed: {event.get('error') or 'no reason'}"))]
        if name == "run.cancelled":
            return [self._finish(Canceled("Hermes stopped the run"))]
        # reasoning.available carries the final answer again in 0.19: never part of the
        # answer. Unknown or newer events (subagent.*, run.steered, ...) are ignored.
        return []

    def feed_status(self, run: dict[str, Any]) -> list[HandlerEvent]:
        """Handler events for a ``GET /v1/runs/{id}`` snapshot (used after the stream is lost)."""
        status = run.get("status")
        if self.terminal is not None:
            return []
        if status == "completed":
            return [self._finish(Completed(text=_text(run, "output"),
                                           metadata=self._result_metadata(run)))]
        if status == "failed":
            return [self._finish(Failed(f"Hermes run failed: {run.get('error') or 'no reason'}"))]
        if status in ("cancelled", "interrupted"):
            return [self._finish(Canceled(f"Hermes run {status}"))]
        if status == "waiting_for_approval" and not self.awaiting_approval:
            approval = run.get("approval") if isinstance(run.get("approval"), dict) else {}
            return [self._approval({**approval, "event": "approval.request"})]
        if status in ("running", "stopping") and self.awaiting_approval:
            self.awaiting_approval = False
            return [Progress("approval_resolved", "the approval is no longer pending",
                             {"status": status})]
        return []

    def _delta(self, text: str) -> list[HandlerEvent]:
        if not self.streamed:
            # Hermes starts the first answer chunk after a tool call with "\n\n".
            text = text.lstrip("\n")
            if not text:
                return []
        self.streamed = True
        return [TextDelta(text)]

    def _tool_completed(self, event: dict[str, Any]) -> list[HandlerEvent]:
        data = _clean({"tool": event.get("tool"), "duration": event.get("duration"),
                       "error": bool(event.get("error"))})
        status = "failed" if data["error"] else "done"
        events: list[HandlerEvent] = []
        if self.awaiting_approval:
            # No approval.responded first: the approval expired (approvals.timeout) or
            # a stop released it as a deny. Either way it is no longer pending.
            self.awaiting_approval = False
            events.append(Progress("approval_expired", "the approval is no longer pending",
                                   {"tool": event.get("tool")}))
        events.append(Progress("tool_completed", f"{event.get('tool')}: {status}", data))
        return events

    def _approval(self, event: dict[str, Any]) -> InputRequired:
        self.awaiting_approval = True
        choices = narrow_choices(event.get("choices"), self.allowed_choices)
        command = str(event.get("command") or "")
        description = str(event.get("description") or event.get("pattern_key") or "")
        self.approvals += 1
        # Hermes asks before its terminal tool runs a command; it takes no edited command
        call = AskedCall(f"{self.run_id}/approval-{self.approvals}", "terminal",
                         {"command": command})
        asked = approval_request([call], answers=choices, hint=(
            f"Hermes asks for approval to run a command flagged as {description or 'dangerous'}"))
        data = {"type": "hermes.approval", "run_id": self.run_id, "command": command,
                "description": description, "choices": choices, HITL_URI: asked}
        return asking_approval(approval_prompt(command, description, choices), data)

    def _result_metadata(self, source: dict[str, Any]) -> dict[str, Any]:
        metadata: dict[str, Any] = {"hermes_run_id": self.run_id}
        if isinstance(source.get("usage"), dict):
            metadata["usage"] = source["usage"]
        return metadata

    def _finish(self, event: HandlerEvent) -> HandlerEvent:
        self.awaiting_approval = False
        self.terminal = event
        return event


def _text(source: dict[str, Any], key: str) -> str:
    """A text field of an event or snapshot (missing or null: empty)."""
    value = source.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UnexpectedFrame(BACKEND, f"{key!r} is not text")
    return value


def _clean(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}
