"""k8s/: both overlays render with `kubectl kustomize`, and the rendered objects are what an operator can run."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.cli.main import SERVICES
from sim.infra import nats_server_binary

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ("dev", "prod")
SIMULATORS = {"vast-sim": ["sim", "vast"], "ollama-sim": ["sim", "ollama"]}
WORKLOADS = ("Deployment", "StatefulSet")
SECRET_LIKE = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|CREDENTIALS", re.IGNORECASE)

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl not installed: the kustomize overlays cannot be rendered"
)


@functools.cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "k8s" / "overlays" / overlay)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def objects(overlay: str, kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in rendered(overlay) if doc["kind"] == kind}


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


def config_data(overlay: str, prefix: str) -> dict[str, str]:
    [config] = [cm for name, cm in objects(overlay, "ConfigMap").items() if name.startswith(prefix)]
    data: dict[str, str] = config["data"]
    return data


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_has_the_required_fields_and_a_namespace(overlay: str) -> None:
    namespace = {"dev": "fleetpilot-dev", "prod": "fleetpilot"}[overlay]
    for doc in rendered(overlay):
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], doc
        assert doc["metadata"]["namespace"] == namespace, doc["metadata"]["name"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "fleetpilot"
    kinds = {doc["kind"] for doc in rendered(overlay)}
    assert {"Deployment", "StatefulSet", "Service", "ConfigMap", "NetworkPolicy"} <= kinds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_is_a_deployment_of_the_one_image_with_its_nats_user(overlay: str) -> None:
    deployments = objects(overlay, "Deployment")
    tag = {"dev": "dev", "prod": "0.1.0"}[overlay]
    for name in SERVICES:
        assert name in deployments, f"no Deployment for service {name!r}"
        [container] = containers(deployments[name])
        assert container["image"] == f"fleetpilot:{tag}"
        assert container["args"] == ["run", name]
        env = env_of(container)
        assert env["FLEETPILOT_NATS_USER"]["value"] == name
        secret = env["FLEETPILOT_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert secret == {"name": "fleetpilot-nats", "key": f"{name}-password"}
        assert container["envFrom"][0]["configMapRef"]["name"].startswith("fleetpilot-config-")
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == "/health", (name, probe)
            assert container[probe]["httpGet"]["port"] == "http"
        template = deployments[name]["spec"]["template"]["metadata"]["annotations"]
        assert template["prometheus.io/scrape"] == "true" and template["prometheus.io/port"] == "8000"
    assert deployments["decider"]["spec"]["replicas"] == 2


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_pinned_probed_bounded_and_unprivileged(overlay: str) -> None:
    for kind in WORKLOADS:
        for name, workload in objects(overlay, kind).items():
            pod = workload["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True, name
            assert pod["securityContext"]["runAsUser"] != 0, name
            assert pod.get("automountServiceAccountToken") is False, name
            for container in containers(workload):
                image = container["image"]
                assert ":" in image and not image.endswith(":latest"), f"{name}: unpinned image {image}"
                assert "readinessProbe" in container and "livenessProbe" in container, name
                for bound in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(container["resources"][bound]), (name, bound)
                security = container["securityContext"]
                assert security["readOnlyRootFilesystem"] is True, name
                assert security["allowPrivilegeEscalation"] is False, name
                assert security["capabilities"]["drop"] == ["ALL"], name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_value_is_written_in_the_manifests(overlay: str) -> None:
    assert objects(overlay, "Secret") == {}, "Secrets are created by the operator, never rendered from the repo"
    for kind in WORKLOADS:
        for name, workload in objects(overlay, kind).items():
            for container in containers(workload):
                for variable, item in env_of(container).items():
                    if SECRET_LIKE.search(variable):
                        assert "value" not in item, f"{name}: {variable} is set in plain text"
                        assert "secretKeyRef" in item["valueFrom"], f"{name}: {variable} not from a Secret"
    for config in objects(overlay, "ConfigMap").values():
        for key in config["data"]:
            if key.endswith(".conf"):
                continue
            assert not SECRET_LIKE.search(key), f"{key} belongs in a Secret"
    vast_key = {
        item["valueFrom"]["secretKeyRef"]["name"]
        for workload in objects(overlay, "Deployment").values()
        for container in containers(workload)
        for variable, item in env_of(container).items()
        if variable == "FLEETPILOT_VAST_API_KEY"
    }
    assert vast_key == {"fleetpilot-vast"}


def test_only_the_provisioner_is_given_the_vast_key() -> None:
    holders = [
        name
        for name, workload in objects("prod", "Deployment").items()
        for container in containers(workload)
        if "FLEETPILOT_VAST_API_KEY" in env_of(container)
    ]
    assert holders == ["provisioner"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_nats_is_a_three_node_jetstream_cluster_with_volumes_and_routes(overlay: str, tmp_path: Path) -> None:
    nats = objects(overlay, "StatefulSet")["nats"]
    spec = nats["spec"]
    assert spec["replicas"] == 3
    [claim] = spec["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"]
    headless = objects(overlay, "Service")[spec["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    assert {port["port"] for port in headless["spec"]["ports"]} >= {4222, 6222}
    config = config_data(overlay, "nats-config-")
    for ordinal in range(3):
        assert f"nats://nats-{ordinal}.{spec['serviceName']}:6222" in config["nats.conf"]
    assert config["auth.conf"] == (REPO / "deploy" / "nats" / "auth.conf").read_text(), (
        "k8s/base/nats/auth.conf must be an exact copy of deploy/nats/auth.conf"
    )

    # the rendered config is one nats-server accepts, with the passwords the StatefulSet passes it
    [container] = containers(nats)
    env = {"POD_NAME": "nats-0"}
    for variable, item in env_of(container).items():
        if variable.endswith("_PASSWORD"):
            assert item["valueFrom"]["secretKeyRef"]["name"] == "fleetpilot-nats"
            env[variable] = f"p{variable.lower()}"
    for name, text in config.items():
        (tmp_path / name).write_text(text)
    result = subprocess.run(
        [nats_server_binary(), "-c", str(tmp_path / "nats.conf"), "-t"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_deny_by_default_and_keep_redis_to_the_services(overlay: str) -> None:
    policies = objects(overlay, "NetworkPolicy")
    default = policies["default-deny-ingress"]["spec"]
    assert default["podSelector"] == {} and default["policyTypes"] == ["Ingress"] and "ingress" not in default
    [redis_rule] = policies["redis"]["spec"]["ingress"]
    assert redis_rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "service"}}}]
    cluster_rules = [rule for rule in policies["nats"]["spec"]["ingress"] if {"port": 6222} in rule.get("ports", [])]
    assert cluster_rules[0]["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "nats"}}}]


def test_prod_points_at_real_vast_and_an_ollama_host_without_simulators() -> None:
    config = config_data("prod", "fleetpilot-config-")
    assert config["FLEETPILOT_VAST_API_URL"] == "https://console.vast.ai"
    assert config["FLEETPILOT_OLLAMA_HOST"].startswith("http") and "sim" not in config["FLEETPILOT_OLLAMA_HOST"]
    assert not set(SIMULATORS) & set(objects("prod", "Deployment"))


def test_dev_runs_the_simulators_and_points_at_them() -> None:
    deployments = objects("dev", "Deployment")
    services = objects("dev", "Service")
    for name, args in SIMULATORS.items():
        [container] = containers(deployments[name])
        assert container["args"][:2] == args
        assert services[name]["spec"]["ports"][0]["targetPort"] == "http"
    config = config_data("dev", "fleetpilot-config-")
    assert config["FLEETPILOT_VAST_API_URL"] == f"http://vast-sim:{services['vast-sim']['spec']['ports'][0]['port']}"
    ollama_port = services["ollama-sim"]["spec"]["ports"][0]["port"]
    assert config["FLEETPILOT_OLLAMA_HOST"] == f"http://ollama-sim:{ollama_port}"
