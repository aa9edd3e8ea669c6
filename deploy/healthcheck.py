"""Container health check: exit 0 when the gateway in this container answers ``/healthz``."""

import os
import sys
import urllib.request

PORT = os.environ.get("A2A_GATEWAY_PORT", "8080")

try:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=3) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError:
    sys.exit(1)
