"""The gateway as users run it — ``a2a-gateway serve`` — with one echo endpoint (``delay: 0``).

    python bench/servers/gateway.py --store memory:// --port 8701 --log-level warning

Writes an endpoints file with the echo endpoint (public unless ``--api-key``) and replaces
this process with ``python -m a2a_gateway serve --endpoints FILE`` (same pid, so a bench
measures the served gateway's CPU). ``--api-key KEY`` makes the endpoint private and
stores KEY for it first, so it needs a file store (``sqlite:///…``); ``--limit NAME=VALUE``
(repeatable) gives that key quotas. ``--no-uvloop`` sets
``A2A_GATEWAY_EVENT_LOOP=asyncio``. ``A2A_BENCH_SOURCE`` (``core_send --ref``) serves a
snapshot of the packages instead of the working tree.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(os.environ.get("A2A_BENCH_SOURCE") or ROOT)
sys.path.insert(0, str(ROOT))
from bench.servers.common import BENCH_ENDPOINT_ID  # noqa: E402

ENDPOINTS = """endpoints:
  - id: {id}
    name: echo
    description: benchmark echo
    handler: handlers.echo:EchoHandler
    public: {public}
    settings: {{delay: 0}}
"""


async def _store_key(store_url: str, key: str, limits: list[str]) -> None:
    sys.path.insert(0, str(SOURCE))
    from a2a_gateway.auth.api_keys import hash_key, key_id_of, make_key
    from a2a_gateway.settings import GatewaySettings
    from a2a_gateway.stores import open_store

    secret = GatewaySettings().api_key_secret.get_secret_value().encode()
    store = await open_store(store_url)
    try:
        row, _ = make_key(secret, endpoint_id=BENCH_ENDPOINT_ID, tenant="default")
        row.id, row.key_hash = key_id_of(key), hash_key(secret, key)
        if limits:
            from a2a_gateway.governance.limits import NO_LIMITS, apply_assignments

            row.limits = apply_assignments(NO_LIMITS, limits).set()
        await store.create_api_key(row)
    finally:
        await store.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", default="memory://")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8701)
    p.add_argument("--log-level", default="warning")
    p.add_argument("--no-uvloop", action="store_true")
    p.add_argument(
        "--api-key", help="make the endpoint private, callable with this key (file stores only)"
    )
    p.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                   help="a quota of the --api-key key (repeatable)")
    args = p.parse_args()
    if args.api_key:
        if args.store.startswith("memory:"):
            sys.exit("--api-key needs a file store: the key is stored before the gateway starts")
        asyncio.run(_store_key(args.store, args.api_key, args.limit))
    endpoints = Path(tempfile.mkdtemp(prefix="a2a-bench-endpoints-")) / "endpoints.yaml"
    endpoints.write_text(
        ENDPOINTS.format(id=BENCH_ENDPOINT_ID, public=str(args.api_key is None).lower())
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env.update({"PYTHONPATH": str(SOURCE), "A2A_GATEWAY_STORE": args.store,
                "A2A_GATEWAY_LOG_LEVEL": args.log_level,
                "A2A_GATEWAY_EVENT_LOOP": "asyncio" if args.no_uvloop else "auto"})
    print(
        f"bench-server gateway (a2a-gateway serve) store={args.store} log={args.log_level}"
        f" source={SOURCE}",
        flush=True,
    )
    os.chdir(SOURCE)
    os.execve(sys.executable, [sys.executable, "-m", "a2a_gateway", "serve", "--host", args.host,
                               "--port", str(args.port), "--endpoints", str(endpoints)], env)


if __name__ == "__main__":
    main()
