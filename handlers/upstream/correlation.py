"""The A2A task's identifiers on every backend call, so that a backend's own logs (and the
logs of an LLM gateway behind it) can be joined to the task: ``X-A2A-Task-Id``,
``X-A2A-Context-Id`` and ``X-A2A-Endpoint-Id``, next to the trace context.

A context id is the caller's choice, so every value is made safe for a header first: any
character outside a small set (letters, digits, ``-._~:@+=``) is percent-encoded as UTF-8
(a UUID goes out unchanged; CR, LF, ``%`` and non-ASCII never go out raw), and the result is
clipped to ``MAX_HEADER_CHARS``. A header can then neither break the request nor smuggle
another header in.

A backend whose run takes metadata of its own in the body (LangGraph's run ``metadata``, ADK's
``custom_metadata``, Agno's run ``metadata``) also gets the ids there (``correlation_metadata``),
as they are (JSON carries any text), clipped to ``MAX_HEADER_CHARS``."""

from __future__ import annotations

from urllib.parse import quote

from handlers.base import HandlerRequest

TASK_HEADER = "X-A2A-Task-Id"
CONTEXT_HEADER = "X-A2A-Context-Id"
ENDPOINT_HEADER = "X-A2A-Endpoint-Id"
CORRELATION_HEADERS = (TASK_HEADER, CONTEXT_HEADER, ENDPOINT_HEADER)
METADATA_KEYS = ("a2a_task_id", "a2a_context_id", "a2a_endpoint_id")

MAX_HEADER_CHARS = 200
"""The longest value sent; a longer (encoded) id is clipped."""

KEPT_AS_IS = "-._~:@+="
"""Characters sent unencoded besides ASCII letters and digits."""


def header_value(value: str) -> str:
    """``value`` percent-encoded where it is not plain, then clipped to
    ``MAX_HEADER_CHARS`` at a character's end (an escape, or a character's UTF-8 escapes,
    is never cut in half)."""
    pieces: list[str] = []
    length = 0
    for char in value:
        piece = quote(char, safe=KEPT_AS_IS, errors="replace")  # a lone surrogate: "?"
        length += len(piece)
        if length > MAX_HEADER_CHARS:
            break
        pieces.append(piece)
    return "".join(pieces)


def correlation_headers(request: HandlerRequest | None) -> dict[str, str]:
    """The task's, context's and endpoint's ids of ``request`` as headers (an empty id is
    left out; no request, no headers)."""
    if request is None:
        return {}
    return {name: header_value(value) for name, value in _ids(CORRELATION_HEADERS, request)}


def correlation_metadata(request: HandlerRequest) -> dict[str, str]:
    """The same ids for a run's metadata in the body: ``a2a_task_id``, ``a2a_context_id``,
    ``a2a_endpoint_id`` (an empty id is left out)."""
    return {key: value[:MAX_HEADER_CHARS] for key, value in _ids(METADATA_KEYS, request)}


def _ids(names: tuple[str, str, str], request: HandlerRequest) -> list[tuple[str, str]]:
    ids = (request.task_id, request.context_id, request.endpoint_id)
    return [(name, value) for name, value in zip(names, ids, strict=True) if value]
