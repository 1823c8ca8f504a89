"""`fleetpilot status`, `publish task|queue` and `audit tail`: rendering on plain values, the commands on a real bus."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from rich.console import Console
from typer.testing import CliRunner

from services.cli.main import app
from services.cli.render import (
    InputError,
    build_event,
    decision_lines,
    parse_queue_depth,
    snapshot_table,
)
from shared.bus import event_headers
from shared.contract import (
    AgentTrace,
    DecisionRecord,
    DestroyInstance,
    FleetSnapshot,
    FleetSnapshotRequest,
    ForeignInstance,
    GuardrailVerdict,
    InstanceLine,
    InstanceState,
    InstanceTransitioned,
    LaunchInstances,
    QueueSnapshot,
    TaskEvent,
    TriggerRef,
    VastAccountObserved,
)
from shared.settings import Settings
from shared.streams import AUDIT, DEMAND, INSTANCES, LATEST
from sim.infra import NatsServer

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def instance(instance_id: int, state: InstanceState, **extra: object) -> InstanceLine:
    fields: dict[str, object] = {
        "instance_id": instance_id,
        "state": state,
        "gpu_model": "RTX 4090",
        "price_usd_per_h": 0.5,
        "created_at": NOW - timedelta(hours=3),
        "state_since": NOW - timedelta(minutes=40),
        "line": f"#{instance_id} RTX 4090 {state.value}",
    }
    fields.update(extra)
    return InstanceLine.model_validate(fields)


def snapshot(at: datetime = NOW) -> FleetSnapshot:
    return FleetSnapshot(
        occurred_at=at,
        source="fleet",
        instances=[
            instance(33032712, InstanceState.PRODUCING, tasks_completed=118, throughput_tasks_per_h=121.0),
            instance(33032713, InstanceState.LOADING, gpu_model="RTX 5090", price_usd_per_h=0.43),
        ],
        counts_by_state={InstanceState.PRODUCING: 1, InstanceState.LOADING: 1},
        spend_usd_per_h=0.93,
        producing_instances=1,
        arriving_instances=1,
    )


def decision(run_id: str, outcome: str = "acted", minute: int = 0) -> DecisionRecord:
    launch = LaunchInstances(
        occurred_at=NOW,
        source="decider",
        idempotency_key=f"launch-{run_id}",
        requested_by="policy",
        count=2,
        launch_priority="normal",
        reason="sustained_demand",  # type: ignore[arg-type]
    )
    destroy = DestroyInstance(
        occurred_at=NOW,
        source="decider",
        idempotency_key=f"destroy-{run_id}",
        requested_by="agent",
        instance_id=33032712,
        reason="idle",  # type: ignore[arg-type]
    )
    at = NOW + timedelta(minutes=minute)
    return DecisionRecord(
        occurred_at=at,
        source="decider",
        run_id=run_id,
        triggers=[TriggerRef(priority="p0", reason="instance_failed"), TriggerRef(priority="heartbeat")],  # type: ignore[arg-type]
        started_at=at,
        finished_at=at,
        duration_s=1.5,
        signal_freshness="fresh",
        snapshot_freshness="stale",
        recommendation=f"{run_id}: arrivals 240/h over 2 h exceed capacity 120/h; launch 2",
        verdicts=[
            GuardrailVerdict(action=launch, verdict="allowed", explanation="within budget: $1.86/h of $20/h"),
            GuardrailVerdict(
                action=destroy,
                verdict="refused",
                rule="last_producer",
                explanation="the last producing machine while 40 tasks are queued",
            ),
        ],
        commands_sent=[f"launch-{run_id}"],
        outcome=outcome,  # type: ignore[arg-type]
        agent=AgentTrace(decision="launch two RTX 4090 for the afternoon peak", status="ok"),
    )


def rendered(renderable: object) -> str:
    console = Console(record=True, width=200)
    console.print(renderable)
    return console.export_text()


# --- pure ---


def test_queue_depth_parses_and_bad_input_names_the_value() -> None:
    assert parse_queue_depth("proving=12/3").model_dump() == {"task_type": "proving", "pending": 12, "running": 3}
    assert parse_queue_depth("index=4").running == 0
    with pytest.raises(InputError, match="'proving'"):
        parse_queue_depth("proving")
    with pytest.raises(InputError, match="'twelve'"):
        parse_queue_depth("proving=twelve")
    with pytest.raises(InputError, match=r"pending.*-1"):
        parse_queue_depth("proving=-1")


def test_a_bad_task_event_is_refused_naming_the_field_and_the_value() -> None:
    with pytest.raises(InputError, match=r"kind: .*'done'"):
        build_event(TaskEvent, occurred_at=NOW, source="jobs", kind="done", task_id="t1")
    with pytest.raises(InputError, match=r"duration_s: .*-4"):
        build_event(TaskEvent, occurred_at=NOW, source="jobs", kind="completed", task_id="t1", duration_s=-4)


def test_snapshot_table_shows_each_instance_with_ages_from_the_snapshot_time() -> None:
    text = rendered(snapshot_table(snapshot()))
    assert "2 instances (1 loading, 1 producing): 1 producing, 1 arriving, $0.93/h" in text
    producing = next(line for line in text.splitlines() if "#33032712" in line)
    assert "producing" in producing and "RTX 4090" in producing and "3.0h" in producing and "121" in producing
    loading = next(line for line in text.splitlines() if "#33032713" in line)
    assert "loading" in loading and "RTX 5090" in loading and "0.43" in loading and "40m" in loading
    assert text.index("#33032713") < text.index("#33032712"), "rows follow the lifecycle: loading before producing"


def test_a_decision_reads_with_its_triggers_reasons_and_guardrail_verdicts() -> None:
    text = "\n".join(decision_lines(decision("r1")))
    assert "run r1  ACTED" in text and "p0:instance_failed, heartbeat" in text
    assert "demand signal fresh, fleet snapshot stale" in text
    assert "policy: r1: arrivals 240/h over 2 h exceed capacity 120/h; launch 2" in text
    assert "agent (ok): launch two RTX 4090 for the afternoon peak" in text
    assert "allowed: launch 2 (normal, sustained_demand, any GPU): within budget" in text
    assert "REFUSED by last_producer: destroy #33032712 (idle): the last producing machine" in text
    assert "directives in force" not in text
    bound = "\n".join(decision_lines(decision("r2").model_copy(update={"directives": [3, 7]})))
    assert "  directives in force: #3, #7" in bound


# --- the commands on a real nats-server ---


def cli_env(settings: Settings) -> dict[str, str]:
    return {"FLEETPILOT_NATS_URL": settings.nats_url, "FLEETPILOT_SUBJECT_PREFIX": settings.subject_prefix}


async def invoke(settings: Settings, *args: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (it runs its own event loop), so this test's loop can answer requests meanwhile."""
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args), env=cli_env(settings))
    return result.exit_code, result.stdout, result.stderr


async def test_publish_task_stores_the_event_once_per_event_id(settings: Settings, js: JetStreamContext) -> None:
    args = ["publish", "task", "completed", "t-42", "--task-type", "proving", "--worker-id", "w1"]
    code, out, err = await invoke(settings, *args, "--instance-id", "7", "--duration-s", "240", "--event-id", "e-42")
    assert code == 0, err
    assert "published TaskEvent e-42 on fpt.demand.task.completed" in out
    stored = await js.get_last_msg(DEMAND.name(settings.subjects), settings.subjects.task("completed"))
    event = TaskEvent.model_validate_json(stored.data)
    assert (event.task_id, event.task_type, event.worker_id, event.instance_id, event.duration_s) == (
        "t-42",
        "proving",
        "w1",
        7,
        240.0,
    )
    assert stored.headers and stored.headers["Nats-Msg-Id"] == "e-42"

    code, out, _ = await invoke(settings, *args, "--event-id", "e-42")
    assert code == 0 and "already stored" in out
    assert (await js.stream_info(DEMAND.name(settings.subjects))).state.messages == 1


async def test_publish_task_refuses_a_bad_kind_and_publishes_nothing(settings: Settings, js: JetStreamContext) -> None:
    code, _, err = await invoke(settings, "publish", "task", "done", "t-1")
    assert code != 0 and "kind" in err and "'done'" in err
    assert (await js.stream_info(DEMAND.name(settings.subjects))).state.messages == 0


async def test_publish_queue_stores_a_queue_snapshot(settings: Settings, js: JetStreamContext) -> None:
    code, out, err = await invoke(settings, "publish", "queue", "proving=12/3", "index=0")
    assert code == 0, err
    assert "published QueueSnapshot" in out
    stored = await js.get_last_msg(DEMAND.name(settings.subjects), settings.subjects.queue)
    queues = QueueSnapshot.model_validate_json(stored.data).queues
    assert [(q.task_type, q.pending, q.running) for q in queues] == [("proving", 12, 3), ("index", 0, 0)]


async def test_status_shows_what_fleet_answers(settings: Settings, nc: NatsClient, js: JetStreamContext) -> None:
    asked: list[FleetSnapshotRequest] = []

    async def answer(msg: Msg) -> None:  # stands in for the fleet service's responder
        asked.append(FleetSnapshotRequest.model_validate_json(msg.data))
        await msg.respond(snapshot().model_dump_json().encode())

    await nc.subscribe(settings.subjects.fleet_snapshot, cb=answer)
    await nc.flush()  # the server knows the responder before the CLI asks (a loaded machine once raced it)
    code, out, err = await invoke(settings, "status", "--timeout", "30")
    assert code == 0, err
    assert len(asked) == 1
    assert "#33032712" in out and "producing" in out and "$0.93/h" in out
    assert "did not answer" not in err


async def test_status_falls_back_to_the_published_snapshot_and_says_so(
    settings: Settings, js: JetStreamContext
) -> None:
    published = snapshot(datetime.now(UTC) - timedelta(minutes=3))
    await js.publish(
        settings.subjects.fleet_snapshot_published,
        published.model_dump_json().encode(),
        headers=event_headers(published),
        stream=LATEST.name(settings.subjects),
    )
    code, out, err = await invoke(settings, "status", "--timeout", "0.3")
    assert code == 0, err
    assert "fleet did not answer" in err and "3m ago" in err
    assert "#33032713" in out


async def test_status_lists_the_foreign_instances_the_provisioner_saw(settings: Settings, js: JetStreamContext) -> None:
    """Someone's own machine, and another deployment's, on the account: shown, so nobody wonders who pays."""
    published = snapshot(datetime.now(UTC))
    account = VastAccountObserved(
        occurred_at=datetime.now(UTC),
        source="provisioner",
        foreign_count=2,
        foreign_instances=[
            ForeignInstance(instance_id=4711, label="my-notebook", gpu_model="RTX 3090", num_gpus=1,
                            vast_actual_status="running", price_usd_per_h=None),
            ForeignInstance(instance_id=4712, label="fleetpilot:staging:k:0", deployment_id="staging",
                            gpu_model="RTX 4090", num_gpus=1, vast_actual_status="running", price_usd_per_h=0.5),
        ],
        unreadable_rows=2,
    )  # fmt: skip
    for subject, event in (
        (settings.subjects.fleet_snapshot_published, published),
        (settings.subjects.provision_account, account),
    ):
        await js.publish(
            subject,
            event.model_dump_json().encode(),
            headers=event_headers(event),
            stream=LATEST.name(settings.subjects),
        )
    code, out, err = await invoke(settings, "status", "--timeout", "0.3")
    assert code == 0, err
    assert "2 foreign instance(s)" in out and "#4711 my-notebook:" in out and "price unknown" in out
    # another FleetPilot deployment's machine on the same account says whose it is
    assert "#4712 fleetpilot:staging:k:0 [FleetPilot deployment 'staging']: RTX 4090" in out
    assert "2 row(s) of the last list were unreadable" in out


async def test_status_without_any_snapshot_says_what_to_check(settings: Settings, js: JetStreamContext) -> None:
    code, _, err = await invoke(settings, "status", "--timeout", "0.3")
    assert code == 1 and "fleetpilot run fleet" in err


async def test_audit_tail_prints_the_most_recent_decisions_oldest_first(
    settings: Settings, js: JetStreamContext
) -> None:
    for minute, run_id in enumerate(("r1", "r2", "r3")):
        record = decision(run_id, minute=minute)
        await js.publish(
            settings.subjects.decision_audit,
            record.model_dump_json().encode(),
            headers=event_headers(record),
            stream=AUDIT.name(settings.subjects),
        )
    code, out, err = await invoke(settings, "audit", "tail", "-n", "2")
    assert code == 0, err
    assert "run r1" not in out
    assert out.index("run r2") < out.index("run r3")
    assert "REFUSED by last_producer" in out and "policy: r3: arrivals 240/h" in out

    code, out, _ = await invoke(settings, "audit", "tail", "-n", "5", "--json")
    assert [DecisionRecord.model_validate_json(line).run_id for line in out.splitlines()] == ["r1", "r2", "r3"]


async def test_commands_say_when_nats_is_unreachable(settings: Settings, nats_server: NatsServer) -> None:
    nats_server.stop()
    code, _, err = await invoke(settings, "status")
    assert code == 2 and f"cannot reach NATS at {settings.nats_url}" in err


async def test_audit_tail_in_one_line_each_and_filtered_by_instance_outcome_and_time(
    settings: Settings, js: JetStreamContext
) -> None:
    for minute, (run_id, outcome) in enumerate((("r1", "acted"), ("r2", "hold"), ("r3", "acted"))):
        record = decision(run_id, outcome=outcome, minute=minute)
        if run_id == "r3":  # acts on another machine only
            record = record.model_copy(update={"verdicts": record.verdicts[:1]})
        await js.publish(settings.subjects.decision_audit, record.model_dump_json().encode(),
                         headers=event_headers(record), stream=AUDIT.name(settings.subjects))  # fmt: skip
    code, out, err = await invoke(
        settings, "audit", "tail", "--oneline", "--instance", "33032712", "--outcome", "acted"
    )
    assert code == 0, err
    [line] = out.splitlines()
    assert line.startswith("03-02 08:00:00 ACTED") and "REFUSED by last_producer destroy #33032712 (idle)" in line
    code, out, _ = await invoke(settings, "audit", "tail", "--oneline", "--since", "2026-03-02T08:01:30")
    assert [line.split()[1] for line in out.splitlines()] == ["08:02:00"]
    code, _, err = await invoke(settings, "audit", "tail", "--outcome", "nope")
    assert code != 0 and "'nope': expected one of hold, acted" in err and "--outcome" in err
    code, _, err = await invoke(settings, "audit", "tail", "--since", "yesterday")
    assert code != 0 and "'yesterday': expected 30m, 2h, 1d" in err and "--since" in err
    # further back than the calendar goes: every decision, not a traceback
    code, out, err = await invoke(settings, "audit", "tail", "--oneline", "--since", "99999999999d")
    assert code == 0 and len(out.splitlines()) == 3, err
    code, _, err = await invoke(settings, "audit", "tail", "--since", "0001-01-01T00:00+05:00")
    assert code != 0 and "expected 30m, 2h, 1d" in err and "Traceback" not in err


async def test_status_wide_filters_by_state_and_lists_the_machines_gone_with_why(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    async def answer(msg: Msg) -> None:
        await msg.respond(snapshot().model_dump_json().encode())

    await nc.subscribe(settings.subjects.fleet_snapshot, cb=answer)
    await nc.flush()  # the server knows the responder before the CLI asks
    gone = InstanceTransitioned(
        occurred_at=NOW, source="fleet", instance_id=33032700, from_state=InstanceState.FAILED,
        to_state=InstanceState.GONE, price_usd_per_h=0.5, gpu_model="RTX 4090",
        detail="provisioner: destroyed (dead) by policy, key run-1234-0",
    )  # fmt: skip
    await js.publish(settings.subjects.fleet_instance(InstanceState.GONE), gone.model_dump_json().encode(),
                     headers=event_headers(gone), stream=INSTANCES.name(settings.subjects))  # fmt: skip
    code, narrow, err = await invoke(settings, "status", "--timeout", "30")
    assert code == 0, err
    assert max(len(line) for line in narrow.splitlines()) <= 80 and "host" not in narrow
    code, wide, err = await invoke(settings, "status", "-o", "wide", "--state", "producing", "--all", "--timeout", "30")
    assert code == 0, err
    assert "#33032712" in wide and "#33032713" not in wide  # the loading one is filtered out
    assert "host" in wide and "bench" in wide
    assert "#33032700 RTX 4090: provisioner: destroyed (dead) by policy, key run-1234-0" in wide
    code, _, err = await invoke(settings, "status", "--state", "sleeping")
    assert code != 0 and "'sleeping': expected one of" in err
