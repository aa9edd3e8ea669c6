"""Why a backend could not be used: ``UpstreamError`` and its reasons, short, naming the
backend, and safe to show to the A2A client (no secret, no URL credentials, no frame content).
"""

from __future__ import annotations

import json
import ssl

import httpx

from handlers.upstream.redaction import shown_url

MAX_REASON_CHARS = 500


class UpstreamError(Exception):
    """The backend could not be used; ``reason`` is safe to show to the A2A client.
    ``status`` and ``code`` are the HTTP status and the error code of an error answer."""

    def __init__(self, reason: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.code = code


class UnexpectedFrame(UpstreamError):
    """The backend sent a well-formed frame of a shape the bridge does not know.

    ``detail`` names what was wrong, never the frame's content (which may carry
    anything, secrets included)."""

    def __init__(self, backend: str, detail: str) -> None:
        super().__init__(f"{backend} sent an unexpected frame ({detail})")


class RunTimedOut(UpstreamError):
    """The run reached its ``run_timeout_seconds``."""


def clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_detail(body: bytes | str) -> tuple[str, str | None]:
    """The message and code of an OpenAI-style error body (``{"error": {"message",
    "code"}}``), a ``message`` or a FastAPI ``detail`` text, else the body itself and no code."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        value = json.loads(text)
    except ValueError:
        return clip(text), None
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code = error.get("code")
            return clip(error["message"]), code if isinstance(code, str) else None
        if isinstance(error, str):
            return clip(error), None
        if isinstance(value.get("message"), str):
            return clip(value["message"]), None
        if isinstance(value.get("detail"), str):  # FastAPI's HTTPException (AgentOS)
            return clip(value["detail"]), None
    return clip(text), None


def http_error_reason(backend: str, status: int, message: str, attempts: int = 1) -> str:
    """A reason for a non-2xx answer; 401/403 never echo the body."""
    if status == 401:
        return (f"{backend} rejected the API key (HTTP 401); "
                "check the endpoint's API key setting")
    if status == 403:
        return f"{backend} refused the request (HTTP 403): the API key lacks a permission"
    if status == 429:
        return (f"{backend} is rate limiting requests (HTTP 429, {attempts} attempt(s)): "
                f"{message}")
    if status == 503:
        return f"{backend} is unavailable (HTTP 503, {attempts} attempt(s)): {message}"
    if status >= 500:
        return f"{backend} failed (HTTP {status}): {message}"
    return f"{backend} rejected the request (HTTP {status}): {message}"


def transport_error_reason(backend: str, url: str, exc: BaseException, timeout: float) -> str:
    """A reason for an httpx error, naming the URL without its credentials."""
    url = shown_url(url)
    if isinstance(exc, httpx.ConnectTimeout):
        return f"cannot reach {backend} at {url}: connection timed out"
    if isinstance(exc, httpx.TimeoutException):
        return f"{backend} sent nothing for {timeout:g} s (timeout)"
    if isinstance(exc, httpx.ConnectError):
        refused = _certificate_refusal(exc)
        if refused is not None:  # the fix is the operator's (a CA bundle, the name called)
            return f"cannot reach {backend} at {url}: its TLS certificate was refused ({refused})"
        return f"cannot reach {backend} at {url}"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"{backend} closed the connection before the answer was complete"
    return f"connection to {backend} failed ({type(exc).__name__})"


def _certificate_refusal(exc: BaseException) -> str | None:
    """Why a certificate check failed a connection (OpenSSL's words: "unable to get local
    issuer certificate", "Hostname mismatch, ..."), found along ``exc``'s causes: httpx's
    transports and ours raise the httpx error from the one below it, and aiohttp's own
    error is an ``SSLCertVerificationError`` without OpenSSL's message."""
    seen: BaseException | None = exc
    for _ in range(8):  # the chain is short; a cycle must not hang
        if seen is None:
            return None
        message = getattr(seen, "verify_message", None)
        if isinstance(seen, ssl.SSLCertVerificationError) and message:
            return str(message)
        seen = seen.__cause__ or seen.__context__
    return None
