"""Finding the SQL migration files: ``migrations/<dialect>/NNNN_name.sql``.

The top-level ``migrations/`` folder ships in the wheel as the resource package
``a2a_gateway.migrations``; a source checkout reads the folder directly.
"""

from __future__ import annotations

import importlib.resources
import re
from importlib.resources.abc import Traversable
from pathlib import Path

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_SOURCE_DIR = Path(__file__).resolve().parents[2] / "migrations"


def _root() -> Traversable:
    if _SOURCE_DIR.is_dir():
        return _SOURCE_DIR
    return importlib.resources.files("a2a_gateway.migrations")


def migration_files(dialect: str) -> list[tuple[int, str, str]]:
    """``(number, file name, sql)`` for each migration of ``dialect``, in order."""
    folder = _root() / dialect
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text()))
    return found
