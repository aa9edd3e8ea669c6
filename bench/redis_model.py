"""A model of the Redis live path at fleet scale: Redis operations, bandwidth and cores.

``RedisLiveHub`` (``a2a_gateway/live/redis.py``) writes, per replica:

* one ``XADD`` per mirrored event: every event of a task that streams on its replica (its
  replay log makes it resumable elsewhere) or that another replica watches, plus an
  ``s`` entry per new follower and an ``x`` entry at the end;
* one ``EXPIRE`` per key per flushed batch (a batch is up to 512 entries, one pipeline);
* one ``XREAD`` per reader pass, naming every stream the replica follows (and its wake
  stream): the request grows with the followed streams, and Redis looks at every key
  named, with or without new entries.

The inputs per delta (entries, ``EXPIRE`` calls, payload bytes) come from a measured run of
``bench/postgres_replicas.py --parts latency --live redis --json FILE`` (``--measured
FILE``), or the defaults below, which are that run's figures. With ``--redis-url`` (and
``redis-benchmark`` installed) the capacity of one Redis core is measured here: ``XADD``
and ``EXPIRE`` throughput pipelined as the hub sends them, and the server's time for an
``XREAD`` naming 500 and 5,000 streams with nothing new, from ``INFO commandstats``.

    python bench/redis_model.py                                  # the defaults
    python bench/redis_model.py --measured run.json --redis-url redis://user:pw@host:6379/0
    python bench/redis_model.py --replicas 20 --streams 5000 --deltas-per-second 20

Everything measured here uses keys under a prefix of its own, deleted at the end. The
model is arithmetic on those inputs; what it leaves out is printed with it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

KEY_BYTES = 46
"""``a2a:live:{<32 hex digits>}``."""
XADD_OVERHEAD = 70
"""RESP framing of ``XADD key MAXLEN ~ 256 * k e i <id> e <event>`` beyond key and fields."""
EXPIRE_BYTES = KEY_BYTES + 30
XADD_REPLY = 20
ENTRY_REPLY_OVERHEAD = 40
"""An entry in an ``XREAD`` reply beyond its fields: its id and RESP framing."""
XREAD_KEY_BYTES = KEY_BYTES + 40
"""Per key named in an ``XREAD`` request: the key, the id after which to read, framing."""


@dataclass
class Inputs:
    """Per published delta, from a measured run (defaults: 2026-12-05, 500 streams)."""

    entries_per_delta: float = 1.03
    expires_per_delta: float = 1.0
    entry_payload_bytes: float = 171.0
    reader_passes_per_delta: float = 0.2
    """XREAD calls per delta delivered to a follower (several deltas share a pass)."""


@dataclass
class Capacity:
    """One Redis core: operations per second it serves (pipelined) and XREAD cost."""

    xadd_per_second: float = 60_000.0
    expire_per_second: float = 100_000.0
    xread_us_base: float = 5.0
    xread_us_per_key: float = 0.15


def measured_inputs(path: Path, streams: int | None) -> Inputs:
    """The Redis figures of a ``postgres_replicas.py --json`` run: the rounds of the
    largest stream count (or ``streams``), medians."""
    rounds = [r for r in json.loads(path.read_text())["results"]["latency"]["rounds"]
              if r.get("redis")]
    if not rounds:
        sys.exit(f"{path}: no Redis rounds (run with --live redis)")
    wanted = streams or max(r["streams"] for r in rounds)
    rounds = [r for r in rounds if r["streams"] == wanted]

    def per_delta(key: str) -> float:
        return statistics.median(r["redis"][key] / r["deltas"] for r in rounds)

    return Inputs(
        entries_per_delta=per_delta("xadd"),
        expires_per_delta=per_delta("expire"),
        entry_payload_bytes=statistics.median(r["redis"]["entry_payload_bytes"] for r in rounds),
        reader_passes_per_delta=per_delta("xread"),
    )


# measuring one Redis core --------------------------------------------------------------------


def benchmark(url: str, command: list[str], requests: int) -> float:
    """Requests per second ``redis-benchmark`` gets for one command (50 clients,
    pipelines of 16, as the hub's batches are pipelined)."""
    parts = urlsplit(url)
    argv = ["redis-benchmark", "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 6379),
            "-n", str(requests), "-c", "50", "-P", "16", "-r", "100000", "-q", "--csv"]
    if parts.username:
        argv += ["--user", parts.username]
    if parts.password:
        argv += ["-a", parts.password]
    out = subprocess.run([*argv, *command], capture_output=True, text=True, timeout=300)
    rows = [line for line in out.stdout.splitlines() if line.startswith('"') and "rps" not in line]
    if out.returncode != 0 or not rows:
        raise RuntimeError(f"redis-benchmark failed: {out.stderr[-500:]}")
    return float(rows[-1].split(",")[1].strip('"'))


def xread_cost(client: Any, prefix: str, keys: int, calls: int) -> float:
    """Server µs of an ``XREAD`` naming ``keys`` streams, none with new entries."""
    names = [f"{prefix}live:{{{n:032x}}}" for n in range(keys)]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.xadd(name, {"k": "e"})
    ids = pipe.execute()
    streams = dict(zip(names, ids, strict=True))
    before = client.info("commandstats").get("cmdstat_xread", {})
    for _ in range(calls):
        client.xread(streams)
    after = client.info("commandstats")["cmdstat_xread"]
    return (after["usec"] - before.get("usec", 0)) / (after["calls"] - before.get("calls", 0))


def measure_capacity(url: str, requests: int) -> Capacity:
    import redis

    prefix = f"bench{uuid.uuid4().hex[:8]}:"
    payload = "x" * 150
    client = redis.Redis.from_url(url)
    try:
        xadd = benchmark(url, ["XADD", f"{prefix}live:{{__rand_int__}}", "MAXLEN", "~", "256",
                               "*", "k", "e", "i", "1733390000000-0", "e", payload], requests)
        expire = benchmark(url, ["EXPIRE", f"{prefix}live:{{__rand_int__}}", "3600"], requests)
        small, large = 500, 5000
        small_us = xread_cost(client, f"{prefix}r{small}:", small, 200)
        large_us = xread_cost(client, f"{prefix}r{large}:", large, 50)
    finally:
        keys = list(client.scan_iter(match=f"{prefix}*", count=5000))
        for start in range(0, len(keys), 1000):
            client.unlink(*keys[start:start + 1000])
        client.close()
    per_key = (large_us - small_us) / (large - small)
    print(f"one Redis core here: XADD {xadd:,.0f}/s, EXPIRE {expire:,.0f}/s (redis-benchmark,"
          f" 50 clients, pipelines of 16); XREAD naming {small} streams {small_us:.0f} µs,"
          f" {large} streams {large_us:.0f} µs of server time ({per_key:.3f} µs per key)")
    return Capacity(xadd, expire, max(0.0, small_us - small * per_key), per_key)


# the model ----------------------------------------------------------------------------------


def fleet(args: argparse.Namespace, inputs: Inputs, cap: Capacity,
          followed: float) -> dict[str, float]:
    """Redis load of the fleet when a fraction ``followed`` of the streams has a follower
    on another replica (each stream streams on its owner, so it is mirrored anyway)."""
    streams = args.replicas * args.streams
    deltas = streams * args.deltas_per_second
    xadds = deltas * inputs.entries_per_delta
    expires = deltas * inputs.expires_per_delta
    delivered = deltas * followed
    followed_per_replica = args.streams * followed
    passes = min(delivered * inputs.reader_passes_per_delta,
                 args.replicas * args.max_passes_per_second)
    if followed_per_replica == 0:
        passes = 0.0
    entry_in = inputs.entry_payload_bytes + KEY_BYTES + XADD_OVERHEAD
    bytes_in = xadds * entry_in + expires * EXPIRE_BYTES + passes * (
        (followed_per_replica + 1) * XREAD_KEY_BYTES)
    bytes_out = xadds * XADD_REPLY + expires * 4 + delivered * (
        inputs.entry_payload_bytes + ENTRY_REPLY_OVERHEAD)
    core_seconds = (
        xadds / cap.xadd_per_second + expires / cap.expire_per_second
        + passes * (cap.xread_us_base + cap.xread_us_per_key * (followed_per_replica + 1)) / 1e6
    )
    return {"streams": streams, "deltas": deltas, "xadd": xadds, "expire": expires,
            "xread": passes, "keys_per_xread": followed_per_replica + 1,
            "mb_in": bytes_in / 1e6, "mb_out": bytes_out / 1e6, "cores": core_seconds}


def report(args: argparse.Namespace, inputs: Inputs, cap: Capacity) -> None:
    print(f"\n{args.replicas} replicas × {args.streams:,} streams each, {args.deltas_per_second:g}"
          f" deltas/s per stream; per delta: {inputs.entries_per_delta:.2f} XADD,"
          f" {inputs.expires_per_delta:.2f} EXPIRE, {inputs.reader_passes_per_delta:.3f} XREAD"
          f" per delivered delta, entry payload {inputs.entry_payload_bytes:.0f} B")
    print("| followed on another replica | deltas/s | XADD/s | EXPIRE/s | XREAD/s "
          "| keys per XREAD | MB/s in | MB/s out | Redis cores (1 core = 1.0) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for followed in args.followed:
        f = fleet(args, inputs, cap, followed)
        print(f"| {followed:.0%} | {f['deltas']:,.0f} | {f['xadd']:,.0f} | {f['expire']:,.0f} "
              f"| {f['xread']:,.0f} | {f['keys_per_xread']:,.0f} | {f['mb_in']:,.1f} "
              f"| {f['mb_out']:,.1f} | {f['cores']:.2f} |")
    per_core = 1 / (inputs.entries_per_delta / cap.xadd_per_second
                    + inputs.expires_per_delta / cap.expire_per_second)
    print(f"\nOne core mirrors at most ≈ {per_core:,.0f} deltas/s (XADD + EXPIRE alone): "
          f"≈ {per_core / args.deltas_per_second:,.0f} streams at {args.deltas_per_second:g}"
          f" deltas/s, i.e. {per_core / args.deltas_per_second / args.streams:.2f} replicas"
          f" of {args.streams:,} streams. Shards needed for the fleet at 70 % of a core:"
          f" {math.ceil(fleet(args, inputs, cap, max(args.followed))['cores'] / 0.7)}.")
    print("Left out: pub/sub (watch, refresh every 2 s per followed task: small), the"
          " snapshot and end entries beyond the measured ratio, replication to replicas of"
          " Redis, TLS.")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--replicas", type=int, default=20)
    p.add_argument("--streams", type=int, default=5000, help="open streams per replica")
    p.add_argument("--deltas-per-second", type=float, default=20.0,
                   help="deltas per second of one stream (a model streaming tokens)")
    p.add_argument("--followed", default="0,0.1,1",
                   help="fractions of streams with a follower on another replica")
    p.add_argument("--max-passes-per-second", type=float, default=2000.0,
                   help="reader passes one replica can make (bounded by round trips)")
    p.add_argument("--measured", type=Path, help="a postgres_replicas.py --json file")
    p.add_argument("--measured-streams", type=int, help="its rounds with this stream count")
    p.add_argument("--redis-url", default=os.environ.get("A2A_TEST_REDIS_URL"),
                   help="measure one Redis core here (default: $A2A_TEST_REDIS_URL)")
    p.add_argument("--no-measure", action="store_true", help="use the default capacity")
    p.add_argument("--requests", type=int, default=200_000)
    args = p.parse_args()
    args.followed = [float(x) for x in args.followed.split(",") if x.strip()]
    if not (1 <= args.replicas <= 10_000 and 1 <= args.streams <= 10_000_000
            and all(0 <= f <= 1 for f in args.followed) and 1000 <= args.requests <= 10**7):
        sys.exit("--replicas, --streams, --followed (0..1) or --requests out of range")
    inputs = measured_inputs(args.measured, args.measured_streams) if args.measured else Inputs()
    cap = Capacity()
    if args.redis_url and not args.no_measure:
        if shutil.which("redis-benchmark") is None:
            print("redis-benchmark is not installed: default capacity", file=sys.stderr)
        else:
            cap = measure_capacity(args.redis_url, args.requests)
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), f"{os.cpu_count()} CPUs,"
          f" load {os.getloadavg()[0]:.2f}")
    report(args, inputs, cap)


if __name__ == "__main__":
    main()
