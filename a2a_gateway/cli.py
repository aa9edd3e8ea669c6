"""Command line: ``serve``, ``demo``, ``endpoints …``, ``migrate``. Argument parsing only.

Every failure an operator can cause (a bad flag value, a busy port, a store that cannot be
opened, an endpoint that would not load) ends the command with one line on stderr and a
non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import secrets
import signal
import sys
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import structlog
from aiohttp import web
from pydantic import SecretStr, ValidationError

from a2a_gateway.app import ENDPOINT_COUNT, ENDPOINTS_FILE, build_app, gateway_runner
from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.auth.callers import needed
from a2a_gateway.endpoints.card_signing import CardSigningKeyError
from a2a_gateway.endpoints.file import EndpointsFileError, endpoint_row, export
from a2a_gateway.endpoints.registry import check_endpoint, runtime_auth, secret_settings
from a2a_gateway.errors import EndpointMisconfiguredError
from a2a_gateway.governance.audit import endpoint_fields, os_actor, record
from a2a_gateway.governance.limits import (
    LIMIT_NAMES,
    NO_LIMITS,
    Limits,
    LimitsError,
    apply_assignments,
    parse_limits,
)
from a2a_gateway.observability.logs import configure_logging, looks_secret, mask_credentials
from a2a_gateway.settings import DEFAULT_STORE, GatewaySettings, SecretSettingsError, load_settings
from a2a_gateway.shutdown import drain
from a2a_gateway.state import GATEWAY
from a2a_gateway.stores import UnknownStoreError, display_url, migrate_store, open_store
from a2a_gateway.stores.base import Endpoint, Scope, StoreError
from a2a_gateway.tasks.dispatch import DispatchSetupError
from a2a_gateway.tasks.kill_switch import cancel_running_in_store, operator_reason
from a2a_gateway.transport.admin import key_json

DEMO_ENDPOINT_ID = "00000000-0000-4000-8000-00000000ec40"


class CommandError(Exception):
    """An operator's mistake: printed as one line, exit status 1."""


def _parse_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _settings(args: argparse.Namespace) -> GatewaySettings:
    return load_settings(
        getattr(args, "config", None),
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        store=getattr(args, "store", None),
        endpoints_file=getattr(args, "endpoints", None),
        grpc_port=getattr(args, "grpc_port", None),
    )


def _row_store(args: argparse.Namespace) -> str:
    """The store a row command writes to; ``memory://`` would forget the row at exit."""
    url = _settings(args).store
    if url.startswith("memory:"):
        raise CommandError(
            "memory:// keeps nothing once this command exits: give --store the store the "
            f"gateway serves (default {DEFAULT_STORE})"
        )
    return url


async def _with_store(url: str, action: Any) -> Any:
    store = await open_store(url)
    try:
        return await action(store)
    finally:
        await store.aclose()


# -- serve and demo ---------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> None:
    serve(_settings(args))


def serve(settings: GatewaySettings, endpoints: Sequence[Endpoint] = (),
          banner: Callable[[str], None] | None = None) -> None:
    """Run the gateway until SIGINT or SIGTERM; ``endpoints`` are created if missing.
    ``banner`` is called with the gateway's base URL once it listens, before the listening line."""
    configure_logging(settings.log_level, settings.log_format)
    new_loop, loop_name = event_loop(settings.event_loop)
    try:
        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(_serve(settings, endpoints, loop_name, banner))
    except (web.GracefulExit, KeyboardInterrupt):
        pass


def event_loop(choice: str) -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]:
    """The loop factory ``serve`` runs on and its name: uvloop when it is installed (the
    ``speed`` extra) unless ``choice`` is ``asyncio``; ``uvloop`` insists on it."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise CommandError("event_loop is uvloop but uvloop is not installed "
                                   "(pip install 'a2a-gateway[speed]')") from None
        else:
            return uvloop.new_event_loop, "uvloop"
    return None, "asyncio"


def tune_gc_for_serving(young_threshold: int) -> None:
    """Freeze the objects alive now and collect the youngest generation every
    ``young_threshold`` allocations (the older generations' thresholds stay Python's).

    A request leaves no reference cycles, so a collection finds no garbage: it walks the
    requests in flight and, every so often, every object start-up created (a thousand times a
    request's). On a blocking echo send that was about 40 µs of CPU per request, 15 % of the
    gateway's. Cycles other paths leave (an exception's traceback) are still collected, later.

    Before the freeze only the two younger generations are collected (1 ms): what start-up
    left since the imports' collections. A full collection walks the ~90,000 objects of the
    imports too (50 ms before the first request can be answered, the Lambda image's cold
    start included) and found no garbage there."""
    gc.collect(1)
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)


async def _serve(
    settings: GatewaySettings,
    endpoints: Sequence[Endpoint],
    loop_name: str = "asyncio",
    banner: Callable[[str], None] | None = None,
) -> None:
    app = build_app(settings, endpoints=endpoints)
    runner = gateway_runner(app, settings, shutdown_timeout=settings.shutdown_close_seconds)
    stop, hurry = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:  # the first signal drains; a second one ends the grace period
        (hurry if stop.is_set() else stop).set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, on_signal)
    try:
        await runner.setup()
    except OSError as exc:  # the gRPC port cannot be bound, its TLS files cannot be read
        raise CommandError(str(exc)) from None
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        try:
            await site.start()
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise CommandError(
                f"cannot listen on {settings.host}:{settings.port}: {reason}"
            ) from None
        host, port = runner.addresses[0][:2]
        count = app[ENDPOINT_COUNT]
        if ENDPOINTS_FILE in app:
            app[ENDPOINTS_FILE].reload_on_sighup(app[GATEWAY].store)
        grpc_port = app[GATEWAY].grpc_port
        grpc = (
            f", gRPC on {settings.grpc_host or settings.host}:{grpc_port}"
            if grpc_port is not None
            else ""
        )
        tune_gc_for_serving(settings.gc_young_threshold)  # after start-up: its objects are frozen
        if banner is not None:
            banner(settings.public_base_url or http_url(host, port))
        print(
            f"a2a-gateway {version('a2a-gateway')} listening on {http_url(host, port)} "
            f"(store {display_url(settings.store)}, "
            f"{count} endpoint{'s' if count != 1 else ''}){grpc}"
            f", event loop {loop_name}",
            flush=True,
        )
        await stop.wait()
        await drain(app, hurry)
    finally:
        await runner.cleanup()


def http_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def demo_endpoint() -> Endpoint:
    return Endpoint(
        id=DEMO_ENDPOINT_ID, name="Echo demo", description="Echoes your message word by word.",
        metadata={"module_name": "handlers.echo", "class_name": "EchoHandler", "delay": 0.05,
                  "public": True},
    )


def demo_console(settings: GatewaySettings) -> tuple[GatewaySettings, str | None]:
    """The demo's settings with the console on, its log for people on a terminal (unless
    log_format is set), and a new operator key when none is set."""
    update: dict[str, Any] = {"console": True}
    if "log_format" not in settings.model_fields_set:
        update["log_format"] = "auto"
    if settings.operator_keys:
        return settings.model_copy(update=update), None
    key = secrets.token_urlsafe(24)
    return settings.model_copy(update={**update, "operator_keys": [SecretStr(key)]}), key


def cmd_demo(args: argparse.Namespace) -> None:
    settings, console_key = demo_console(_settings(args))
    serve(settings, [demo_endpoint()], banner=lambda base: print_demo_banner(base, console_key))


def print_demo_banner(base: str, console_key: str | None) -> None:
    """Where the console, the card and a first call are, with the URL the demo listens on."""
    print(f"Console: {base}/console")
    if console_key is None:
        print("sign in with one of A2A_GATEWAY_OPERATOR_KEYS", file=sys.stderr)
    else:
        print("its operator key, shown only now (to keep using it after a restart, set "
              "A2A_GATEWAY_OPERATOR_KEYS to it):", file=sys.stderr, flush=True)
        print(console_key)
    print(f"Agent card: {base}/{DEMO_ENDPOINT_ID}/.well-known/agent-card.json")
    print("Try:")
    print(
        f"  curl -s {base}/{DEMO_ENDPOINT_ID}/a2a -H 'Content-Type: application/json' "
        "-H 'A2A-Version: 1.0' "
        '-d \'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":'
        '{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hello gateway"}]}}}\'',
        flush=True,
    )


# -- endpoints --------------------------------------------------------------------------------


def _shown_metadata(ep: Endpoint, settings: GatewaySettings) -> dict[str, Any]:
    """The row's metadata with literal secrets masked (``env:NAME`` references are shown):
    secret settings, fields named like a credential at any depth (``extra_headers``'
    ``X-Api-Key``), and credentials in URLs (``user:password@``, ``?token=``)."""
    secret = secret_settings(ep, settings)
    return {
        k: "***" if k in secret and not _env_ref(v) else _shown(v) for k, v in ep.metadata.items()
    }


def _shown(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "***" if looks_secret(k) and not _env_ref(v) else _shown(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return mask_credentials(value) if isinstance(value, str) else value


def _env_ref(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("env:")


def _endpoint_json(ep: Endpoint, settings: GatewaySettings) -> dict[str, Any]:
    return {
        "id": ep.id, "tenant": ep.tenant, "name": ep.name, "description": ep.description,
        "enabled": ep.enabled, "card": ep.card, "metadata": _shown_metadata(ep, settings),
        "created_at": ep.created_at.isoformat(), "updated_at": ep.updated_at.isoformat(),
    }


def _endpoint_from_args(args: argparse.Namespace) -> Endpoint:
    settings: dict[str, Any] = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(f"--set needs KEY=VALUE, got {item!r}")
        settings[key] = _parse_value(value)
    auth = None
    if args.auth:
        try:
            auth = json.loads(args.auth)
        except json.JSONDecodeError as exc:
            raise CommandError(
                f"--auth is not valid JSON: {exc.msg} at character {exc.pos}"
            ) from None
    try:
        card = json.loads(args.card) if args.card else {}
    except json.JSONDecodeError as exc:
        raise CommandError(f"--card is not valid JSON: {exc.msg} at character {exc.pos}") from None
    if args.id:
        try:
            endpoint_id = str(uuid.UUID(args.id))
        except ValueError:
            raise CommandError(f"--id must be a UUID, got {args.id!r}") from None
    else:
        endpoint_id = str(uuid.uuid4())
    try:
        return endpoint_row(endpoint_id, args.name, args.handler, tenant=args.tenant,
                            description=args.description or "", card=card, settings=settings,
                            public=True if args.public else None, auth=auth)
    except ValueError as exc:
        raise CommandError(f"--handler {exc}") from None


def _print_notes(
    endpoint: Endpoint, settings: GatewaySettings, notes: list[str], *, prefix: str = ""
) -> None:
    for note in notes:
        print(f"{prefix}note: {note}", file=sys.stderr)
    if not endpoint.metadata.get("public") and not settings.allow_unauthenticated_endpoints:
        print(f"{prefix}note: not --public: {_who_may_call(endpoint, settings)}", file=sys.stderr)


def _not_added(problems: list[str]) -> CommandError:
    """One problem is the error's line; several are a line each, then the error."""
    if len(problems) == 1:
        return CommandError(f"endpoint not added: {problems[0]}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return CommandError(f"endpoint not added ({len(problems)} problems)")


def _who_may_call(endpoint: Endpoint, settings: GatewaySettings) -> str:
    try:
        auth = runtime_auth(endpoint, settings, resolve_env=False)
    except EndpointMisconfiguredError:
        return "callers need the credentials its auth declares"
    keys = (
        f"; a2a-gateway keys create --endpoint {endpoint.id} makes a key"
        if auth.api_key_header
        else ""
    )
    return f"callers need {needed(auth)}{keys}"


def cmd_endpoints_add(args: argparse.Namespace) -> None:
    endpoint = _endpoint_from_args(args)
    settings = _settings(args)
    url = _row_store(args)
    check = check_endpoint(endpoint, settings)
    if check.problems:
        raise _not_added(check.problems)
    async def create(store: Any) -> None:
        await store.create_endpoint(endpoint)
        await _audit(store, "endpoint.added", endpoint.id, after=endpoint_fields(endpoint),
                     secret_fields=secret_settings(endpoint, settings))

    asyncio.run(_with_store(url, create))
    _print_notes(endpoint, settings, check.notes)  # an unset env: variable: the gateway may have it
    print(endpoint.id)


def cmd_endpoints_check(args: argparse.Namespace) -> None:
    """Whether each row can be served by a gateway started here: an ``env:`` variable this
    environment lacks is a problem (``add`` only notes it: the row may be written elsewhere)."""
    settings = _settings(args)
    url = _row_store(args)

    async def rows(store: Any) -> list[Endpoint]:
        if args.id is None:
            return await store.list_endpoints()
        return [await _existing(store, args.id)]

    failed = 0
    for endpoint in asyncio.run(_with_store(url, rows)):
        check = check_endpoint(endpoint, settings)
        prefix = f"{endpoint.id}: "
        problems = check.problems + check.unset_env
        _print_notes(
            endpoint, settings, [n for n in check.notes if n not in check.unset_env], prefix=prefix
        )
        for problem in problems:
            print(f"{prefix}{problem}", file=sys.stderr)
        if problems:
            failed += 1
        else:
            print(f"{endpoint.id} ok")
    if failed:
        raise CommandError(f"{failed} endpoint{'s' if failed != 1 else ''} cannot be served")


async def _existing(store: Any, endpoint_id: str) -> Endpoint:
    ep = await store.get_endpoint(endpoint_id)
    if ep is None:
        raise CommandError(f"no endpoint {endpoint_id}")
    return ep


def cmd_endpoints_list(args: argparse.Namespace) -> None:
    endpoints = asyncio.run(_with_store(_row_store(args), lambda s: s.list_endpoints()))
    for ep in endpoints:
        handler = f"{ep.metadata.get('module_name')}:{ep.metadata.get('class_name')}"
        print(f"{ep.id}  {'enabled ' if ep.enabled else 'disabled'}  {ep.name}  {handler}")


def cmd_endpoints_show(args: argparse.Namespace) -> None:
    ep = asyncio.run(_with_store(_row_store(args), lambda s: _existing(s, args.id)))
    print(json.dumps(_endpoint_json(ep, _settings(args)), indent=2))


def cmd_endpoints_export(args: argparse.Namespace) -> None:
    rows = asyncio.run(_with_store(_row_store(args), lambda s: s.list_endpoints()))
    sys.stdout.write(export(rows, _settings(args), args.format))


async def _announce_change(settings: GatewaySettings, endpoint_id: str) -> None:
    """With a Redis shared by the replicas, tell them at once (PostgreSQL's trigger does it
    there anyway; on other stores they would see the change within the endpoint cache time)."""
    from a2a_gateway.live.redis import announce_endpoint_change, open_redis

    redis = open_redis(settings.redis_url.get_secret_value(), settings.redis_ca_file)
    if redis is not None:
        try:
            await announce_endpoint_change(redis, settings.redis_prefix, "cli", endpoint_id)
        finally:
            await redis.aclose()


def _set_enabled(enabled: bool) -> Any:
    def command(args: argparse.Namespace) -> None:
        cancel_running = getattr(args, "cancel_running", False)

        async def change(store: Any) -> list[str]:
            ep = await _existing(store, args.id)
            before = ep.enabled
            ep.enabled = enabled
            ep.updated_at = datetime.now(UTC)
            await store.update_endpoint(ep)
            canceled = await _kill(store, ep.id, "endpoint disabled") if cancel_running else []
            await _announce_change(_settings(args), ep.id)  # after the kill: its runs stop then
            if before != enabled or cancel_running:
                await _audit(
                    store, "endpoint.enabled" if enabled else "endpoint.disabled", ep.id,
                    before={"enabled": before}, after={"enabled": enabled},
                    details={"canceledTasks": canceled} if cancel_running else None,
                )
            return canceled

        canceled = asyncio.run(_with_store(_row_store(args), change))
        print(f"{args.id} {'enabled' if enabled else 'disabled'}")
        if cancel_running:
            print(f"{len(canceled)} running task{'s' if len(canceled) != 1 else ''} canceled")

    return command


def cmd_endpoints_delete(args: argparse.Namespace) -> None:
    settings = _settings(args)

    async def delete(store: Any) -> None:
        ep = await _existing(store, args.id)
        if ep.enabled:
            raise CommandError(f"endpoint {ep.id} is enabled: disable it first"
                               f" (endpoints disable {ep.id} --cancel-running ends its tasks)")
        if await store.delete_endpoint(ep.id):
            await _announce_change(settings, ep.id)
            await _audit(store, "endpoint.deleted", ep.id, before=endpoint_fields(ep),
                         secret_fields=secret_settings(ep, settings))

    asyncio.run(_with_store(_row_store(args), delete))
    print(f"{args.id} deleted")


# -- audit and kill switch ----------------------------------------------------------------------


async def _audit(store: Any, action: str, target: str, **change: Any) -> None:
    """``governance.audit.record`` with the OS user as actor; its log line goes to stderr, as
    JSON, when ``log_level`` lets info through (stdout is the command's answer)."""
    if not structlog.is_configured():
        level = logging.getLevelNamesMapping().get(
            load_settings().log_level.upper(), logging.INFO
        )
        structlog.configure(
            processors=[structlog.processors.TimeStamper(fmt="iso", utc=True),
                        structlog.processors.JSONRenderer()],
            wrapper_class=structlog.make_filtering_bound_logger(level),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        )
    await record(store, os_actor(), action, target, **change)


async def _kill(store: Any, endpoint_id: str, what: str, principal: Any = None) -> list[str]:
    """End the endpoint's running tasks (``principal``'s only, if given) CANCELED in the store,
    then tell their replicas at once where the store can (PostgreSQL NOTIFY); the others see it
    at their next lease check. Each replica stops its backend run with the handler's cancel."""
    ended = await cancel_running_in_store(
        store, endpoint_id, operator_reason(os_actor(), what), principal=principal
    )
    notify = getattr(store, "notify", None)
    owned = [(stored.owner, stored.task.id) for _, stored in ended if stored.owner]
    if notify is not None and owned:
        from a2a_gateway.live.postgres_wire import control_payload, replica_channel

        with contextlib.suppress(StoreError):  # the lease check still finds them
            await notify([(replica_channel(owner), control_payload("cli", "cancel", task_id))
                          for owner, task_id in owned])
    return [stored.task.id for _, stored in ended]


# -- keys -------------------------------------------------------------------------------------


def cmd_keys_create(args: argparse.Namespace) -> None:
    settings = _settings(args)
    if args.expires is not None and args.expires <= 0:
        raise CommandError("--expires must be a positive number of days")
    limits = _limits(NO_LIMITS, args.limit)

    async def create(store: Any) -> tuple[Any, str]:
        endpoint = await _existing(store, args.endpoint)
        row, key = make_key(
            settings.api_key_secret.get_secret_value().encode(), endpoint_id=endpoint.id,
            tenant=endpoint.tenant, principal=args.principal, name=args.name or "",
            expires_days=args.expires,
        )
        row.limits = limits
        await store.create_api_key(row)
        await _audit(store, "key.created", row.id, after=key_json(row))
        return row, key

    row, key = asyncio.run(_with_store(_row_store(args), create))
    expires = row.expires_at.isoformat(timespec="seconds") if row.expires_at else "never"
    print(
        f"key {row.id} for endpoint {row.endpoint_id}, principal {row.principal}, expires {expires}"
    )
    print("the key is shown only now:", file=sys.stderr)
    print(key)


def _limits(current: Limits, assignments: Sequence[str]) -> dict[str, int | float]:
    try:
        return apply_assignments(current, assignments).set()
    except LimitsError as exc:
        raise CommandError(str(exc)) from None


def _limits_text(limits: dict[str, int | float]) -> str:
    return ",".join(f"{name}={value:g}" for name, value in limits.items()) or "none"


def cmd_keys_limit(args: argparse.Namespace) -> None:
    async def limit(store: Any) -> dict[str, int | float]:
        row = await store.get_api_key(args.key_id)
        if row is None:
            raise CommandError(f"no key {args.key_id}")
        limits = _limits(parse_limits(row.limits), args.assignments)
        await store.set_api_key_limits(row.id, limits)
        changed = await store.get_api_key(row.id) or row
        await _audit(store, "key.limited", row.id, before=key_json(row), after=key_json(changed))
        return limits

    limits = asyncio.run(_with_store(_row_store(args), limit))
    print(f"key {args.key_id} limits: {_limits_text(limits)}")


def cmd_keys_list(args: argparse.Namespace) -> None:
    rows = asyncio.run(_with_store(_row_store(args), lambda s: s.list_api_keys(args.endpoint)))
    now = datetime.now(UTC)
    for row in rows:
        if row.revoked_at is not None:
            state = f"revoked {row.revoked_at.isoformat(timespec='seconds')}"
        elif row.expires_at is not None and row.expires_at <= now:
            state = f"expired {row.expires_at.isoformat(timespec='seconds')}"
        elif row.expires_at is not None:
            state = f"active, expires {row.expires_at.isoformat(timespec='seconds')}"
        else:
            state = "active, never expires"
        line = f"{row.id}  {row.endpoint_id}  {row.principal}  {state}  {row.name}".rstrip()
        print(f"{line}  limits {_limits_text(row.limits)}" if row.limits else line)


def cmd_keys_revoke(args: argparse.Namespace) -> None:
    async def revoke(store: Any) -> list[str]:
        row = await store.get_api_key(args.key_id)
        if row is None or not await store.revoke_api_key(args.key_id, datetime.now(UTC)):
            raise CommandError(f"no key {args.key_id}")
        canceled = []
        if args.cancel_running:  # the tasks of the key's principal (keys sharing it share this)
            canceled = await _kill(store, row.endpoint_id, "API key revoked",
                                   Scope(row.tenant, row.endpoint_id, row.principal))
            await _announce_change(_settings(args), row.endpoint_id)  # its runs stop at once
        revoked = await store.get_api_key(args.key_id) or row
        await _audit(store, "key.revoked", row.id, before=key_json(row), after=key_json(revoked),
                     details={"canceledTasks": canceled} if args.cancel_running else None)
        return canceled

    canceled = asyncio.run(_with_store(_row_store(args), revoke))
    print(f"{args.key_id} revoked")
    if args.cancel_running:
        print(f"{len(canceled)} running task{'s' if len(canceled) != 1 else ''} canceled")


def cmd_migrate(args: argparse.Namespace) -> None:
    applied = asyncio.run(migrate_store(_settings(args).store))
    print("\n".join(applied) if applied else "schema is up to date")


# -- arguments --------------------------------------------------------------------------------


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", help=f"store URL: {DEFAULT_STORE} (default, or A2A_GATEWAY_STORE), "
                   "memory://, postgresql://…, dynamodb://?region=…")
    p.add_argument("--config", help="TOML settings file (or A2A_GATEWAY_CONFIG_FILE)")


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default 8080; 0 picks a free one)")
    p.add_argument("--grpc-port", type=int, help="also serve the gRPC binding on this port "
                   "(default: none; needs A2A_GATEWAY_GRPC_TLS_CERT_FILE and _KEY_FILE, or "
                   "A2A_GATEWAY_GRPC_ALLOW_PLAINTEXT=true)")
    p.add_argument("--endpoints", metavar="FILE", help="YAML or TOML file of endpoints, applied at "
                   "startup and on SIGHUP (or A2A_GATEWAY_ENDPOINTS_FILE)")
    _store_args(p)


def _endpoint_commands(sub: Any) -> None:
    endpoints = sub.add_parser(
        "endpoints", help="manage endpoints (agents) in the store", description="Manage endpoints "
        "(agents). Rows are read by a running gateway within A2A_GATEWAY_ENDPOINT_CACHE_SECONDS.",
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    add = endpoints.add_parser("add", help="check and register an agent; prints its id last",
                               description="Check an agent's handler, settings and card, then "
                               "register it. Prints the new endpoint's id as the last line.")
    _store_args(add)
    add.add_argument("--name", required=True, help="name shown in the agent card")
    add.add_argument(
        "--handler", required=True, help="MODULE:CLASS, e.g. handlers.hermes:HermesAgentHandler"
    )
    add.add_argument("--id", help="endpoint UUID (default: a new one)")
    add.add_argument("--tenant", default="default", help="tenant the endpoint's tasks belong to")
    add.add_argument("--description", help="description shown in the agent card")
    add.add_argument(
        "--card", help="card fields as JSON (skills, capabilities, version, provider …)"
    )
    add.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="handler setting, JSON or text; env:NAME is read from the gateway's environment",
    )
    add.add_argument("--public", action="store_true",
                     help="anyone may call it without credentials (principal anonymous); "
                     "credentials that are sent are still checked")
    add.add_argument(
        "--auth",
        metavar="JSON",
        help='who may call it, any of {"api_key": {"header": …}, "jwt": {"issuer": …, '
        '"audience": …, "jwks_url": … or "keys": [PEM, JWK or env:NAME], "algorithms": '
        '[…], "principal_claim": "sub", "tenant_claim": …}, "trusted_header": '
        '{"header": "X-Forwarded-User"}} (default: API keys)',
    )
    add.set_defaults(func=cmd_endpoints_add)
    check = endpoints.add_parser("check", help="run the checks of add on stored endpoints")
    _store_args(check)
    check.add_argument("id", nargs="?", help="endpoint id (default: every endpoint)")
    check.set_defaults(func=cmd_endpoints_check)
    exported = endpoints.add_parser("export", help="print every endpoint as an endpoints file",
                                    description="Print the store's endpoints in the format of "
                                    "serve --endpoints. Secrets stay env:NAME references; a row "
                                    "holding a secret as such is refused.")
    _store_args(exported)
    exported.add_argument("--format", choices=("yaml", "toml"), default="yaml",
                          help="yaml (default) or toml")
    exported.set_defaults(func=cmd_endpoints_export)
    for name, func, help_ in (
        ("list", cmd_endpoints_list, "list endpoints: id, enabled, name, handler"),
        ("show", cmd_endpoints_show, "print an endpoint row as JSON"),
        ("disable", _set_enabled(False), "stop serving an endpoint (it answers 404)"),
        ("enable", _set_enabled(True), "serve a disabled endpoint again"),
        ("delete", cmd_endpoints_delete, "remove a disabled endpoint's row (its keys and tasks "
         "stay, unreachable)"),
    ):
        p = endpoints.add_parser(name, help=help_)
        _store_args(p)
        if name != "list":
            p.add_argument("id", help="endpoint id")
        if name == "disable":
            p.add_argument("--cancel-running", action="store_true",
                           help="kill switch: also cancel the endpoint's running tasks")
        p.set_defaults(func=func)


def _key_commands(sub: Any) -> None:
    keys = sub.add_parser(
        "keys", help="manage callers' API keys", description="Manage the API keys callers present "
        "(X-API-Key header or Authorization: Bearer). Keys are stored only as a keyed hash.",
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    create = keys.add_parser(
        "create", help="create a key for an endpoint; prints the key once, last"
    )
    _store_args(create)
    create.add_argument("--endpoint", required=True, help="endpoint id the key may call")
    create.add_argument(
        "--principal",
        help="caller identity its tasks belong to (default: the key's "
        "id); keys with the same principal share tasks, as when rotating",
    )
    create.add_argument("--name", help="label for the operator")
    create.add_argument(
        "--expires", type=float, metavar="DAYS", help="days until the key stops working"
    )
    create.add_argument(
        "--limit", action="append", default=[], metavar="NAME=VALUE",
        help=f"a quota of the key (repeatable): {', '.join(LIMIT_NAMES)}",
    )
    create.set_defaults(func=cmd_keys_create)
    limit = keys.add_parser(
        "limit", help="set or remove a key's quotas (running gateways apply them within "
        "A2A_GATEWAY_API_KEY_CACHE_SECONDS)",
    )
    _store_args(limit)
    limit.add_argument("key_id", help="key id, as keys list shows it")
    limit.add_argument("assignments", nargs="+", metavar="NAME=VALUE",
                       help="a limit to set, or NAME=none to remove it; others stay")
    limit.set_defaults(func=cmd_keys_limit)
    listing = keys.add_parser("list", help="list keys: id, endpoint, principal, state (active "
                              "and when it expires, expired, revoked), label")
    _store_args(listing)
    listing.add_argument("--endpoint", help="only the keys of this endpoint")
    listing.set_defaults(func=cmd_keys_list)
    revoke = keys.add_parser("revoke", help="revoke a key (running gateways stop taking it within "
                             "A2A_GATEWAY_API_KEY_CACHE_SECONDS)")
    _store_args(revoke)
    revoke.add_argument("key_id", help="key id, as keys list shows it")
    revoke.add_argument("--cancel-running", action="store_true",
                        help="kill switch: also cancel the running tasks of the key's principal")
    revoke.set_defaults(func=cmd_keys_revoke)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="a2a-gateway", description="A2A gateway for agents of any framework"
    )
    root.add_argument("--version", action="version", version=f"%(prog)s {version('a2a-gateway')}")
    sub = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "serve", help="run the gateway", description="Run the gateway on the store's endpoints."
    )
    _serve_args(p)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser(
        "demo", help="run the gateway with an echo demo agent",
        description=f"Run the gateway with an echo demo agent ({DEMO_ENDPOINT_ID}), added to the "
        f"store if missing. Same store as serve and endpoints (default {DEFAULT_STORE}).",
    )
    _serve_args(p)
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser(
        "migrate", help="create or upgrade the store's schema (PostgreSQL, DynamoDB)"
    )
    _store_args(p)
    p.set_defaults(func=cmd_migrate)
    _endpoint_commands(sub)
    _key_commands(sub)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except (CommandError, StoreError, UnknownStoreError, ValidationError, CardSigningKeyError,
            EndpointsFileError, SecretSettingsError, DispatchSetupError) as exc:
        sys.exit(f"a2a-gateway: {_one_line(exc)}")


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return " ".join(str(exc).split())
