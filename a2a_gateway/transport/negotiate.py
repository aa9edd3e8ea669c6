"""A2A-Version and A2A-Extensions negotiation (header, or query parameter for the version)."""

from __future__ import annotations

from a2a.extensions.common import get_requested_extensions
from a2a.utils.errors import ExtensionSupportRequiredError, VersionNotSupportedError
from aiohttp import web

from a2a_gateway.endpoints.registry import EndpointRuntime

V03 = "0.3"
V10 = "1.0"
V11 = "1.1"
"""1.0 with the 1.1 draft's task generations (``a2a_gateway.generation``), which only a
client that asks for 1.1 reads."""
SPEAKS_1_0 = frozenset({V10, V11})


def requested_version(request: web.Request) -> str:
    return (request.headers.get("A2A-Version") or request.query.get("A2A-Version") or "").strip()


def parse_version(raw: str, *, empty_means: str = V03) -> str:
    """Major.Minor of the requested version; patch levels do not matter."""
    if not raw:
        return empty_means
    parts = raw.split(".")
    major_minor = ".".join(parts[:2]) if len(parts) >= 2 else raw
    if major_minor in (V11, V10, V03):
        return major_minor
    raise VersionNotSupportedError(
        f"A2A version {raw!r} is not supported (supported: 1.1, 1.0, 0.3)"
    )


def negotiate_extensions(request: web.Request, runtime: EndpointRuntime) -> list[str]:
    """The declared extensions the client activated; -32008 for a missing required one."""
    values = request.headers.getall("A2A-Extensions", []) + request.headers.getall(
        "X-A2A-Extensions", []
    )
    return activated_extensions(values, runtime)


def activated_extensions(values: list[str], runtime: EndpointRuntime) -> list[str]:
    """Of the extensions named in ``values`` (A2A-Extensions values), those the endpoint
    declares."""
    requested = get_requested_extensions(values)
    declared = runtime.extensions
    missing = [e["uri"] for e in declared if e.get("required") and e.get("uri") not in requested]
    if missing:
        raise ExtensionSupportRequiredError(
            f"this agent requires the extension(s) {', '.join(missing)};"
            " activate them with A2A-Extensions"
        )
    return [e["uri"] for e in declared if e.get("uri") in requested]
