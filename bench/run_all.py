"""The whole benchmark set in one command, and the summary table that bench/README.md quotes.

    python bench/run_all.py                    # every script, as set below (about 25 minutes)
    python bench/run_all.py --quick            # fewer and shorter runs (about 10 minutes)
    python bench/run_all.py --only core_send,cold_start
    python bench/run_all.py --write            # also replace the summary in bench/README.md

Each script runs as its own process (each starts its servers afresh and pins them, see its own
section of bench/README.md) and writes its raw figures with ``--json`` into a temporary
directory; this script reads them back and prints one table: every figure the performance
targets name, its value, the target, and whether it is met. A script that fails or cannot run
here (no wrk, no PostgreSQL) is reported in the table and the others still run.

PostgreSQL figures need ``--postgres-dsn`` (or ``A2A_TEST_POSTGRES_DSN``); DynamoDB figures use
``--dynamodb-endpoint`` (or ``A2A_TEST_DYNAMODB_ENDPOINT``), else the script starts moto itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
README = BENCH_DIR / "README.md"
BEGIN, END = "<!-- run_all: begin -->", "<!-- run_all: end -->"

Figures = dict[str, Any]
"""The parsed ``--json`` output of each script that ran, by script name."""


@dataclass(frozen=True)
class Script:
    name: str
    args: tuple[str, ...]
    quick_args: tuple[str, ...]


def scripts(options: argparse.Namespace) -> list[Script]:
    servers = "gateway-memory,gateway-sqlite,a2a-sdk,bare-aiohttp"
    if options.postgres_dsn:
        servers += ",gateway-postgres"
    dynamo = ("--endpoint", options.dynamodb_endpoint) if options.dynamodb_endpoint else ()
    postgres = ("--postgres-dsn", options.postgres_dsn) if options.postgres_dsn else ()
    return [
        Script(
            "core_send",
            ("--servers", servers, *postgres, "--runs", "5"),
            ("--servers", servers, *postgres, "--runs", "3", "--duration", "5"),
        ),
        Script("streaming", ("--runs", "3"), ("--runs", "1")),
        Script(
            "cold_start",
            ("--stores", "memory,sqlite", "--runs", "7"),
            ("--stores", "memory,sqlite", "--runs", "3"),
        ),
        Script(
            "dynamodb_gateway",
            (*dynamo, "--runs", "3"),
            (*dynamo, "--runs", "2", "--duration", "5"),
        ),
        Script("idle_streams", (), ("--streams", "2000")),
    ]


def run_script(script: Script, quick: bool, out: Path) -> tuple[Any | None, str]:
    """Runs one script; its parsed JSON, or None and why not."""
    path = BENCH_DIR / f"{script.name}.py"
    if not path.exists():
        return None, "script not in this tree"
    json_path = out / f"{script.name}.json"
    argv = [
        sys.executable,
        str(path),
        *(script.quick_args if quick else script.args),
        "--json",
        str(json_path),
    ]
    print(f"== {script.name}: {' '.join(argv[1:])}", flush=True)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=BENCH_DIR.parent, check=False)
    print(
        f"== {script.name}: exit {done.returncode} after {time.monotonic() - started:.0f} s",
        flush=True,
    )
    if done.returncode != 0 or not json_path.exists():
        return None, f"failed (exit {done.returncode})"
    return json.loads(json_path.read_text()), ""


# --- reading figures back -------------------------------------------------------------------------

def _median(values: list[float]) -> float | None:
    values = [v for v in values if isinstance(v, int | float) and v == v]
    return statistics.median(values) if values else None


def core_cpu_us(figures: Figures, server: str) -> float | None:
    samples = (figures.get("core_send") or {}).get("results", {}).get(server, [])
    return _median([s.get("cpu_us") for s in samples])


def per_cpu_ratio(figures: Figures, server: str, other: str) -> float | None:
    """Requests per CPU-second of ``server`` over those of ``other``."""
    mine, theirs = core_cpu_us(figures, server), core_cpu_us(figures, other)
    return theirs / mine if mine and theirs else None


def streaming(figures: Figures, scenario: str, key: str) -> float | None:
    results = (figures.get("streaming") or {}).get("results", {})
    return _median([m.get(key) for m in results.get(f"{scenario}|working", [])])


def deltas_per_core(figures: Figures, scenario: str) -> float | None:
    cpu = streaming(figures, scenario, "cpu µs/delta")
    return 1e6 / cpu if cpu else None


def cold_start(figures: Figures, store: str, key: str) -> float | None:
    rows = (figures.get("cold_start") or {}).get("results", [])  # one source: the working tree
    return _median([v for r in rows if r.get("store") == store for v in (r.get(key) or [])])


def import_and_build_ms(figures: Figures) -> float | None:
    imported, built = (
        cold_start(figures, "sqlite", "import_ms"),
        cold_start(figures, "sqlite", "build_ms"),
    )
    return imported + built if imported is not None and built is not None else None


def dynamodb(figures: Figures, key: str) -> float | None:
    samples = (figures.get("dynamodb_gateway") or {}).get("results", {}).get("dynamodb-moto", [])
    if key == "calls":
        return _median([sum(s.get("calls", {}).values()) for s in samples])
    return _median([s.get(key) for s in samples])


def idle(figures: Figures, key: str) -> float | None:
    value = (figures.get("idle_streams") or {}).get(key)
    return value if isinstance(value, int | float) else None


@dataclass(frozen=True)
class Target:
    metric: str
    value: Callable[[Figures], float | None]
    unit: str
    target: float
    at_least: bool = True
    """The figure must be ≥ the target (else ≤)."""

    def row(self, figures: Figures) -> tuple[str, str, str, str]:
        value = self.value(figures)
        goal = f"{'≥' if self.at_least else '≤'} {self.target:g}{self.unit}"
        if value is None:
            return self.metric, "not measured", goal, "–"
        met = value >= self.target if self.at_least else value <= self.target
        shown = f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:.2f}"
        shown += self.unit
        return self.metric, shown, goal, "met" if met else "not met"


TARGETS = [
    Target(
        "SendMessage, memory:// vs a2a-sdk server (per CPU-s)",
        lambda f: per_cpu_ratio(f, "gateway-memory", "a2a-sdk"),
        "×",
        15,
    ),
    Target(
        "SendMessage, SQLite vs a2a-sdk server (per CPU-s)",
        lambda f: per_cpu_ratio(f, "gateway-sqlite", "a2a-sdk"),
        "×",
        10,
    ),
    Target(
        "SendMessage, memory:// vs bare aiohttp (per CPU-s)",
        lambda f: per_cpu_ratio(f, "gateway-memory", "bare-aiohttp"),
        "×",
        0.3,
    ),
    Target(
        "SendMessage, PostgreSQL vs SQLite (per CPU-s)",
        lambda f: per_cpu_ratio(f, "gateway-postgres", "gateway-sqlite"),
        "×",
        0.8,
    ),
    Target(
        "DynamoDB (moto): gateway CPU per blocking send",
        lambda f: v / 1000 if (v := dynamodb(f, "gateway_cpu_us")) is not None else None,
        " ms",
        2,
        False,
    ),
    Target(
        "DynamoDB (moto): store calls per blocking send",
        lambda f: dynamodb(f, "calls"),
        "",
        2,
        False,
    ),
    Target(
        "added latency per delta, 50 streams, p50",
        lambda f: streaming(f, "latency-50", "added p50 ms"),
        " ms",
        0.3,
        False,
    ),
    Target(
        "added latency per delta, 50 streams, p99",
        lambda f: streaming(f, "latency-50", "added p99 ms"),
        " ms",
        2,
        False,
    ),
    Target(
        "deltas per CPU-second through the OpenAI-chat bridge, 1 stream",
        lambda f: deltas_per_core(f, "chat-1"),
        "",
        30_000,
    ),
    Target(
        "deltas per CPU-second through the OpenAI-chat bridge, 100 streams",
        lambda f: deltas_per_core(f, "chat-100"),
        "",
        30_000,
    ),
    Target(
        "first delta of 100 streams started at once, p50",
        lambda f: streaming(f, "echo-100", "first delta p50 ms"),
        " ms",
        50,
        False,
    ),
    Target(
        "a client slower than its stream: the whole text (1 = yes)",
        lambda f: streaming(f, "slow-client", "whole text"),
        "",
        1,
    ),
    Target(
        "idle open streams: RSS per stream", lambda f: idle(f, "KB per stream"), " KB", 20, False
    ),
    Target(
        "idle open streams: errors",
        lambda f: (
            sum(v)
            if None not in (v := [idle(f, "open errors"), idle(f, "stream errors")])
            else None
        ),
        "",
        0,
        False,
    ),
    Target(
        "idle open streams: longest keepalive gap (every 5 s)",
        lambda f: idle(f, "max keepalive gap s"),
        " s",
        5.5,
        False,
    ),
    Target("import + build_app CPU (SQLite)", import_and_build_ms, " ms", 150, False),
    Target(
        "RSS of an idle gateway (SQLite)",
        lambda f: cold_start(f, "sqlite", "rss_mb"),
        " MB",
        50,
        False,
    ),
]


def summary(figures: Figures, skipped: dict[str, str], options: argparse.Namespace) -> str:
    machine = next(
        (f["machine"] for f in figures.values() if isinstance(f, dict) and f.get("machine")), ""
    )
    lines = [
        f"Summary of `python bench/run_all.py{' --quick' if options.quick else ''}`, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit `{git_commit()}`."
        f" Machine: {machine or 'unknown'}.",
        "",
        "| figure | measured | target | |",
        "|---|---:|---|---|",
        *("| " + " | ".join(Target.row(t, figures)) + " |" for t in TARGETS),
    ]
    if skipped:
        lines += [
            "",
            "Not run: " + "; ".join(f"`{name}`: {why}" for name, why in skipped.items()) + ".",
        ]
    return "\n".join(lines)


def git_commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=BENCH_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=BENCH_DIR,
                           capture_output=True, text=True, check=False).stdout.strip()
    return (done.stdout.strip() or "unknown") + ("+changes" if dirty else "")


def write_readme(text: str) -> None:
    readme = README.read_text()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in readme and END in readme:
        head, rest = readme.split(BEGIN, 1)
        readme = head + block + rest.split(END, 1)[1]
    else:  # first time: under the title
        title, _, body = readme.partition("\n")
        readme = f"{title}\n\n{block}\n{body}"
    README.write_text(readme)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="fewer and shorter runs")
    p.add_argument("--only", help="comma list of scripts to run (default: all)")
    p.add_argument("--postgres-dsn", default=os.environ.get("A2A_TEST_POSTGRES_DSN"))
    p.add_argument("--dynamodb-endpoint", default=os.environ.get("A2A_TEST_DYNAMODB_ENDPOINT"))
    p.add_argument(
        "--write", action="store_true", help="replace the summary block of bench/README.md"
    )
    p.add_argument("--json", help="also write every script's raw figures to this file")
    options = p.parse_args()
    wanted = {n.strip() for n in options.only.split(",")} if options.only else None
    figures: Figures = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="a2a-bench-all-") as tmp:
        for script in scripts(options):
            if wanted is not None and script.name not in wanted:
                continue
            result, why = run_script(script, options.quick, Path(tmp))
            if result is None:
                skipped[script.name] = why
            else:
                figures[script.name] = result
    text = summary(figures, skipped, options)
    print()
    print(text)
    if options.json:
        Path(options.json).write_text(json.dumps(figures, indent=2))
    if options.write:
        write_readme(text)


if __name__ == "__main__":
    main()
