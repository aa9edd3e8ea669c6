"""Gateway errors that are not A2A protocol errors, and how each goes on the wire.

    GatewayError
     ├── EndpointNotFoundError     unknown or disabled endpoint        → HTTP 404
     ├── EndpointMisconfiguredError handler not allowed/missing/invalid → HTTP 503 / JSON-RPC -32603
     └── StoreUnavailableError (stores.base)  database down, retriable → HTTP 503 / JSON-RPC -32603

Protocol errors are the a2a-sdk's ``A2AError`` classes, mapped by the SDK's tables.
"""

from __future__ import annotations


class GatewayError(Exception):
    http_status = 500
    message = "gateway error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.message)
        self.message = message or self.message


class EndpointNotFoundError(GatewayError):
    http_status = 404
    message = "endpoint not found"


class EndpointMisconfiguredError(GatewayError):
    http_status = 503
    message = "endpoint is misconfigured"
