"""LangGraph interrupts that ask to approve tool calls, as ``handlers.approvals`` requests.

An interrupt whose value has the shape of LangChain's ``HumanInTheLoopMiddleware`` request,
``{"action_requests": [{"name", "args", "description"?}], "review_configs": [{"action_name",
"allowed_decisions"}]}``, is an approval: each action becomes a call (editable when its review
config allows ``edit``), and the client's decisions resume the interrupt with the middleware's
answer ``{"decisions": [{"type": "approve"} | {"type": "edit", "edited_action": {"name",
"args"}} | {"type": "reject", "message"?}]}``, one per action, in order. Any other interrupt
is a free question: its answer is resumed as the client sent it.
"""

from __future__ import annotations

from typing import Any

from handlers.approvals import AskedCall, Decision, approval_request, call_text

__all__ = ["approval_of", "asked_calls", "decisions_value", "is_approval"]


def is_approval(value: Any) -> bool:
    """True for an interrupt value of the middleware's request shape."""
    return isinstance(value, dict) and isinstance(value.get("action_requests"), list) and all(
        isinstance(a, dict) and isinstance(a.get("name"), str)
        for a in value["action_requests"])


def _allowed(value: dict[str, Any], name: str) -> list[str]:
    for config in value.get("review_configs") or []:
        if isinstance(config, dict) and config.get("action_name") == name:
            allowed = config.get("allowed_decisions")
            return [d for d in allowed if isinstance(d, str)] if isinstance(allowed, list) else []
    return ["approve", "reject"]


def asked_calls(interrupt: dict[str, Any]) -> list[AskedCall]:
    """The calls one approval interrupt asks about; ids are ``<interrupt id>/<index>``."""
    value = interrupt["value"]
    calls = []
    for index, action in enumerate(value["action_requests"]):
        args = action.get("args") if isinstance(action.get("args"), dict) else {}
        calls.append(AskedCall(f"{interrupt.get('id') or 'interrupt'}/{index}", action["name"],
                               args, call_id=str(interrupt.get("id") or ""),
                               editable="edit" in _allowed(value, action["name"])))
    return calls


def approval_of(interrupts: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The prompt and the ``tool_approval_request`` of the approval interrupts among
    ``interrupts``; None when there are none."""
    calls: list[AskedCall] = []
    lines = []
    for interrupt in interrupts:
        if is_approval(interrupt.get("value")):
            for call, action in zip(asked_calls(interrupt),
                                    interrupt["value"]["action_requests"], strict=True):
                calls.append(call)
                described = action.get("description")
                lines.append(described if isinstance(described, str) and described
                             else f"Approve the tool call {call_text(call.name, call.args)}?")
    if not calls:
        return None
    prompt = "\n".join(lines)
    return prompt, approval_request(calls, hint=prompt, answers=("approve", "deny"))


def decisions_value(interrupt: dict[str, Any], decided: dict[str, Decision]) -> dict[str, Any]:
    """The middleware's resume value for one approval interrupt, from the decisions by id."""
    answers = []
    for call in asked_calls(interrupt):
        decision = decided.get(call.id, Decision(False))
        if decision.args is not None:
            answers.append({"type": "edit",
                            "edited_action": {"name": call.name, "args": decision.args}})
        elif decision.approved:
            answers.append({"type": "approve"})
        else:
            answers.append({"type": "reject", **({"message": decision.reason}
                                                 if decision.reason else {})})
    return {"decisions": answers}
