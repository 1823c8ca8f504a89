"""The NATS StatefulSet as rendered for both overlays: brokers spread one per node (required), the image pinned
by digest, a preStop hook that really puts nats-server into lame-duck mode, the streams created by the admin Job,
and prod's routes authenticated by certificate."""

from __future__ import annotations

import asyncio
import functools
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.infra import NatsServer, nats_server_binary
from tests.helpers import eventually

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ("dev", "prod")
DIGEST_PINNED = re.compile(r"^[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}$")

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: cannot render k8s/")


@functools.cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "k8s" / "overlays" / overlay)], capture_output=True, text=True, check=True
    )
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def one(overlay: str, kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in rendered(overlay) if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def nats_config(overlay: str) -> str:
    [config] = [d for d in rendered(overlay) if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("nats-")]
    text: str = config["data"]["nats.conf"]
    return text


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_brokers_are_spread_one_per_node_and_the_image_is_pinned_by_digest(overlay: str) -> None:
    spec = one(overlay, "StatefulSet", "nats")["spec"]["template"]["spec"]
    required = [c for c in spec["topologySpreadConstraints"] if c["whenUnsatisfiable"] == "DoNotSchedule"]
    assert required == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "nats"}},
        }
    ]
    [container] = spec["containers"]
    assert DIGEST_PINNED.match(container["image"]), container["image"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_prestop_hook_puts_nats_server_into_lame_duck_mode(overlay: str, tmp_path: Path) -> None:
    """The hook's signal command, run against a real nats-server through the pid file the config names: the
    server enters lame-duck mode and stops by itself (no clients to move here)."""
    spec = one(overlay, "StatefulSet", "nats")["spec"]["template"]["spec"]
    [container] = spec["containers"]
    shell, flag, script = container["lifecycle"]["preStop"]["exec"]["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    signal_command, _, hold = script.partition(" && ")
    [pid_file] = re.findall(r"^pid_file:\s*(\S+)$", nats_config(overlay), re.MULTILINE)
    assert shlex.split(signal_command) == ["nats-server", "--signal", f"ldm={pid_file}"]
    # the SIGTERM waits for lame duck (30 s, after a 10 s grace) and fits in the grace period
    assert hold.startswith("sleep ") and 40 < int(hold.split()[1]) < spec["terminationGracePeriodSeconds"]
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(Path(pid_file).parent) in mounted, "the pid file's directory must be writable (read-only root)"

    server = NatsServer(data_dir=tmp_path / "nats")
    server.start()
    try:
        assert server.process is not None
        command = shlex.split(signal_command.replace(pid_file, str(server.pid_file)))
        subprocess.run([nats_server_binary(), *command[1:]], check=True)
        process = server.process
        asyncio.run(eventually(lambda: process.poll() is not None, timeout_s=30))
        assert process.returncode == 0
        assert "Entering lame duck mode" in server.log_path.read_text()
    finally:
        server.close()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_streams_are_created_by_the_admin_job_alone(overlay: str) -> None:
    job = one(overlay, "Job", "fleetpilot-streams")["spec"]["template"]["spec"]
    [container] = job["containers"]
    assert container["args"][:2] == ["streams", "ensure"]
    env = {item["name"]: item for item in container["env"]}
    assert env["FLEETPILOT_NATS_USER"]["value"] == "admin"
    assert env["FLEETPILOT_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "fleetpilot-nats",
        "key": "admin-password",
    }
    nats_env = {item["name"] for item in one(overlay, "StatefulSet", "nats")["spec"]["template"]["spec"]
                ["containers"][0]["env"]}  # fmt: skip
    assert "ADMIN_PASSWORD" in nats_env


def test_prod_requires_tls_from_clients_and_a_ca_signed_certificate_from_routes() -> None:
    config = nats_config("prod")
    cluster = config[config.index("cluster {") :]
    assert "verify: true" in cluster and "tls {" in cluster
    assert "tls {" in config[: config.index("cluster {")]
    statefulset = one("prod", "StatefulSet", "nats")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in statefulset["containers"][0]["volumeMounts"]}
    secrets = {v["name"]: v.get("secret", {}).get("secretName") for v in statefulset["volumes"]}
    assert secrets[mounts["/etc/nats-tls"]] == "fleetpilot-nats-tls"
    # every client trusts the CA: the services and the streams Job
    clients = [d for d in rendered("prod") if d["kind"] in ("Deployment", "Job")]
    assert {d["metadata"]["name"] for d in clients} >= {"demand", "fleet", "provisioner", "decider", "bench"}
    for client in clients:
        spec = client["spec"]["template"]["spec"]
        assert {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]} >= {"/etc/nats-ca"}
    [config_map] = [d for d in rendered("prod") if d["metadata"]["name"].startswith("fleetpilot-config")]
    assert config_map["data"]["FLEETPILOT_NATS_TLS_CA_FILE"] == "/etc/nats-ca/ca.crt"
