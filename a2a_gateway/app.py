"""``build_app(settings)``: the aiohttp application, its routes and its resources.

Resources open in cleanup contexts and close in reverse order: the store, the
shared HTTP client, the registry (closes handlers), the push notifier and the
task engine with its lease loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import structlog
from aiohttp import web

from a2a_gateway.auth.callers import build_authenticator
from a2a_gateway.auth.operators import OperatorAuth, OperatorKeys
from a2a_gateway.auth.peer import remember_peer
from a2a_gateway.auth.sessions import ConsoleSessions
from a2a_gateway.endpoints.backend_health import BackendHealth
from a2a_gateway.endpoints.card_signing import CardSigner
from a2a_gateway.endpoints.file import EndpointsFile
from a2a_gateway.endpoints.registry import EndpointRegistry
from a2a_gateway.governance.audit import prune_old_entries
from a2a_gateway.governance.quotas import Quotas
from a2a_gateway.live.feed import FeedLimits
from a2a_gateway.live.hub import LiveHub, ReplayLimits
from a2a_gateway.observability import tracing
from a2a_gateway.observability.fleet_stats import FLEET_STATS, FleetStats
from a2a_gateway.observability.memory import MemoryRelease
from a2a_gateway.observability.stats import STATS, StatsSampler, running_task
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.shutdown import refuse_when_stopping
from a2a_gateway.state import GATEWAY, Gateway
from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import Endpoint, Store, StoreUnavailableError
from a2a_gateway.tasks.conversation import Conversation
from a2a_gateway.tasks.dispatch import dispatcher_of
from a2a_gateway.tasks.engine import EngineLimits, TaskEngine
from a2a_gateway.tasks.live_view import LiveView
from a2a_gateway.tasks.ownership import Ownership
from a2a_gateway.tasks.push import PushNotifier
from a2a_gateway.tasks.push_guard import WebhookGuard
from a2a_gateway.tasks.run import RunServices
from a2a_gateway.transport.body import BODY_BUDGET, BodyBudget
from a2a_gateway.transport.connections import GatewayRunner
from a2a_gateway.transport.middleware import request_context, trace_response_header
from a2a_gateway.transport.routes import add_routes
from a2a_gateway.transport.sse import OPEN_STREAMS
from handlers.upstream.telemetry import trace_calls
from handlers.upstream.transport import backend_client

log = structlog.get_logger(__name__)

ENDPOINT_COUNT = web.AppKey("endpoint_count", int)
"""How many endpoint rows the store held at startup."""

ENDPOINTS_FILE = web.AppKey("endpoints_file", EndpointsFile)
"""The endpoints file the app applied at startup (set only when there is one)."""

MEMORY_RELEASE = web.AppKey("memory_release", MemoryRelease)
"""Drops expired replay logs and trims the heap after a wave of streams."""

SHARED_REDIS = web.AppKey("shared_redis", object)
"""The Redis client the replicas share (None without ``redis_url``)."""


async def _load_request_path(app: web.Application) -> None:
    """Every A2A request and card needs the a2a-sdk's server package (about 80 ms of CPU to
    import): loaded at start-up rather than by the first caller, so a replica (or a Lambda
    initialised ahead of its first invocation) is ready when /healthz says so."""
    from a2a_gateway.tasks import request_handler  # noqa: F401


async def _lease_loop(gateway: Gateway) -> None:
    interval = max(gateway.settings.lease_seconds / 3, 0.5)
    while True:
        await gateway.engine.next_ownership_check(interval)
        try:
            await gateway.engine.keep_ownership(gateway.registry)
            if gateway.quotas is not None:
                await gateway.quotas.renew()
        except StoreUnavailableError:
            log.warning("lease_loop_store_unavailable")  # /readyz says so too; retried next tick
        except Exception:
            log.exception("lease_loop_failed")


async def _ensure_endpoints(store: Store, endpoints: Sequence[Endpoint]) -> int:
    """Create the ``endpoints`` the store lacks; the number of rows it then holds."""
    for endpoint in endpoints:
        if await store.get_endpoint(endpoint.id) is None:
            await store.create_endpoint(endpoint)
    return len(await store.list_endpoints())


def server_options(settings: GatewaySettings) -> dict[str, Any]:
    """Connection limits for ``web.AppRunner(app, **server_options(settings))``."""
    return {
        "keepalive_timeout": settings.keepalive_timeout_seconds,
        "max_line_size": settings.max_header_bytes,
        "max_field_size": settings.max_header_bytes,
        "max_headers": settings.max_headers,
        "auto_decompress": False,  # transport.body decodes within the body limits
    }


def gateway_runner(app: web.Application, settings: GatewaySettings, **kwargs: Any) -> GatewayRunner:
    """The runner that serves ``app`` on a port: ``server_options`` and the header timeout."""
    return GatewayRunner(app, header_timeout=settings.header_timeout_seconds, access_log=None,
                         **server_options(settings), **kwargs)


def build_app(
    settings: GatewaySettings, store: Store | None = None, *, endpoints: Sequence[Endpoint] = (),
    http: httpx.AsyncClient | None = None,
) -> web.Application:
    """The gateway app. ``store`` may be given (tests); otherwise ``settings.store`` is opened.
    ``endpoints`` are created at startup if the store has no row of that id (the demo agent).
    ``http`` is the client the handlers use (tests pass one over ``httpx.MockTransport``); the
    gateway closes only a client it opened itself."""
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[request_context])
    trace_calls(tracing.backend_call)  # backend calls continue the trace; handlers never import it
    tracing.configure()
    app.on_response_prepare.append(trace_response_header)
    add_routes(app, default_endpoint=settings.default_endpoint,
               worker_events_path=settings.worker_events_path if settings.worker else "")
    if settings.console:
        from a2a_gateway.console.pages import add_console_routes  # cold start: only when on

        add_console_routes(app)
        if settings.console_oidc_issuer:
            from a2a_gateway.console.oidc import add_oidc_routes
            add_oidc_routes(app)
    app.middlewares.append(remember_peer)
    app.middlewares.append(refuse_when_stopping)
    card_signer = CardSigner()
    if settings.card_signing_keys:  # cryptography and PyJWT load only with keys
        from a2a_gateway.endpoints.card_keys import load_card_signer
        card_signer = load_card_signer(settings.card_signing_keys)  # a bad key stops startup here
    operator_keys = OperatorKeys(settings.operator_keys)  # so does a bad operator key
    sessions = (
        ConsoleSessions(
            settings.console_session_secret.get_secret_value(), settings.console_session_seconds
        )
        if settings.console
        else None
    )
    declared = EndpointsFile(settings.endpoints_file, settings) if settings.endpoints_file else None
    if declared is not None:  # a bad file stops startup here too
        app[ENDPOINTS_FILE] = declared

    async def resources(app: web.Application) -> AsyncIterator[None]:
        opened = store or await open_store(
            settings.store, page_token_key=settings.page_token_key.get_secret_value().encode()
        )
        check_schema = getattr(opened, "check_schema", None)
        if check_schema is not None:
            await check_schema()  # refuse to serve an unmigrated or newer schema
        if declared is not None:
            await declared.apply(opened)
        app[ENDPOINT_COUNT] = await _ensure_endpoints(opened, endpoints)
        client = http or backend_client(settings.backend_max_connections,
                                        settings.backend_max_keepalive_connections,
                                        settings.backend_keepalive_seconds)
        redis = app[SHARED_REDIS] = _open_shared_redis(settings)
        hub = live_hub(settings, opened, redis)
        push = PushNotifier(
            opened,
            WebhookGuard(allow_loopback=settings.push_allow_private_urls,
                         allowed_hosts=settings.push_allowed_hosts),
            timeout=settings.push_timeout_seconds,
            max_attempts=settings.push_max_attempts,
            retry_base_seconds=settings.push_retry_base_seconds,
            retry_max_seconds=settings.push_retry_max_seconds,
            replica_id=settings.replica_id,
            claim_seconds=settings.lease_seconds,
            poll_seconds=settings.push_poll_seconds,
            max_in_flight=settings.push_max_in_flight,
            stop_grace_seconds=settings.push_stop_grace_seconds,
            schedule=hub,
        )
        services = RunServices(
            opened, hub, push,
            Ownership(opened, settings.replica_id, settings.lease_seconds),
            Conversation(opened, settings.context_max_turns),
            BackendHealth(opened, write_seconds=settings.backend_health_write_seconds,
                          cache_seconds=settings.backend_health_cache_seconds,
                          flush_seconds=settings.backend_health_flush_seconds),
        )
        engine = TaskEngine(services, EngineLimits(
            cancel_wait_seconds=settings.cancel_wait_seconds,
            max_task_history=settings.max_task_history,
            remote_poll_seconds=settings.remote_poll_seconds,
            unseen_task_seconds=settings.unseen_task_seconds,
            dispatch_claim_seconds=settings.dispatch_claim_seconds,
            long_poll_seconds=settings.long_poll_seconds,
            eager_blocking_runs=settings.eager_blocking_runs,
        ), dispatcher=dispatcher_of(settings))
        hub.serve(LiveView(engine), ReplayLimits(settings.stream_replay_events,
                                                 settings.stream_replay_keep_seconds,
                                                 settings.stream_replay_max_bytes),
                  subscriber_max_bytes=settings.stream_subscriber_max_bytes)
        hub.feed.limits = FeedLimits(
            settings.event_feed_replay_events,
            settings.event_feed_replay_keep_seconds,
            settings.event_feed_replay_max_bytes,
            settings.event_feed_client_max_bytes,
        )
        await hub.start()
        registry = EndpointRegistry(opened, settings, client)
        def endpoint_changed(endpoint_id: str | None) -> None:  # another replica's or the CLI's
            registry.forget(endpoint_id)
            engine.endpoint_changed(endpoint_id)  # its runs whose tasks the CLI's kill ended

        hub.endpoint_changed = endpoint_changed
        auth = build_authenticator(settings, opened, client, redis)
        quotas = Quotas(opened, lease_seconds=settings.lease_seconds, redis=redis,
                        prefix=settings.redis_prefix)
        gateway = Gateway(
            settings,
            opened,
            client,
            registry,
            hub,
            push,
            engine,
            auth,
            card_signer,
            operators=OperatorAuth(
                operator_keys,
                auth,
                sessions,
                oidc_issuer=settings.console_oidc_issuer if sessions else "",
            ),
            quotas=quotas,
        )
        app[GATEWAY] = gateway
        if sessions is not None and settings.console_oidc_issuer:
            from a2a_gateway.console.oidc import OIDC_LOGIN, OidcLogin
            app[OIDC_LOGIN] = OidcLogin(settings, client, sessions)
        await engine.recover_expired(registry)
        lease_task = asyncio.create_task(_lease_loop(gateway))
        push.start()
        try:
            if settings.grpc_port is not None:  # grpcio is imported only then
                from a2a_gateway.transport import grpc_binding
                gateway.grpc_port = await grpc_binding.start(app)
            yield
        finally:
            if gateway.grpc_port is not None:
                await grpc_binding.stop(app)
            lease_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lease_task
            await engine.aclose()
            await quotas.aclose()
            await services.health.aclose()
            await hub.aclose()
            if redis is not None:
                await redis.aclose()
            await push.aclose()
            await registry.aclose()
            if http is None:
                await client.aclose()
            if store is None:
                await opened.aclose()
            await tracing.shutdown()

    app[OPEN_STREAMS] = set()
    app[BODY_BUDGET] = BodyBudget(settings.max_inflight_body_bytes)

    async def end_streams(app: web.Application) -> None:
        for stream in list(app[OPEN_STREAMS]):
            stream.end()

    async def sample_stats(app: web.Application) -> AsyncIterator[None]:
        sampler = app[STATS] = StatsSampler(
            settings.stats_interval_seconds,
            settings.stats_window_seconds,
            open_streams=lambda: len(app[OPEN_STREAMS]),
        )
        if app[SHARED_REDIS] is None:
            async with sampler.running():
                yield
            return
        fleet = app[FLEET_STATS] = FleetStats(
            app[SHARED_REDIS], settings.redis_prefix, settings.replica_id, sampler
        )
        async with sampler.running(), fleet.running():
            yield

    app.on_shutdown.append(end_streams)
    async def audit_retention(app: web.Application) -> AsyncIterator[None]:
        if settings.audit_retention_days <= 0:
            yield
            return
        pruning = prune_old_entries(app[GATEWAY].store, settings.audit_retention_days)
        async with running_task(pruning, "audit_retention"):
            yield

    async def release_memory(app: web.Application) -> AsyncIterator[None]:
        hub = app[GATEWAY].hub
        release = app[MEMORY_RELEASE] = MemoryRelease(
            lambda: len(app[OPEN_STREAMS]) + hub.drop_expired_logs(), settings.memory_trim_streams,
            interval=min(5.0, max(0.1, settings.stream_replay_keep_seconds)),
        )  # a log is dropped within its keep time after it expired, even on a quiet hub
        async with running_task(release.run(), "memory_release"):
            yield

    app.cleanup_ctx.append(resources)
    app.cleanup_ctx.append(sample_stats)
    app.cleanup_ctx.append(release_memory)
    app.cleanup_ctx.append(audit_retention)
    app.on_startup.append(_load_request_path)
    return app


def live_hub(settings: GatewaySettings, store: Any, redis: Any) -> LiveHub:
    """Redis links the replicas when configured (on any store); else PostgreSQL's
    LISTEN/NOTIFY on that store; else the replica is alone."""
    if redis is not None:
        from a2a_gateway.live.redis import RedisLiveHub  # cold start: only with Redis

        return RedisLiveHub(redis, store, settings.replica_id, prefix=settings.redis_prefix)
    if "a2a_gateway.stores.postgres" in sys.modules:  # else the store is no PostgresStore
        from a2a_gateway.live.postgres import PostgresLiveHub, uses_postgres

        if uses_postgres(store):
            return PostgresLiveHub(store, settings.replica_id)
    return LiveHub()


def _open_shared_redis(settings: GatewaySettings) -> Any:
    """The Redis client of ``settings.redis_url``, None without one."""
    if not settings.redis_url.get_secret_value():
        return None
    from a2a_gateway.live.redis import open_redis  # cold start: only with Redis

    return open_redis(settings.redis_url.get_secret_value(), settings.redis_ca_file)
