"""The audit log: one entry per change an operator makes, written by ``record`` alone.

Every caller — the admin API, the console's sign-in, the CLI, the endpoints file — hands
``record`` who did what to which target and the fields before and after; ``record`` takes the
secrets out, appends the entry to the store and emits one JSON log line (``audit_entry``).
Secrets are: fields the caller names (an endpoint's secret settings), ``key`` and ``key_hash``,
any field named like a credential (``looks_secret``: ``api_key``, ``token``, …) at any depth, and
credentials inside URLs. An ``env:NAME`` reference is kept: it names the secret, not its value.

Actors: a gateway operator key is ``key:<ref>`` (``OperatorKeys.ref_of``, not the key), an OIDC
sign-in ``oidc:<subject>``, the CLI ``os:<user>``, the gateway itself (the endpoints file at
start or on SIGHUP) ``gateway``, a refused sign-in before any identity was known ``unknown``.
"""

from __future__ import annotations

import asyncio
import getpass
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from a2a_gateway.observability.logs import looks_secret, mask_credentials
from a2a_gateway.stores.base import AuditEntry, Endpoint, Store

SECRET_SHOWN = "***"
KEY_FIELDS = frozenset({"key", "key_hash"})
"""An API key and its hash, whose names ``looks_secret`` does not catch."""
PRUNE_INTERVAL_SECONDS = 3600.0
GATEWAY_ACTOR = "gateway"

log = structlog.get_logger(__name__)


async def record(
    store: Store,
    actor: str,
    action: str,
    target: str = "",
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    details: dict[str, Any] | None = None,
    secret_fields: Iterable[str] = (),
) -> AuditEntry:
    """Append an entry for ``action`` (a stable dotted name such as ``endpoint.disabled``) and
    log it; return it as stored. ``secret_fields``: field names whose values are secrets
    wherever they appear in ``before``, ``after`` or ``details``."""
    secret = KEY_FIELDS | frozenset(secret_fields)
    entry = AuditEntry(
        id=uuid.uuid4().hex,
        at=datetime.now(UTC),
        actor=actor,
        action=action,
        target=target,
        before=without_secrets(before, secret) if before is not None else None,
        after=without_secrets(after, secret) if after is not None else None,
        details=without_secrets(details or {}, secret),
    )
    await store.append_audit_entry(entry)
    log.info("audit_entry", **entry_json(entry))
    return entry


class RefusedSignIns:
    """Records refused console sign-ins (``console.sign_in_failed``), at most ``per_minute`` a
    minute on this replica: a refusal needs no credential, so a flood of them must not become a
    flood of store writes. The refusals left out are counted in the next entry written
    (``details.unrecorded_before``)."""

    def __init__(self, per_minute: int = 30, clock: Callable[[], float] = time.monotonic) -> None:
        self._per_minute = per_minute
        self._clock = clock
        self._minute = -1
        self._written = 0
        self._unrecorded = 0

    async def record(self, store: Store, actor: str, details: dict[str, Any]) -> None:
        minute = int(self._clock() // 60)
        if minute != self._minute:
            self._minute, self._written = minute, 0
        if self._written >= self._per_minute:
            self._unrecorded += 1
            return
        self._written += 1
        if self._unrecorded:
            details = {**details, "unrecorded_before": self._unrecorded}
            self._unrecorded = 0
        await record(store, actor, "console.sign_in_failed", details=details)


def without_secrets(value: Any, secret_fields: frozenset[str] = frozenset()) -> Any:
    """``value`` (JSON) with every secret replaced by ``***``."""
    if isinstance(value, dict):
        return {
            str(k): SECRET_SHOWN
            if (k in secret_fields or looks_secret(str(k))) and _may_be_secret(v)
            else without_secrets(v, secret_fields)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [without_secrets(v, secret_fields) for v in value]
    if isinstance(value, str):
        return mask_credentials(value)
    return value


def _may_be_secret(value: Any) -> bool:
    """A number, a truth value or nothing is never a credential (``per_1k_input_tokens`` of a
    price is not a token), nor is an ``env:NAME`` reference."""
    if value is None or isinstance(value, bool | int | float):
        return False
    return not (isinstance(value, str) and value.startswith("env:"))


def endpoint_fields(endpoint: Endpoint) -> dict[str, Any]:
    """What an entry shows of an endpoint row (its metadata: settings, auth, handler); pass
    its secret settings' names to ``record`` as ``secret_fields``."""
    return {
        "name": endpoint.name,
        "tenant": endpoint.tenant,
        "description": endpoint.description,
        "enabled": endpoint.enabled,
        "metadata": endpoint.metadata,
    }


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    """An entry as the admin API and the log line show it."""
    return {
        "id": entry.id,
        "at": entry.at.isoformat(),
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "before": entry.before,
        "after": entry.after,
        "details": entry.details,
    }


async def prune_old_entries(store: Store, retention_days: float,
                            interval: float = PRUNE_INTERVAL_SECONDS) -> None:
    """Forever: remove the entries older than ``retention_days``, now and every ``interval``
    seconds (a failed pass is logged and tried again at the next one)."""
    while True:
        try:
            pruned = await store.prune_audit_entries(
                datetime.now(UTC) - timedelta(days=retention_days)
            )
            if pruned:
                log.info("audit_entries_pruned", count=pruned, retention_days=retention_days)
        except Exception as exc:
            log.warning("audit_prune_failed", error=str(exc) or type(exc).__name__)
        await asyncio.sleep(interval)


def os_actor() -> str:
    """The CLI's actor: the OS user running it (``os:alice``)."""
    try:
        return f"os:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry and no USER variable (some containers)
        return "os:unknown"
