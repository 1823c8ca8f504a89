"""k8s/: both overlays render with `kubectl kustomize`, and the rendered objects are what an operator can run."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.cli.service_apps import SERVICES
from sim.infra import RedisServer, nats_server_binary
from tests.deploy.k8s_copies import MONITORING, stale_copies
from tests.deploy.tools import require_tool
from tests.security.pki import TestAuthority

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ("dev", "prod")
SIMULATORS = {"vast-sim": ["sim", "vast"], "ollama-sim": ["sim", "ollama"]}
WORKLOADS = ("Deployment", "StatefulSet")
SECRET_LIKE = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|CREDENTIALS", re.IGNORECASE)

# the prod overlay's image: a placeholder for the operator's own registry (k8s/overlays/prod/kustomization.yaml)
PROD_IMAGE = "registry.example.com/fleetpilot:0.1.0"
WITH_MONITORING = "prod+monitoring"


def kustomize(directory: Path) -> tuple[dict[str, Any], ...]:
    kubectl = require_tool("kubectl")
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


@functools.cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    if overlay == WITH_MONITORING:
        return prod_with_monitoring()
    return kustomize(REPO / "k8s" / "overlays" / overlay)


def prod_with_monitoring() -> tuple[dict[str, Any], ...]:
    """The prod overlay with the optional component, as an operator adds it (kustomize wants relative paths)."""
    with tempfile.TemporaryDirectory() as directory:
        k8s = os.path.relpath(REPO / "k8s", directory)
        overlay = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": "fleetpilot",
            "resources": [f"{k8s}/overlays/prod"],
            "components": [f"{k8s}/components/monitoring"],
        }
        (Path(directory) / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
        return kustomize(Path(directory))


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
    image = {"dev": "fleetpilot:dev", "prod": PROD_IMAGE}[overlay]
    for name in SERVICES:
        assert name in deployments, f"no Deployment for service {name!r}"
        [container] = containers(deployments[name])
        assert container["image"] == image
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
    # prod mounts its certificates (Secret fleetpilot-nats-tls) at /etc/nats-tls: here, ones made for the test
    issued = TestAuthority("k8s-render-test-ca").issue(tmp_path / "tls")
    for name, text in config.items():
        (tmp_path / name).write_text(text.replace("/etc/nats-tls/", f"{issued.directory}/"))
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


def test_prod_names_an_image_in_a_registry_not_a_docker_hub_short_name() -> None:
    """`fleetpilot:0.1.0` would be pulled from Docker Hub, where no such image exists."""
    images = {
        container["image"] for workload in objects("prod", "Deployment").values() for container in containers(workload)
    }
    assert images == {PROD_IMAGE}
    registry = PROD_IMAGE.split("/")[0]
    assert "." in registry or ":" in registry, "the first path part must be a registry host"
    readme = (REPO / "k8s" / "README.md").read_text()
    assert "registry.example.com" in readme, "k8s/README.md documents the placeholder"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_single_writers_are_recreated_never_rolled(overlay: str) -> None:
    """demand and fleet each own their state: a rolling update would briefly run two writers."""
    deployments = objects(overlay, "Deployment")
    for name in ("demand", "fleet"):
        assert deployments[name]["spec"]["replicas"] == 1
        assert deployments[name]["spec"]["strategy"] == {"type": "Recreate"}, name


def durability_flags(argv: list[str]) -> dict[str, str]:
    return {flag: argv[argv.index(flag) + 1] for flag in ("--appendonly", "--appendfsync") if flag in argv}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_redis_is_pinned_by_digest_and_as_durable_as_in_the_tests(overlay: str, tmp_path: Path) -> None:
    [container] = containers(objects(overlay, "StatefulSet")["redis"])
    assert re.fullmatch(r"redis:[\w.-]+@sha256:[0-9a-f]{64}", container["image"]), container["image"]
    tested = durability_flags(RedisServer(data_dir=tmp_path).command())
    assert tested == {"--appendonly": "yes", "--appendfsync": "always"}
    assert durability_flags(container["args"]) == tested
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]["redis"]
    assert durability_flags(compose["command"]) == tested
    assert compose["image"] == container["image"], "compose and Kubernetes run the same Redis"


def test_monitoring_copies_match_deploy() -> None:
    assert stale_copies() == [], "run `python -m tests.deploy.k8s_copies` after changing deploy/"


def test_monitoring_component_scrapes_every_service_under_its_own_job_name() -> None:
    [monitor] = objects(WITH_MONITORING, "PodMonitor").values()
    spec = monitor["spec"]
    scraped = [
        workload
        for workload in objects(WITH_MONITORING, "Deployment").values()
        if spec["selector"]["matchLabels"].items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    ]
    jobs = {workload["spec"]["template"]["metadata"]["labels"][spec["jobLabel"]] for workload in scraped}
    assert jobs == set(SERVICES), "the alert rules select job=demand, job=fleet, ..."
    [endpoint] = spec["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics"
    for workload in scraped:
        [container] = containers(workload)
        assert endpoint["port"] in {port["name"] for port in container["ports"]}
    assert monitor["metadata"]["namespace"] == "fleetpilot"


def test_monitoring_component_carries_the_alert_rules_and_the_dashboards() -> None:
    [rule] = objects(WITH_MONITORING, "PrometheusRule").values()
    alerts = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"]
    [monitor] = objects(WITH_MONITORING, "PodMonitor").values()
    assert rule["metadata"]["labels"]["release"] == monitor["metadata"]["labels"]["release"]
    [dashboards] = [
        cm for cm in objects(WITH_MONITORING, "ConfigMap").values() if "dashboards" in cm["metadata"]["name"]
    ]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    deployed = {path.name: path.read_text() for path in (REPO / "deploy" / "grafana" / "dashboards").glob("*.json")}
    assert dashboards["data"] == deployed
    assert (MONITORING / "kustomization.yaml").exists()


def test_monitoring_is_optional() -> None:
    for overlay in OVERLAYS:
        kinds = {doc["kind"] for doc in rendered(overlay)}
        assert not kinds & {"PodMonitor", "ServiceMonitor", "PrometheusRule"}, overlay


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_bench_intake_limits_each_client_and_prod_serves_it_over_tls_only(overlay: str) -> None:
    """Rented machines post their reports and tokens from the internet: nginx caps body and rate per address, and
    prod's intake is https only, at the host the provisioner's onstart reaches."""
    intake = objects(overlay, "Ingress")["bench-intake"]
    annotations = intake["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-body-size"] == "64k"
    assert int(annotations["nginx.ingress.kubernetes.io/limit-rpm"]) > 0
    assert int(annotations["nginx.ingress.kubernetes.io/limit-connections"]) > 0
    [rule] = intake["spec"]["rules"]
    [provisioner] = containers(objects(overlay, "Deployment")["provisioner"])
    bench_url = env_of(provisioner)["FLEETPILOT_PROVISIONER_BENCH_URL"]["value"]
    assert bench_url == f"https://{rule['host']}"
    if overlay == "prod":
        assert intake["spec"]["tls"] == [{"hosts": [rule["host"]], "secretName": "bench-intake-tls"}]
        assert annotations["nginx.ingress.kubernetes.io/force-ssl-redirect"] == "true"
