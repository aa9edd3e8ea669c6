"""Limits on what one request may carry beyond its size: parts per message, characters per
text part, bytes of each metadata object. Checked on the request's JSON (the same for
A2A 1.0 and 0.3, JSON-RPC and REST) before it is converted; each error names its setting."""

from __future__ import annotations

from typing import Any

import orjson
from a2a.utils.errors import InvalidParamsError

from a2a_gateway.settings import GatewaySettings


def _check_metadata(holder: Any, where: str, settings: GatewaySettings) -> None:
    metadata = holder.get("metadata") if isinstance(holder, dict) else None
    if metadata is None:
        return
    size = len(orjson.dumps(metadata))
    if size > settings.max_metadata_bytes:
        raise InvalidParamsError(
            f"{where}metadata is {size} bytes; max_metadata_bytes is {settings.max_metadata_bytes}"
        )


def check_request_limits(params: Any, settings: GatewaySettings) -> None:
    """``InvalidParamsError`` naming the limit ``params`` (a request's JSON) goes past."""
    _check_metadata(params, "", settings)
    message = params.get("message") if isinstance(params, dict) else None
    if not isinstance(message, dict):
        return
    _check_metadata(message, "message.", settings)
    parts = message.get("parts")
    if not isinstance(parts, list):
        return
    if len(parts) > settings.max_message_parts:
        raise InvalidParamsError(
            f"message has {len(parts)} parts; max_message_parts is {settings.max_message_parts}"
        )
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            continue
        text = part.get("text")
        if isinstance(text, str) and len(text) > settings.max_text_chars:
            raise InvalidParamsError(
                f"message.parts[{i}].text has {len(text)} characters; "
                f"max_text_chars is {settings.max_text_chars}"
            )
        _check_metadata(part, f"message.parts[{i}].", settings)
