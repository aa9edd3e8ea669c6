"""Every Python package of the project ships in the wheel: pyproject's package list names
each folder that holds an ``__init__.py`` (a folder left out works in a checkout and is
missing from an installed gateway, e.g. the container image)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_in_pyproject_packages() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = {name: ROOT / folder for name, folder in config.get("package-dir", {}).items()}
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("a2a_gateway", "handlers") for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found - listed == set()
    assert all((mapped.get(name, ROOT / name.replace(".", "/"))).is_dir() for name in listed)
