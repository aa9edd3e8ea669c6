"""The ``catalog`` flag of an endpoint row: a boolean beside ``public``, in the endpoints file
and in the row's metadata, never a handler setting."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from a2a_gateway.endpoints.card import in_catalog
from a2a_gateway.endpoints.file import EndpointsFileError, entry_of, load
from a2a_gateway.endpoints.registry import check_endpoint
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Endpoint

SETTINGS = GatewaySettings(store="memory://")
ECHO = {"module_name": "handlers.echo", "class_name": "EchoHandler"}
ID = "7d0c6c1e-6a57-4b8e-9d43-3f1c2a9e0b11"


def _file(tmp_path: Path, **entry: object) -> Path:
    path = tmp_path / "endpoints.yaml"
    path.write_text(yaml.safe_dump({"endpoints": [
        {"id": ID, "name": "Echo", "handler": "handlers.echo:EchoHandler", **entry}]}))
    return path


def test_rows_are_listed_unless_the_flag_is_false():
    assert in_catalog(Endpoint(id=ID, name="a", metadata=ECHO))
    assert in_catalog(Endpoint(id=ID, name="a", metadata={**ECHO, "catalog": True}))
    assert not in_catalog(Endpoint(id=ID, name="a", metadata={**ECHO, "catalog": False}))


def test_the_file_sets_the_flag_beside_public_and_exports_it(tmp_path):
    (row,) = load(_file(tmp_path, public=True, catalog=False), SETTINGS)
    assert row.metadata["catalog"] is False and not in_catalog(row)
    assert entry_of(row)["catalog"] is False
    assert "catalog" not in entry_of(row).get("settings", {})
    assert check_endpoint(row, SETTINGS).problems == []


def test_a_flag_that_is_not_a_boolean_is_a_problem_of_the_row(tmp_path):
    row = Endpoint(id=ID, name="a", metadata={**ECHO, "catalog": "no"})
    assert check_endpoint(row, SETTINGS).problems == ["catalog must be true or false"]
    with pytest.raises(EndpointsFileError, match="catalog"):
        load(_file(tmp_path, catalog="no"), SETTINGS)
