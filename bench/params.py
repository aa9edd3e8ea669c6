"""Params → protobuf: µs per request params for the three ways the gateway can read them.

    json_format    protobuf's ``json_format.ParseDict`` (``ignore_unknown_fields``)
    parse_dict     ``a2a_gateway.protojson.parse_dict``: converters per field descriptor
    parse_params   ``a2a_gateway.transport.params.parse_params``: a reader per field of
                   SendMessageRequest and GetTaskRequest (what JSON-RPC and REST call)

then the REQUIRED-field check of the parsed request: ``validate_required_fields`` (the walk)
and ``check_required_fields`` (skips the walk when the fields are plainly set), and the two
together as JSON-RPC calls them: before (``parse_dict`` + the walk) and after
(``read_params``). Each is timed on the same params in one process, interleaved round by
round; the table shows the median of ``--rounds`` rounds (each the best of 3 repeats of
``--number`` calls).

    python bench/params.py
    python bench/params.py --rounds 9 --number 20000
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from a2a.types import GetTaskRequest, SendMessageRequest  # noqa: E402
from google.protobuf import json_format  # noqa: E402

from a2a_gateway.protojson import parse_dict  # noqa: E402
from a2a_gateway.transport.params import (  # noqa: E402
    check_required_fields,
    parse_params,
    read_params,
)
from a2a_gateway.transport.required_fields import validate_required_fields  # noqa: E402

BENCH_SEND = {  # bench/wrk_send.lua's params
    "message": {"messageId": "bench-1-1", "role": "ROLE_USER", "parts": [{"text": "hello gateway"}]}
}
RICH_SEND = {
    "message": {
        "messageId": "m-1", "role": "ROLE_USER", "contextId": "ctx-1", "taskId": "t-1",
        "parts": [
            {"text": "hello", "metadata": {"lang": "en"}},
            {"raw": "aGVsbG8gZ2F0ZXdheQ==", "mediaType": "text/plain", "filename": "a.txt"},
            {"url": "https://example.com/x.png", "mediaType": "image/png"},
            {"data": {"k": [1, 2, {"z": None}], "ok": True}},
        ],
        "metadata": {"trace": "abc", "n": 3},
        "extensions": ["https://example.com/ext/1"],
        "referenceTaskIds": ["t-0"],
    },
    "configuration": {
        "acceptedOutputModes": ["text/plain"], "historyLength": 5, "returnImmediately": False,
    },
    "metadata": {"client": "bench"},
}
GET = {"id": "5b0c1c0e-8b7a-4a83-9c55-6a0e7b0b6d2a", "historyLength": 10}
CASES: list[tuple[str, type, dict[str, Any]]] = [
    ("SendMessage, the benchmark's (1 text part)", SendMessageRequest, BENCH_SEND),
    ("SendMessage, 4 parts, metadata, configuration", SendMessageRequest, RICH_SEND),
    ("GetTask, id and historyLength", GetTaskRequest, GET),
]


def parse_then_walk(data: Any, message: Any) -> Any:
    """What JSON-RPC did before ``read_params``."""
    validate_required_fields(parse_dict(data, message))
    return message


PARSERS: dict[str, Callable[[Any, Any], Any]] = {
    "json_format": lambda d, m: json_format.ParseDict(d, m, ignore_unknown_fields=True),
    "parse_dict": parse_dict,
    "parse_params": parse_params,
    "before": parse_then_walk,
    "after": read_params,
}
CHECKS: dict[str, Callable[[Any], Any]] = {
    "walk": validate_required_fields,
    "check": check_required_fields,
}


def best_of_3(call: Callable[[], Any], number: int) -> float:
    """µs per call: the best of three repeats of ``number`` calls."""
    return min(timeit.repeat(call, number=number, repeat=3)) / number * 1e6


def measure(rounds: int, number: int) -> dict[tuple[str, str], list[float]]:
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for case, model, data in CASES:
            for name, parse in PARSERS.items():
                assert parse(data, model()) == json_format.ParseDict(data, model())
                samples.setdefault((case, name), []).append(
                    best_of_3(lambda p=parse, d=data, m=model: p(d, m()), number)
                )
            parsed = parse_params(data, model())
            for name, check in CHECKS.items():
                samples.setdefault((case, name), []).append(
                    best_of_3(lambda c=check, p=parsed: c(p), number)
                )
    return samples


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--number", type=int, default=10_000, help="calls per repeat")
    args = p.parse_args()
    samples = measure(args.rounds, args.number)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"params → protobuf, µs per params, median of {args.rounds} rounds, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit}, "
          f"Python {sys.version.split()[0]}")
    names = ["json_format", "parse_dict", "parse_params", *CHECKS, "before", "after"]
    print(f"| {'params':<46} | " + " | ".join(f"{n:>12}" for n in names) + " | after/before |")
    print(f"|{'-' * 48}|" + "|".join("-" * 14 for _ in names) + "|--------------|")
    for case, _, _ in CASES:
        med = {n: statistics.median(samples[case, n]) for n in names}
        cells = " | ".join(f"{med[n]:>12.2f}" for n in names)
        print(f"| {case:<46} | {cells} | {med['after'] / med['before']:>11.2f}x |")


if __name__ == "__main__":
    main()
