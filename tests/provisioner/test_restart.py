"""A provisioner process killed between vast's create and its own answer: the next one knows the instance once."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.provisioner.reconcile import KnownInstance, launch_label
from shared.clock import RealClock, SimulatedClock
from shared.contract import InstanceState, LaunchInstances, LaunchReason
from shared.processes import free_port
from shared.settings import Settings
from sim.infra import RedisServer
from sim.vast.scenario import Endpoint
from sim.vast.server import ScriptedFault
from tests.helpers import eventually
from tests.provisioner.service_harness import NOW, QUIET, BusRecorder, market_scenario, running_provisioner, send
from tests.sim_vast.harness import API_KEY, StartVast

FAST_RECOVERY = {"command_ack_wait_s": 2.0, "lease_ttl_s": 2.0}


def provisioner_environment(settings: Settings, vast_url: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(Path.cwd()),
        "FLEETPILOT_NATS_URL": settings.nats_url,
        "FLEETPILOT_REDIS_URL": settings.redis_url,
        "FLEETPILOT_SUBJECT_PREFIX": settings.subject_prefix,
        "FLEETPILOT_VAST_API_URL": vast_url,
        "FLEETPILOT_VAST_API_KEY": API_KEY,
        "FLEETPILOT_DECIDER_MODE": "live",  # commands are carried out (shadow, the default, refuses them)
        "FLEETPILOT_HTTP_PORT": str(free_port()),
    }
    config = QUIET.model_copy(update={**FAST_RECOVERY, "request_timeout_s": 60.0})
    for name, value in config.model_dump(mode="json", exclude={"report_token"}, exclude_none=True).items():
        env[f"FLEETPILOT_PROVISIONER_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    assert config.report_token is not None
    env["FLEETPILOT_BENCH_REPORT_TOKEN"] = config.report_token.get_secret_value()  # shared with bench
    return env


def start_process(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """`fleetpilot run provisioner` as its own process, logging at debug level into `log_path`."""
    with open(log_path, "wb") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "run", "provisioner", "--log-level", "debug"],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )


async def test_a_restart_between_launch_and_result_leaves_the_instance_known_once(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    tmp_path: Path,
    bus: BusRecorder,
) -> None:
    simulator, url = await start_vast(market_scenario())
    # vast creates the instance at once but holds its answer: the first process dies waiting for it
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="slow", delay_wall_s=6.0))
    log_path = tmp_path / "provisioner-1.log"
    first = start_process(provisioner_environment(settings, url), log_path)
    try:
        command = LaunchInstances(
            occurred_at=NOW, source="decider", idempotency_key="launch-crash", requested_by="policy", count=1,
            launch_priority="normal", reason=LaunchReason.BACKLOG,
        )  # fmt: skip
        await send(js, settings, "launch", command)
        await eventually(lambda: simulator.world.instances, timeout_s=30)
    finally:
        first.kill()  # SIGKILL: no answer, no ack, the lease left to expire
        first.wait()
    [created] = simulator.world.instances.values()
    assert bus.results == [] and bus.observed == []  # it died before saying anything

    config = QUIET.model_copy(update=FAST_RECOVERY)
    async with running_provisioner(settings, RealClock(), url, config):
        result = await bus.result_for("launch-crash", timeout_s=20)

    assert result.outcome == "done" and result.instance_ids == [created.instance_id]
    [entry] = simulator.world.ledger(sim_clock.now()).entries  # one instance, never a second create
    assert entry.instance_id == created.instance_id
    observed = bus.observed_of(created.instance_id)
    assert [(o.state, o.adopted, o.idempotency_key) for o in observed] == [
        (InstanceState.REQUESTED, True, "launch-crash")
    ]
    redis = Redis.from_url(settings.redis_url)
    stored = await redis.hgetall("fleetpilot:fpt:provisioner:instances")
    await redis.aclose()
    known = [KnownInstance.model_validate_json(raw) for raw in stored.values()]
    assert [(k.instance_id, k.label) for k in known] == [(created.instance_id, launch_label("launch-crash", 0))]
    assert API_KEY not in log_path.read_text()


async def test_a_redis_restart_while_the_lease_is_held_does_not_lock_the_provisioner_out(
    settings: Settings,
    js: JetStreamContext,
    start_vast: StartVast,
    redis_server: RedisServer,
    bus: BusRecorder,
) -> None:
    """Redis dies mid-operation: the lease's release fails, and Redis (append-only) brings the lease back with
    its two-minute life. The fault suite's soak saw commands dead-lettered behind it; the provisioner must know
    the lease is its own and release it once Redis is back, so the next command runs at once."""
    _, url = await start_vast(market_scenario())
    async with running_provisioner(settings, RealClock(), url) as service:
        with contextlib.suppress(RedisError):
            async with service.operations._exclusive():
                redis_server.kill()
        redis_server.start()
        command = LaunchInstances(
            occurred_at=NOW, source="decider", idempotency_key="after-redis", requested_by="policy", count=1,
            launch_priority="normal", reason=LaunchReason.BACKLOG,
        )  # fmt: skip
        await send(js, settings, "launch", command)
        result = await bus.result_for("after-redis", timeout_s=30)  # the lease would hold it for 120 s
    assert result.outcome == "done"
