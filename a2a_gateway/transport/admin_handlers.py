"""``GET /admin/api/handlers``: the handlers that ship with the gateway (the ``handlers``
package) and that its ``handler_allowlist`` admits, for the console's new-endpoint form.

Each is ``{"handler": "MODULE:CLASS", "description", "settings", "secrets"}``: the first line
of the class docstring, the JSON schema of its settings model (types, defaults, descriptions:
a field's ``Field(description=…)``, else the docstring under it in the model or a base) with
``"x-secret": true`` on each secret field, and the names of those fields. A secret is what
the admin API hides in an endpoint's settings (``secret_settings``); a row should hold it as
an ``env:NAME`` reference, expanded by the gateway that serves it. A handler module that does
not import is left out (the gateway could not serve it either).

The docstrings are read from the source here, at the first call, not by pydantic
(``use_attribute_docstrings`` would parse each model's module whenever a handler is imported,
tens of milliseconds more at every start).

The answer is built once per allowlist and kept: neither the shipped handlers nor the
allowlist change while the gateway runs.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import pkgutil
import textwrap
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog
from aiohttp import web
from pydantic import BaseModel

from a2a_gateway.auth.operators import Operator
from a2a_gateway.endpoints.registry import load_handler_class, secret_settings
from a2a_gateway.errors import EndpointMisconfiguredError
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.state import GATEWAY
from a2a_gateway.stores.base import Endpoint
from handlers.base import Handler

SHIPPED_PACKAGE = "handlers"

log = structlog.get_logger(__name__)
View = Callable[[web.Request], Awaitable[web.StreamResponse]]


_ANSWERS: dict[tuple[str, ...], bytes] = {}
"""The answer per allowlist (gateways of one process, as in tests, may have different ones)."""


def handlers_route(operator_of: Callable[[web.Request], Operator]) -> View:
    """``GET /admin/api/handlers`` for the operators ``operator_of`` admits (the admin API's
    check, handed in: that module registers this one)."""

    async def list_handlers(request: web.Request) -> web.Response:
        operator_of(request)
        settings = request.app[GATEWAY].settings
        allowlist = tuple(settings.handler_allowlist)
        if allowlist not in _ANSWERS:  # imports and parses sources: off the event loop, once
            _ANSWERS[allowlist] = await asyncio.to_thread(handlers_answer, allowlist, settings)
        return web.Response(
            body=_ANSWERS[allowlist],
            content_type="application/json",
            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
        )

    return list_handlers


def handlers_answer(allowlist: tuple[str, ...], settings: GatewaySettings) -> bytes:
    found = [handler_json(path, cls, settings) for path, cls in allowed_handlers(allowlist)]
    return orjson.dumps({"handlers": found})


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
    docstrings = attribute_docstrings(cls.Settings)
    for name, field in schema.get("properties", {}).items():
        description = field.get("description") or docstrings.get(name)
        if description:  # a docstring's line breaks are not the text's
            field["description"] = " ".join(description.split())
        if name in secrets:
            field["x-secret"] = True
    return {
        "handler": path,
        "description": _first_line(cls.__doc__),
        "settings": schema,
        "secrets": secrets,
    }


def attribute_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field name → the string literal right under its annotated assignment in the class body
    of ``model`` or of a base model (the nearest class wins); none where the source is not
    available."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (issubclass(cls, BaseModel) and cls is not BaseModel):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):  # no source shipped: the schema as it is
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def _first_line(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").partition("\n")[0]
