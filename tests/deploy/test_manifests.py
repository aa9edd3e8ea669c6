"""deploy/compose.yaml and deploy/k8s/: they parse, name only settings the gateway knows (with
values it accepts), keep secrets out of the files, probe real routes, and give the gateway
time to shut down gracefully before the orchestrator kills it."""

from __future__ import annotations

import re
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from a2a_gateway.endpoints.file import load
from a2a_gateway.observability.logs import looks_secret
from a2a_gateway.settings import GatewaySettings
from tests.deploy.dockerfile import ROOT, stages
from tests.deploy.gateway_env import FIELDS, PREFIX, known_settings
from tests.support.harness import running_gateway

DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
KUBERNETES = "1.32"  # the oldest Kubernetes these manifests are for
INTERPOLATION = re.compile(r"^\$\{(\w+):\?[^}]+\}$")  # compose: required, no default


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def kustomization() -> dict[str, Any]:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def k8s_resources() -> dict[str, dict[str, Any]]:
    """The kustomization's resources by kind."""
    docs = [yaml.safe_load((K8S / name).read_text()) for name in kustomization()["resources"]]
    return {doc["kind"]: doc for doc in docs}


def pod() -> dict[str, Any]:
    return k8s_resources()["Deployment"]["spec"]["template"]["spec"]


def gateway_container() -> dict[str, Any]:
    (container,) = [c for c in pod()["containers"] if c["name"] == "gateway"]
    return container


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    return dict(item.split("=", 1) for item in env) if isinstance(env, list) else env


def k8s_settings_literals() -> dict[str, str]:
    (settings,) = [
        g for g in kustomization()["configMapGenerator"] if g["name"] == "a2a-gateway-settings"
    ]
    return dict(item.split("=", 1) for item in settings["literals"])


def k8s_env(container: dict[str, Any]) -> dict[str, Any]:
    """Name → literal value, or the valueFrom mapping."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def every_env() -> list[tuple[str, str, Any]]:
    """(where, name, value) for every variable the deployment files set."""
    found = [("Dockerfile", k, v) for stage in stages() for k, v in stage.env().items()]
    for name, service in compose()["services"].items():
        found += [(f"compose {name}", k, v) for k, v in compose_env(service).items()]
    found += [("k8s settings ConfigMap", k, v) for k, v in k8s_settings_literals().items()]
    for container in pod()["containers"] + pod().get("initContainers", []):
        found += [(f"k8s {container['name']}", k, v) for k, v in k8s_env(container).items()]
    return found


def test_every_gateway_variable_is_a_setting_and_its_value_is_accepted():
    places: dict[str, dict[str, Any]] = {}
    for where, name, value in every_env():
        places.setdefault(where, {})[name] = value
    literal = lambda value: isinstance(value, str) and not INTERPOLATION.match(value)  # noqa: E731
    checked = sum(len(known_settings(where, env, literal)) for where, env in places.items())
    assert checked >= 10


def test_pods_get_no_service_link_variables_that_would_read_as_settings():
    """Kubernetes gives a pod ``<SERVICE>_PORT=tcp://…`` for each Service unless told not to;
    for the Service ``a2a-gateway`` that is ``A2A_GATEWAY_PORT``, the gateway's port setting."""
    service = k8s_resources()["Service"]["metadata"]["name"]
    assert service.upper().replace("-", "_") == "A2A_GATEWAY"  # the clash exists...
    assert pod()["enableServiceLinks"] is False  # ...and the pod turns the variables off


def test_secrets_are_references_never_values():
    for where, name, value in every_env():
        if not looks_secret(name):
            continue
        if where.startswith("compose"):
            assert isinstance(value, str) and INTERPOLATION.match(value), (
                f"{where}: {name} is a literal"
            )
        else:
            assert isinstance(value, dict) and "secretKeyRef" in value, (
                f"{where}: {name} is not a Secret reference"
            )
    for where, name, value in every_env():
        if name == f"{PREFIX}STORE" and isinstance(value, str):
            assert not re.search(r"://[^/@]*:[^/@]*@", value), (
                f"{where}: the store URL holds a password"
            )
    example = (DEPLOY / ".env.example").read_text()
    assert all(
        line.endswith("=") for line in example.splitlines() if line and not line.startswith("#")
    )


def test_compose_migrates_before_any_gateway_and_scales_out_behind_the_proxy():
    services = compose()["services"]
    migrate = services["migrate"]
    assert migrate["command"][0] == "migrate"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    gateways = [name for name, s in services.items() if s.get("command", ["serve"])[0] == "serve"
                and s.get("image") == migrate["image"] and name != "migrate"]
    assert sorted(gateways) == ["gateway", "gateway-2"]
    store = migrate["command"][migrate["command"].index("--store") + 1]
    for name in gateways:
        service = services[name]
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert compose_env(service)[f"{PREFIX}STORE"] == store, f"{name} serves the migrated store"
    assert services["gateway-2"]["profiles"] == ["scale"] and services["proxy"]["profiles"] == [
        "scale"
    ]
    assert set(services["proxy"]["depends_on"]) == {"gateway", "gateway-2"}
    nginx = (DEPLOY / "nginx.conf").read_text()
    assert set(re.findall(r"server (\S+):8080;", nginx)) == set(gateways)
    assert "proxy_buffering off;" in nginx
    read_timeout = int(re.search(r"proxy_read_timeout (\d+)s;", nginx)[1])
    assert read_timeout >= 600, "an SSE stream outlives a short proxy read timeout"


def test_compose_and_the_configmap_carry_an_endpoints_file_the_gateway_loads():
    source, target = compose()["services"]["gateway"]["volumes"][0].split(":")[:2]
    assert compose_env(compose()["services"]["gateway"])[f"{PREFIX}ENDPOINTS_FILE"] == target
    assert (DEPLOY / source).resolve() == K8S / "endpoints.yaml"
    (mount,) = [m for m in gateway_container()["volumeMounts"] if m["name"] == "endpoints"]
    (volume,) = [v for v in pod()["volumes"] if v["name"] == "endpoints"]
    generated = {g["name"]: g for g in kustomization()["configMapGenerator"]}
    assert generated[volume["configMap"]["name"]]["files"] == ["endpoints.yaml"]
    assert (
        k8s_env(gateway_container())[f"{PREFIX}ENDPOINTS_FILE"]
        == f"{mount['mountPath']}/endpoints.yaml"
    )
    assert [row.name for row in load(K8S / "endpoints.yaml", GatewaySettings())] == ["Echo"]


def test_every_configmap_and_secret_the_pod_uses_is_generated_or_documented():
    generated = {g["name"] for g in kustomization()["configMapGenerator"]}
    container = gateway_container()
    used_maps = {
        ref["configMapRef"]["name"] for ref in container.get("envFrom", []) if "configMapRef" in ref
    }
    used_maps |= {v["configMap"]["name"] for v in pod()["volumes"] if "configMap" in v}
    assert used_maps <= generated
    secret_keys = {(v["secretKeyRef"]["name"], v["secretKeyRef"]["key"])
                   for c in pod()["containers"] + pod()["initContainers"]
                   for v in k8s_env(c).values() if isinstance(v, dict) and "secretKeyRef" in v}
    readme = (DEPLOY / "README.md").read_text()
    for name, key in secret_keys:
        assert re.search(
            rf"kubectl create secret generic {name} [^`]*--from-literal={key}=", readme, re.S
        ), f"deploy/README.md shows how to create secret {name} with key {key}"


async def test_the_probes_and_the_port_are_the_gateway_s():
    container = gateway_container()
    (port,) = container["ports"]
    assert str(port["containerPort"]) == stages()[-1].env()[f"{PREFIX}PORT"]
    probes = {
        kind: container[kind]["httpGet"]
        for kind in ("readinessProbe", "livenessProbe", "startupProbe")
    }
    assert (
        probes["readinessProbe"]["path"] == "/readyz"
        and probes["livenessProbe"]["path"] == "/healthz"
    )
    assert {p["port"] for p in probes.values()} == {port["name"]}
    async with running_gateway() as gw, httpx.AsyncClient(timeout=30) as http:
        for kind, probe in probes.items():
            answer = await http.get(f"{gw.base_url}{probe['path']}")
            assert answer.status_code == 200, f"{kind} {probe['path']}: {answer.status_code}"


def test_kubernetes_waits_longer_than_the_gateway_s_graceful_shutdown():
    spec = pod()
    env = {**k8s_settings_literals(), **k8s_env(gateway_container())}
    gateway = {name.removeprefix(PREFIX).lower(): value for name, value in env.items()
               if isinstance(value, str) and name.removeprefix(PREFIX).lower() in FIELDS}
    settings = GatewaySettings(**gateway)
    grace = float(env[f"{PREFIX}SHUTDOWN_GRACE_SECONDS"])
    close = settings.shutdown_close_seconds
    assert settings.shutdown_grace_seconds == grace
    pre_stop = gateway_container()["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert spec["terminationGracePeriodSeconds"] > float(pre_stop[1]) + grace + close
    services = compose()["services"]
    compose_grace = float(compose_env(services["gateway"])[f"{PREFIX}SHUTDOWN_GRACE_SECONDS"])
    assert int(services["gateway"]["stop_grace_period"].removesuffix("s")) > compose_grace + close


def test_several_replicas_that_scale_and_survive_disruptions():
    resources = k8s_resources()
    deployment, labels = resources["Deployment"], pod_labels()
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert resources["Service"]["spec"]["selector"].items() <= labels.items()
    assert (
        resources["Service"]["spec"]["ports"][0]["targetPort"]
        == gateway_container()["ports"][0]["name"]
    )
    assert (
        resources["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items()
        <= labels.items()
    )
    hpa = resources["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert 2 <= hpa["minReplicas"] < hpa["maxReplicas"]
    assert resources["PodDisruptionBudget"]["spec"]["minAvailable"] < hpa["minReplicas"]
    for container in pod()["containers"] + pod()["initContainers"]:
        assert {"requests", "limits"} <= set(container["resources"]), container["name"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod()["securityContext"]["runAsNonRoot"] is True


def pod_labels() -> dict[str, str]:
    return k8s_resources()["Deployment"]["spec"]["template"]["metadata"]["labels"]


def test_every_image_is_pinned():
    for name, service in compose()["services"].items():
        image, _, tag = service["image"].partition(":")
        assert tag and tag != "latest", f"compose {name}: {service['image']}"
        assert "build" in service or tag[0].isdigit(), f"compose {name}: pin a version, not {tag}"
    for image in kustomization()["images"]:
        assert image["newTag"][0].isdigit(), image


@pytest.mark.parametrize("name", kustomization()["resources"])
def test_each_kubernetes_resource_matches_the_api_schema(name: str):
    """Strict: a misspelt or misplaced field is an error, not silently dropped by the API."""
    kubernetes_validate.validate(yaml.safe_load((K8S / name).read_text()), KUBERNETES, strict=True)


def test_the_generated_configmaps_match_the_api_schema():
    for generator in kustomization()["configMapGenerator"]:
        data = dict(item.split("=", 1) for item in generator.get("literals", []))
        data |= {file: (K8S / file).read_text() for file in generator.get("files", [])}
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": generator["name"]},
            "data": data,
        }
        kubernetes_validate.validate(configmap, KUBERNETES, strict=True)
