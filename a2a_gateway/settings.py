"""Gateway settings (``A2A_GATEWAY_*``) and the per-handler settings chain.

Precedence for gateway settings: command-line flags → environment → config file
(TOML, ``--config`` or ``A2A_GATEWAY_CONFIG_FILE``) → defaults.
Per handler: endpoint metadata → ``handler_settings`` of the gateway → the
handler's own defaults; any string value ``"env:NAME"`` is replaced by the
environment variable NAME, so secrets need not sit in endpoint rows.
This is the only module that reads ``os.environ``.
"""

from __future__ import annotations

import ipaddress
import os
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from handlers.base import HandlerSettings

RESERVED_METADATA_KEYS = frozenset(
    {"module_name", "class_name", "public", "strict_v1_card", "auth", "rate_limit",
     "endpoints_file", "catalog", "limits", "cost", "mcp"}
)
"""Endpoint metadata keys the gateway itself reads (the rest are handler settings)."""


DEFAULT_STORE = "sqlite:///./a2a-gateway.db"
"""The embedded store that serve, demo and endpoints share when none is given."""


class HandlerSettingsError(ValueError):
    """An endpoint's handler settings are invalid or reference a missing variable."""


class SecretSettingsError(ValueError):
    """The settings secret (``secrets_manager_id``) cannot be read."""


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="A2A_GATEWAY_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    store: str = DEFAULT_STORE
    endpoints_file: str = ""
    """YAML or TOML file of endpoints applied to the store at startup and on SIGHUP
    (``serve --endpoints``; docs/endpoints-file.md). Empty: none."""
    public_base_url: str = ""
    """Base of the absolute URLs in agent cards; empty = the request's scheme and host."""
    default_endpoint: str = ""
    """Endpoint id also served at the root (``/.well-known/agent-card.json``, ``/a2a``)."""
    mcp: bool = True
    """Serve every endpoint as an MCP server at ``/<endpoint_id>/mcp`` (an endpoint's metadata
    ``mcp: false`` turns off its own; needs the ``mcp`` extra)."""
    allow_unauthenticated_endpoints: bool = False
    """Take calls without credentials on every endpoint, public or not (local testing only)."""
    api_key_header: str = "X-API-Key"
    """Header that carries a caller's API key (``Authorization: Bearer <key>`` works too)."""
    api_key_secret: SecretStr = SecretStr("a2a-gateway-api-key")
    """Key of the HMAC under which API keys are stored: the same on every replica; changing
    it invalidates every key."""
    rate_limit_per_second: float = 0.0
    """Requests per second each caller may make on an endpoint without its own ``rate_limit``
    (0: no limit); counted per replica."""
    rate_limit_burst: int = 0
    """Requests a caller may make at once (0: one second's worth)."""
    api_key_cache_seconds: float = 5.0
    """How long a key's row is cached (a revoked key stops working within this time)."""
    jwt_leeway_seconds: float = 30.0
    """Clock skew allowed when checking a JWT's ``exp``, ``nbf`` and ``iat``."""
    jwks_cache_seconds: float = 300.0
    """How long an issuer's JWKS is used before it is fetched again."""
    jwks_refresh_seconds: float = 30.0
    """Least time between two fetches of one JWKS (a token with an unknown ``kid`` fetches
    again, at most this often)."""
    jwks_timeout_seconds: float = 5.0
    """Time allowed for fetching a JWKS."""
    jwks_max_bytes: int = 512 * 1024
    """Largest JWKS document read."""
    trusted_proxies: Annotated[list[str], NoDecode] = []
    """Addresses or CIDRs of authenticating reverse proxies whose identity header an endpoint
    may trust (``auth.trusted_header``); the TCP peer's address is checked, never
    X-Forwarded-For. Empty: no proxy is trusted."""
    handler_allowlist: list[str] = ["handlers."]
    """Module prefixes that endpoint rows may name as handlers."""
    handler_settings: dict[str, dict[str, Any]] = {}
    """Defaults per handler, keyed ``module:Class`` (or just the module)."""
    max_body_bytes: int = 4 * 1024 * 1024
    max_inflight_body_bytes: int = 64 * 1024 * 1024
    """Bytes of request bodies the whole process receives at once; past it a request is
    answered 503 with ``Retry-After`` (bounds memory under many slow uploads)."""
    body_read_timeout_seconds: float = 30.0
    """Time a client has to send a request's whole body; then 408 and the connection closes."""
    max_json_depth: int = 32
    """Deepest nesting of JSON objects and arrays a request body may have."""
    header_timeout_seconds: float = Field(60.0, gt=0)
    """A new connection is closed when it has not sent its first request's line and headers
    within this time (silent or slow clients), however many bytes it sent meanwhile; a
    shorter ``keepalive_timeout_seconds`` bounds this wait too."""
    keepalive_timeout_seconds: float = 75.0
    """A connection is closed when the next request's line and headers have not arrived this
    long after the last response ended (idle keep-alive connections, slow clients); a
    response being sent (a silent stream) or a body being read is not idle. Keep it above the
    idle timeout of a reverse proxy in front."""
    max_header_bytes: int = 8190
    """Longest request line and longest header field (larger: 400)."""
    max_headers: int = 128
    """Most header fields a request may have."""
    max_message_parts: int = 100
    """Most parts one message may have."""
    max_text_chars: int = 1_000_000
    """Longest text part, in characters."""
    max_metadata_bytes: int = 64 * 1024
    """Largest metadata object (of a request, a message or a part), as JSON bytes."""
    rest_content_type: str = "application/json"
    rest_error_statuses: Literal["1.0.1", "1.0.0"] = "1.0.1"
    """HTTP statuses of REST errors and gRPC status codes: A2A v1.0.1's table (as the a2a-sdk)
    or v1.0.0's."""
    sse_keepalive_seconds: float = 15.0
    stream_replay_events: int = 1000
    """Events of a streamed task each replica keeps, so a client that reconnects with
    ``Last-Event-ID`` gets exactly the events it missed (0: none kept; a reconnect then
    starts from the Task snapshot)."""
    stream_replay_keep_seconds: float = 60.0
    """How long those events are kept after the task's last event or its last stream
    closed, so a client that lost the final events can still fetch them."""
    stream_replay_max_bytes: int = 64 * 1024 * 1024
    """All kept events of all tasks together, in bytes; beyond it the least recently active
    tasks' events are dropped first."""
    memory_trim_streams: int = Field(1000, ge=0)
    """Give freed memory back to the operating system (glibc's ``malloc_trim``) once the open
    streams and kept replay logs together fell by this many from their high point since the
    last trim (0: never)."""
    stream_subscriber_max_bytes: int = Field(1024 * 1024, gt=0)
    """Bytes of events one stream may have waiting for a slow client (text deltas of one
    artifact are merged while they wait, so this bounds text, not deltas); past it the
    stream drops what waits and starts over from the task and its text so far."""
    backend_max_connections: int = Field(2000, gt=0)
    """Connections to backends (Hermes, OpenClaw, chat APIs) open at once, over all
    endpoints; each streamed run holds one for its whole length, so this bounds the
    concurrent backend streams of one replica (one more waits for a free connection)."""
    backend_max_keepalive_connections: int = Field(200, ge=0)
    """Idle backend connections kept open for reuse."""
    backend_keepalive_seconds: float = Field(5.0, ge=0)
    """How long an idle backend connection is kept for reuse."""
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    """The event loop ``serve`` runs on: ``auto`` takes uvloop when it is installed (the
    ``speed`` extra), ``asyncio`` the standard loop, ``uvloop`` insists on uvloop."""
    gc_young_threshold: int = Field(default=10_000, ge=100)
    """``serve``: allocations between two collections of the garbage collector's youngest
    generation (Python's default is 700; see ``cli.tune_gc_for_serving``). ``serve`` also
    freezes the objects start-up created, so full collections skip them."""
    stats_interval_seconds: float = Field(default=10.0, gt=0)
    """How often the gateway reads its own metrics for ``GET /admin/api/stats`` (the console's
    charts): each reading is one point of the series."""
    stats_window_seconds: float = Field(default=3600.0, gt=0)
    """How far back ``GET /admin/api/stats`` goes (the sampler keeps window / interval points)."""
    backend_health_write_seconds: float = Field(default=5.0, gt=0)
    """Each replica adds an endpoint's backend health changes (its runs' outcomes) to the store
    at most once per this interval: the first outcome after a quiet interval at once, the later
    ones together when the interval ends."""
    backend_health_cache_seconds: float = Field(default=2.0, ge=0)
    """How long the admin API keeps the backend health it read from the store (the other
    replicas' outcomes show within this time of being written)."""
    audit_retention_days: float = Field(default=365.0, ge=0)
    """Audit log entries older than this many days are pruned (hourly, by every replica);
    0 keeps them forever."""
    backend_health_flush_seconds: float = Field(default=2.0, gt=0)
    """How long a worker waits for its backend health writes under way before it answers an
    invocation (Lambda may freeze it then), and a stopping gateway for its last ones."""
    operator_keys: Annotated[list[SecretStr], NoDecode] = []
    """Gateway operator keys (``Authorization: Bearer <key>``): each the key itself or
    ``sha256:<hex digest of the key>``; comma-separated in the environment. An operator key
    opens every endpoint's event feed. Empty: only endpoint operators (``auth.operators``)."""
    console: bool = False
    """Serve the operator console at ``/console`` (gateway operators log in with an operator
    key); ``a2a-gateway demo`` turns it on."""
    console_session_secret: SecretStr = SecretStr("")
    """Signs console session cookies: the same on every replica behind one address. Empty: a
    random one per process (sessions then work on this replica only, until it restarts)."""
    console_session_seconds: float = Field(default=8 * 3600.0, gt=0)
    """How long a console login lasts."""
    console_oidc_issuer: str = ""
    """OpenID Provider whose users may sign in to the console (Authorization Code flow with
    PKCE; its discovery document is read at ``<issuer>/.well-known/openid-configuration``).
    Register ``<public_base_url>/console/oidc/callback`` as the client's redirect URI. Empty:
    operator keys only."""
    console_oidc_client_id: str = ""
    """The console's client id at the issuer (the ID token's audience)."""
    console_oidc_client_secret: SecretStr = SecretStr("")
    """The client's secret (empty: a public client, PKCE only)."""
    console_oidc_client_auth: Literal["auto", "client_secret_basic", "client_secret_post"] = "auto"
    """How the client with a secret authenticates at the token endpoint: ``auto`` takes
    client_secret_basic when the issuer's discovery document lists it, else client_secret_post."""
    console_oidc_scopes: str = "openid profile email groups"
    """Scopes asked for, space-separated (``openid`` is always asked for)."""
    console_oidc_operator_claim: str = "groups"
    """ID token claim that names gateway operators (a string or a list of strings)."""
    console_oidc_operator_values: Annotated[list[str], NoDecode] = []
    """Values of that claim that make a user a gateway operator (any one suffices);
    comma-separated in the environment."""
    console_oidc_login_seconds: float = Field(default=600.0, gt=0)
    """Time a user has to sign in at the issuer before the login must be started again."""
    console_oidc_timeout_seconds: float = Field(default=10.0, gt=0)
    """Time allowed for each call to the issuer (discovery, token exchange, keys)."""

    @model_validator(mode="after")
    def _console_oidc(self) -> GatewaySettings:
        if not self.console_oidc_issuer:
            return self
        issuer = urlsplit(self.console_oidc_issuer)
        if issuer.scheme != "https" and not (
            issuer.scheme == "http" and issuer.hostname in {"127.0.0.1", "::1", "localhost"}
        ):
            raise ValueError(
                "console_oidc_issuer must be an https URL (http only on a loopback address)"
            )
        if not self.console_oidc_client_id:
            raise ValueError("console_oidc_issuer needs console_oidc_client_id")
        if not self.console_oidc_operator_claim or not self.console_oidc_operator_values:
            raise ValueError(
                "console_oidc_issuer needs console_oidc_operator_claim and "
                "console_oidc_operator_values (who of the issuer's users are operators)"
            )
        return self

    @field_validator("console_oidc_operator_values", mode="before")
    @classmethod
    def _value_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value
    event_feed_replay_events: int = 1000
    """Events of an endpoint's event feed each replica keeps, so a dashboard that reconnects
    with ``Last-Event-ID`` gets exactly the events it missed (0: none; it gets a snapshot)."""
    event_feed_replay_keep_seconds: float = 300.0
    """How long an endpoint's feed events are kept after its last feed client left."""
    event_feed_replay_max_bytes: int = 16 * 1024 * 1024
    """All kept feed events of all endpoints together; beyond it the least recently active
    endpoints' events are dropped first."""
    event_feed_client_max_bytes: int = 1024 * 1024
    """Events one feed client may have pending; a client further behind is disconnected (it
    reconnects with ``Last-Event-ID``)."""
    event_feed_snapshot_max_tasks: int = 1000
    """Most non-terminal tasks a feed snapshot lists (newest status first)."""
    card_max_age_seconds: int = 300
    card_signing_keys: list[str] = []
    """Keys that sign agent cards, each a file or ``env:NAME`` holding a PEM or JWK key (ES256
    or EdDSA): the first signs, all are published at ``/.well-known/jwks.json``, so a key
    stays listed until the cards it signed are gone. Empty: cards are unsigned."""
    endpoint_cache_seconds: float = 5.0
    admin_tasks_max_page_size: int = Field(default=200, ge=1)
    """Most tasks one page of the admin API's task list (``GET /admin/api/tasks``) may ask for."""
    cancel_wait_seconds: float = 10.0
    context_max_turns: int = 200
    max_task_history: int = 1000
    """Messages a task may hold; a follow-up past it is refused (-32602), naming this limit."""
    max_push_configs_per_task: int = 10
    """Push notification configs one task may have."""
    push_allow_private_urls: bool = False
    """Allow webhooks on loopback addresses (local testing only); private, link-local, metadata
    and other non-public addresses stay refused."""
    push_allowed_hosts: list[str] = []
    """Webhook hosts push notifications may reach (empty: any host with a public address);
    ``.example.com`` also matches its subdomains. Their addresses are checked all the same."""
    push_timeout_seconds: float = 10.0
    """Time one webhook POST may take (keep it well below ``lease_seconds``, the claim)."""
    push_max_attempts: int = 20
    """Attempts per notification and webhook, the first included; then it is given up
    (logged as ``push_gave_up``). With the default backoff, 20 attempts span about 45 minutes."""
    push_retry_base_seconds: float = 1.0
    """Wait before a notification's first retry; each next wait doubles, up to
    ``push_retry_max_seconds``, less a random part of up to half (jitter)."""
    push_retry_max_seconds: float = 300.0
    push_poll_seconds: float = 1.0
    """How often each replica claims due deliveries from the store: retries, and deliveries
    of a replica that stopped (once its claim, ``lease_seconds``, has run out)."""
    push_max_in_flight: int = 64
    """Webhook POSTs one replica has under way at once; more wait in the store."""
    push_stop_grace_seconds: float = 5.0
    """On shutdown, webhook POSTs under way get this long to finish; the rest are cut off and
    left to the next replica (their receiver may then get them twice, under one id)."""
    lease_seconds: float = 30.0
    dispatch: Literal["in_process", "lambda"] = "in_process"
    """Who runs a new task: this instance (``in_process``) or a worker Lambda invoked
    asynchronously with the task's ids (``lambda``: this instance records the task, the worker
    claims and runs it, clients follow it through the store)."""
    dispatch_function: str | None = Field(None, validate_default=True)
    """Name or ARN of the worker Lambda (needed with ``dispatch = "lambda"``)."""
    dispatch_endpoint_url: str | None = None
    """Lambda API endpoint to invoke the worker at instead of AWS's (e.g. a local invoke
    endpoint)."""
    dispatch_region: str | None = None
    """AWS region of the worker Lambda (empty: the AWS SDK's default, e.g. ``AWS_REGION``)."""
    dispatch_timeout_seconds: float = 10.0
    """Time one invoke of the worker may take to connect and to be answered (each of up to
    three attempts)."""
    dispatch_claim_seconds: float = 300.0
    """How long a dispatched task may wait for a worker to claim it; then a replica's recovery
    (or the worker's ``sweep`` event) fails it. Cover the invoke queue's delays and retries."""
    worker: bool = False
    """This instance is a worker: it serves ``worker_events_path``, where the worker Lambda
    receives the dispatched task references (and ``sweep`` events)."""
    worker_events_path: str = "/events"
    """The worker route: the AWS Lambda Web Adapter posts non-HTTP events here."""
    remote_poll_seconds: float = 1.0
    """How often a replica polls the store for a task that runs on another replica."""
    long_poll_seconds: float = Field(default=25.0, ge=0, le=3600)
    """How long a GetTask with ``currentGeneration`` (A2A 1.1) waits for the task to change
    before it answers the task as it stands: below the idle timeout of load balancers (60 s
    on AWS ALB), Lambda Function URLs and browsers."""
    redis_url: SecretStr = SecretStr("")
    """Redis or Valkey shared by the replicas (``redis://[user:password@]host:port/db``,
    ``rediss://`` for TLS, ``unix://``): it then carries the live path across replicas (any
    store; with PostgreSQL too, instead of NOTIFY) and counts rate limits for the whole fleet.
    Empty: each replica alone (PostgreSQL still links replicas through LISTEN/NOTIFY)."""
    redis_ca_file: str = ""
    """PEM file of the CA that signs a ``rediss://`` server's certificate, when the system's
    trusted CAs do not (a private CA); empty: the system's (ElastiCache's are public)."""
    redis_prefix: str = "a2a:"
    """Prefix of every Redis key and channel (several gateways may share one Redis)."""
    unseen_task_seconds: float = Field(1.0, ge=0)
    """A blocking SendMessage's task (no stream, no push config) is written once, in its final
    state, when its run ends within this time; a longer run is written when it passes it, so
    GetTask, ListTasks and the operator feed see it while it runs."""
    eager_blocking_runs: bool = True
    """On Python 3.12 and later, a blocking SendMessage's run takes its first step at once,
    in the request's turn of the event loop: a handler that answers without waiting (an
    echo, a cached reply) has answered before the request looks, with no loop turn between
    (about 5 µs less per send). The answers are the same either way; ``false`` starts every
    run on the next turn, as Python 3.11 does."""
    shutdown_grace_seconds: float = 20.0
    """On SIGTERM or SIGINT, open streams and blocking calls may go on this long; then the
    gateway hands its running tasks over (each stream gets a last status event, blocking
    callers the task as it stands, leases are released). Keep it below the orchestrator's
    grace period (Kubernetes: 30 s) minus ``shutdown_close_seconds``."""
    shutdown_close_seconds: float = 3.0
    """After the hand-over, the last responses get this long to be written before the
    connections are closed."""
    grpc_port: int | None = None
    """Port of the gRPC binding (``serve --grpc-port``; 0 picks a free one). None: no gRPC
    (grpcio is not even imported)."""
    grpc_host: str = ""
    """Address the gRPC binding listens on (empty: ``host``)."""
    public_grpc_url: str = ""
    """``host:port`` of the gRPC binding in agent cards; empty: the host name the card was
    requested at, with the gRPC port."""
    grpc_tls_cert_file: str = ""
    """PEM certificate chain of the gRPC binding (with ``grpc_tls_key_file``: TLS)."""
    grpc_tls_key_file: str = ""
    """PEM private key of the gRPC binding."""
    grpc_allow_plaintext: bool = False
    """Serve gRPC without TLS when no certificate is configured (local testing, or TLS ended
    by a proxy in front); otherwise a gRPC port without a certificate stops startup."""
    grpc_max_message_bytes: int = Field(4 * 1024 * 1024, gt=0)
    """Largest gRPC request message; a larger one is refused with RESOURCE_EXHAUSTED."""
    grpc_keepalive_seconds: float = Field(30.0, gt=0)
    """The gRPC server pings a connection idle this long (so proxies keep idle streams open)
    and takes client pings as often as every ``grpc_keepalive_seconds / 3``."""
    grpc_keepalive_timeout_seconds: float = Field(10.0, gt=0)
    """A connection whose ping is not answered within this time is closed."""
    grpc_reflection: bool = False
    """Serve gRPC server reflection (``grpcurl`` lists the A2A service without the proto)."""
    page_token_key: SecretStr = SecretStr("a2a-gateway-page-token")
    secrets_manager_id: str = ""
    """ARN or name of an AWS Secrets Manager secret whose JSON object holds settings by their
    variable names (``{"A2A_GATEWAY_API_KEY_SECRET": …, "A2A_GATEWAY_PAGE_TOKEN_KEY": …}``),
    read once at startup, so secrets stay out of a function's environment; the environment
    and flags win over it. Needs boto3 (the ``dynamodb`` extra). Empty: none."""
    replica_id: str = Field(default_factory=lambda: f"gw-{uuid.uuid4().hex[:12]}")
    log_level: str = "info"
    log_format: Literal["json", "console", "auto"] = "json"
    """``json`` lines, ``console`` (lines for people), or ``auto``: console when the log goes to
    a terminal, else json. ``demo`` defaults to ``auto``."""

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _networks(cls, value: Any) -> Any:
        """A list, or comma-separated text
        (``A2A_GATEWAY_TRUSTED_PROXIES=10.0.0.5,10.1.0.0/16``)."""
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, list):
            items = [str(v).strip() for v in items if str(v).strip()]
            for item in items:
                ipaddress.ip_network(item, strict=False)  # ValueError names a bad one
        return items

    @field_validator("operator_keys", mode="before")
    @classmethod
    def _key_list(cls, value: Any) -> Any:
        """A list, or comma-separated text
        (``A2A_GATEWAY_OPERATOR_KEYS=sha256:ab12…,sha256:cd34…``)."""
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("default_endpoint")
    @classmethod
    def _endpoint_id(cls, value: str) -> str:
        return str(uuid.UUID(value)) if value else value

    @model_validator(mode="after")
    def _grpc_transport_security(self) -> GatewaySettings:
        if bool(self.grpc_tls_cert_file) != bool(self.grpc_tls_key_file):
            raise ValueError("gRPC TLS needs both grpc_tls_cert_file and grpc_tls_key_file")
        if (
            self.grpc_port is not None
            and not self.grpc_tls_cert_file
            and not self.grpc_allow_plaintext
        ):
            raise ValueError("grpc_port needs grpc_tls_cert_file and grpc_tls_key_file, or "
                             "grpc_allow_plaintext = true to serve gRPC without TLS")
        return self

    @field_validator("dispatch_function")
    @classmethod
    def _dispatch_target(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("dispatch") == "lambda" and not value:
            raise ValueError('dispatch = "lambda" needs the worker Lambda\'s name or ARN')
        return value


def load_settings(config_file: str | None = None, **overrides: Any) -> GatewaySettings:
    """Build settings from flags (``overrides``), environment, the config file, defaults."""
    from_env = GatewaySettings().model_dump(exclude_unset=True)
    path = config_file or os.environ.get("A2A_GATEWAY_CONFIG_FILE")
    from_file: dict[str, Any] = {}
    if path:
        import tomllib  # only with a config file

        with Path(path).open("rb") as fh:
            from_file = tomllib.load(fh)
    given = {k: v for k, v in overrides.items() if v is not None}
    secret_id = from_env.get("secrets_manager_id") or from_file.get("secrets_manager_id", "")
    from_secret = _secret_settings(secret_id)
    return GatewaySettings(**{**from_file, **from_secret, **from_env, **given})


def _secret_settings(secret_id: str) -> dict[str, Any]:
    """The settings in the Secrets Manager secret ``secret_id`` (none when empty)."""
    if not secret_id:
        return {}
    from botocore.exceptions import BotoCoreError, ClientError
    from pydantic_settings import AWSSecretsManagerSettingsSource

    try:
        return AWSSecretsManagerSettingsSource(GatewaySettings, secret_id, case_sensitive=False)()
    except ClientError as exc:
        reason = exc.response.get("Error", {}).get("Code", "error")
        raise SecretSettingsError(
            f"cannot read the settings secret {secret_id}: {reason}"
        ) from None
    except (BotoCoreError, ValueError) as exc:
        raise SecretSettingsError(f"cannot read the settings secret {secret_id}: {exc}") from None


def expand_env_refs(value: Any) -> Any:
    """Replace ``"env:NAME"`` strings (also inside lists and dicts) by the variable's value."""
    if isinstance(value, str) and value.startswith("env:"):
        name = value[4:]
        if name not in os.environ:
            raise HandlerSettingsError(f"environment variable {name} is not set")
        return os.environ[name]
    if isinstance(value, dict):
        return {k: expand_env_refs(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env_refs(v) for v in value]
    return value


def unset_env_refs(values: dict[str, Any]) -> dict[str, str]:
    """Keys whose value is an ``"env:NAME"`` reference to an unset variable → NAME."""
    return {
        key: value[4:] for key, value in values.items()
        if isinstance(value, str) and value.startswith("env:") and value[4:] not in os.environ
    }


def resolve_handler_settings(
    settings_model: type[HandlerSettings],
    handler_path: str,
    metadata: dict[str, Any],
    gateway: GatewaySettings,
) -> HandlerSettings:
    """Endpoint metadata → gateway ``handler_settings`` → the model's defaults."""
    module = handler_path.split(":", 1)[0]
    merged: dict[str, Any] = {}
    merged.update(gateway.handler_settings.get(module, {}))
    merged.update(gateway.handler_settings.get(handler_path, {}))
    merged.update({k: v for k, v in metadata.items() if k not in RESERVED_METADATA_KEYS})
    try:
        return settings_model.model_validate(expand_env_refs(merged))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise HandlerSettingsError(f"invalid handler settings: {problems}") from None
