"""Shared bits of the benchmark launchers: the endpoint id and the event loop choice."""

from __future__ import annotations

import asyncio

BENCH_ENDPOINT_ID = "00000000-0000-4000-8000-0000000be9c4"
"""Endpoint id the gateway launcher registers; the other servers ignore the path prefix."""


def new_loop(use_uvloop: bool = True) -> tuple[asyncio.AbstractEventLoop, bool]:
    """A fresh event loop (uvloop when installed and wanted) and whether uvloop is used."""
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop(), True
    return asyncio.new_event_loop(), False


def announce(name: str, port: int, uvloop_used: bool) -> None:
    print(f"bench-server {name} port={port} uvloop={'yes' if uvloop_used else 'no'}", flush=True)
