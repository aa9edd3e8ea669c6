"""ListTasks page tokens: an opaque keyset cursor (status timestamp, task id), and the SQL
stores' page of an endpoint's tasks that ends at one.

The token is signed with a keyed hash so a forged or altered token is rejected
rather than obeyed; the key comes from the gateway settings (one key shared by
all replicas of a deployment).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any

from a2a.types import Task

from a2a_gateway.stores.base import EndpointTaskPage, InvalidPageTokenError, Scope

_DEFAULT_KEY = b"a2a-gateway-page-token"


def encode_page_token(status_us: int, task_id: str, key: bytes | None = None) -> str:
    """``key`` is the deployment's signing key (None: the built-in default)."""
    body = f"{status_us}:{task_id}".encode()
    mac = hmac.new(key or _DEFAULT_KEY, body, hashlib.sha256).digest()[:12]
    return base64.urlsafe_b64encode(mac + body).decode().rstrip("=")


def decode_page_token(token: str, key: bytes | None = None) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        if base64.urlsafe_b64encode(raw).decode().rstrip("=") != token:
            raise ValueError("not a canonical encoding")  # e.g. altered padding bits
        mac, body = raw[:12], raw[12:]
        if not hmac.compare_digest(
            mac, hmac.new(key or _DEFAULT_KEY, body, hashlib.sha256).digest()[:12]
        ):
            raise ValueError("bad signature")
        status_us, task_id = body.decode().split(":", 1)
        return int(status_us), task_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidPageTokenError("invalid page token") from exc


def endpoint_task_page(
    rows: Sequence[Mapping[str, Any]], endpoint_id: str, page_size: int, key: bytes | None
) -> EndpointTaskPage:
    """``list_endpoint_tasks``' page from the rows (tenant, principal, id, status_us, task) of
    a query for ``page_size + 1`` in page order: a row beyond the page means a next page."""
    page = rows[:page_size]
    token = ""
    if len(rows) > page_size and page:
        token = encode_page_token(page[-1]["status_us"], page[-1]["id"], key=key)
    tasks = [
        (Scope(r["tenant"], endpoint_id, r["principal"]), Task.FromString(r["task"])) for r in page
    ]
    return EndpointTaskPage(tasks, token)
