"""The JetStream streams, declared once here; services bind to them and never declare their own.

`ensure_streams` creates or updates them: one admin step (`fleetpilot streams ensure`, a Kubernetes Job, a
compose one-shot) runs it with the only NATS user allowed to; a service waits for them (`wait_for_streams`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import nats.errors
from faststream.nats import ConsumerConfig, DeliverPolicy, JStream
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError, ServiceUnavailableError

from shared.subjects import Subjects

DAY_S = 86_400.0
MIB = 1024 * 1024

# Every stream is bounded (security review, issue #24): all share one JetStream store, and with no limits a job
# system flooding task events filled it until command and audit publishes failed, the fleet froze and kept
# billing. The sum of max_bytes (under 2 GiB) stays under half the stores of deploy/nats/nats.conf (10 GB) and k8s
# (8 GB), so no stream can take another's room; a test keeps it so. Sizes: a task event is ~0.5 KB, so FP_DEMAND's
# 256 MiB holds ~6 weeks at 120 tasks/h; FP_AUDIT's 1 GiB holds its 90 days at 30 runs/h of ~10 KB records (larger
# records shorten that: the oldest go first).

# A command is decided on the demand of its moment: one queued this long (a provisioner outage) is dropped by the
# stream, and the provisioner refuses any past its own expires_at before that (FLEETPILOT_DECIDER_COMMAND_TTL_S).
COMMANDS_MAX_AGE_S = 15 * 60.0
# the decider's default expiry of a command (one heartbeat of demand change; FLEETPILOT_DECIDER_COMMAND_TTL_S)
DEFAULT_COMMAND_TTL_S = 300.0

# Publishers set Nats-Msg-Id = event_id; JetStream drops a repeat inside this window (a retried publish
# after a lost ack must not become two events).
DUPLICATE_WINDOW_S = 300.0

# A handler that fails this many deliveries goes to the dead-letter subject instead of looping forever.
MAX_DELIVER = 5
ACK_WAIT_S = 30.0

# A service started alongside the admin step (compose, a Kubernetes rollout) waits this long for the streams;
# past it, it exits and its supervisor restarts it.
STREAMS_WAIT_S = 120.0
STREAMS_POLL_MAX_S = 5.0


@dataclass(frozen=True)
class StreamSpec:
    suffix: str
    subjects: Callable[[Subjects], list[str]]
    retention: RetentionPolicy = RetentionPolicy.LIMITS
    max_age_s: float = 7 * DAY_S
    max_msgs_per_subject: int = -1
    description: str = ""
    max_bytes: int = 64 * MIB
    max_msgs: int = 100_000
    # OLD: the newest matter (events, records); NEW: a full stream refuses the publish, its publisher sees the
    # error and alerts, rather than dropping a queued command nobody has acted on
    discard: DiscardPolicy = DiscardPolicy.OLD

    def name(self, subjects: Subjects) -> str:
        return f"{subjects.prefix.upper().replace('-', '_')}_{self.suffix}"

    def config(self, subjects: Subjects, replicas: int = 1) -> StreamConfig:
        return StreamConfig(
            num_replicas=replicas,
            name=self.name(subjects),
            description=self.description,
            subjects=self.subjects(subjects),
            retention=self.retention,
            storage=StorageType.FILE,
            max_age=self.max_age_s,
            max_msgs_per_subject=self.max_msgs_per_subject,
            max_bytes=self.max_bytes,
            max_msgs=self.max_msgs,
            discard=self.discard,
            duplicate_window=DUPLICATE_WINDOW_S,
        )


DEMAND = StreamSpec(
    "DEMAND",
    lambda s: [s.tasks_all, s.queue],
    # the job system writes here, outside FleetPilot's control: a flood pushes out its own oldest events only
    max_bytes=256 * MIB,
    max_msgs=1_000_000,
    description="task events and queue snapshots from the job system",
)
LATEST = StreamSpec(
    "LATEST",
    lambda s: [s.demand_signal, s.fleet_snapshot_published, s.provision_account],
    max_msgs_per_subject=1,
    max_age_s=DAY_S,
    max_bytes=16 * MIB,
    max_msgs=1_000,
    description="last value of the demand signal, the fleet snapshot and the provisioner's account view",
)
INSTANCES = StreamSpec(
    "INSTANCES",
    lambda s: [s.provision_instance_all, s.provision_result, s.fleet_instance_all],
    max_age_s=30 * DAY_S,
    max_bytes=256 * MIB,
    max_msgs=1_000_000,
    description="provisioner observations and results, fleet lifecycle transitions",
)
TRIGGERS = StreamSpec(
    "TRIGGERS",
    lambda s: [f"{s.prefix}.trigger.>"],
    max_age_s=DAY_S,
    description="P0/P1 wake-ups for the decider",
)
COMMANDS = StreamSpec(
    "COMMANDS",
    lambda s: [s.provision_commands_all, s.fleet_drain],
    retention=RetentionPolicy.WORK_QUEUE,
    max_age_s=COMMANDS_MAX_AGE_S,
    max_msgs=10_000,
    # a full command queue refuses the next command (the decider counts and alerts: PUBLISH_FAILED) rather than
    # silently dropping the oldest one that the provisioner has not taken yet
    discard=DiscardPolicy.NEW,
    description="commands; a work queue so each is taken once (provisioner: provision.*, fleet: drain)",
)
BENCH = StreamSpec(
    "BENCH", lambda s: [s.bench_request, s.bench_result], max_age_s=30 * DAY_S, max_bytes=128 * MIB, max_msgs=200_000
)
OPERATOR = StreamSpec("OPERATOR", lambda s: [s.operator_message, s.operator_reply], max_age_s=30 * DAY_S)
AUDIT = StreamSpec(
    "AUDIT",
    lambda s: [s.decision_audit],
    max_age_s=90 * DAY_S,
    max_bytes=1024 * MIB,
    max_msgs=1_000_000,
    description="every decision with inputs, reasoning, actions, verdicts",
)
DLQ = StreamSpec(
    "DLQ",
    lambda s: [f"{s.prefix}.dlq.>"],
    max_age_s=30 * DAY_S,
    max_bytes=128 * MIB,
    max_msgs=200_000,
    description="rejected messages",
)

ALL_STREAMS: tuple[StreamSpec, ...] = (
    DEMAND,
    LATEST,
    INSTANCES,
    TRIGGERS,
    COMMANDS,
    BENCH,
    OPERATOR,
    AUDIT,
    DLQ,
)


async def ensure_streams(js: JetStreamContext, subjects: Subjects, replicas: int = 1) -> list[str]:
    """Create each stream, or bring an existing one to this config. Returns the stream names."""
    names = []
    for spec in ALL_STREAMS:
        config = spec.config(subjects, replicas)
        try:
            await js.stream_info(config.name or "")
            await js.update_stream(config)
        except NotFoundError:
            await js.add_stream(config)
        names.append(spec.name(subjects))
    return names


async def missing_streams(js: JetStreamContext, subjects: Subjects) -> list[str]:
    """The FleetPilot streams that do not exist yet (a service only binds; it cannot create one)."""
    missing = []
    for spec in ALL_STREAMS:
        try:
            await js.stream_info(spec.name(subjects))
        except NotFoundError:
            missing.append(spec.name(subjects))
    return missing


async def _missing_or_unanswered(js: JetStreamContext, subjects: Subjects) -> list[str]:
    """A JetStream that does not answer yet (a cluster electing its leaders) is waited for, like a missing stream."""
    try:
        return await missing_streams(js, subjects)
    except (nats.errors.TimeoutError, ServiceUnavailableError) as error:
        return [f"(JetStream did not answer: {type(error).__name__})"]


async def wait_for_streams(
    js: JetStreamContext,
    subjects: Subjects,
    timeout_s: float = STREAMS_WAIT_S,
    on_missing: Callable[[list[str]], None] = lambda names: None,
) -> None:
    """Until every stream exists: a service started before the admin step has run waits for it, then binds."""
    deadline = time.monotonic() + timeout_s
    delay_s = 0.1
    while missing := await _missing_or_unanswered(js, subjects):
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"JetStream streams {', '.join(missing)} do not exist after {timeout_s:.0f}s: "
                "run `fleetpilot streams ensure` with the NATS admin user"
            )
        on_missing(missing)
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, STREAMS_POLL_MAX_S)


def bound_stream(spec: StreamSpec, subjects: Subjects) -> JStream:
    """A FastStream handle on a stream declared by `ensure_streams` (declare=False: never ad hoc)."""
    return JStream(spec.name(subjects), declare=False)


def durable_consumer(
    durable_name: str,
    *,
    max_deliver: int = MAX_DELIVER,
    ack_wait_s: float = ACK_WAIT_S,
    deliver_policy: DeliverPolicy = DeliverPolicy.ALL,
) -> ConsumerConfig:
    """Explicit acks after processing, a bounded number of redeliveries, then the dead-letter path."""
    return ConsumerConfig(
        durable_name=durable_name,
        max_deliver=max_deliver,
        ack_wait=ack_wait_s,
        deliver_policy=deliver_policy,
    )
