"""``GET /admin/api/handlers``: the handlers that ship with the gateway (the ``handlers``
package) and that its ``handler_allowlist`` admits, for the console's new-endpoint form.

Each is ``{"handler": "MODULE:CLASS", "description", "settings", "secrets"}``: the first line
of the class docstring, the JSON schema of its settings model (types, defaults, the fields'
docstrings as descriptions) with ``"x-secret": true`` on each secret field, and the names of
those fields. A secret is what the admin API hides in an endpoint's settings
(``secret_settings``); a row should hold it as an ``env:NAME`` reference, expanded by the
gateway that serves it. A handler module that does not import is left out (the gateway
could not serve it either).

The answer is built once per allowlist and kept: neither the shipped handlers nor the
allowlist change while the gateway runs.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import orjson
import structlog
from aiohttp import web

from a2a_gateway.endpoints.registry import load_handler_class, secret_settings
from a2a_gateway.errors import EndpointMisconfiguredError
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.state import GATEWAY
from a2a_gateway.stores.base import Endpoint
from a2a_gateway.transport.admin import operator_of
from handlers.base import Handler

SHIPPED_PACKAGE = "handlers"

log = structlog.get_logger(__name__)


_ANSWERS: dict[tuple[str, ...], bytes] = {}
"""The answer per allowlist (gateways of one process, as in tests, may have different ones)."""


async def list_handlers(request: web.Request) -> web.Response:
    operator_of(request)
    settings = request.app[GATEWAY].settings
    allowlist = tuple(settings.handler_allowlist)
    if allowlist not in _ANSWERS:
        found = [handler_json(path, cls, settings) for path, cls in allowed_handlers(allowlist)]
        _ANSWERS[allowlist] = orjson.dumps({"handlers": found})
    return web.Response(
        body=_ANSWERS[allowlist],
        content_type="application/json",
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


def allowed_handlers(allowlist: tuple[str, ...]) -> list[tuple[str, type[Handler]]]:
    """``(MODULE:CLASS, class)`` of every concrete handler class defined in a module of the
    ``handlers`` package that ``allowlist`` admits, sorted by path."""
    package = importlib.import_module(SHIPPED_PACKAGE)
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        module_name = f"{SHIPPED_PACKAGE}.{info.name}"
        for class_name in _handler_classes(module_name):
            try:
                cls = load_handler_class(
                    {"module_name": module_name, "class_name": class_name}, list(allowlist)
                )
            except EndpointMisconfiguredError:  # outside the allowlist
                continue
            found.append((f"{module_name}:{class_name}", cls))
    return sorted(found, key=lambda item: item[0])


def _handler_classes(module_name: str) -> list[str]:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an optional dependency missing: not offered, like not served
        log.warning("handler_module_not_importable", module=module_name, error=type(exc).__name__)
        return []
    return [
        name for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, Handler)
        and not inspect.isabstract(value) and value.__module__ == module_name
    ]


def handler_json(path: str, cls: type[Handler], settings: GatewaySettings) -> dict[str, Any]:
    module_name, _, class_name = path.partition(":")
    probe = Endpoint(id="", name="", metadata={"module_name": module_name,
                                               "class_name": class_name})
    secrets = sorted(secret_settings(probe, settings))
    schema = cls.Settings.model_json_schema()
    for name, field in schema.get("properties", {}).items():
        if "description" in field:  # a docstring's line breaks are not the text's
            field["description"] = " ".join(field["description"].split())
        if name in secrets:
            field["x-secret"] = True
    return {
        "handler": path,
        "description": _first_line(cls.__doc__),
        "settings": schema,
        "secrets": secrets,
    }


def _first_line(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").partition("\n")[0]
