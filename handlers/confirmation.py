"""Confirming a tool call the backend paused on (Agno's ``requires_confirmation``, ADK's
``require_confirmation``, an AG-UI interrupt): the call as the question shows it, and the yes
or no of the client's answer."""

from __future__ import annotations

import json
from typing import Any

from handlers.base import HandlerRequest

YES = frozenset({"yes", "y", "approve", "approved", "allow", "ok", "confirm", "confirmed"})
NO = frozenset({"no", "n", "deny", "denied", "reject", "rejected", "cancel"})


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
    """The client's answer to a confirmation: a data part with ``confirmed`` (or
    ``approved``) true/false, or a text such as yes/approve or no/deny; None when unclear."""
    for data in request.data:
        for key in ("confirmed", "approved"):
            if isinstance(data.get(key), bool):
                return data[key]
        if isinstance(data.get("choice"), str):
            return yes_or_no(data["choice"])
    return yes_or_no(request.text)
