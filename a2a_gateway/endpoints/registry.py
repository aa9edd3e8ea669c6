"""Endpoint registry: endpoint id → row → allowlisted handler class → cached runtime.

A runtime holds the endpoint row and its handler instance (settings resolved, opened
once). Rows are re-read at most every ``endpoint_cache_seconds``, and at the next request
after ``forget`` (an operator's change on this replica; on PostgreSQL, any replica's change of
the row, announced by the database); a changed row builds a new runtime, and the old handler
is closed once its last run has ended. A row that cannot be served (handler not allowed or
missing, invalid settings or card) becomes a runtime with a ``problem``, which every route of
the endpoint answers.
``check_endpoint`` runs the same checks for the command line, before a row is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import importlib
import inspect
import math
import pkgutil
import time
import typing
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import structlog
from pydantic import SecretStr, ValidationError

from a2a_gateway.auth.config import EndpointAuth, EndpointAuthView, endpoint_auth
from a2a_gateway.auth.rate_limit import RateLimit, endpoint_rate_limit
from a2a_gateway.endpoints.card import capabilities, capability, check_card, with_handler_fields
from a2a_gateway.errors import EndpointMisconfiguredError, EndpointNotFoundError
from a2a_gateway.governance.limits import LimitsError, parse_limits
from a2a_gateway.governance.usage import COST_KEY, check_cost
from a2a_gateway.observability.logs import looks_secret
from a2a_gateway.settings import (
    RESERVED_METADATA_KEYS,
    GatewaySettings,
    HandlerSettingsError,
    resolve_handler_settings,
    unset_env_refs,
)
from a2a_gateway.stores.base import Endpoint, Store
from handlers.base import Handler, HandlerSettings

if TYPE_CHECKING:
    from a2a.compat.v0_3.request_handler import RequestHandler03
    from a2a.server.request_handlers.request_handler import RequestHandler
    from a2a.types import AgentCard

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class EndpointRuntime:
    endpoint: Endpoint
    handler: Handler | None
    problem: str | None = None
    """Why the handler could not be built (the endpoint then answers with an error)."""
    auth: EndpointAuth = field(default_factory=EndpointAuth)
    """The schemes callers may authenticate with (the row's ``auth``, ``public``)."""
    rate_limit: RateLimit | None = None
    """Requests per caller (the row's ``rate_limit`` or the gateway's); None: unlimited."""
    limits: dict[str, int | float] = field(default_factory=dict)
    """The row's quota ``limits`` that are set (all callers together); empty: none."""
    request_handlers: tuple[RequestHandler, RequestHandler03] | None = None
    """The endpoint's 1.0 request handler and its 0.3 adapter (``state.Gateway`` builds them)."""
    card_cache: tuple[str, bytes, str] | None = None
    """The served card for one base URL: (base URL, signed JSON bytes, ETag)."""
    extended_card_cache: tuple[str, AgentCard] | None = None
    """The signed extended card for one base URL."""
    secrets: tuple[str, ...] = ()
    """The handler's secret settings values (``env:`` references resolved): never shown."""
    auth_view: EndpointAuthView = field(init=False, repr=False)
    """What auth checks a caller against (a changed row builds a new runtime, so it stays true)."""
    _active_runs: int = field(default=0, init=False, repr=False)
    _idle: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def __post_init__(self) -> None:
        self.auth_view = EndpointAuthView(self.endpoint.id, self.auth, self.rate_limit)

    @classmethod
    def gone(cls, endpoint_id: str) -> EndpointRuntime:
        """The runtime of an endpoint that no longer exists (its tasks can only be ended)."""
        return cls(
            Endpoint(id=endpoint_id, name="", enabled=False), None, problem="endpoint not found"
        )

    def run_started(self) -> None:
        self._active_runs += 1
        self._idle.clear()

    def run_ended(self) -> None:
        self._active_runs -= 1
        if self._active_runs <= 0:
            self._idle.set()

    async def close_when_idle(self, timeout: float | None = None) -> None:
        """Close the handler once no run of it is going on (``timeout``: close anyway)."""
        if self.handler is None:
            return
        if self._active_runs > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # not wait_for: it can lose a cancel
                    await self._idle.wait()
        try:
            await self.handler.aclose()
        except Exception:
            log.exception("handler_close_failed", endpoint_id=self.endpoint.id)

    @property
    def streaming(self) -> bool:
        return capability(self.endpoint, "streaming")

    @property
    def push_notifications(self) -> bool:
        return capability(self.endpoint, "pushNotifications")

    @property
    def extended_card(self) -> bool:
        """The row declares an extended card and configures its content."""
        return capability(self.endpoint, "extendedAgentCard") and bool(
            self.endpoint.card.get("extended")
        )

    @property
    def extensions(self) -> list[dict[str, Any]]:
        return list(capabilities(self.endpoint).get("extensions", []))

    def require_handler(self) -> Handler:
        if self.handler is None:
            raise EndpointMisconfiguredError(f"endpoint is misconfigured: {self.problem}")
        return self.handler


def handler_path(metadata: dict[str, Any]) -> str:
    return f"{metadata.get('module_name', '')}:{metadata.get('class_name', '')}"


def load_handler_class(metadata: dict[str, Any], allowlist: list[str]) -> type[Handler]:
    module_name = str(metadata.get("module_name") or "")
    class_name = str(metadata.get("class_name") or "")
    if not module_name or not class_name:
        raise EndpointMisconfiguredError("metadata must name module_name and class_name")
    if not any(module_name.startswith(p) or module_name == p.rstrip(".") for p in allowlist):
        raise EndpointMisconfiguredError(
            f"handler module {module_name!r} is not in the allowlist"
            f"{_did_you_mean(module_name, _allowed_modules(allowlist))}"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a broken handler module is this endpoint's problem, not a crash
        typo = isinstance(exc, ModuleNotFoundError) and exc.name == module_name
        hint = _did_you_mean(module_name, _allowed_modules(allowlist)) if typo else ""
        raise EndpointMisconfiguredError(
            f"handler module {module_name!r} cannot be imported: {type(exc).__name__}: {exc}{hint}"
        ) from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Handler)):
        classes = [name for name, value in vars(module).items() if isinstance(value, type)
                   and issubclass(value, Handler) and not inspect.isabstract(value)]
        raise EndpointMisconfiguredError(f"{module_name}.{class_name} is not a handler class"
                                         f"{_did_you_mean(class_name, classes)}")
    return cls


def _allowed_modules(allowlist: list[str]) -> list[str]:
    """The modules of the allowlisted packages (``handlers.`` → ``handlers.echo``, …),
    unimported."""
    names = []
    for package_name in {p.rstrip(".") for p in allowlist if p.endswith(".")}:
        try:
            package = importlib.import_module(package_name)
        except Exception:  # only a hint: a package that does not import has no names
            continue
        names += [
            f"{package_name}.{m.name}"
            for m in pkgutil.iter_modules(getattr(package, "__path__", []))
        ]
    return names


def _did_you_mean(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1)
    return f"; did you mean {close[0]}?" if close else ""


@dataclass(slots=True)
class EndpointCheck:
    problems: list[str] = field(default_factory=list)
    """Why the row cannot be served."""
    notes: list[str] = field(default_factory=list)
    """What this process cannot check (environment references the gateway must resolve)."""
    unset_env: list[str] = field(default_factory=list)
    """The notes that name an ``env:`` variable not set in this process."""

    def note_unset_env(self, unset: dict[str, str]) -> None:
        """Note each setting (key → variable) whose ``env:`` variable is not set here."""
        found = [f"{key} reads the environment variable {name}, which is not set here"
                 for key, name in unset.items()]
        self.unset_env += found
        self.notes += found


def runtime_auth(
    endpoint: Endpoint, settings: GatewaySettings, *, resolve_env: bool = True
) -> EndpointAuth:
    return endpoint_auth(
        endpoint.metadata, default_header=settings.api_key_header,
        allow_anonymous=settings.allow_unauthenticated_endpoints, resolve_env=resolve_env,
    )


def runtime_rate_limit(endpoint: Endpoint, settings: GatewaySettings) -> RateLimit | None:
    try:
        return endpoint_rate_limit(
            endpoint.metadata, settings.rate_limit_per_second, settings.rate_limit_burst
        )
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()
        )
        raise EndpointMisconfiguredError(f"invalid rate_limit: {problems}") from None


def runtime_limits(endpoint: Endpoint) -> dict[str, int | float]:
    """The row's quota ``limits`` that are set; ``EndpointMisconfiguredError`` if malformed."""
    try:
        return parse_limits(endpoint.metadata.get("limits")).set()
    except LimitsError as exc:
        raise EndpointMisconfiguredError(f"invalid {exc}") from None


def check_endpoint(endpoint: Endpoint, settings: GatewaySettings) -> EndpointCheck:
    """The checks of ``_build`` without building: handler, settings, card, auth. Settings that
    name an unset ``env:`` variable are noted, not refused: the gateway may have it."""
    check = EndpointCheck()
    try:
        check_card(endpoint)
    except EndpointMisconfiguredError as exc:
        check.problems.append(exc.message)
    _check_auth(endpoint, settings, check)
    try:
        runtime_rate_limit(endpoint, settings)
    except EndpointMisconfiguredError as exc:
        check.problems.append(exc.message)
    try:
        runtime_limits(endpoint)
    except EndpointMisconfiguredError as exc:
        check.problems.append(exc.message)
    if COST_KEY in endpoint.metadata and (problem := check_cost(endpoint.metadata[COST_KEY])):
        check.problems.append(f"invalid {problem}")
    if not isinstance(endpoint.metadata.get("mcp", True), bool):
        check.problems.append("mcp must be true or false")
    try:
        cls = load_handler_class(endpoint.metadata, settings.handler_allowlist)
    except EndpointMisconfiguredError as exc:
        check.problems.append(exc.message)
        return check
    metadata = dict(endpoint.metadata)
    unset = unset_env_refs(metadata)
    check.note_unset_env(unset)
    for key in unset:
        del metadata[key]
    known = cls.Settings.model_fields
    unknown = sorted(k for k in metadata if k not in known and k not in RESERVED_METADATA_KEYS)
    if unknown:
        check.problems.append(
            f"unknown setting {', '.join(unknown)} for {handler_path(metadata)} "
            f"(its settings: {', '.join(sorted(known)) or 'none'})"
        )
    try:
        resolve_handler_settings(cls.Settings, handler_path(metadata), metadata, settings)
    except HandlerSettingsError as exc:
        check.problems.append(str(exc))
    return check


def _check_auth(endpoint: Endpoint, settings: GatewaySettings, check: EndpointCheck) -> None:
    try:
        auth = runtime_auth(endpoint, settings, resolve_env=False)
    except EndpointMisconfiguredError as exc:
        check.problems.append(exc.message)
        return
    keys = ((endpoint.metadata.get("auth") or {}).get("jwt") or {}).get("keys") or []
    unset = unset_env_refs({f"auth.jwt.keys.{i}": key for i, key in enumerate(keys)})
    check.note_unset_env(unset)
    if auth.trusted_header and not settings.trusted_proxies:
        check.notes.append(
            f"auth.trusted_header: no proxy address is trusted here, so the "
            f"{auth.trusted_header} header is ignored (set A2A_GATEWAY_TRUSTED_PROXIES)"
        )


def secret_settings(endpoint: Endpoint, settings: GatewaySettings) -> set[str]:
    """Metadata keys whose values are secrets: the handler's ``SecretStr`` settings, and any
    key named like a credential when the handler cannot be loaded."""
    try:
        cls = load_handler_class(endpoint.metadata, settings.handler_allowlist)
    except EndpointMisconfiguredError:
        return {k for k in endpoint.metadata if looks_secret(k)}
    return {
        name for name, info in cls.Settings.model_fields.items()
        if _holds_secret(info.annotation) or looks_secret(name)
    }


def secret_values(settings: HandlerSettings) -> tuple[str, ...]:
    """The values of a handler's settings that are secrets: ``SecretStr`` ones, and strings
    of a field named like a credential."""
    values = []
    for name, value in settings:
        if isinstance(value, SecretStr):
            values.append(value.get_secret_value())
        elif isinstance(value, str) and looks_secret(name):
            values.append(value)
    return tuple(v for v in values if v)


def _holds_secret(annotation: Any) -> bool:
    """``SecretStr``, or a union/optional of it."""
    return annotation is SecretStr or SecretStr in typing.get_args(annotation)


def is_endpoint_id(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class EndpointRegistry:
    def __init__(self, store: Store, settings: GatewaySettings, http: httpx.AsyncClient) -> None:
        self._store = store
        self._settings = settings
        self._http = http
        self._cache: dict[str, tuple[float, EndpointRuntime | None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        """Old runtimes whose handler closes once its runs end."""
        self._forgotten = 0
        """Calls of ``forget`` so far: a row read while one happened is not cached as fresh."""

    def known(self, endpoint_id: str) -> bool:
        """Whether ``endpoint_id`` names an endpoint read from the store (not a client's guess)."""
        cached = self._cache.get(endpoint_id)
        return cached is not None and cached[1] is not None

    @property
    def changes(self) -> int:
        """Calls of ``forget`` so far: a view over many endpoints (the agent catalog) built
        before the last one is stale."""
        return self._forgotten

    def forget(self, endpoint_id: str | None = None) -> None:
        """The row of ``endpoint_id`` (None: of every endpoint) changed: re-read it at the
        next request, whatever the age of the cached copy."""
        self._forgotten += 1
        for key in [endpoint_id] if endpoint_id is not None else list(self._cache):
            cached = self._cache.get(key)
            if cached is not None:
                self._cache[key] = (-math.inf, cached[1])

    async def get(self, endpoint_id: str) -> EndpointRuntime:
        """The runtime of an enabled endpoint that can be served: ``EndpointNotFoundError`` for
        an unknown or disabled one, ``EndpointMisconfiguredError`` with the problem otherwise."""
        cached = self._cache.get(endpoint_id)
        if (
            cached is not None
            and time.monotonic() - cached[0] < self._settings.endpoint_cache_seconds
        ):
            runtime = cached[1]
        else:
            runtime = await self._refresh(endpoint_id)
        if runtime is None or not runtime.endpoint.enabled:
            raise EndpointNotFoundError(f"no endpoint {endpoint_id}")
        runtime.require_handler()
        return runtime

    async def runtime_of(self, row: Endpoint) -> EndpointRuntime:
        """The runtime of ``row``, read from the store with the others (the agent catalog lists
        them in one read): the cached one while the row is unchanged, else one built from it and
        cached as ``get`` would. A misconfigured one is returned with its problem, not raised."""
        lock = self._locks.setdefault(row.id, asyncio.Lock())
        try:
            async with lock:
                return await self._install(row)
        finally:
            if not lock.locked():
                self._locks.pop(row.id, None)

    async def _install(self, row: Endpoint) -> EndpointRuntime:
        cached = self._cache.get(row.id)
        old = cached[1] if cached else None
        if old is not None and old.endpoint.updated_at == row.updated_at:
            return old
        forgotten = self._forgotten
        runtime = await self._open(self._build(row))
        if old is not None:
            self._retire(old)
        self._cache[row.id] = (
            time.monotonic() if forgotten == self._forgotten else -math.inf, runtime
        )
        return runtime

    async def _refresh(self, endpoint_id: str) -> EndpointRuntime | None:
        if not is_endpoint_id(endpoint_id):
            return None
        lock = self._locks.setdefault(endpoint_id, asyncio.Lock())
        try:
            async with lock:
                return await self._reload(endpoint_id)
        finally:
            if not lock.locked():
                self._locks.pop(endpoint_id, None)

    async def _reload(self, endpoint_id: str) -> EndpointRuntime | None:
        cached = self._cache.get(endpoint_id)
        if (
            cached is not None
            and time.monotonic() - cached[0] < self._settings.endpoint_cache_seconds
        ):
            return cached[1]
        forgotten = self._forgotten
        row = await self._store.get_endpoint(endpoint_id)
        old = cached[1] if cached else None
        if row is not None and old is not None and old.endpoint.updated_at == row.updated_at:
            runtime: EndpointRuntime | None = old
        else:
            runtime = await self._open(self._build(row)) if row is not None else None
            if old is not None:
                self._retire(old)
        if runtime is None:
            self._cache.pop(endpoint_id, None)  # unknown ids are not remembered
        else:  # a row read before a change it crossed is used once, not kept
            self._cache[endpoint_id] = (
                time.monotonic() if forgotten == self._forgotten else -math.inf,
                runtime,
            )
        return runtime

    def _build(self, endpoint: Endpoint) -> EndpointRuntime:
        path = handler_path(endpoint.metadata)
        try:
            check_card(endpoint)
            cls = load_handler_class(endpoint.metadata, self._settings.handler_allowlist)
            settings = resolve_handler_settings(
                cls.Settings, path, endpoint.metadata, self._settings
            )
            auth = runtime_auth(endpoint, self._settings)
            rate_limit = runtime_rate_limit(endpoint, self._settings)
            limits = runtime_limits(endpoint)
            handler = cls(settings, self._http)
            return EndpointRuntime(endpoint, handler, auth=auth, rate_limit=rate_limit,
                                   limits=limits, secrets=secret_values(settings))
        except (EndpointMisconfiguredError, HandlerSettingsError) as exc:
            log.warning("endpoint_misconfigured", endpoint_id=endpoint.id, problem=str(exc))
            return EndpointRuntime(endpoint, None, problem=str(exc))

    async def _open(self, runtime: EndpointRuntime) -> EndpointRuntime:
        if runtime.handler is None:
            return runtime
        try:
            await runtime.handler.open()
        except Exception as exc:  # the message may carry settings: only the type is shown
            problem = f"handler failed to open ({type(exc).__name__})"
            log.warning("endpoint_misconfigured", endpoint_id=runtime.endpoint.id, problem=problem)
            return EndpointRuntime(runtime.endpoint, None, problem=problem)
        runtime.endpoint = with_handler_fields(runtime.endpoint, runtime.handler.card_fields())
        return runtime

    def _retire(self, runtime: EndpointRuntime) -> None:
        task = asyncio.create_task(runtime.close_when_idle())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def aclose(self) -> None:
        """Close every handler (the engine stopped the runs before this)."""
        for _, runtime in self._cache.values():
            if runtime is not None:
                await runtime.close_when_idle(timeout=self._settings.cancel_wait_seconds)
        self._cache.clear()
        if self._retiring:
            await asyncio.wait(set(self._retiring), timeout=self._settings.cancel_wait_seconds)
