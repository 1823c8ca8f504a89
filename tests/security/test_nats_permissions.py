"""The NATS policy in deploy/nats/auth.conf, on a real nats-server: who may connect, publish and consume what."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import nats
import nats.aio.msg
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client as NatsClient
from typer.testing import CliRunner

from services.cli.main import SERVICES
from services.cli.main import app as cli_app
from shared.bus import event_headers
from shared.contract import DeadLetter, DrainInstance, Event, LaunchInstances, OperatorMessage, TaskEvent
from shared.processes import free_port
from shared.streams import COMMANDS, DEMAND, DLQ, OPERATOR
from shared.subjects import PROVISION_VERBS, Subjects
from sim.infra import nats_server_binary
from tests.helpers import eventually
from tests.security.conftest import AUTH_CONF, USERS, SecuredNats, ServiceProcess, password_variable

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
SUBJECTS = Subjects("fp")
# a refused JetStream call gets no answer at all; this is how long each test waits for one
REFUSED_WAIT_S = 0.5


def launch_command(key: str = "launch-0001") -> LaunchInstances:
    return LaunchInstances(
        occurred_at=NOW,
        source="decider",
        idempotency_key=key,
        requested_by="policy",
        count=1,
        launch_priority="normal",
        reason="backlog",  # type: ignore[arg-type]
    )


def operator_message(operator: str) -> OperatorMessage:
    return OperatorMessage(
        occurred_at=NOW, source="cli", conversation_id="c1", operator=operator, text="scale down to 2 machines"
    )


async def js_publish(client: NatsClient, subject: str, event: Event, stream: str) -> object:
    js = client.jetstream(timeout=REFUSED_WAIT_S)
    return await js.publish(subject, event.model_dump_json().encode(), headers=event_headers(event), stream=stream)


async def stream_messages(secured: SecuredNats, stream: str) -> int:
    operator = await secured.connect("operator")
    info = await operator.jetstream().stream_info(stream)
    return int(info.state.messages)


def refused(errors: list[Exception], subject: str) -> bool:
    return any("permissions violation" in str(e) and subject.lower() in str(e).lower() for e in errors)


def test_policy_defines_every_user_and_refuses_to_start_without_their_passwords(
    passwords: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = AUTH_CONF.read_text()
    assert set(re.findall(r"^\s*user:\s*([\w-]+)\s*$", text, re.MULTILINE)) == set(USERS)
    for user in USERS:
        assert f"password: ${password_variable(user)}" in text
    check = [nats_server_binary(), "-c", str(AUTH_CONF), "-t"]
    assert subprocess.run(check, capture_output=True, text=True, check=False).returncode == 0

    monkeypatch.delenv("DECIDER_PASSWORD")
    missing = subprocess.run(check, capture_output=True, text=True, check=False)
    assert missing.returncode != 0
    assert "DECIDER_PASSWORD" in missing.stdout + missing.stderr


def test_every_service_has_a_user() -> None:
    """A service added to `fleetpilot run` needs its own user here before it can run in compose or k8s."""
    assert set(SERVICES) <= set(USERS)


async def test_demand_with_its_credentials_consumes_task_events_and_publishes(
    secured_nats: SecuredNats, service_processes: list[ServiceProcess], tmp_path: Path
) -> None:
    demand = ServiceProcess("demand", secured_nats, tmp_path / "demand.log")
    service_processes.append(demand)
    await demand.wait_healthy()

    jobs = await secured_nats.connect("jobs")
    event = TaskEvent(occurred_at=NOW, source="jobs", kind="submitted", task_id="t1")
    await js_publish(jobs, SUBJECTS.task("submitted"), event, DEMAND.name(SUBJECTS))
    # a malformed one makes demand publish, with its own credentials, to its dead-letter subject
    await jobs.jetstream().publish(SUBJECTS.task("completed"), b"{not json", stream=DEMAND.name(SUBJECTS))

    counted = {"service": "demand", "reason": "invalid_message"}
    await eventually(lambda: demand.sample("fleetpilot_dead_letters_total", counted), timeout_s=30)
    operator = await secured_nats.connect("operator")
    stored = await eventually(lambda: _last_message(operator, DLQ.name(SUBJECTS), SUBJECTS.dead_letter("demand")))
    letter = DeadLetter.model_validate_json(stored.data)
    assert letter.service == "demand" and letter.payload == "{not json"
    # the good event was consumed too: demand's durable consumer took both and acknowledged them
    js = (await secured_nats.connect("demand")).jetstream()

    async def all_acknowledged() -> bool:
        info = await js.consumer_info(DEMAND.name(SUBJECTS), "demand-tasks")
        return info.delivered.stream_seq == 2 and info.num_ack_pending == 0

    await eventually(all_acknowledged, timeout_s=30)
    assert secured_nats.violations() == []


async def _last_message(client: NatsClient, stream: str, subject: str):  # type: ignore[no-untyped-def]
    try:
        return await client.jetstream().get_last_msg(stream, subject)
    except nats.js.errors.NotFoundError:
        return None


async def test_wrong_or_missing_credentials_are_refused(
    secured_nats: SecuredNats, service_processes: list[ServiceProcess], tmp_path: Path
) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(secured_nats.url, user="demand", password="not-the-password", allow_reconnect=False)
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(secured_nats.url, allow_reconnect=False)
    # another service's password is not this user's password
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(
            secured_nats.url, user="decider", password=secured_nats.passwords["demand"], allow_reconnect=False
        )

    # a service started with a wrong password does not start
    demand = ServiceProcess("demand", secured_nats, tmp_path / "demand.log", password="pwrong")
    service_processes.append(demand)
    await eventually(lambda: demand.process.poll() is not None, timeout_s=60)
    assert demand.process.returncode != 0
    assert "Authorization Violation" in demand.log()
    assert 'authentication error - User "demand"' in secured_nats.server.log_path.read_text()


async def test_demand_cannot_publish_a_provision_command_but_the_decider_can(secured_nats: SecuredNats) -> None:
    errors: list[Exception] = []
    demand = await secured_nats.connect("demand", errors)
    subject = SUBJECTS.provision_command("launch")
    with pytest.raises(nats.errors.TimeoutError):
        await js_publish(demand, subject, launch_command("from-demand-1"), COMMANDS.name(SUBJECTS))
    await eventually(lambda: refused(errors, subject))
    assert ("demand", "Publish", subject) in secured_nats.violations()
    assert await stream_messages(secured_nats, COMMANDS.name(SUBJECTS)) == 0

    for user in ("fleet", "provisioner", "bench", "jobs", "operator"):
        client = await secured_nats.connect(user)
        await client.publish(subject, launch_command(f"from-{user}-1").model_dump_json().encode())
        await client.flush()
        await eventually(lambda user=user: (user, "Publish", subject) in secured_nats.violations())

    decider = await secured_nats.connect("decider")
    await js_publish(decider, subject, launch_command("from-decider-1"), COMMANDS.name(SUBJECTS))
    assert await stream_messages(secured_nats, COMMANDS.name(SUBJECTS)) == 1


async def test_the_decider_may_publish_every_provision_command(secured_nats: SecuredNats) -> None:
    decider = await secured_nats.connect("decider")
    for verb in PROVISION_VERBS:  # a verb added to the contract and forgotten here is refused in production
        await js_publish(
            decider, SUBJECTS.provision_command(verb), launch_command(f"decider-{verb}-1"), COMMANDS.name(SUBJECTS)
        )
    assert await stream_messages(secured_nats, COMMANDS.name(SUBJECTS)) == len(PROVISION_VERBS)


async def test_operator_messages_are_accepted_only_from_operator_credentials(secured_nats: SecuredNats) -> None:
    subject = SUBJECTS.operator_message
    for user in ("demand", "fleet", "provisioner", "decider", "bench", "jobs"):
        errors: list[Exception] = []
        client = await secured_nats.connect(user, errors)
        with pytest.raises(nats.errors.TimeoutError):
            await js_publish(client, subject, operator_message(f"impostor-{user}"), OPERATOR.name(SUBJECTS))
        assert refused(errors, subject), user

    operator = await secured_nats.connect("operator")
    await js_publish(operator, subject, operator_message("alice"), OPERATOR.name(SUBJECTS))

    stored = await operator.jetstream().get_last_msg(OPERATOR.name(SUBJECTS), subject)
    assert OperatorMessage.model_validate_json(stored.data).operator == "alice"
    assert await stream_messages(secured_nats, OPERATOR.name(SUBJECTS)) == 1


async def test_only_the_provisioner_may_consume_provision_commands(secured_nats: SecuredNats) -> None:
    decider = await secured_nats.connect("decider")
    stream = COMMANDS.name(SUBJECTS)
    await js_publish(decider, SUBJECTS.provision_command("launch"), launch_command(), stream)
    drain = DrainInstance(
        occurred_at=NOW,
        source="decider",
        idempotency_key="drain-0001",
        requested_by="policy",
        instance_id=7,
        reason="idle",  # type: ignore[arg-type]
    )
    await js_publish(decider, SUBJECTS.fleet_drain, drain, stream)

    # fleet may not take provision commands, not even through the durable name it is allowed to use
    attempts = [(user, "steal") for user in ("fleet", "decider", "demand", "bench", "jobs", "operator")]
    attempts.append(("fleet", "fleet-drain"))
    for user, durable in attempts:
        errors: list[Exception] = []
        client = await secured_nats.connect(user, errors)
        with pytest.raises(nats.errors.TimeoutError):
            await client.jetstream(timeout=REFUSED_WAIT_S).pull_subscribe(
                SUBJECTS.provision_commands_all, durable=durable, stream=stream
            )
        assert any("permissions violation" in str(e) for e in errors), (user, durable)

    provisioner = await secured_nats.connect("provisioner")
    commands = await provisioner.jetstream().pull_subscribe(
        SUBJECTS.provision_commands_all, durable="provisioner-commands", stream=stream
    )
    [message] = await commands.fetch(1, timeout=5)
    assert LaunchInstances.model_validate_json(message.data).idempotency_key == "launch-0001"
    await message.ack()

    # ...and fleet consumes its drain command through its own durable
    fleet = await secured_nats.connect("fleet")
    drains = await fleet.jetstream().pull_subscribe(SUBJECTS.fleet_drain, durable="fleet-drain", stream=stream)
    [message] = await drains.fetch(1, timeout=5)
    assert DrainInstance.model_validate_json(message.data).instance_id == 7
    await message.ack()


async def test_every_service_process_starts_under_its_own_credentials_without_a_refusal(
    secured_nats: SecuredNats, service_processes: list[ServiceProcess], tmp_path: Path
) -> None:
    """`fleetpilot run <service>` for each service, as in production: start-up declares the streams and creates
    every consumer, and each of those must fit that service's permissions."""
    for service in sorted(SERVICES):
        service_processes.append(ServiceProcess(service, secured_nats, tmp_path / f"{service}.log"))
    for process in service_processes:
        await process.wait_healthy()
    for process in service_processes:
        process.stop()
    assert secured_nats.violations() == []


async def test_the_cli_works_with_the_jobs_and_operator_users_and_no_further(secured_nats: SecuredNats) -> None:
    """`publish` as the job system, `audit tail` and `status` as an operator; an operator cannot feed demand."""
    cli = secured_nats.cli

    code, out, err = await cli("jobs", "publish", "task", "submitted", "t-1")
    assert code == 0 and "published TaskEvent" in out, err
    code, _, err = await cli("operator", "publish", "task", "submitted", "t-2", "--timeout", "0.5")
    assert code == 1 and "no acknowledgement" in err
    assert ("operator", "Publish", SUBJECTS.task("submitted")) in secured_nats.violations()

    code, _, err = await cli("operator", "audit", "tail")
    assert code == 0 and "no decisions recorded yet" in err
    code, _, err = await cli("operator", "status", "--timeout", "0.3")
    assert code == 1 and "fleetpilot run fleet" in err
    assert [v for v in secured_nats.violations() if v[0] != "operator" or v[2] != SUBJECTS.task("submitted")] == []


async def test_no_user_can_read_another_users_replies(secured_nats: SecuredNats) -> None:
    """Replies (API answers, publish acks, pulled messages, request replies) arrive on `_INBOX_<user>.…`; a user
    may subscribe to its own prefix alone, so the operator cannot listen in on the decider's or anyone's."""
    errors: list[Exception] = []
    operator = await secured_nats.connect("operator", errors)
    eavesdropped: list[str] = []

    async def record(msg: nats.aio.msg.Msg) -> None:
        eavesdropped.append(msg.subject)

    for subject in ("_INBOX_decider.>", "_INBOX_provisioner.>", "_INBOX.>", "*.>", ">"):
        await operator.subscribe(subject, cb=record)
        await operator.flush()
        await eventually(lambda subject=subject: ("operator", "Subscription", subject) in secured_nats.violations())

    # the decider asks JetStream something; its answer goes to its own inbox, and reaches it
    decider = await secured_nats.connect("decider")
    assert decider._inbox_prefix == b"_INBOX_decider"
    info = await decider.jetstream().stream_info(COMMANDS.name(SUBJECTS))
    assert info.config.name == COMMANDS.name(SUBJECTS)
    await operator.flush()
    assert eavesdropped == []
    assert all("permissions violation" in str(e).lower() for e in errors)

    # ...while the operator's own replies still reach it
    own = await operator.jetstream().stream_info(OPERATOR.name(SUBJECTS))
    assert own.config.name == OPERATOR.name(SUBJECTS)


@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_a_service_cannot_create_update_delete_or_purge_a_stream(secured_nats: SecuredNats, service: str) -> None:
    """Streams are the admin step's: a service only binds. Each refused call gets no answer (a timeout) and the
    server logs the violation; the stream keeps its configuration and its messages."""
    stream = DEMAND.name(SUBJECTS)
    jobs = await secured_nats.connect("jobs")
    await js_publish(jobs, SUBJECTS.task("submitted"), TaskEvent(occurred_at=NOW, source="jobs", kind="submitted",
                                                                 task_id="kept"), stream)  # fmt: skip
    errors: list[Exception] = []
    client = await secured_nats.connect(service, errors)
    js = client.jetstream(timeout=REFUSED_WAIT_S)
    before = await js.stream_info(stream)  # binding is allowed: INFO

    changed = dataclasses.replace(before.config, max_age=3600.0)
    attempts = {
        f"$JS.API.STREAM.UPDATE.{stream}": js.update_stream(changed),
        "$JS.API.STREAM.CREATE.FP_ROGUE": js.add_stream(name="FP_ROGUE", subjects=["rogue.>"]),
        f"$JS.API.STREAM.PURGE.{stream}": js.purge_stream(stream),
        f"$JS.API.STREAM.DELETE.{stream}": js.delete_stream(stream),
    }
    for subject, attempt in attempts.items():
        with pytest.raises(nats.errors.TimeoutError):
            await attempt
        await eventually(lambda subject=subject: (service, "Publish", subject) in secured_nats.violations())
        assert refused(errors, subject), subject

    after = await (await secured_nats.connect("operator")).jetstream().stream_info(stream)
    assert after.config.max_age == before.config.max_age and after.state.messages == 1
    with pytest.raises(nats.js.errors.NotFoundError):
        await (await secured_nats.connect("operator")).jetstream().stream_info("FP_ROGUE")


async def test_streams_ensure_is_the_admin_users_step_alone(secured_nats: SecuredNats) -> None:
    """`fleetpilot streams ensure` as `admin` brings the streams to their configuration; as a service it is
    refused with one line, and nothing changes."""

    async def ensure(user: str) -> tuple[int, str, str]:
        return await secured_nats.cli(user, "streams", "ensure")

    # someone shortened a stream's retention by hand: the admin step puts it back
    admin = (await secured_nats.connect("admin")).jetstream()
    demand_stream = await admin.stream_info(DEMAND.name(SUBJECTS))
    await admin.update_stream(dataclasses.replace(demand_stream.config, max_age=3600.0))

    code, out, err = await ensure("admin")
    assert code == 0, err
    assert out.startswith("streams ensured (1 replica): ") and DEMAND.name(SUBJECTS) in out
    assert out.rstrip().endswith(f" on {secured_nats.url}"), out  # the server it used, without credentials
    assert (await admin.stream_info(DEMAND.name(SUBJECTS))).config.max_age == DEMAND.max_age_s

    code, out, err = await ensure("decider")
    assert code == 1 and out == ""
    assert "may NATS user 'decider' create and update streams (only `admin` may)" in err
    assert len(err.strip().splitlines()) == 1
    assert ("decider", "Publish", f"$JS.API.STREAM.UPDATE.{DEMAND.name(SUBJECTS)}") in secured_nats.violations()
    assert secured_nats.violations("admin") == []


def test_streams_ensure_says_in_one_line_when_nats_cannot_be_reached() -> None:
    env = {"FLEETPILOT_NATS_URL": f"nats://127.0.0.1:{free_port()}", "FLEETPILOT_SUBJECT_PREFIX": "fp"}
    result = CliRunner().invoke(cli_app, ["streams", "ensure", "--wait-s", "0.5"], env=env)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"cannot reach NATS at {env['FLEETPILOT_NATS_URL']} after 0 s")
    assert len(result.stderr.strip().splitlines()) == 1


async def test_the_operator_adds_lists_and_revokes_directives_through_the_decider_and_no_service_can(
    secured_nats: SecuredNats, service_processes: list[ServiceProcess], tmp_path: Path
) -> None:
    """`fleetpilot directives` as `operator` against `fleetpilot run decider` as `decider`: the decider answers into
    the operator's inbox and wakes itself with its P1 trigger, within the policy; a service may not ask."""
    decider = ServiceProcess("decider", secured_nats, tmp_path / "decider.log")
    service_processes.append(decider)
    await decider.wait_healthy()
    cli = secured_nats.cli

    code, out, err = await cli("operator", "directives", "add", "cap_instances", "3", "--until", "4h", "--by", "eve")
    assert code == 0 and out.startswith("directive #1 stored: "), err
    code, out, err = await cli("operator", "directives")
    assert code == 0 and "at most 3 machines" in out and "eve (cli)" in out, err
    code, out, err = await cli("operator", "directives", "revoke", "1")
    assert code == 0 and "directive #1 revoked" in out, err
    assert secured_nats.violations() == []

    code, _, err = await cli("jobs", "directives")
    assert code != 0
    assert ("jobs", "Publish", SUBJECTS.decider_directives) in secured_nats.violations()
