"""The settings the docs and deploy files name are the settings the gateway has.

Every ``A2A_GATEWAY_*`` variable written in README.md, HERMES_INTEGRATION.md, docs/*.md or
deploy/ must be one ``GatewaySettings`` reads (its ``env_prefix`` plus the field name, or a
field's alias), and every setting must have a row in the README's settings table.
"""

from __future__ import annotations

import re
from pathlib import Path

from a2a_gateway.settings import GatewaySettings

ROOT = Path(__file__).resolve().parents[2]
PREFIX = GatewaySettings.model_config["env_prefix"]
NESTED = GatewaySettings.model_config.get("env_nested_delimiter") or None
VARIABLE = re.compile(re.escape(PREFIX) + r"[A-Z0-9][A-Z0-9_]*")

READ_OUTSIDE_THE_MODEL = {"A2A_GATEWAY_CONFIG_FILE"}
"""Variables the gateway reads that are not settings: the config file's path
(``load_settings``)."""

LOCAL_ONLY = {".env"}
"""Files in deploy/ never committed (deploy/.gitignore)."""


def setting_variables() -> dict[str, str]:
    """Environment variable -> setting, as pydantic-settings maps them."""
    variables = {}
    for name, field in GatewaySettings.model_fields.items():
        alias = field.validation_alias if isinstance(field.validation_alias, str) else None
        variables[(alias or PREFIX + name).upper()] = name
    return variables


def is_setting(variable: str, variables: dict[str, str]) -> bool:
    if variable.endswith("_"):  # a family written as A2A_GATEWAY_GRPC_*
        return any(known.startswith(variable) for known in variables)
    if variable in variables:
        return True
    return NESTED is not None and variable.partition(NESTED)[0] in variables


def documents() -> list[Path]:
    deploy = [p for p in (ROOT / "deploy").rglob("*") if p.is_file() and p.name not in LOCAL_ONLY]
    return sorted([ROOT / "README.md", ROOT / "HERMES_INTEGRATION.md",
                   *(ROOT / "docs").glob("*.md"), *deploy])


def variables_in(text: str) -> list[tuple[int, str]]:
    """(line number, variable) of each ``A2A_GATEWAY_*`` name in ``text``."""
    return [(number, match.group())
            for number, line in enumerate(text.splitlines(), 1)
            for match in VARIABLE.finditer(line)]


def settings_table(readme: str) -> set[str]:
    """The names in the first column of the README's settings table (without the prefix)."""
    start = readme.index("| Setting | Default |")
    rows = readme[start:].split("\n\n", 1)[0].splitlines()[2:]
    return {name for row in rows for name in re.findall(r"`([A-Z0-9_]+)`", row.split("|")[1])}


def test_every_variable_the_docs_and_deploy_files_name_is_a_setting() -> None:
    variables = setting_variables()
    unknown = []
    for path in documents():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        unknown += [f"{path.relative_to(ROOT)}:{number}: {variable}"
                    for number, variable in variables_in(text)
                    if variable not in READ_OUTSIDE_THE_MODEL
                    and not is_setting(variable, variables)]
    assert not unknown, "not a setting of GatewaySettings:\n" + "\n".join(unknown)


def test_every_setting_has_a_row_in_the_readme_table() -> None:
    table = settings_table((ROOT / "README.md").read_text(encoding="utf-8"))
    documented = {PREFIX + name for name in table}
    variables = setting_variables()
    missing = sorted(set(variables) - documented)
    assert not missing, f"settings without a row in the README's settings table: {missing}"
    stale = sorted(documented - set(variables))
    assert not stale, f"README settings table rows that are no setting: {stale}"


def test_the_variables_read_outside_the_model_are_still_read() -> None:
    source = (ROOT / "a2a_gateway" / "settings.py").read_text(encoding="utf-8")
    assert all(f'"{name}"' in source for name in READ_OUTSIDE_THE_MODEL)


def test_the_checks_catch_a_typo_and_a_missing_row() -> None:
    variables = setting_variables()
    assert is_setting("A2A_GATEWAY_REPLICA_ID", variables)
    assert is_setting("A2A_GATEWAY_GRPC_", variables)
    assert not is_setting("A2A_GATEWAY_REPLICA", variables)
    assert not is_setting("A2A_GATEWAY_NO_SUCH_", variables)
    assert variables_in("x A2A_GATEWAY_STORE=y `A2A_GATEWAY_*`\nA2A_GATEWAY_PORT") == [
        (1, "A2A_GATEWAY_STORE"), (2, "A2A_GATEWAY_PORT")]
    table = "| Setting | Default | |\n|---|---|---|\n| `HOST`, `PORT` | a, `B` | `STORE` |\n\nafter"
    assert settings_table(table) == {"HOST", "PORT"}
