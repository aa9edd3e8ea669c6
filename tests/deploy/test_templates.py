"""The CloudFormation templates under deploy/ pass cfn-lint (offline, the dev extra's version)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.dockerfile import ROOT

TEMPLATES = sorted(
    path for path in (ROOT / "deploy").rglob("*.yaml")
    if "AWSTemplateFormatVersion" in path.read_text() or "AWS::Serverless" in path.read_text()
)


def test_the_dynamodb_template_is_among_them():
    assert ROOT / "deploy/dynamodb/template.yaml" in TEMPLATES


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_cfn_lint_passes(template: Path):
    cfn_lint = shutil.which("cfn-lint", path=str(Path(sys.executable).parent))
    assert cfn_lint, "cfn-lint comes with the dev extra"
    done = subprocess.run(
        [cfn_lint, "--", str(template)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
