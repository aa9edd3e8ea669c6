"""moto in server mode, one request at a time: the DynamoDB (and Secrets Manager) emulator the
tests run against. ``.ci/services/05-moto.sh`` runs it for CI (``A2A_TEST_DYNAMODB_ENDPOINT``);
without that variable ``dynamo_support.moto_endpoint`` starts it as a child of the test run.

moto checks a ConditionExpression and then writes, without a lock, while its server answers
requests on many threads: two racing conditional updates can both succeed. Real DynamoDB
makes each write atomic, so this server serves one request at a time.

Run as ``python moto_server.py``: it listens on a free loopback port (the server picks it: no
port race) and prints the port as its first line on stdout once it accepts connections.
It imports only moto and werkzeug, so CI runs it from a venv holding moto alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server


def serialized_moto() -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """The WSGI application of moto, answering one request at a time."""
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def serialized(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:  # conditional writes become atomic, as on DynamoDB
            return list(app(environ, start_response))

    return serialized


def main() -> None:
    server = make_server(
        "127.0.0.1", 0, serialized_moto(), threaded=True, request_handler=MotoRequestHandler
    )
    print(server.server_port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
