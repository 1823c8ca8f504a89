"""A past for question scenarios: decision records and instance transitions built from a few plain values, and a
record reader that hands them to the agent as the JetStream reader would."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from services.decider.agent.record import Record
from shared.contract import (
    DecisionRecord,
    DestroyInstance,
    GuardrailVerdict,
    InstanceState,
    InstanceTransitioned,
    LaunchInstances,
    LaunchReason,
    RemovalReason,
    StopInstance,
    TriggerRef,
)
from shared.contract.base import Event

SOURCE = "evaluation"


def transition(
    at: datetime,
    instance_id: int,
    to_state: str,
    *,
    from_state: str | None = None,
    gpu_model: str = "RTX 4090",
    price: float = 0.5,
    detail: str = "",
) -> InstanceTransitioned:
    return InstanceTransitioned(
        occurred_at=at,
        source="fleet",
        instance_id=instance_id,
        from_state=InstanceState(from_state) if from_state else None,
        to_state=InstanceState(to_state),
        gpu_model=gpu_model,
        price_usd_per_h=price,
        detail=detail,
    )


def life(
    instance_id: int, start: datetime, end: datetime | None, *, gpu_model: str = "RTX 4090", price: float = 0.5
) -> list[InstanceTransitioned]:
    """A machine requested at `start`, producing 1 h later, gone at `end` (None: still producing)."""
    moves = [
        transition(start, instance_id, "requested", gpu_model=gpu_model, price=price),
        transition(
            start + timedelta(hours=1),
            instance_id,
            "producing",
            from_state="requested",
            gpu_model=gpu_model,
            price=price,
        ),
    ]
    if end is not None:
        moves.append(transition(end, instance_id, "gone", from_state="producing", gpu_model=gpu_model, price=price))
    return moves


def _key(at: datetime, what: str) -> str:
    return f"ev-{what}-{at:%Y%m%d%H%M%S}"


def removal(
    at: datetime, instance_id: int, *, verb: Literal["destroy", "stop"] = "destroy", reason: str = "idle"
) -> DestroyInstance | StopInstance:
    kind = DestroyInstance if verb == "destroy" else StopInstance
    return kind(
        occurred_at=at,
        source="decider",
        idempotency_key=_key(at, f"{verb}{instance_id}"),
        requested_by="policy",
        instance_id=instance_id,
        reason=RemovalReason(reason),
    )


def launch(at: datetime, count: int) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=at,
        source="decider",
        idempotency_key=_key(at, f"launch{count}"),
        requested_by="policy",
        count=count,
        launch_priority="normal",
        reason=LaunchReason.SUSTAINED_DEMAND,
    )


def decision(
    at: datetime,
    run_id: str,
    recommendation: str,
    actions: list[Any] | None = None,
    *,
    explanation: str = "",
    refused_by: str | None = None,
) -> DecisionRecord:
    verdicts = [
        GuardrailVerdict(
            action=action,
            verdict="refused" if refused_by else "allowed",
            rule=refused_by,
            explanation=explanation or recommendation[:500],
        )
        for action in actions or []
    ]
    return DecisionRecord(
        occurred_at=at,
        source="decider",
        run_id=run_id,
        triggers=[TriggerRef(priority="heartbeat")],
        started_at=at,
        finished_at=at + timedelta(seconds=2),
        duration_s=2.0,
        signal_freshness="fresh",
        snapshot_freshness="fresh",
        recommendation=recommendation,
        verdicts=verdicts,
        commands_sent=[v.action.idempotency_key for v in verdicts if v.verdict == "allowed"],
        outcome="acted" if verdicts and not refused_by else "hold",
    )


class StaticRecordReader:
    """The agent's `RecordReader` over a fixed past: what was recorded before `since` is left out, as a read from
    the streams would leave it."""

    def __init__(self, decisions: list[DecisionRecord], transitions: list[InstanceTransitioned]) -> None:
        self.decisions = sorted(decisions, key=lambda r: r.started_at)
        self.transitions = sorted(transitions, key=lambda t: t.occurred_at)
        self.reads: list[datetime] = []

    async def read(self, since: datetime) -> Record:
        self.reads.append(since)
        return Record(
            since=since,
            decisions=[r for r in self.decisions if r.started_at >= since],
            transitions=[t for t in self.transitions if _at(t) >= since],
        )


def _at(event: Event) -> datetime:
    return event.occurred_at


def eval_past(now: datetime) -> StaticRecordReader:
    """The past the question scenarios ask about (instructions.yaml names its numbers): a launch of 3 at 00:35, one
    machine destroyed idle at 11:00, machines running since yesterday."""
    launch_at = now.replace(hour=0, minute=35)
    destroyed_at = now.replace(hour=11, minute=0)
    yesterday = now - timedelta(days=1)
    return StaticRecordReader(
        decisions=[
            decision(
                launch_at,
                "run-0035",
                "launch 3: sustained arrivals 410 tasks/h exceed capacity 240 tasks/h for 1.5 h; backlog 2.8 worker-h",
                [launch(launch_at, 3)],
            ),
            decision(
                destroyed_at,
                "run-1100",
                "scale down: 1 producer idle",
                [removal(destroyed_at, 33032720)],
                explanation="idle 42 min with 0 tasks queued; 4 other producers remain",
            ),
            decision(now - timedelta(minutes=5), "run-1355", "hold: 12 tasks queued, 0.1 worker-h of backlog"),
        ],
        transitions=[
            *life(33032720, yesterday.replace(hour=9, minute=0), destroyed_at, price=0.52),
            *life(33032721, yesterday.replace(hour=6, minute=0), None, gpu_model="RTX 5090", price=0.43),
            *life(33032722, launch_at, None, price=0.48),
        ],
    )
