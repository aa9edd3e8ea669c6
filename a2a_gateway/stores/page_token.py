"""ListTasks page tokens: an opaque keyset cursor (status timestamp, task id).

The token is signed with a keyed hash so a forged or altered token is rejected
rather than obeyed; the key comes from the gateway settings (one key shared by
all replicas of a deployment).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from a2a_gateway.stores.base import InvalidPageTokenError

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
        if not hmac.compare_digest(mac, hmac.new(key or _DEFAULT_KEY, body, hashlib.sha256).digest()[:12]):
            raise ValueError("bad signature")
        status_us, task_id = body.decode().split(":", 1)
        return int(status_us), task_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidPageTokenError("invalid page token") from exc
