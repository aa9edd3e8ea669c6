"""deploy/Dockerfile read as data: its stages, each a list of (INSTRUCTION, arguments), and
its ENV values; enough of the Dockerfile syntax for the recipe this project writes."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str = ""
    steps: list[tuple[str, str]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The stage's ENV values (``K=V`` pairs, unexpanded)."""
        values: dict[str, str] = {}
        for instruction, args in self.steps:
            if instruction == "ENV":
                values.update(pair.split("=", 1) for pair in shlex.split(args))
        return values

    def all(self, instruction: str) -> list[str]:
        return [args for name, args in self.steps if name == instruction]


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    result = []
    for line in logical:
        instruction, _, args = line.strip().partition(" ")
        result.append((instruction.upper(), " ".join(args.split())))
    return result


def stages(path: Path = DOCKERFILE) -> list[Stage]:
    found: list[Stage] = []
    for instruction, args in instructions(path.read_text()):
        if instruction == "FROM":
            base, _, name = args.partition(" AS ")
            found.append(Stage(base=base.strip(), name=name.strip()))
        else:
            found[-1].steps.append((instruction, args))
    return found
