"""What of a backend's secrets and addresses a reader may see: secrets replaced by stars,
URLs without their credentials and query."""

from __future__ import annotations

import re
from collections.abc import Iterable

_USERINFO = re.compile(r"(?<=://)[^/?#@]*@")


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def shown_url(url: str) -> str:
    """``url`` as a caller may read it: without ``user:password@`` and the query, which may
    carry credentials."""
    return _USERINFO.sub("", url).partition("?")[0].partition("#")[0]
