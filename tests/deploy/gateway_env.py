"""The one check of what a deployment file sets for the gateway: every ``A2A_GATEWAY_*`` name
is a setting the gateway knows, and one place's values together are settings it accepts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from pydantic import ValidationError

from a2a_gateway.settings import GatewaySettings

PREFIX = "A2A_GATEWAY_"
FIELDS = set(GatewaySettings.model_fields)
NOT_FIELDS = {"config_file"}  # read by load_settings itself


def known_settings(
    where: str,
    env: Mapping[str, Any],
    literal: Callable[[Any], bool] = lambda v: isinstance(v, str),
) -> dict[str, Any]:
    """The settings ``env`` (one service, container or function) sets, by field name; fails the
    test on a name that is no setting or on literal values the gateway refuses."""
    values: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(PREFIX):
            continue
        field = name.removeprefix(PREFIX).lower()
        assert field in FIELDS | NOT_FIELDS, f"{where}: {name} is no gateway setting"
        if field in FIELDS and literal(value):
            values[field] = value
    try:
        GatewaySettings(**values)
    except ValidationError as exc:
        pytest.fail(f"{where}: {exc}")
    return values
