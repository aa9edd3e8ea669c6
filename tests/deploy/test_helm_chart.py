"""deploy/helm/a2a-gateway rendered by the real helm (A2A_TEST_HELM, .ci/services/85-helm.sh):
it lints, what it renders matches the Kubernetes API schema, sets only settings the gateway
accepts, carries secrets only as references to Secrets, probes and scrapes real routes, and
wires Redis, the HPA, the PDB and the ServiceMonitor to the gateway's pods."""

from __future__ import annotations

import base64
import os
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import kubernetes_validate
import pytest
import yaml

from a2a_gateway.endpoints.file import load
from a2a_gateway.observability.logs import looks_secret
from a2a_gateway.settings import GatewaySettings
from tests.deploy.dockerfile import ROOT, stages
from tests.deploy.gateway_env import FIELDS, PREFIX, known_settings
from tests.support.harness import require_env, running_gateway

CHART = ROOT / "deploy" / "helm" / "a2a-gateway"
K8S_ENDPOINTS = ROOT / "deploy" / "k8s" / "endpoints.yaml"
KUBERNETES = "1.32"  # as tests/deploy/test_manifests.py
RELEASE = "edge"
REDIS_URL = f"{PREFIX}REDIS_URL"
FULL = {  # everything on: the in-release Redis, the HPA, the ServiceMonitor, agents
    "redis": {"enabled": True},
    "autoscaling": {"enabled": True},
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "settings": {f"{PREFIX}PUBLIC_BASE_URL": "https://a2a.example.com"},
    "endpoints": yaml.safe_load(K8S_ENDPOINTS.read_text())["endpoints"],
}
FROM_EXISTING_SECRETS = {  # every secret, the Redis password and an agent's key included
    "redis": {"enabled": True, "auth": {"existingSecret": "valkey-auth"}},
    "extraEnv": [
        {
            "name": "HERMES_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "agents", "key": "hermes"}},
        }
    ],
}
CASES = {"defaults": {}, "full": FULL, "secrets": FROM_EXISTING_SECRETS}


@dataclass
class Rendered:
    """The documents ``helm template`` printed."""

    docs: list[dict[str, Any]]
    text: str

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [doc for doc in self.docs if doc["kind"] == kind]

    def one(self, kind: str, component: str = "gateway") -> dict[str, Any]:
        (doc,) = [
            d
            for d in self.all(kind)
            if d["metadata"]["labels"].get("app.kubernetes.io/component") == component
        ]
        return doc

    def pod(self, kind: str = "Deployment", component: str = "gateway") -> dict[str, Any]:
        return self.one(kind, component)["spec"]["template"]

    def container(self, name: str = "gateway") -> dict[str, Any]:
        pods = [self.pod()["spec"]] + [
            t["spec"]["template"]["spec"] for t in self.all("StatefulSet")
        ]
        (found,) = [
            c
            for pod in pods
            for c in pod["containers"] + pod.get("initContainers", [])
            if c["name"] == name
        ]
        return found


def env_entries(container: dict[str, Any]) -> list[dict[str, Any]]:
    return container.get("env", [])


def env(container: dict[str, Any]) -> dict[str, Any]:
    """Name → literal value, or the valueFrom mapping."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env_entries(container)}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., subprocess.CompletedProcess]:
    """Runs the helm binary with its config, cache and data under a scratch directory."""
    binary = require_env("A2A_TEST_HELM")
    home = tmp_path_factory.mktemp("helm-home")
    helm_env = {
        f"HELM_{part}_HOME": str(home / part.lower()) for part in ("CONFIG", "CACHE", "DATA")
    }

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [binary, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "HOME": str(home), **helm_env},
        )

    return run


@pytest.fixture(scope="module")
def values_file(tmp_path_factory: pytest.TempPathFactory) -> Callable[[dict[str, Any]], Path]:
    folder = tmp_path_factory.mktemp("values")

    def write(values: dict[str, Any]) -> Path:
        path = folder / f"values-{len(list(folder.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(values))
        return path

    return write


@pytest.fixture(scope="module")
def render(helm, values_file) -> Callable[..., Rendered]:
    def template(values: dict[str, Any] | None = None, release: str = RELEASE) -> Rendered:
        result = helm(
            "template",
            release,
            str(CHART),
            "--namespace",
            "agents",
            "--values",
            str(values_file(values or {})),
        )
        assert result.returncode == 0, result.stderr
        docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        return Rendered(docs, result.stdout)

    return template


def refused(helm, values_file, values: dict[str, Any]) -> str:
    """What ``helm template`` says when the chart refuses ``values``."""
    result = helm("template", RELEASE, str(CHART), "--values", str(values_file(values)))
    assert result.returncode != 0, f"rendered: {values}"
    return result.stderr


@pytest.mark.parametrize("values", [{}, FULL], ids=["defaults", "full"])
def test_the_chart_lints_strictly(helm, values_file, values):
    result = helm("lint", "--strict", str(CHART), "--values", str(values_file(values)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_chart_deploys_the_project_s_version(render):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["apiVersion"] == "v2" and chart["appVersion"] == project
    image = render().container()["image"]
    assert image.endswith(f":{project}") and render().container("migrate")["image"] == image


@pytest.mark.parametrize("values", CASES.values(), ids=CASES.keys())
def test_every_rendered_resource_matches_the_api_schema(render, values):
    """Strict, as the kustomize files: a misspelt or misplaced field is an error."""
    rendered = render(values)
    for doc in rendered.docs:
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            continue  # a CRD: checked in test_the_service_monitor_scrapes_the_gateway_s_metrics
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    kinds = {doc["kind"] for doc in rendered.docs}
    assert {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget"} <= kinds
    assert ("StatefulSet" in kinds) == bool(values.get("redis", {}).get("enabled"))


@pytest.mark.parametrize("values", CASES.values(), ids=CASES.keys())
def test_every_gateway_variable_is_a_setting_and_its_value_is_accepted(render, values):
    rendered = render(values)
    for name in ("gateway", "migrate"):
        variables = env(rendered.container(name))
        if "redis_url" not in FIELDS:  # until the gateway reads it; checked by the Redis tests
            variables.pop(REDIS_URL, None)
        # $(NAME) is expanded by Kubernetes when the container starts
        literal = lambda v: isinstance(v, str) and "$(" not in v  # noqa: E731
        assert len(known_settings(f"helm {name}", variables, literal)) >= 3


def test_without_redis_the_gateway_has_no_redis_url(render):
    rendered = render()
    assert REDIS_URL not in env(rendered.container())
    assert not rendered.all("StatefulSet") and not rendered.all("Secret")
    assert [s["metadata"]["name"] for s in rendered.all("Service")] == [f"{RELEASE}-a2a-gateway"]


def test_with_redis_the_gateway_s_url_names_the_release_s_redis_and_its_password(render):
    rendered = render(FULL)
    gateway_env = env_entries(rendered.container())
    names = [e["name"] for e in gateway_env]
    url = urlsplit(env(rendered.container())[REDIS_URL])
    service = rendered.one("Service", "redis")
    (service_port,) = service["spec"]["ports"]
    server = rendered.container("redis")
    assert url.scheme == "redis" and url.hostname == service["metadata"]["name"]
    assert url.port == service_port["port"]
    assert service_port["targetPort"] == server["ports"][0]["name"]
    redis_pod = rendered.pod("StatefulSet", "redis")
    assert selects(service["spec"]["selector"], redis_pod["metadata"]["labels"])
    assert not selects(service["spec"]["selector"], rendered.pod()["metadata"]["labels"])
    # the password is a reference Kubernetes expands, to a variable defined before the URL
    assert url.password == "$(REDIS_PASSWORD)"
    assert names.index("REDIS_PASSWORD") < names.index(REDIS_URL)
    password_ref = env(rendered.container())["REDIS_PASSWORD"]["secretKeyRef"]
    assert env(server)["REDIS_PASSWORD"]["secretKeyRef"] == password_ref
    assert server["args"][server["args"].index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    (secret,) = rendered.all("Secret")
    assert secret["metadata"]["name"] == password_ref["name"]
    password = base64.b64decode(secret["data"][password_ref["key"]]).decode()
    assert len(password) >= 32 and password.isalnum()  # URL-safe, so it can sit in the URL
    assert rendered.text.count(password) == 0  # only its base64 form, only in the Secret
    assert rendered.text.count(secret["data"][password_ref["key"]]) == 1


def test_an_external_redis_is_a_url_or_a_secret_reference(render):
    elasticache = "rediss://master.gw.abc123.euc1.cache.amazonaws.com:6379/0"
    rendered = render({"redis": {"url": elasticache}})
    assert env(rendered.container())[REDIS_URL] == elasticache
    rendered = render({"redis": {"existingSecret": "elasticache", "existingSecretKey": "url"}})
    assert env(rendered.container())[REDIS_URL] == {
        "secretKeyRef": {"name": "elasticache", "key": "url"}
    }
    assert not rendered.all("StatefulSet") and not rendered.all("Secret")


def test_no_secret_value_is_rendered_when_secrets_come_from_existing_secrets(render):
    rendered = render(FROM_EXISTING_SECRETS)
    assert not rendered.all("Secret")
    secret_names = {"REDIS_PASSWORD", f"{PREFIX}STORE"}
    for container in ("gateway", "migrate", "redis"):
        for name, value in env(rendered.container(container)).items():
            if looks_secret(name) or name in secret_names:
                assert isinstance(value, dict) and "secretKeyRef" in value, f"{container}: {name}"
    references = {
        (v["secretKeyRef"]["name"], v["secretKeyRef"]["key"])
        for v in env(rendered.container()).values()
        if isinstance(v, dict) and "secretKeyRef" in v
    }
    assert references == {
        ("a2a-gateway", "store"),
        ("a2a-gateway", "api-key-secret"),
        ("a2a-gateway", "page-token-key"),
        ("valkey-auth", "redis-password"),
        ("agents", "hermes"),
    }


def test_the_chart_refuses_credentials_in_values(helm, values_file):
    assert "redis.url holds a password" in refused(
        helm, values_file, {"redis": {"url": "rediss://gw:hunter2@cache.example.com:6379"}}
    )
    assert "settings.A2A_GATEWAY_STORE holds a password" in refused(
        helm,
        values_file,
        {
            "secretKeys": {f"{PREFIX}STORE": None},
            "settings": {f"{PREFIX}STORE": "postgresql://a2a:hunter2@db/a2a"},
        },
    )
    assert "set one of them" in refused(
        helm, values_file, {"redis": {"enabled": True, "url": "redis://cache:6379"}}
    )


def test_a_dynamodb_store_needs_no_secret(render):
    store = "dynamodb://?region=eu-central-1&table_prefix=a2a-"
    rendered = render(
        {
            "secretKeys": {f"{PREFIX}STORE": None},
            "settings": {f"{PREFIX}STORE": store},
            "serviceAccount": {
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/gw"}
            },
        }
    )
    assert env(rendered.container())[f"{PREFIX}STORE"] == store
    (account,) = rendered.all("ServiceAccount")
    assert rendered.pod()["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert "eks.amazonaws.com/role-arn" in account["metadata"]["annotations"]


async def test_the_probes_and_the_port_match_the_service_and_the_gateway(render):
    rendered = render(FULL)
    container = rendered.container()
    (port,) = container["ports"]
    assert str(port["containerPort"]) == stages()[-1].env()[f"{PREFIX}PORT"]
    (service_port,) = rendered.one("Service")["spec"]["ports"]
    assert service_port["targetPort"] == port["name"]
    probes = {
        kind: container[kind]["httpGet"]
        for kind in ("readinessProbe", "livenessProbe", "startupProbe")
    }
    assert {p["port"] for p in probes.values()} == {port["name"]}
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == probes["startupProbe"]["path"] == "/healthz"
    async with running_gateway() as gw, httpx.AsyncClient(timeout=30) as http:
        for kind, probe in probes.items():
            answer = await http.get(f"{gw.base_url}{probe['path']}")
            assert answer.status_code == 200, f"{kind} {probe['path']}: {answer.status_code}"


async def test_the_service_monitor_scrapes_the_gateway_s_metrics(render):
    assert not render().all("ServiceMonitor")
    rendered = render(FULL)
    (monitor,) = rendered.all("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = [s for s in rendered.all("Service") if selects(selector, s["metadata"]["labels"])]
    assert scraped == [rendered.one("Service")]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == rendered.one("Service")["spec"]["ports"][0]["name"]
    async with running_gateway() as gw, httpx.AsyncClient(timeout=30) as http:
        answer = await http.get(f"{gw.base_url}{endpoint['path']}")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    assert "# TYPE" in answer.text


def test_the_pdb_and_the_hpa_target_the_gateway_s_pods(render):
    rendered = render(FULL)
    deployment, labels = rendered.one("Deployment"), rendered.pod()["metadata"]["labels"]
    redis_labels = rendered.pod("StatefulSet", "redis")["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], labels)
    pdb = rendered.all("PodDisruptionBudget")[0]["spec"]
    assert selects(pdb["selector"]["matchLabels"], labels)
    assert not selects(pdb["selector"]["matchLabels"], redis_labels)
    assert selects(rendered.one("Service")["spec"]["selector"], labels)
    assert not selects(rendered.one("Service")["spec"]["selector"], redis_labels)
    (hpa,) = rendered.all("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert pdb["minAvailable"] < hpa["spec"]["minReplicas"]
    assert "replicas" not in deployment["spec"], "the HPA, not each upgrade, sets the replicas"
    defaults = render()
    assert not defaults.all("HorizontalPodAutoscaler")
    assert defaults.one("Deployment")["spec"]["replicas"] >= 2


def test_kubernetes_waits_longer_than_the_gateway_s_graceful_shutdown(render):
    rendered = render()
    variables = env(rendered.container())
    grace = float(variables[f"{PREFIX}SHUTDOWN_GRACE_SECONDS"])
    settings = GatewaySettings(shutdown_grace_seconds=grace)
    pre_stop = rendered.container()["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    spec = rendered.pod()["spec"]
    assert spec["terminationGracePeriodSeconds"] > (
        float(pre_stop[1]) + grace + settings.shutdown_close_seconds
    )


def test_no_service_link_variable_reaches_the_gateway_s_settings(render):
    """Kubernetes gives pods NAME_PORT=tcp://... for each Service; for a Service named
    a2a-gateway that is A2A_GATEWAY_PORT, a setting the gateway refuses in that form."""
    rendered = render(release="a2a-gateway")
    service = rendered.one("Service")["metadata"]["name"]
    link = f"{service.upper().replace('-', '_')}_PORT"
    assert link == f"{PREFIX}PORT"
    with pytest.raises(ValueError):
        GatewaySettings(**{link.removeprefix(PREFIX).lower(): "tcp://10.0.0.7:80"})
    assert rendered.pod()["spec"]["enableServiceLinks"] is False
    assert render(FULL).pod("StatefulSet", "redis")["spec"]["enableServiceLinks"] is False


def test_the_endpoints_configmap_is_mounted_where_the_gateway_reads_it(render, tmp_path):
    rendered = render(FULL)
    (configmap,) = rendered.all("ConfigMap")
    (volume,) = [v for v in rendered.pod()["spec"]["volumes"] if v["name"] == "endpoints"]
    (mount,) = [m for m in rendered.container()["volumeMounts"] if m["name"] == "endpoints"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert (
        env(rendered.container())[f"{PREFIX}ENDPOINTS_FILE"]
        == f"{mount['mountPath']}/endpoints.yaml"
    )
    (tmp_path / "endpoints.yaml").write_text(configmap["data"]["endpoints.yaml"])
    assert [row.name for row in load(tmp_path / "endpoints.yaml", GatewaySettings())] == ["Echo"]
    checksum = "checksum/endpoints"
    assert (
        rendered.pod()["metadata"]["annotations"][checksum]
        != (render().pod()["metadata"]["annotations"][checksum])
    ), "a new endpoints file rolls the pods"


def test_every_container_runs_unprivileged_with_limits(render):
    rendered = render(FULL)
    user = stages()[-1].all("USER")[-1]
    assert str(rendered.pod()["spec"]["securityContext"]["runAsUser"]) == user
    for kind, component in (("Deployment", "gateway"), ("StatefulSet", "redis")):
        spec = rendered.pod(kind, component)["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in spec["containers"] + spec.get("initContainers", []):
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, container["name"]
            assert security["readOnlyRootFilesystem"] is True, container["name"]
            assert security["capabilities"]["drop"] == ["ALL"], container["name"]
            assert {"requests", "limits"} <= set(container["resources"]), container["name"]
            image, _, tag = container["image"].rpartition(":")
            assert image and tag[0].isdigit(), f"{container['name']}: pin a version"
