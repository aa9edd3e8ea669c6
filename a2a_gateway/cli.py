"""Command line: ``serve``, ``demo``, ``endpoints …``, ``migrate``. Argument parsing only."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from a2a_gateway.app import build_app
from a2a_gateway.logs import configure_logging
from a2a_gateway.settings import GatewaySettings, load_settings
from a2a_gateway.stores import UnknownStoreError, open_store
from a2a_gateway.stores.base import Endpoint, StoreError

DEMO_ENDPOINT_ID = "00000000-0000-4000-8000-00000000ec40"


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
    )


async def _with_store(url: str, action: Any) -> Any:
    store = await open_store(url)
    try:
        return await action(store)
    finally:
        await store.aclose()


def cmd_serve(args: argparse.Namespace) -> None:
    serve(_settings(args))


def serve(settings: GatewaySettings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    web.run_app(build_app(settings), host=settings.host, port=settings.port, access_log=None, print=None)


def cmd_demo(args: argparse.Namespace) -> None:
    settings = _settings(args)
    if args.store is None and "store" not in GatewaySettings().model_fields_set:
        settings.store = "sqlite:///./a2a-gateway-demo.db"

    async def ensure(store: Any) -> None:
        if await store.get_endpoint(DEMO_ENDPOINT_ID) is None:
            await store.create_endpoint(Endpoint(
                id=DEMO_ENDPOINT_ID, name="Echo demo", description="Echoes your message word by word.",
                metadata={"module_name": "handlers.echo", "class_name": "EchoHandler", "delay": 0.05},
            ))

    asyncio.run(_with_store(settings.store, ensure))
    base = settings.public_base_url or f"http://{settings.host}:{settings.port}"
    print(f"Agent card: {base}/{DEMO_ENDPOINT_ID}/.well-known/agent-card.json")
    print("Try:")
    print(
        f"  curl -s {base}/{DEMO_ENDPOINT_ID}/a2a -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' "
        "-d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"SendMessage\",\"params\":{\"message\":"
        "{\"messageId\":\"m1\",\"role\":\"ROLE_USER\",\"parts\":[{\"text\":\"hello gateway\"}]}}}'"
    )
    sys.stdout.flush()
    serve(settings)


def _endpoint_json(ep: Endpoint) -> dict[str, Any]:
    return {
        "id": ep.id, "tenant": ep.tenant, "name": ep.name, "description": ep.description,
        "enabled": ep.enabled, "card": ep.card, "metadata": ep.metadata,
        "created_at": ep.created_at.isoformat(), "updated_at": ep.updated_at.isoformat(),
    }


def cmd_endpoints_add(args: argparse.Namespace) -> None:
    module_name, _, class_name = args.handler.partition(":")
    if not class_name:
        sys.exit("--handler must be MODULE:CLASS, e.g. handlers.echo:EchoHandler")
    metadata: dict[str, Any] = {"module_name": module_name, "class_name": class_name}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"--set needs key=value, got {item!r}")
        metadata[key] = _parse_value(value)
    card = json.loads(args.card) if args.card else {}
    endpoint = Endpoint(
        id=args.id or str(uuid.uuid4()), name=args.name, tenant=args.tenant,
        description=args.description or "", card=card, metadata=metadata,
    )
    if args.public:
        endpoint.metadata["public"] = True
    asyncio.run(_with_store(_settings(args).store, lambda s: s.create_endpoint(endpoint)))
    print(endpoint.id)


def cmd_endpoints_list(args: argparse.Namespace) -> None:
    endpoints = asyncio.run(_with_store(_settings(args).store, lambda s: s.list_endpoints()))
    for ep in endpoints:
        handler = f"{ep.metadata.get('module_name')}:{ep.metadata.get('class_name')}"
        print(f"{ep.id}  {'enabled ' if ep.enabled else 'disabled'}  {ep.name}  {handler}")


def cmd_endpoints_show(args: argparse.Namespace) -> None:
    ep = asyncio.run(_with_store(_settings(args).store, lambda s: s.get_endpoint(args.id)))
    if ep is None:
        sys.exit(f"no endpoint {args.id}")
    print(json.dumps(_endpoint_json(ep), indent=2))


def _set_enabled(enabled: bool) -> Any:
    def command(args: argparse.Namespace) -> None:
        async def change(store: Any) -> None:
            ep = await store.get_endpoint(args.id)
            if ep is None:
                sys.exit(f"no endpoint {args.id}")
            ep.enabled = enabled
            ep.updated_at = datetime.now(UTC)
            await store.update_endpoint(ep)

        asyncio.run(_with_store(_settings(args).store, change))
        print(f"{args.id} {'enabled' if enabled else 'disabled'}")

    return command


def cmd_migrate(args: argparse.Namespace) -> None:
    from a2a_gateway.stores.migrate import migrate

    applied = asyncio.run(migrate(_settings(args).store))
    print("\n".join(applied) if applied else "schema is up to date")


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", help="store URL (default: A2A_GATEWAY_STORE or sqlite:///./a2a-gateway.db)")
    p.add_argument("--config", help="TOML settings file")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="a2a-gateway", description="A2A gateway for agents of any framework")
    sub = root.add_subparsers(dest="command", required=True)
    for name, func, help_ in (("serve", cmd_serve, "run the gateway"),
                              ("demo", cmd_demo, "run the gateway with an echo demo agent")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--host")
        p.add_argument("--port", type=int)
        _store_args(p)
        p.set_defaults(func=func)
    p = sub.add_parser("migrate", help="create or upgrade the store's schema")
    _store_args(p)
    p.set_defaults(func=cmd_migrate)

    endpoints = sub.add_parser("endpoints", help="manage endpoints (agents)").add_subparsers(
        dest="action", required=True
    )
    add = endpoints.add_parser("add", help="register an agent; prints its id last")
    _store_args(add)
    add.add_argument("--name", required=True)
    add.add_argument("--handler", required=True, help="MODULE:CLASS, e.g. handlers.hermes:HermesAgentHandler")
    add.add_argument("--id", help="endpoint UUID (default: a new one)")
    add.add_argument("--tenant", default="default")
    add.add_argument("--description")
    add.add_argument("--card", help="card fields as JSON (skills, capabilities, version, provider …)")
    add.add_argument("--set", action="append", metavar="KEY=VALUE", help="handler setting (JSON or text)")
    add.add_argument("--public", action="store_true", help="needs no credentials")
    add.set_defaults(func=cmd_endpoints_add)
    for name, func in (("list", cmd_endpoints_list), ("show", cmd_endpoints_show),
                       ("disable", _set_enabled(False)), ("enable", _set_enabled(True))):
        p = endpoints.add_parser(name)
        _store_args(p)
        if name != "list":
            p.add_argument("id")
        p.set_defaults(func=func)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except (StoreError, UnknownStoreError, ValidationError) as exc:
        sys.exit(f"a2a-gateway: {exc}")
