"""The attacks of the security review (issue #24, items 5-8), each made on a private nats-server running
deploy/nats/auth.conf: confused-deputy replies, an operator removing the decider's consumers or adding triggers,
a job system flooding the store, and stale commands run after a provisioner outage."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats.aio.msg
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client as NatsClient
from nats.js.api import ConsumerConfig, DiscardPolicy

from shared.contract import FleetSnapshot, FleetSnapshotRequest, ProvisionResult, RefusalRule, TaskEvent, Trigger
from shared.streams import ALL_STREAMS, AUDIT, COMMANDS, DEMAND, DLQ, LATEST, OPERATOR, TRIGGERS, StreamSpec
from tests.helpers import eventually
from tests.security.conftest import REPO, SecuredNats, ServiceProcess
from tests.security.test_nats_permissions import (
    NOW,
    REFUSED_WAIT_S,
    SUBJECTS,
    js_publish,
    launch_command,
    operator_message,
    refused,
    stream_messages,
)

# auth.conf's JOBS account: `limits: { max_connections: 32, ... }`
JOBS_MAX_CONNECTIONS = 32

# what a requester names as the reply subject to make a responder publish into a stream (the review's attack)
HIJACKED_REPLIES = (SUBJECTS.provision_command("launch"), SUBJECTS.demand_signal)


def snapshot_request() -> bytes:
    return FleetSnapshotRequest(occurred_at=NOW, source="cli").model_dump_json().encode()


async def no_demand_signal(secured: SecuredNats) -> bool:
    operator = await secured.connect("operator")
    try:
        await operator.jetstream().get_last_msg(LATEST.name(SUBJECTS), SUBJECTS.demand_signal)
    except nats.js.errors.NotFoundError:
        return True
    return False


# --- item 5: a responder publishes to inboxes only --------------------------------------------------------------


@pytest.mark.parametrize(
    ("responder", "requester", "subject"),
    [("fleet", "operator", SUBJECTS.fleet_snapshot), ("provisioner", "decider", SUBJECTS.provision_offers)],
)
async def test_a_responder_cannot_be_made_to_answer_into_a_stream(
    secured_nats: SecuredNats, responder: str, requester: str, subject: str
) -> None:
    """The responder answers whatever reply subject it is handed (as a bug or an older release would): the server
    refuses each one outside the requester's inbox, and nothing reaches the command stream or the latest signal."""
    responder_client = await secured_nats.connect(responder)

    async def answer_blindly(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b'{"not": "from the decider"}')

    await responder_client.subscribe(subject, cb=answer_blindly)
    await responder_client.flush()
    requester_client = await secured_nats.connect(requester)
    for reply in HIJACKED_REPLIES:
        await requester_client.publish(subject, snapshot_request(), reply=reply)
        await requester_client.flush()
        await eventually(lambda reply=reply: (responder, "Publish", reply) in secured_nats.violations())

    assert await stream_messages(secured_nats, COMMANDS.name(SUBJECTS)) == 0
    assert await no_demand_signal(secured_nats)
    # the requester's own inbox still gets its answer
    answer = await requester_client.request(subject, snapshot_request(), timeout=5)
    assert answer.data == b'{"not": "from the decider"}'


async def test_fleet_refuses_a_reply_subject_outside_an_inbox_counts_and_logs_it(
    secured_nats: SecuredNats, service_processes: list[ServiceProcess], tmp_path: Path
) -> None:
    fleet = ServiceProcess("fleet", secured_nats, tmp_path / "fleet.log")
    service_processes.append(fleet)
    await fleet.wait_healthy()
    operator = await secured_nats.connect("operator")
    # a real request is answered (and so fleet listens: a core NATS request before that reaches nobody)
    answer = await eventually(lambda: answered(operator), timeout_s=30)
    assert FleetSnapshot.model_validate_json(answer.data).instances == []

    for reply in HIJACKED_REPLIES:
        await operator.publish(SUBJECTS.fleet_snapshot, snapshot_request(), reply=reply)
    await operator.flush()
    refused_replies = {"service": "fleet", "subject": SUBJECTS.fleet_snapshot}
    count = await eventually(lambda: fleet.sample("fleetpilot_refused_replies_total", refused_replies), timeout_s=30)
    assert count == len(HIJACKED_REPLIES) or await eventually(
        lambda: fleet.sample("fleetpilot_refused_replies_total", refused_replies) == len(HIJACKED_REPLIES)
    )
    assert "a reply goes to an inbox only" in fleet.log()
    # fleet never even tried a subject outside an inbox: the server saw nothing to refuse
    assert secured_nats.violations("fleet") == []
    assert await stream_messages(secured_nats, COMMANDS.name(SUBJECTS)) == 0
    assert await no_demand_signal(secured_nats)


async def answered(client: NatsClient) -> nats.aio.msg.Msg | None:
    try:
        return await client.request(SUBJECTS.fleet_snapshot, snapshot_request(), timeout=1)
    except nats.errors.NoRespondersError:
        return None
    except nats.errors.TimeoutError:
        return None


# --- item 6: the operator's own consumers only, no triggers -----------------------------------------------------


async def test_the_operator_cannot_delete_or_replace_the_deciders_consumer(secured_nats: SecuredNats) -> None:
    stream = OPERATOR.name(SUBJECTS)
    decider_js = (await secured_nats.connect("decider")).jetstream()
    durable = "decider-r1-operator"
    await decider_js.add_consumer(
        stream, ConsumerConfig(durable_name=durable, filter_subject=SUBJECTS.operator_message)
    )

    errors: list[Exception] = []
    operator = await secured_nats.connect("operator", errors)
    js = operator.jetstream(timeout=REFUSED_WAIT_S)
    taken_over = ConsumerConfig(name=durable, filter_subject=SUBJECTS.operator_reply)
    attempts = {
        f"$JS.API.CONSUMER.DELETE.{stream}.{durable}": js.delete_consumer(stream, durable),
        f"$JS.API.CONSUMER.CREATE.{stream}.{durable}.{SUBJECTS.operator_reply}": js.add_consumer(stream, taken_over),
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}": js.add_consumer(
            stream, ConsumerConfig(durable_name=durable, filter_subject=SUBJECTS.operator_reply)
        ),
    }
    for subject, attempt in attempts.items():
        with pytest.raises(nats.errors.TimeoutError):
            await attempt
        await eventually(lambda subject=subject: refused(errors, subject))
    for other in (AUDIT, DLQ):  # nor anyone's consumer on the other streams it reads
        with pytest.raises(nats.errors.TimeoutError):
            await js.delete_consumer(other.name(SUBJECTS), "any-durable")

    # the bare subject it may use, naming the decider's consumer in the body: the server creates no such thing
    body = {"stream_name": stream, "config": {"name": durable, "filter_subject": SUBJECTS.operator_reply}}
    answer = await operator.request(f"$JS.API.CONSUMER.CREATE.{stream}", json.dumps(body).encode(), timeout=5)
    assert "error" in json.loads(answer.data), answer.data

    kept = await decider_js.consumer_info(stream, durable)
    assert kept.config.filter_subject == SUBJECTS.operator_message


async def test_the_operator_follows_a_stream_through_a_server_named_consumer(secured_nats: SecuredNats) -> None:
    """What the operator keeps: an ordered consumer (ephemeral, named by the server) on the streams it reads."""
    operator = await secured_nats.connect("operator")
    await js_publish(operator, SUBJECTS.operator_message, operator_message("alice"), OPERATOR.name(SUBJECTS))
    following = await operator.jetstream().subscribe(
        SUBJECTS.operator_message, stream=OPERATOR.name(SUBJECTS), ordered_consumer=True
    )
    message = await following.next_msg(timeout=5)
    assert b"alice" in message.data
    assert secured_nats.violations("operator") == []


async def test_the_operator_cannot_publish_a_trigger(secured_nats: SecuredNats) -> None:
    """A `config_change` of the operator's own let the run of its question act; the operator's message wakes the
    decider by itself."""
    errors: list[Exception] = []
    operator = await secured_nats.connect("operator", errors)
    for reason in ("config_change", "operator_message"):
        subject = f"{SUBJECTS.prefix}.trigger.p0.{reason}"
        trigger = Trigger(occurred_at=NOW, source="cli", priority="p0", reason=reason)  # type: ignore[arg-type]
        with pytest.raises(nats.errors.TimeoutError):
            await js_publish(operator, subject, trigger, TRIGGERS.name(SUBJECTS))
        assert refused(errors, subject), subject
    assert await stream_messages(secured_nats, TRIGGERS.name(SUBJECTS)) == 0


# --- item 7: every stream bounded ------------------------------------------------------------------------------


def store_bytes(conf: Path) -> int:
    """`max_file_store: 10GB` of a nats.conf, in bytes (nats-server reads GB as 1024^3)."""
    found = re.search(r"max_file_store:\s*(\d+)\s*GB", conf.read_text())
    assert found, conf
    return int(found.group(1)) * 1024**3


@pytest.mark.parametrize(
    "conf", ["deploy/nats/nats.conf", "k8s/base/nats/nats.conf", "k8s/overlays/prod/nats/nats.conf"]
)
def test_the_streams_together_fit_in_the_jetstream_store(conf: str) -> None:
    assert sum(spec.max_bytes for spec in ALL_STREAMS) <= store_bytes(REPO / conf) // 2


async def test_every_stream_is_declared_with_its_limits(secured_nats: SecuredNats) -> None:
    js = (await secured_nats.connect("operator")).jetstream()
    for spec in ALL_STREAMS:
        config = (await js.stream_info(spec.name(SUBJECTS))).config
        assert config.max_bytes == spec.max_bytes > 0 and config.max_msgs == spec.max_msgs > 0, spec.suffix
    assert (await js.stream_info(DEMAND.name(SUBJECTS))).config.discard == DiscardPolicy.OLD
    commands = (await js.stream_info(COMMANDS.name(SUBJECTS))).config
    assert commands.discard == DiscardPolicy.NEW and commands.max_age is not None and commands.max_age <= 15 * 60


async def flood(secured: SecuredNats, user: str, subject: str, payload: bytes, count: int, stream: StreamSpec) -> int:
    """`count` JetStream publishes in batches; how many the stream refused."""
    js = (await secured.connect(user)).jetstream(timeout=10)
    refused_publishes = 0
    for start in range(0, count, 200):
        batch = [js.publish(subject, payload, stream=stream.name(SUBJECTS)) for _ in range(min(200, count - start))]
        results = await asyncio.gather(*batch, return_exceptions=True)
        refused_publishes += sum(isinstance(result, nats.js.errors.APIError) for result in results)
    return refused_publishes


async def test_a_job_system_flooding_task_events_pushes_out_its_own_oldest_only(secured_nats: SecuredNats) -> None:
    event = TaskEvent(occurred_at=NOW, source="jobs", kind="submitted", task_id="t").model_dump_json().encode()
    payload = event + b" " * (1024 * 1024 - 1024 - len(event))  # near the 1 MB message limit: few publishes
    count = DEMAND.max_bytes // len(payload) + 16
    assert await flood(secured_nats, "jobs", SUBJECTS.task("submitted"), payload, count, DEMAND) == 0

    state = (await (await secured_nats.connect("operator")).jetstream().stream_info(DEMAND.name(SUBJECTS))).state
    assert state.bytes <= DEMAND.max_bytes and state.first_seq > 1 and state.last_seq == count
    # the streams the fleet is run through take their messages as before
    decider = await secured_nats.connect("decider")
    await js_publish(
        decider, SUBJECTS.provision_command("launch"), launch_command("after-flood-1"), COMMANDS.name(SUBJECTS)
    )
    assert await stream_messages(secured_nats, COMMANDS.name(SUBJECTS)) == 1


async def test_a_full_command_queue_refuses_new_commands_and_keeps_the_queued_ones(secured_nats: SecuredNats) -> None:
    payload = launch_command("queued-0001").model_dump_json().encode()
    assert (
        await flood(secured_nats, "decider", SUBJECTS.provision_command("launch"), payload, COMMANDS.max_msgs, COMMANDS)
        == 0
    )
    decider = await secured_nats.connect("decider")
    with pytest.raises(nats.js.errors.APIError, match="maximum messages exceeded"):
        await js_publish(
            decider, SUBJECTS.provision_command("launch"), launch_command("one-too-many"), COMMANDS.name(SUBJECTS)
        )
    state = (await decider.jetstream().stream_info(COMMANDS.name(SUBJECTS))).state
    assert state.first_seq == 1 and state.messages == COMMANDS.max_msgs


# --- item 8: commands expire ------------------------------------------------------------------------------------


async def test_the_provisioner_refuses_a_command_queued_past_its_expiry(
    secured_nats: SecuredNats, service_processes: list[ServiceProcess], tmp_path: Path
) -> None:
    """A launch the decider sent before a provisioner outage is refused, counted and recorded when the provisioner
    comes back, and vast.ai is never asked (its URL here answers nothing, which would be another refusal)."""
    decider = await secured_nats.connect("decider")
    sent_at = datetime.now(UTC) - timedelta(minutes=10)
    stale = launch_command("stale-launch-1").model_copy(
        update={"occurred_at": sent_at, "expires_at": sent_at + timedelta(minutes=5)}
    )
    await js_publish(decider, SUBJECTS.provision_command("launch"), stale, COMMANDS.name(SUBJECTS))
    results = await decider.jetstream().pull_subscribe(
        SUBJECTS.provision_result, durable="decider-results", stream="FP_INSTANCES"
    )

    provisioner = ServiceProcess("provisioner", secured_nats, tmp_path / "provisioner.log")
    service_processes.append(provisioner)
    await provisioner.wait_healthy()
    [message] = await results.fetch(1, timeout=30)
    result = ProvisionResult.model_validate_json(message.data)
    assert (result.idempotency_key, result.outcome, result.refusal_rule) == (
        "stale-launch-1", "refused", RefusalRule.EXPIRED,
    )  # fmt: skip
    expired = {"verb": "launch"}
    assert await provisioner.sample("fleetpilot_provisioner_commands_expired_total", expired) == 1
    assert "expired" in provisioner.log()

    # taken and acknowledged, not retried
    async def taken() -> bool:
        return await stream_messages(secured_nats, COMMANDS.name(SUBJECTS)) == 0

    await eventually(taken)


async def test_fleetpilots_jetstream_is_capped_by_its_account(secured_nats: SecuredNats) -> None:
    """Even the admin step cannot grow a stream past the account's file store (auth.conf: FLEETPILOT, 8 GB)."""
    admin = (await secured_nats.connect("admin")).jetstream()
    config = (await admin.stream_info(DEMAND.name(SUBJECTS))).config
    with pytest.raises(nats.js.errors.APIError, match="insufficient storage"):
        await admin.update_stream(dataclasses.replace(config, max_bytes=8 * 1024**3))
    assert (await admin.stream_info(DEMAND.name(SUBJECTS))).config.max_bytes == DEMAND.max_bytes


async def test_the_job_system_account_is_held_to_its_connections(secured_nats: SecuredNats) -> None:
    for _ in range(JOBS_MAX_CONNECTIONS):
        await secured_nats.connect("jobs")
    with pytest.raises(nats.errors.Error, match="maximum account active connections exceeded"):
        await asyncio.wait_for(
            nats.connect(secured_nats.url, user="jobs", password=secured_nats.passwords["jobs"], allow_reconnect=False),
            timeout=10,
        )
    # FleetPilot's own users are in another account: not held to the job system's count
    await secured_nats.connect("operator")
