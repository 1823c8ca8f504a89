"""Every contract model round-trips through JSON and rejects unknown fields and wrong types by name."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone

import pydantic
import pytest

from shared import contract as c

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
ENVELOPE = {"occurred_at": NOW, "source": "test"}

SIGNAL = c.DemandSignal(
    **ENVELOPE,
    state=c.DemandState.SERVED,
    explanation="120 tasks/h arriving, capacity 240 tasks/h",
    trend=c.DemandTrend.STEADY,
    pending_tasks=3,
    running_tasks=8,
    windows=[
        c.WindowStats(
            window_s=900,
            arrival_rate_per_h=120,
            completion_rate_per_h=118,
            failure_rate_per_h=0,
            mean_task_duration_s=240,
            arrival_trend_per_h2=0.5,
        )
    ],
    sustained_arrival_rate_per_h=120,
    producing_workers=2,
    per_worker_throughput_tasks_per_h=120,
    fleet_capacity_tasks_per_h=240,
    backlog_worker_hours=0.025,
    above_capacity_for_s=0,
    signal_seq=7,
    season=c.SeasonEcho(
        season_s=86400,
        bucket_s=900,
        starts_at=NOW - timedelta(days=1),
        level_then_per_h=110,
        rates_then_per_h=[110, 130, 150],
    ),
)
LAUNCH = c.LaunchInstances(
    **ENVELOPE,
    idempotency_key="launch-0001",
    requested_by="policy",
    count=2,
    gpu_models=["RTX 4090"],
    launch_priority="normal",
    reason=c.LaunchReason.SUSTAINED_DEMAND,
)
LINE = c.InstanceLine(
    instance_id=33032712,
    state=c.InstanceState.PRODUCING,
    gpu_model="RTX 4090",
    price_usd_per_h=0.5,
    created_at=NOW,
    state_since=NOW,
    line="#33032712 RTX 4090 producing $0.50/h 2.3h up 118 tasks/h",
)

EXAMPLES: list[c.Event] = [
    c.TaskEvent(**ENVELOPE, kind="completed", task_id="t1", worker_id="w1", instance_id=5, duration_s=240.0),
    c.QueueSnapshot(**ENVELOPE, queues=[c.QueueDepth(task_type="prove", pending=59, running=8)]),
    SIGNAL,
    c.InstanceObserved(**ENVELOPE, instance_id=1, state=c.InstanceState.LOADING, price_usd_per_h=0.4),
    c.InstanceTransitioned(
        **ENVELOPE,
        instance_id=1,
        from_state=c.InstanceState.LOADING,
        to_state=c.InstanceState.FAILED,
        failure_reason=c.FailureReason.STUCK_LOADING,
        price_usd_per_h=0.4,
    ),
    c.FleetSnapshotRequest(**ENVELOPE),
    c.FleetSnapshot(
        **ENVELOPE,
        instances=[LINE],
        counts_by_state={c.InstanceState.PRODUCING: 1},
        spend_usd_per_h=0.5,
        producing_instances=1,
        arriving_instances=0,
    ),
    c.Trigger(**ENVELOPE, priority="p0", reason=c.TriggerReason.WORKERS_STALLED, detail="59 queued"),
    LAUNCH,
    c.StopInstance(
        **ENVELOPE,
        idempotency_key="stop-00001",
        requested_by="agent",
        instance_id=1,
        reason=c.RemovalReason.IDLE,
    ),
    c.StopInstance(
        **ENVELOPE,
        idempotency_key="park-00001",
        requested_by="policy",
        instance_id=2,
        reason=c.RemovalReason.PARK,
    ),
    c.ResumeInstance(
        **ENVELOPE,
        idempotency_key="resume-00001",
        requested_by="policy",
        instance_id=2,
        reason=c.LaunchReason.SUSTAINED_DEMAND,
    ),
    c.DestroyInstance(
        **ENVELOPE,
        idempotency_key="kill-00001",
        requested_by="policy",
        instance_id=1,
        reason=c.RemovalReason.DEAD,
    ),
    c.DrainInstance(
        **ENVELOPE, idempotency_key="drain-0001", requested_by="policy", instance_id=1, reason=c.RemovalReason.IDLE
    ),
    c.ProvisionResult(**ENVELOPE, idempotency_key="launch-0001", command="launch", outcome="done", instance_ids=[1]),
    c.OfferQuery(**ENVELOPE, gpu_models=["RTX 4090"], max_price_usd_per_h=0.6),
    c.VastAccountObserved(
        **ENVELOPE,
        foreign_count=1,
        foreign_instances=[c.ForeignInstance(instance_id=77, label="my-notebook", price_usd_per_h=None)],
        unreadable_rows=1,
    ),
    c.OfferList(
        **ENVELOPE,
        offers=[
            c.OfferLine(
                offer_id=9,
                gpu_model="RTX 4090",
                num_gpus=1,
                price_usd_per_h=0.5,
                reliability=0.99,
                expected_usd_per_task=0.0042,
            )
        ],
    ),
    c.ChargesQuery(**ENVELOPE, since=date(2026, 3, 2)),
    c.ChargeList(
        **ENVELOPE,
        lines=[
            c.ChargeLine(
                instance_id=1,
                gpu_model="RTX 4090",
                kind="gpu",
                day=date(2026, 3, 2),
                quantity=2.0,
                amount_usd=1.0,
                description="Instance 1 GPU charge: 2.000 hours * $0.5000",
            )
        ],
    ),
    c.BenchRequest(**ENVELOPE, instance_id=1, kind="gpu"),
    c.BenchResult(**ENVELOPE, instance_id=1, kind="gpu", device="cpu", verdict="pass", metrics={"bf16_tflops": 1.0}),
    c.OperatorMessage(**ENVELOPE, conversation_id="conv1", operator="alice", text="why two machines?"),
    c.OperatorReply(**ENVELOPE, conversation_id="conv1", in_reply_to="abc", text="because demand"),
    c.DecisionRecord(
        **ENVELOPE,
        run_id="run-1",
        triggers=[c.TriggerRef(priority="p0", reason=c.TriggerReason.OPERATOR_MESSAGE)],
        started_at=NOW,
        finished_at=NOW + timedelta(seconds=1),
        duration_s=1.0,
        signal_freshness="fresh",
        snapshot_freshness="fresh",
        signal=SIGNAL,
        recommendation="hold: capacity 240 tasks/h covers 120 tasks/h",
        verdicts=[c.GuardrailVerdict(action=LAUNCH, verdict="refused", rule="budget", explanation="over $20/h")],
        outcome="refused",
    ),
    c.DeadLetter(
        **ENVELOPE,
        service="demand",
        reason="invalid_message",
        error="kind: bad",
        original_subject="fp.demand.task.x",
        payload="{}",
        payload_base64="e30=",
    ),
]


def test_every_message_type_in_the_contract_has_an_example() -> None:
    event_types = {
        obj for obj in vars(c).values() if isinstance(obj, type) and issubclass(obj, c.Event) and obj is not c.Event
    }
    abstract = {c.ProvisionCommand}
    assert event_types - abstract == {type(e) for e in EXAMPLES}


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_round_trips_through_json(event: c.Event) -> None:
    again = type(event).model_validate_json(event.model_dump_json())
    assert again == event


# written by the job system, not by FleetPilot: its next version may add fields (ToleratesUnknownFields)
JOB_SYSTEM_MESSAGES = (c.TaskEvent, c.QueueSnapshot)
OUR_EXAMPLES = [event for event in EXAMPLES if not isinstance(event, JOB_SYSTEM_MESSAGES)]
JOB_SYSTEM_EXAMPLES = [event for event in EXAMPLES if isinstance(event, JOB_SYSTEM_MESSAGES)]


@pytest.mark.parametrize("event", OUR_EXAMPLES, ids=lambda e: type(e).__name__)
def test_rejects_an_unknown_field_naming_it(event: c.Event) -> None:
    payload = json.loads(event.model_dump_json())
    payload["surprise_field"] = 1
    with pytest.raises(pydantic.ValidationError) as error:
        type(event).model_validate_json(json.dumps(payload))
    assert "surprise_field" in str(error.value)


@pytest.mark.parametrize("event", JOB_SYSTEM_EXAMPLES, ids=lambda e: type(e).__name__)
def test_a_job_system_message_ignores_an_unknown_field_and_names_it(event: c.Event) -> None:
    payload = json.loads(event.model_dump_json())
    payload["surprise_field"] = 1
    for queue in payload.get("queues", []):
        queue["owner"] = "team-a"
    read = type(event).model_validate_json(json.dumps(payload))
    assert read == event
    assert isinstance(read, c.ToleratesUnknownFields)
    expected = ["surprise_field"] + (["queues[].owner"] if "queues" in payload else [])
    assert read.unknown_fields() == expected
    # what is kept beyond the handling leaves them out (a producer's extra field is as large as it likes)
    kept = read.without_unknown_fields()
    assert kept == event and kept.unknown_fields() == []
    assert json.loads(kept.model_dump_json()) == json.loads(event.model_dump_json())
    assert event.without_unknown_fields() is event


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_rejects_a_wrong_type_naming_the_field(event: c.Event) -> None:
    payload = json.loads(event.model_dump_json())
    payload["occurred_at"] = "not a time"
    with pytest.raises(pydantic.ValidationError) as error:
        type(event).model_validate_json(json.dumps(payload))
    assert "occurred_at" in str(error.value)


def test_wrong_type_in_a_domain_field_names_field_and_value() -> None:
    payload = json.loads(EXAMPLES[0].model_dump_json())
    payload["duration_s"] = "four minutes"
    with pytest.raises(pydantic.ValidationError) as error:
        c.TaskEvent.model_validate_json(json.dumps(payload))
    assert "duration_s" in str(error.value) and "four minutes" in str(error.value)


def test_a_resume_needs_its_reason_from_the_launch_reasons() -> None:
    payload = json.loads(next(e for e in EXAMPLES if isinstance(e, c.ResumeInstance)).model_dump_json())
    del payload["reason"]
    with pytest.raises(pydantic.ValidationError, match="reason"):
        c.ResumeInstance.model_validate(payload)
    payload["reason"] = "because"
    with pytest.raises(pydantic.ValidationError, match="reason"):
        c.ResumeInstance.model_validate(payload)


def test_a_parked_line_commits_its_storage_and_an_outbid_one_its_price() -> None:
    common = {
        "instance_id": 7,
        "state": c.InstanceState.PARKED,
        "price_usd_per_h": 0.5,
        "storage_usd_per_h": 0.02,
        "created_at": ENVELOPE["occurred_at"],
        "state_since": ENVELOPE["occurred_at"],
        "line": "#7",
    }
    assert c.InstanceLine(**common, park_reason=c.ParkReason.STOPPED).committed_usd_per_h == 0.02
    # vast resumes an outbid bid without asking: its price may come back at any moment
    assert c.InstanceLine(**common, park_reason=c.ParkReason.OUTBID).committed_usd_per_h == 0.5
    unknown_storage = {**common, "storage_usd_per_h": None}
    assert c.InstanceLine(**unknown_storage, park_reason=c.ParkReason.STOPPED).committed_usd_per_h == 0.5


def test_launch_priority_is_a_required_enum() -> None:
    payload = json.loads(LAUNCH.model_dump_json())
    del payload["launch_priority"]
    with pytest.raises(pydantic.ValidationError, match="launch_priority"):
        c.LaunchInstances.model_validate_json(json.dumps(payload))
    payload["launch_priority"] = "urgent"
    with pytest.raises(pydantic.ValidationError, match="launch_priority"):
        c.LaunchInstances.model_validate_json(json.dumps(payload))


def test_times_are_utc_and_naive_times_are_refused() -> None:
    paris = timezone(timedelta(hours=1))
    event = c.TaskEvent(occurred_at=datetime(2026, 3, 2, 9, 0, tzinfo=paris), source="t", kind="submitted", task_id="x")
    assert event.occurred_at == NOW and event.occurred_at.tzinfo == UTC
    with pytest.raises(pydantic.ValidationError, match="occurred_at"):
        c.TaskEvent(occurred_at=datetime(2026, 3, 2, 9, 0), source="t", kind="submitted", task_id="x")


def test_a_moment_beyond_the_last_utc_datetime_is_a_validation_error() -> None:
    """A producer's `9999-12-31T23:59:59-23:59` lies past what Python can hold in UTC: refused like any bad field,
    so a consumer dead-letters it (an OverflowError escaped validation and answered a host's report with a 500)."""
    with pytest.raises(pydantic.ValidationError, match="occurred_at"):
        c.QueueSnapshot.model_validate_json(
            '{"occurred_at": "9999-12-31T23:59:59-23:59", "source": "jobs", "queues": []}'
        )


@pytest.mark.parametrize("duration", ["Infinity", "1e400", "-1", str(8 * 86400)])
def test_a_task_duration_must_be_a_real_length_of_time(duration: str) -> None:
    """An endless or negative run, or one longer than a week, is nonsense from the job system: one endless duration
    made every worker look busy in demand's windows and left NaN there once it aged out."""
    text = (
        '{"occurred_at": "2026-03-02T08:00:00Z", "source": "jobs", "kind": "completed", "task_id": "t1",'
        f' "duration_s": {duration}}}'
    )
    with pytest.raises(pydantic.ValidationError, match="duration_s"):
        c.TaskEvent.model_validate_json(text)
    assert c.TaskEvent.model_validate_json(text.replace(duration, "240.0")).duration_s == 240.0


def test_every_event_carries_the_envelope() -> None:
    for event in EXAMPLES:
        dumped = json.loads(event.model_dump_json())
        assert {"event_id", "occurred_at", "source", "schema_version"} <= dumped.keys()
        assert dumped["schema_version"] == c.SCHEMA_VERSION


def test_a_command_expires_at_its_expires_at_and_one_without_never_does() -> None:
    sent = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    launch = c.LaunchInstances(
        occurred_at=sent,
        source="decider",
        idempotency_key="expiry-0001",
        requested_by="policy",
        count=1,
        launch_priority="normal",
        reason=c.LaunchReason.BACKLOG,
        expires_at=sent + timedelta(minutes=5),
    )
    assert not launch.expired(sent + timedelta(minutes=4, seconds=59))
    assert launch.expired(sent + timedelta(minutes=5))
    round_tripped = c.LaunchInstances.model_validate_json(launch.model_dump_json())
    assert round_tripped.expires_at == launch.expires_at
    assert not launch.model_copy(update={"expires_at": None}).expired(sent + timedelta(days=30))
