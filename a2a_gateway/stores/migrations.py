"""Finding the SQL migration files: ``migrations/<dialect>/NNNN_name.sql``."""

from __future__ import annotations

import re
from pathlib import Path

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def migration_files(dialect: str) -> list[tuple[int, str, str]]:
    """``(number, file name, sql)`` for each migration of ``dialect``, in order."""
    folder = MIGRATIONS_DIR / dialect
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path.name, path.read_text()))
    return found
