"""`fleetpilot history INSTANCE` on a real nats-server: one machine's launch, states, refused and sent removals,
the provisioner's answers and its benchmark, in time order, and nothing of other machines."""

from __future__ import annotations

from datetime import timedelta

from nats.js import JetStreamContext

from shared.bus import event_headers
from shared.contract import (
    BenchResult,
    Event,
    InstanceState,
    InstanceTransitioned,
    ProvisionResult,
)
from shared.settings import Settings
from shared.streams import AUDIT, BENCH, INSTANCES
from tests.deploy.test_ops_cli import NOW, decision, invoke

MACHINE = 33032712


async def put(js: JetStreamContext, subject: str, event: Event, stream: str) -> None:
    await js.publish(subject, event.model_dump_json().encode(), headers=event_headers(event), stream=stream)


def moved(instance_id: int, to: InstanceState, minute: int, detail: str) -> InstanceTransitioned:
    return InstanceTransitioned(
        occurred_at=NOW + timedelta(minutes=minute), source="fleet", instance_id=instance_id, from_state=None,
        to_state=to, price_usd_per_h=0.5, detail=detail,
    )  # fmt: skip


async def test_history_tells_one_machines_story_from_the_streams(settings: Settings, js: JetStreamContext) -> None:
    s, instances = settings.subjects, INSTANCES.name(settings.subjects)
    launched = ProvisionResult(
        occurred_at=NOW + timedelta(seconds=30), source="provisioner", idempotency_key="launch-r1", command="launch",
        outcome="done", detail="launched 2", instance_ids=[MACHINE, 99],
    )  # fmt: skip
    await put(js, s.provision_result, launched, instances)
    await put(js, s.fleet_instance(InstanceState.REQUESTED), moved(MACHINE, InstanceState.REQUESTED, 1, "first seen"),
              instances)  # fmt: skip
    await put(js, s.fleet_instance(InstanceState.LOADING), moved(99, InstanceState.LOADING, 2, "another machine"),
              instances)  # fmt: skip
    await put(js, s.decision_audit, decision("r1"), AUDIT.name(s))  # launches it; its destroy refused
    await put(js, s.decision_audit, decision("r2", minute=90), AUDIT.name(s))
    bench = BenchResult(
        occurred_at=NOW + timedelta(minutes=70), source="bench", instance_id=MACHINE, kind="gpu", device="cuda",
        verdict="pass", explanation="1.02 x the RTX 4090 reference",
    )  # fmt: skip
    await put(js, s.bench_result, bench, BENCH.name(s))
    gone = moved(MACHINE, InstanceState.GONE, 120, "provisioner: destroyed (idle) by policy, key run-7-0")
    await put(js, s.fleet_instance(InstanceState.GONE), gone, instances)

    code, out, err = await invoke(settings, "history", str(MACHINE))
    assert code == 0, err
    lines = out.splitlines()
    assert "another machine" not in out
    assert "run r1: launch (policy) sent: within budget" in lines[0]
    assert "launch done: launched 2 (key launch-r1)" in out
    assert "run r1: destroy (agent) refused by last_producer: the last producing machine" in out
    assert "gpu benchmark pass: 1.02 x the RTX 4090 reference" in out
    assert "new -> gone: provisioner: destroyed (idle) by policy, key run-7-0" in lines[-1]
    assert [line[:14] for line in lines] == sorted(line[:14] for line in lines), "oldest first"


async def test_history_of_an_unknown_machine_says_nothing_is_recorded(settings: Settings, js: JetStreamContext) -> None:
    code, out, _ = await invoke(settings, "history", "12345")
    assert code == 0 and "nothing recorded for instance 12345" in out


def test_a_decision_record_read_back_keeps_each_commands_verb() -> None:
    from shared.contract import DecisionRecord

    record = DecisionRecord.model_validate_json(decision("r1").model_dump_json())
    assert [type(v.action).__name__ for v in record.verdicts] == ["LaunchInstances", "DestroyInstance"]
    # a record written before commands said their verb still reads (a removal as a stop, all it could say)
    old = decision("r0").model_dump(mode="json")
    for verdict in old["verdicts"]:
        verdict["action"].pop("verb")
    again = DecisionRecord.model_validate(old)
    assert [type(v.action).__name__ for v in again.verdicts] == ["LaunchInstances", "StopInstance"]
