"""The prod overlay's NATS configuration (k8s/overlays/prod/nats/nats.conf) on three real nats-servers, with a
certificate authority made at test time: clients and routes speak TLS, a route must present a certificate from
the cluster's CA, and a service, the admin step and a client that trusts the CA work over it."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.errors
import pytest
from typer.testing import CliRunner

from services.cli.main import app as cli_app
from shared.processes import free_port
from shared.streams import ALL_STREAMS
from shared.subjects import Subjects
from sim.infra import ClusterMembership, NatsCluster, NatsServer, RedisServer
from tests.helpers import eventually
from tests.security.conftest import AUTH_CONF, SecuredNats, ServiceProcess
from tests.security.pki import Issued, TestAuthority

REPO = Path(__file__).resolve().parents[2]
PROD_NATS_CONF = REPO / "k8s" / "overlays" / "prod" / "nats" / "nats.conf"
PROD_TLS_DIR = "/etc/nats-tls/"  # where the prod StatefulSet mounts Secret fleetpilot-nats-tls
PROD_STORE_DIR_LINE = "  store_dir: /data/jetstream\n"
SUBJECTS = Subjects("fp")


def prod_config_with(issued: Issued, directory: Path) -> Path:
    """The prod config as it is, its certificate paths pointed at this test's; auth.conf beside it, as in the pod."""
    directory.mkdir(parents=True, exist_ok=True)
    text = PROD_NATS_CONF.read_text()
    assert PROD_TLS_DIR in text and PROD_STORE_DIR_LINE in text
    config = directory / "nats.conf"
    # each node's store directory comes from its command line (-sd), which nats-server will not take twice
    text = text.replace(PROD_STORE_DIR_LINE, "")
    config.write_text(text.replace(PROD_TLS_DIR, f"{issued.directory}/"))
    shutil.copy(AUTH_CONF, directory / "auth.conf")
    return config


def peers_of(node: NatsServer) -> set[str]:
    """The servers this node has a route to (several connections per peer: nats-server pools routes)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{node.monitor_port}/routez", timeout=2.0) as answer:
        return {route["remote_name"] for route in json.load(answer)["routes"] or []}


@pytest.fixture
def authority() -> TestAuthority:
    return TestAuthority("fleetpilot-test-nats-ca")


@pytest.fixture
def tls_cluster(
    authority: TestAuthority, passwords: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[NatsCluster]:
    monkeypatch.setenv("POD_NAME", "unused")  # the config names the server $POD_NAME; each node gets --server_name
    issued = authority.issue(tmp_path / "tls")
    cluster = NatsCluster(tmp_path / "cluster", config_file=prod_config_with(issued, tmp_path / "config"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


async def test_clients_and_routes_speak_tls_with_the_prod_configuration(
    tls_cluster: NatsCluster,
    authority: TestAuthority,
    passwords: dict[str, str],
    redis_server: RedisServer,
    service_processes: list[ServiceProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca_file = tmp_path / "tls" / "ca.crt"
    # the routes formed over verified TLS: each node sees the other two
    assert [peers_of(node) for node in tls_cluster.nodes] == [{"n1", "n2"}, {"n0", "n2"}, {"n0", "n1"}]

    # the admin step declares three-replica streams over TLS, trusting the cluster's CA
    env = {
        "FLEETPILOT_NATS_URL": tls_cluster.url,
        "FLEETPILOT_NATS_USER": "admin",
        "FLEETPILOT_NATS_PASSWORD": passwords["admin"],
        "FLEETPILOT_NATS_TLS_CA_FILE": str(ca_file),
        "FLEETPILOT_SUBJECT_PREFIX": "fp",
    }
    result = await asyncio.to_thread(
        CliRunner().invoke, cli_app, ["streams", "ensure", "--replicas", "3", "--wait-s", "30"], env=env
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("streams ensured (3 replicas)")

    # a service started as production starts it (its user, the CA) binds and becomes healthy
    monkeypatch.setenv("FLEETPILOT_NATS_TLS_CA_FILE", str(ca_file))
    secured = SecuredNats(tls_cluster.nodes[1], passwords, redis_server.url)
    demand = ServiceProcess("demand", secured, tmp_path / "demand.log")
    service_processes.append(demand)
    await demand.wait_healthy()

    trusted = ssl.create_default_context(cafile=str(ca_file))
    operator = await nats.connect(
        servers=tls_cluster.urls, user="operator", password=passwords["operator"], tls=trusted,
        inbox_prefix="_INBOX_operator", allow_reconnect=False,
    )  # fmt: skip
    try:
        for spec in ALL_STREAMS:
            info = await operator.jetstream().stream_info(spec.name(SUBJECTS))
            assert info.cluster is not None and len(info.cluster.replicas or []) == 2, spec.name(SUBJECTS)
    finally:
        await operator.close()


async def test_a_client_that_does_not_trust_the_ca_or_skips_tls_is_refused(
    tls_cluster: NatsCluster, passwords: dict[str, str]
) -> None:
    url = tls_cluster.nodes[0].url
    stranger = ssl.create_default_context(cafile=None)
    stranger.load_verify_locations(cadata=TestAuthority("someone-else").ca_pem().decode())
    with pytest.raises(ssl.SSLCertVerificationError):
        await nats.connect(url, user="operator", password=passwords["operator"], tls=stranger, allow_reconnect=False)
    # a plaintext client: the server requires TLS first, so the connection never gets to authenticate
    with pytest.raises((nats.errors.Error, OSError)):
        await nats.connect(url, user="operator", password=passwords["operator"], allow_reconnect=False)


def test_a_node_without_a_certificate_from_the_cluster_ca_cannot_join(
    tls_cluster: NatsCluster, passwords: dict[str, str], tmp_path: Path
) -> None:
    """Authenticated routes: a server with the same configuration but another CA's certificate gets no route."""
    intruder_pki = TestAuthority("intruder-ca").issue(tmp_path / "intruder-tls")
    routes = tuple(f"nats://127.0.0.1:{node.cluster.cluster_port}" for node in tls_cluster.nodes if node.cluster)
    intruder = NatsServer(
        data_dir=tmp_path / "intruder",
        config_file=prod_config_with(intruder_pki, tmp_path / "intruder-config"),
        cluster=ClusterMembership("intruder", free_port(), routes),
    )
    intruder.start()
    try:
        refusal = "TLS route handshake error"
        asyncio.run(eventually(lambda: refusal in intruder.log_path.read_text(errors="replace"), timeout_s=30))
        assert peers_of(intruder) == set()
        assert [peers_of(node) for node in tls_cluster.nodes] == [{"n1", "n2"}, {"n0", "n2"}, {"n0", "n1"}]
    finally:
        intruder.close()
