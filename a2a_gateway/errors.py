"""Gateway errors that are not A2A protocol errors, and how each goes on the wire.

    Error                        HTTP  REST status       JSON-RPC  ErrorInfo reason
    EndpointNotFoundError        404   NOT_FOUND         -32601    METHOD_NOT_FOUND
    EndpointMisconfiguredError   503   UNAVAILABLE       -32603    INTERNAL_ERROR
    UnauthenticatedError         401   UNAUTHENTICATED   -32600    INVALID_REQUEST
    RateLimitedError             429   RESOURCE_EXHAUSTED -32600   INVALID_REQUEST
    QuotaExceededError           429*  RESOURCE_EXHAUSTED -32600   INVALID_REQUEST
    StoreUnavailableError        503   UNAVAILABLE       -32603    INTERNAL_ERROR
    GatewayStoppingError         503   UNAVAILABLE       -32603    INTERNAL_ERROR
    request body over the limit  413   INVALID_ARGUMENT  -32600    INVALID_REQUEST

(*) 403 for a limit no window resets (``concurrent_tasks``): waiting for a time does not help.

An unknown or disabled endpoint is JSON-RPC's "method not found": nothing at this URL
serves the method, which is what -32601 means (and the a2a-sdk maps it to HTTP 404,
``NOT_FOUND``, too). A client stops calling that URL. A misconfigured endpoint and a
store outage are the server's fault and may pass (an operator fixes the row, the
database comes back): ``UNAVAILABLE`` and HTTP 503 say "retry later", the message says
why; -32603 is the only JSON-RPC code for that (A2A defines none). StoreUnavailableError
lives in ``stores.base``; it also sends ``Retry-After``. The middleware writes these.

A missing or invalid credential is HTTP 401 with ``WWW-Authenticate`` (RFC 9110 §11.6.1);
A2A defines no JSON-RPC code for it, and the request as sent is one this endpoint does not
take, so the body says -32600 with the reason.

Protocol errors are the a2a-sdk's ``A2AError`` classes, mapped by the SDK's tables.
"""

from __future__ import annotations

from a2a.utils.errors import A2AError, InternalError, InvalidRequestError, MethodNotFoundError


class GatewayError(Exception):
    http_status = 500
    status = "INTERNAL"
    """google.rpc status name of the REST error body."""
    a2a_error: type[A2AError] = InternalError
    """The A2A error whose JSON-RPC code and ErrorInfo reason it is sent with."""
    message = "gateway error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.message)
        self.message = message or self.message

    def as_a2a_error(self) -> A2AError:
        return self.a2a_error(self.message)

    def headers(self) -> dict[str, str]:
        """HTTP headers the error response carries."""
        return {}


class EndpointNotFoundError(GatewayError):
    http_status = 404
    status = "NOT_FOUND"
    a2a_error = MethodNotFoundError
    message = "endpoint not found"


class EndpointMisconfiguredError(GatewayError):
    http_status = 503
    status = "UNAVAILABLE"
    message = "endpoint is misconfigured"


class UnauthenticatedError(GatewayError):
    http_status = 401
    status = "UNAUTHENTICATED"
    a2a_error = InvalidRequestError
    message = "this endpoint needs credentials"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="a2a-gateway"'}


class GatewayStoppingError(GatewayError):
    """The gateway instance shuts down: new work goes to another one (``Retry-After``)."""

    http_status = 503
    status = "UNAVAILABLE"
    message = "this gateway instance is shutting down; retry on another one"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class RateLimitedError(GatewayError):
    """The caller's rate limit is spent; ``Retry-After`` says when to come back."""

    http_status = 429
    status = "RESOURCE_EXHAUSTED"
    a2a_error = InvalidRequestError
    message = "rate limit exceeded"

    def __init__(self, message: str | None = None, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class QuotaExceededError(GatewayError):
    """A key's or an endpoint's quota (``governance.limits``) refuses a new task. With a
    window that resets, ``Retry-After`` says when (HTTP 429); without one, HTTP 403."""

    status = "RESOURCE_EXHAUSTED"
    a2a_error = InvalidRequestError
    message = "quota exceeded"

    def __init__(self, message: str, *, limit: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        """The name of the limit that refused."""
        self.retry_after = retry_after
        self.http_status = 429 if retry_after is not None else 403

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}

