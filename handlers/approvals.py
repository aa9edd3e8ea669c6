"""Approvals: a tool call the backend paused on (Hermes' ``approval.request``, a LangGraph
``interrupt()``, ADK's ``require_confirmation``, Agno's ``requires_confirmation``, ...) as a
structured request to the client, and the client's answer read and checked against it.

The request is the ``tool_approval_request`` of kagent's HITL extension (``HITL_URI``):
``{"type", "hint", "tools": [{"id", "call_id", "name", "args"}]}``, plus this gateway's own
fields: ``answers`` (the plain-text answers the backend takes, e.g. Hermes' choices) and, on
each tool, ``editable`` (whether an approval may carry edited ``args``). The bridges put it in
the INPUT_REQUIRED data part under the key ``HITL_URI``, beside their older keys
(``choices``, ``interrupts``, ...). The answer is a ``tool_approval_response``
``{"type", "approvals": [{"id", "approved", "rejection_reason"?, "args"?}]}`` (``args`` is this
gateway's addition), in the message's metadata under ``HITL_URI`` (as kagent sends it), in a
data part under that key, or as a data part itself; a yes/no text (or ``{"approved": bool}``)
still answers every pending tool alike. An answer that does not fit the request raises
``ApprovalAnswerError`` with the reason; the bridges refuse it and the task keeps waiting.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.json_format import MessageToDict

from handlers.base import HandlerRequest, InputRejectedError, InputRequired

__all__ = [
    "HITL_URI",
    "asking_approval",
    "decisions_or_refusal",
    "ApprovalAnswerError",
    "AskedCall",
    "Decision",
    "approval_request",
    "call_text",
    "card_extension",
    "confirmation_answer",
    "decisions",
    "pending_request",
    "structured_answer",
    "yes_or_no",
]

HITL_URI = "https://kagent.dev/extensions/hitl/v1"
REQUEST_TYPE = "tool_approval_request"
RESPONSE_TYPE = "tool_approval_response"

YES = frozenset({"yes", "y", "approve", "approved", "allow", "ok", "confirm", "confirmed"})
NO = frozenset({"no", "n", "deny", "denied", "reject", "rejected", "cancel"})


@dataclass(frozen=True, slots=True)
class AskedCall:
    """One tool call awaiting approval: ``id`` correlates the answer (opaque to the client),
    ``call_id`` is the backend's own id of the call."""

    id: str
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""
    editable: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """The client's decision on one call: ``args`` only when it approved edited arguments."""

    approved: bool
    reason: str = ""
    args: dict[str, Any] | None = None


class ApprovalAnswerError(ValueError):
    """A structured answer that does not fit the pending request; the message says why."""


def card_extension(*, editable: bool) -> dict[str, Any]:
    """The card's declaration of the extension (``params.editableArgs``: edited arguments are
    honoured)."""
    return {"uri": HITL_URI, "required": False, "params": {"editableArgs": editable},
            "description": "Tool approvals as structured requests (kagent HITL v1); answer "
                           "with a tool_approval_response"}


def approval_request(calls: Iterable[AskedCall], *, hint: str,
                     answers: Iterable[str] = ("approve", "deny")) -> dict[str, Any]:
    """The ``tool_approval_request`` for ``calls``: what is asked (``hint``), the calls, and
    the plain-text ``answers`` the backend takes."""
    return {
        "type": REQUEST_TYPE,
        "hint": hint,
        "tools": [{"id": c.id, "call_id": c.call_id or c.id, "name": c.name, "args": c.args,
                   "editable": c.editable} for c in calls],
        "answers": list(answers),
    }


def asking_approval(prompt: str, data: dict[str, Any]) -> InputRequired:
    """The question of a run that may wait for approvals: when ``data`` holds a request
    under ``HITL_URI`` (beside any older keys), the message also carries it in its metadata
    under ``HITL_URI`` and names the extension, as kagent clients read it."""
    if HITL_URI not in data:
        return InputRequired(prompt, data)
    return InputRequired(prompt, data, metadata={HITL_URI: data[HITL_URI]},
                         extensions=(HITL_URI,))


def pending_request(pending: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``tool_approval_request`` kept in a pending input's data, if any."""
    value = (pending or {}).get(HITL_URI)
    return value if isinstance(value, dict) and value.get("type") == REQUEST_TYPE else None


def structured_answer(request: HandlerRequest) -> dict[str, Any] | None:
    """The extension payload of the client's answer: the message metadata under
    ``HITL_URI``, a data part's value under that key, or a data part of the response's
    ``type``; None when the answer has none."""
    metadata = MessageToDict(request.message.metadata) if request.message.metadata else {}
    candidates = [metadata.get(HITL_URI)]
    for data in request.data:
        candidates += [data.get(HITL_URI), data if data.get("type") == RESPONSE_TYPE else None]
    found = [c for c in candidates if c is not None]
    if not found:
        return None
    if not isinstance(found[0], dict):
        raise ApprovalAnswerError(f"the {HITL_URI} payload must be a JSON object")
    return found[0]


def decisions(request: HandlerRequest) -> dict[str, Decision] | None:
    """Each pending call's decision (by id) from the client's answer to the approval request
    kept in ``request.pending_input``: None when the answer says neither yes nor no, empty
    when a yes or no answers a question that has no approval request. Raises
    ``ApprovalAnswerError`` for a structured answer that does not fit the request (or comes
    when no approval is pending)."""
    asked = pending_request(request.pending_input)
    payload = structured_answer(request)
    if payload is not None:
        if asked is None:
            raise ApprovalAnswerError("no tool approval is pending on this task")
        return _checked(payload, asked)
    decision = confirmation_answer(request)
    if decision is None or asked is None:
        return None if decision is None else {}
    return {str(t["id"]): Decision(decision) for t in asked["tools"]}


def decisions_or_refusal(request: HandlerRequest) -> dict[str, Decision] | None:
    """``decisions``, with an answer that does not fit the request refused: the task keeps
    waiting, its pending request unchanged, and the client reads why."""
    try:
        return decisions(request)
    except ApprovalAnswerError as exc:
        raise InputRejectedError(f"Not a valid answer to the approval request: {exc}.",
                                 request.pending_input or None) from None


def _checked(payload: dict[str, Any], asked: dict[str, Any]) -> dict[str, Decision]:
    if payload.get("type") != RESPONSE_TYPE:
        raise ApprovalAnswerError(f"type must be {RESPONSE_TYPE!r} (got {payload.get('type')!r})")
    approvals = payload.get("approvals")
    if not isinstance(approvals, list) or not approvals:
        raise ApprovalAnswerError("approvals must be a non-empty list")
    tools = {str(t["id"]): t for t in asked["tools"]}
    decided: dict[str, Decision] = {}
    for index, item in enumerate(approvals):
        where = f"approvals[{index}]"
        if not isinstance(item, dict):
            raise ApprovalAnswerError(f"{where} must be an object")
        ident = item.get("id")
        if not isinstance(ident, str) or ident not in tools:
            raise ApprovalAnswerError(f"{where}.id {ident!r} is not a pending approval; pending: "
                                      f"{', '.join(tools)}")
        if ident in decided:
            raise ApprovalAnswerError(f"{where}.id {ident!r} is answered twice")
        decided[ident] = _decision(item, tools[ident], where)
    missing = [i for i in tools if i not in decided]
    if missing:
        raise ApprovalAnswerError(f"no answer for the pending approval(s) {', '.join(missing)}")
    return decided


def _decision(item: dict[str, Any], tool: dict[str, Any], where: str) -> Decision:
    unknown = sorted(set(item) - {"id", "approved", "rejection_reason", "args"})
    if unknown:
        raise ApprovalAnswerError(f"{where} has unknown field(s) {', '.join(unknown)}")
    approved = item.get("approved")
    if not isinstance(approved, bool):
        raise ApprovalAnswerError(f"{where}.approved must be true or false")
    reason = item.get("rejection_reason")
    if reason is not None and not isinstance(reason, str):
        raise ApprovalAnswerError(f"{where}.rejection_reason must be a string")
    args = item.get("args")
    if args is not None:
        if not tool.get("editable"):
            raise ApprovalAnswerError(f"{where}.args: the backend cannot run {tool.get('name')} "
                                      "with edited arguments; approve or deny it as asked")
        if not isinstance(args, dict):
            raise ApprovalAnswerError(f"{where}.args must be an object")
        if not approved:
            raise ApprovalAnswerError(f"{where}.args comes only with approved: true")
    return Decision(approved, reason or "", args)


def call_text(name: Any, args: Any) -> str:
    """A tool call as a question shows it: ``name(key=<JSON value>, ...)``."""
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}"
                      for k, v in (args.items() if isinstance(args, dict) else ()))
    return f"{name or 'a tool'}({shown})"


def yes_or_no(value: Any) -> bool | None:
    """True for a yes (approve, ok, ...), False for a no (deny, reject, ...), a bool as it
    is; None for anything else."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower().strip(".!\"' ")
    return True if word in YES else False if word in NO else None


def confirmation_answer(request: HandlerRequest) -> bool | None:
    """The client's plain answer to a confirmation: a data part with ``confirmed`` (or
    ``approved``) true/false, or a text such as yes/approve or no/deny; None when unclear."""
    for data in request.data:
        for key in ("confirmed", "approved"):
            if isinstance(data.get(key), bool):
                return data[key]
        if isinstance(data.get("choice"), str):
            return yes_or_no(data["choice"])
    return yes_or_no(request.text)
