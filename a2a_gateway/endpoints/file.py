"""Endpoints as code: a YAML or TOML file of endpoint entries, checked, applied to a store,
exported.

    endpoints:
      - id: 7d0c6c1e-6a57-4b8e-9d43-3f1c2a9e0b11
        name: Echo
        handler: handlers.echo:EchoHandler
        settings: {delay: 0}
        public: true

Applying a file creates or updates the row of each entry (the file wins for its id) and
leaves rows created otherwise alone. Rows the file wrote carry ``endpoints_file: true`` in
their metadata; such a row whose entry is gone from the file is disabled (it answers 404,
its tasks stay), so an agent removed from the file stops answering on every replica.
Secrets are ``env:NAME`` references, resolved by the registry when it builds the handler;
the file, the store and an export hold only the reference.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError

from a2a_gateway.endpoints.registry import check_endpoint, secret_settings
from a2a_gateway.governance.audit import GATEWAY_ACTOR, record
from a2a_gateway.observability.logs import looks_secret, mask_credentials
from a2a_gateway.settings import RESERVED_METADATA_KEYS, GatewaySettings
from a2a_gateway.stores.base import ConflictError, Endpoint, Store

log = structlog.get_logger(__name__)

FROM_FILE = "endpoints_file"
"""Metadata key marking a row the endpoints file wrote."""

GATEWAY_KEYS = ("public", "auth", "rate_limit", "strict_v1_card", "catalog", "limits", "cost",
                "mcp")
"""Entry keys the gateway reads; they sit beside ``settings`` in an entry, in the row's metadata."""

FORMATS = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}


class EndpointsFileError(Exception):
    """The file cannot be read or one of its entries cannot be served."""


def split_handler(handler: str) -> tuple[str, str]:
    """``module:Class`` → (module, Class); ValueError names the expected form."""
    module_name, _, class_name = handler.partition(":")
    if not module_name or not class_name:
        raise ValueError("must be MODULE:CLASS, e.g. handlers.echo:EchoHandler")
    return module_name, class_name


def endpoint_row(
    endpoint_id: str,
    name: str,
    handler: str,
    *,
    tenant: str = "default",
    description: str = "",
    enabled: bool = True,
    card: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    **gateway: Any,
) -> Endpoint:
    """The store row of an endpoint (``endpoints add`` and the file): the handler and its
    settings, then the gateway's keys (``public``, ``auth``, …) that are not None, in metadata."""
    module_name, class_name = split_handler(handler)
    metadata = {"module_name": module_name, "class_name": class_name, **(settings or {})}
    metadata.update({k: v for k, v in gateway.items() if v is not None})
    return Endpoint(id=endpoint_id, name=name, tenant=tenant, description=description,
                    enabled=enabled, card=card or {}, metadata=metadata)


class Entry(BaseModel):
    """One endpoint as the file declares it."""

    model_config = ConfigDict(extra="forbid")

    id: uuid.UUID
    name: StrictStr
    handler: StrictStr
    tenant: StrictStr = "default"
    description: StrictStr = ""
    enabled: StrictBool = True
    settings: dict[str, Any] = {}
    card: dict[str, Any] = {}
    auth: dict[str, Any] | None = None
    public: StrictBool | None = None
    rate_limit: dict[str, Any] | None = None
    strict_v1_card: StrictBool | None = None
    catalog: StrictBool | None = None
    limits: dict[str, Any] | None = None
    """Quota limits of the endpoint's callers together (``governance.limits``)."""
    cost: dict[str, Any] | None = None
    """The endpoint's price, for the usage ledger (``governance.usage.Price``)."""
    mcp: StrictBool | None = None
    """False: the endpoint is not served at ``/<id>/mcp`` (``transport.mcp``)."""

    def row(self) -> Endpoint:
        gateway = {key: getattr(self, key) for key in GATEWAY_KEYS}
        row = endpoint_row(str(self.id), self.name, self.handler, tenant=self.tenant,
                           description=self.description, enabled=self.enabled, card=self.card,
                           settings=self.settings, **gateway)
        row.metadata[FROM_FILE] = True
        return row


def entry_of(endpoint: Endpoint) -> dict[str, Any]:
    """The file entry of a row (the inverse of ``Entry.row``); empty fields are left out."""
    metadata = endpoint.metadata
    entry: dict[str, Any] = {
        "id": endpoint.id, "name": endpoint.name,
        "handler": f"{metadata.get('module_name', '')}:{metadata.get('class_name', '')}",
        "tenant": endpoint.tenant, "description": endpoint.description, "enabled": endpoint.enabled,
        "settings": {k: v for k, v in metadata.items()
                     if k not in RESERVED_METADATA_KEYS and k != FROM_FILE},
        "card": endpoint.card,
        **{key: metadata[key] for key in GATEWAY_KEYS if key in metadata},
    }
    return {k: v for k, v in entry.items() if v not in ("", {}, None)}


def literal_secrets(endpoint: Endpoint, settings: GatewaySettings) -> list[str]:
    """Settings of the row that hold a secret as such rather than as an ``env:NAME`` reference:
    the handler's secret settings, fields named like a credential at any depth, and URLs
    with credentials."""
    secret = secret_settings(endpoint, settings)
    found: list[str] = []

    def visit(where: str, value: Any, is_secret: bool) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                visit(f"{where}.{k}", v, looks_secret(str(k)))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                visit(f"{where}.{i}", v, is_secret)
        elif isinstance(value, str) and value.startswith("env:"):
            return
        elif (is_secret and value not in (None, "")) or (
                isinstance(value, str) and mask_credentials(value) != value):
            found.append(where)

    for key, value in entry_of(endpoint).get("settings", {}).items():
        visit(f"settings.{key}", value, key in secret)
    return found


def read_entries(path: Path) -> list[Any]:
    """The ``endpoints`` list of the file, by its extension (YAML or TOML)."""
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise EndpointsFileError(f"{path}: an endpoints file ends in .yaml, .yml or .toml")
    document = _parse(path, kind)
    if not isinstance(document, dict) or not isinstance(document.get("endpoints"), list):
        raise EndpointsFileError(f"{path}: needs a list named endpoints (an empty list is allowed)")
    extra = sorted(str(k) for k in document if k != "endpoints")
    if extra:
        raise EndpointsFileError(f"{path}: unknown top-level key {', '.join(extra)}")
    return document["endpoints"]


def _parse(path: Path, kind: str) -> Any:
    """The file's document. Its parser is imported here: a gateway without an endpoints file
    loads neither PyYAML nor tomllib."""
    if kind == "yaml":
        import yaml

        parse, syntax_error = yaml.safe_load, yaml.YAMLError
    else:
        import tomllib

        parse, syntax_error = tomllib.loads, tomllib.TOMLDecodeError
    try:
        return parse(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EndpointsFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except (syntax_error, UnicodeDecodeError) as exc:
        raise EndpointsFileError(
            f"{path}: not valid {kind.upper()}: {_syntax_error(exc)}"
        ) from None


def _syntax_error(exc: Exception) -> str:
    """What is wrong and where, without PyYAML's quote of the line (it may hold a value)."""
    mark = getattr(exc, "problem_mark", None)  # set on PyYAML's MarkedYAMLError
    if mark is not None:
        return f"{getattr(exc, 'problem', None)} (line {mark.line + 1}, column {mark.column + 1})"
    return str(exc)


def _entry_problems(
    raw: Any, settings: GatewaySettings
) -> tuple[Endpoint | None, list[str], list[str]]:
    """The row of one entry, why it cannot be served, and what could not be checked here."""
    try:
        entry = Entry.model_validate(raw)
    except ValidationError as exc:
        return (
            None,
            [f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors()],
            [],
        )
    reserved = sorted(k for k in entry.settings if k in RESERVED_METADATA_KEYS or k == FROM_FILE)
    if reserved:
        return None, [f"settings.{', settings.'.join(reserved)}: give {', '.join(reserved)} "
                      "beside settings, not in it"], []
    try:
        row = entry.row()
    except ValueError as exc:
        return None, [f"handler {exc}"], []
    check = check_endpoint(row, settings)
    problems = list(check.problems)
    problems += [f"{where} holds a secret: give it as env:NAME, never in the file"
                 for where in literal_secrets(row, settings)]
    return row, problems, check.notes


def load(path: Path, settings: GatewaySettings) -> list[Endpoint]:
    """The rows the file declares; ``EndpointsFileError`` names each entry that cannot be
    served (its position from 1, its id) and why. Notes (an ``env:`` variable not set
    here) are logged: the endpoint then answers with its problem, as a row added otherwise."""
    rows: list[Endpoint] = []
    refused: list[str] = []
    seen: set[str] = set()
    for number, raw in enumerate(read_entries(path), start=1):
        row, problems, notes = _entry_problems(raw, settings)
        shown_id = raw.get("id") if isinstance(raw, dict) else None
        where = f"entry {number}" + (f" (id {shown_id})" if shown_id else "")
        if row is not None and row.id in seen:
            problems.append(f"id {row.id} is declared twice")
        if problems:
            refused.append(f"{where}: {'; '.join(problems)}")
            continue
        assert row is not None
        seen.add(row.id)
        rows.append(row)
        for note in notes:
            log.warning(
                "endpoints_file_note", file=str(path), entry=number, endpoint_id=row.id, note=note
            )
    if refused:
        raise EndpointsFileError(f"{path}: {' | '.join(refused)}")
    return rows


@dataclass(slots=True)
class Applied:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    """Rows the file wrote before whose entry is gone."""


def _same(a: Endpoint, b: Endpoint) -> bool:
    return (a.name, a.tenant, a.description, a.enabled, a.card, a.metadata) == \
        (b.name, b.tenant, b.description, b.enabled, b.card, b.metadata)


async def apply(store: Store, rows: list[Endpoint]) -> Applied:
    """Write ``rows`` (only those that differ from the store's, so an unchanged entry keeps its
    handler running) and disable the file's former rows that are no longer declared."""
    applied = Applied()
    declared = {row.id for row in rows}
    for row in rows:
        await _put(store, row, applied)
    for row in await store.list_endpoints():
        if row.id not in declared and row.metadata.get(FROM_FILE) and row.enabled:
            row.enabled = False
            row.updated_at = datetime.now(UTC)
            await store.update_endpoint(row)
            applied.disabled.append(row.id)
    return applied


async def _put(store: Store, row: Endpoint, applied: Applied) -> None:
    stored = await store.get_endpoint(row.id)
    if stored is None:
        try:
            await store.create_endpoint(row)
            applied.created.append(row.id)
            return
        except ConflictError:  # another replica created it just now
            stored = await store.get_endpoint(row.id)
            assert stored is not None
    if _same(stored, row):
        applied.unchanged.append(row.id)
        return
    row.created_at = stored.created_at
    row.updated_at = datetime.now(UTC)
    await store.update_endpoint(row)
    applied.updated.append(row.id)


class EndpointsFile:
    """The file a gateway serves: checked at startup, applied, applied again on ``reload``."""

    def __init__(self, path: str | Path, settings: GatewaySettings) -> None:
        self.path = Path(path)
        self._settings = settings
        self._rows = load(self.path, settings)  # a bad file stops startup here
        self._lock = asyncio.Lock()

    async def apply(self, store: Store) -> Applied:
        async with self._lock:
            applied = await apply(store, self._rows)
        self._log(applied)
        await record(store, GATEWAY_ACTOR, "endpoints_file.applied", str(self.path), details={
            "created": applied.created, "updated": applied.updated,
            "disabled": applied.disabled, "unchanged": len(applied.unchanged),
        })
        return applied

    async def reload(self, store: Store) -> Applied | None:
        """Read the file again and apply it; a file that cannot be served is logged and the
        rows stay as they are."""
        try:
            self._rows = load(self.path, self._settings)
        except EndpointsFileError as exc:
            log.error("endpoints_file_refused", file=str(self.path), reason=str(exc))
            return None
        try:
            return await self.apply(store)
        except Exception as exc:  # a store outage must not end the process; the next SIGHUP retries
            log.error("endpoints_file_not_applied", file=str(self.path), error=type(exc).__name__)
            return None

    def reload_on_sighup(self, store: Store) -> None:
        """``reload`` whenever the process gets SIGHUP (one reload at a time, in order)."""
        reloads: set[asyncio.Task[Any]] = set()

        def reload() -> None:
            task = asyncio.create_task(self.reload(store))
            reloads.add(task)
            task.add_done_callback(reloads.discard)

        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)

    def _log(self, applied: Applied) -> None:
        log.info("endpoints_file_applied", file=str(self.path), created=applied.created,
                 updated=applied.updated, unchanged=len(applied.unchanged))
        for endpoint_id in applied.disabled:
            log.warning(
                "endpoints_file_entry_removed",
                file=str(self.path),
                endpoint_id=endpoint_id,
                action="disabled",
            )


def export(rows: list[Endpoint], settings: GatewaySettings, fmt: Literal["yaml", "toml"]) -> str:
    """The rows as an endpoints file. ``EndpointsFileError`` when a row holds a secret as
    such (it is never written): store it as ``env:NAME`` first."""
    literal = [f"{row.id} {where}" for row in rows for where in literal_secrets(row, settings)]
    if literal:
        raise EndpointsFileError(
            f"not exported: {', '.join(literal)} hold{'s' if len(literal) == 1 else ''} a secret "
            "as such; give it as env:NAME (endpoints add --set KEY=env:NAME) and export again"
        )
    document = {"endpoints": [entry_of(row) for row in rows]}
    if fmt == "toml":
        import tomli_w

        try:
            return tomli_w.dumps(document)
        except TypeError as exc:  # TOML has no null
            raise EndpointsFileError(f"not exportable as TOML ({exc}): export as YAML") from None
    import yaml

    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
