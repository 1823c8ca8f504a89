"""The agent carries out parking, resuming and bids as the policy recommends them, through the guardrails."""

from __future__ import annotations

from shared.contract import (
    InstanceState,
    LaunchInstances,
    LaunchReason,
    ParkReason,
    RemovalReason,
    ResumeInstance,
    StopInstance,
)
from shared.settings import Settings
from sim.ollama.server import OllamaStandIn
from tests.agent.builders import NOW, instance, run_inputs, snapshot
from tests.agent.conftest import AgentFactory
from tests.agent.ports import guarded_ports


def command_fields() -> dict[str, object]:
    return {"occurred_at": NOW, "source": "decider", "requested_by": "policy"}


async def test_the_agent_resumes_parks_and_bids_as_recommended(
    make_agent: AgentFactory, agent_settings: Settings, ollama: OllamaStandIn
) -> None:
    await ollama.set_behaviour("follow")
    parked = instance(700, InstanceState.PARKED).model_copy(update={"park_reason": ParkReason.STOPPED})
    drained = instance(701, InstanceState.DRAINING)
    fleet = snapshot([instance(100), instance(101), parked, drained])
    actions = [
        ResumeInstance(idempotency_key="policy-key-0010", instance_id=700, reason=LaunchReason.FORECAST,
                       **command_fields()),  # type: ignore[arg-type]
        StopInstance(idempotency_key="policy-key-0011", instance_id=701, reason=RemovalReason.PARK,
                     **command_fields()),  # type: ignore[arg-type]
        LaunchInstances(idempotency_key="policy-key-0012", count=2, gpu_models=[], launch_priority="normal",
                        reason=LaunchReason.FORECAST, interruptible=1, **command_fields()),  # type: ignore[arg-type]
    ]  # fmt: skip
    inputs = run_inputs("run-park", fleet=fleet, actions=actions, recommendation="resume 1, park 1, launch 2")
    ports = guarded_ports(agent_settings, inputs)
    outcome = await make_agent(prompt_style="compact").advise(inputs, ports)
    assert outcome.status == "ok", outcome
    allowed = ports.allowed
    assert any(isinstance(a, ResumeInstance) and a.instance_id == 700 and a.requested_by == "agent" for a in allowed)
    assert any(isinstance(a, StopInstance) and a.instance_id == 701 and a.reason is RemovalReason.PARK
               for a in allowed)  # fmt: skip
    launches = [a for a in allowed if isinstance(a, LaunchInstances)]
    assert launches and launches[0].interruptible == 1
