"""The gateway with one echo endpoint (``delay: 0``) on any store URL.

    python bench/servers/gateway.py --store memory:// --port 8701 --log-level warning

The endpoint is inserted through the app's own store in an ``on_startup`` hook (it
runs after the gateway's resources are open), so ``memory://`` works; on a SQLite
URL the row is written the same way (skipped when it already exists).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if os.environ.get("A2A_BENCH_SOURCE"):  # a snapshot of a2a_gateway/ and handlers/ (core_send --ref)
    sys.path.insert(0, os.environ["A2A_BENCH_SOURCE"])

from aiohttp import web  # noqa: E402

from a2a_gateway.app import build_app  # noqa: E402
from a2a_gateway.auth.api_keys import hash_key, key_id_of, make_key  # noqa: E402
from a2a_gateway.state import GATEWAY  # noqa: E402
from a2a_gateway.logs import configure_logging  # noqa: E402
from a2a_gateway.settings import GatewaySettings  # noqa: E402
from a2a_gateway.stores.base import Endpoint  # noqa: E402
from bench.servers.common import BENCH_ENDPOINT_ID, announce, new_loop  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--store", default="memory://")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8701)
    p.add_argument("--log-level", default="warning")
    p.add_argument("--no-uvloop", action="store_true")
    p.add_argument("--api-key", help="make the endpoint private, callable with this key")
    args = p.parse_args()

    settings = GatewaySettings(store=args.store, host=args.host, port=args.port, log_level=args.log_level)
    configure_logging(settings.log_level, settings.log_format)
    app = build_app(settings)

    async def add_endpoint(app: web.Application) -> None:
        store = app[GATEWAY].store
        if await store.get_endpoint(BENCH_ENDPOINT_ID) is None:
            await store.create_endpoint(Endpoint(
                id=BENCH_ENDPOINT_ID, name="echo", description="benchmark echo",
                metadata={"module_name": "handlers.echo", "class_name": "EchoHandler", "delay": 0,
                          "public": args.api_key is None},
            ))
        if args.api_key:
            secret = settings.api_key_secret.get_secret_value().encode()
            row, _ = make_key(secret, endpoint_id=BENCH_ENDPOINT_ID, tenant="default")
            row.id, row.key_hash = key_id_of(args.api_key), hash_key(secret, args.api_key)
            await store.create_api_key(row)

    app.on_startup.append(add_endpoint)
    loop, uvloop_used = new_loop(not args.no_uvloop)
    import a2a_gateway

    source = os.path.dirname(os.path.dirname(os.path.abspath(a2a_gateway.__file__)))
    announce(f"gateway store={args.store} log={args.log_level} source={source}", args.port, uvloop_used)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None, loop=loop)


if __name__ == "__main__":
    main()
