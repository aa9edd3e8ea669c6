"""Fuzz a running gateway with many generated hostile requests and count what went wrong.

The cases and the rules a reply must keep are those of tests/integration/test_fuzz.py
(tests/support/fuzz_requests.py): JSON-RPC and REST calls, stray paths, random protocol headers,
content encodings and credentials, on an echo endpoint that needs an API key. Unlike
the test, nothing stops at the first problem: every case runs and is counted.

    python bench/fuzz_gateway.py --cases 100000

prints the number of cases, replies with a 5xx, malformed replies (not a JSON-RPC
envelope echoing the id, not an AIP-193 error, plain text, a dropped connection),
requests that got no answer within the client timeout, tasks created without the valid
key, the HTTP statuses seen, and a few examples of each problem.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from a2a_gateway.observability.logs import configure_logging  # noqa: E402
from tests.support.fuzz_requests import Outcome, cases, gateway_thread, problems, stray_tasks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="client timeout per request (s)"
    )
    args = parser.parse_args()
    configure_logging("critical")  # a log line per request (or per error) would swamp the counts

    outcome = Outcome()
    statuses: Counter[int] = Counter()
    unsendable = [0]
    started = time.monotonic()
    with gateway_thread() as target, httpx.Client(timeout=args.timeout) as client:

        @settings(max_examples=args.cases, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(st.data())
        def each_case(data: st.DataObject) -> None:
            case = data.draw(cases(target.endpoint_id, target.key))
            try:
                response = client.request(case.method, target.base_url + case.path,
                                          headers=case.headers, content=case.body)
            except httpx.LocalProtocolError:
                unsendable[0] += 1  # httpx refuses to send it (a generated header HTTP forbids)
                return
            except httpx.TimeoutException:
                found = ["timeout: no answer"]
            except httpx.TransportError as exc:
                found = [f"malformed: connection closed without an answer ({type(exc).__name__})"]
            else:
                statuses[response.status_code] += 1
                found = problems(case, response)
            outcome.add(case, found)
            if outcome.cases % 10_000 == 0:
                print(
                    f"  {outcome.cases} cases, {time.monotonic() - started:.0f} s", file=sys.stderr
                )

        each_case()
        stray = len(stray_tasks(target))
        created = len(target.store.created)

    print(f"cases            {outcome.cases}")
    print(f"5xx              {outcome.server_errors}")
    print(f"malformed        {outcome.malformed}")
    print(f"no answer        {outcome.timeouts}")
    print(f"tasks created    {created}, without the valid key: {stray}")
    print(f"not sendable     {unsendable[0]} (refused by the client, not counted)")
    print(f"seconds          {time.monotonic() - started:.0f}")
    print("statuses         " + ", ".join(f"{code}: {n}" for code, n in sorted(statuses.items())))
    for example in outcome.examples:
        print("  " + example)


if __name__ == "__main__":
    main()
