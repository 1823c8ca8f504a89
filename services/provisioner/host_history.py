"""This fleet's own memory of hosts and machines: incidents that fade over days, and measured throughput.

A machine that got stuck loading, exited with an error, went offline or failed its benchmark is penalised;
its host's other machines a little less. The penalty halves every `HALF_LIFE_S`, so a host is forgiven
over days, not forever. Bench results also leave a measured throughput ratio per machine, which ranking uses
instead of the GPU model's reference (a degraded but cheap machine can still be the best buy). A benchmark is
the host's own word, so a ratio measured from the machine's completed tasks replaces it and a later benchmark
does not replace that; either expires after `MEASURE_MAX_AGE_S`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared import gpu_models
from shared.contract import InstanceLine, InstanceState, RemovalReason

# Two days: a bad night on a host should cost it the next day's launches, not next week's.
HALF_LIFE_S = 2 * 86_400.0
# Beyond ten half-lives an incident weighs < 0.1%: forget it, so the record stays small.
FORGET_AFTER_S = 10 * HALF_LIFE_S
MAX_INCIDENTS = 2_000
MAX_STARTUPS = 5_000
# A week: hosts swap cards, drivers and cooling, so an older figure is no longer this machine's.
MEASURE_MAX_AGE_S = 7 * 86_400.0
# "bench": the suite the host itself ran and reported; "tasks": what the machine produced for us
MeasureSource = Literal["bench", "tasks"]
# A machine's trouble says something about its host (network, disks, operator), but less than about itself.
HOST_SHARE = 0.5


class IncidentKind(StrEnum):
    STUCK_LOADING = "stuck_loading"
    VAST_ERROR = "vast_error"  # exited, or an error in status_msg
    OFFLINE = "offline"
    NEVER_REGISTERED = "never_registered"
    BENCH_FAILED = "bench_failed"
    DEAD = "dead"
    FAILED = "failed"


INCIDENT_WEIGHTS: dict[IncidentKind, float] = {
    IncidentKind.STUCK_LOADING: 1.0,  # an hour or more paid for nothing
    IncidentKind.VAST_ERROR: 1.0,
    IncidentKind.BENCH_FAILED: 1.0,
    IncidentKind.FAILED: 1.0,
    IncidentKind.OFFLINE: 0.7,  # it worked for a while
    IncidentKind.DEAD: 0.7,
    IncidentKind.NEVER_REGISTERED: 0.7,  # could be our worker as much as the host
}

# destroy/stop reasons that say something about the machine (idle, over-provisioned, budget... do not)
REMOVAL_INCIDENTS: dict[RemovalReason, IncidentKind] = {
    RemovalReason.STUCK_LOADING: IncidentKind.STUCK_LOADING,
    RemovalReason.NEVER_REGISTERED: IncidentKind.NEVER_REGISTERED,
    RemovalReason.FAILED: IncidentKind.FAILED,
    RemovalReason.DEAD: IncidentKind.DEAD,
    RemovalReason.BENCH_FAILED: IncidentKind.BENCH_FAILED,
}


@dataclass
class Penalties:
    """Faded incident weights summed once; `of` gives a machine its own in full and its host's others' in part."""

    by_machine: dict[int, float] = field(default_factory=dict)
    by_host: dict[int, float] = field(default_factory=dict)
    by_host_machine: dict[tuple[int, int], float] = field(default_factory=dict)

    def of(self, host_id: int | None, machine_id: int | None) -> float:
        own = self.by_machine.get(machine_id, 0.0) if machine_id is not None else 0.0
        if host_id is None:
            return own
        # the host's incidents on other machines (this machine's own count in full above, not twice)
        siblings = self.by_host.get(host_id, 0.0)
        if machine_id is not None:
            siblings -= self.by_host_machine.get((host_id, machine_id), 0.0)
        return own + HOST_SHARE * max(0.0, siblings)


class Incident(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime
    kind: IncidentKind
    instance_id: int | None = None
    host_id: int | None = None
    machine_id: int | None = None


class ThroughputMeasure(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime
    ratio_to_reference: float = Field(gt=0)
    source: MeasureSource = "bench"  # absent in histories saved before task measures: those were benchmarks

    def expired(self, now: datetime) -> bool:
        return (now - self.at).total_seconds() >= MEASURE_MAX_AGE_S


@dataclass
class StartupMeans:
    """A machine's own last startup, else its host's machines' mean (one network, one disk, one operator)."""

    by_machine: dict[int, float] = field(default_factory=dict)
    by_host: dict[int, float] = field(default_factory=dict)

    def of(self, host_id: int | None, machine_id: int | None) -> float | None:
        if machine_id is not None and machine_id in self.by_machine:
            return self.by_machine[machine_id]
        return self.by_host.get(host_id) if host_id is not None else None


class StartupMeasure(BaseModel):
    """How long one of our launches took from create to vast's `running` on this machine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime
    seconds: float = Field(gt=0)
    host_id: int | None = None


class HostHistory(BaseModel):
    """Serializable as one JSON document (kept in Redis)."""

    model_config = ConfigDict(extra="forbid")

    incidents: list[Incident] = Field(default_factory=list)
    measured: dict[int, ThroughputMeasure] = Field(default_factory=dict, description="machine_id → last bench")
    startups: dict[int, StartupMeasure] = Field(
        default_factory=dict, description="machine_id → its last create → running"
    )

    def record(self, incident: Incident) -> None:
        """Once per instance and kind: a failure seen by every reconciliation is still one failure."""
        if incident.instance_id is not None and any(
            i.instance_id == incident.instance_id and i.kind == incident.kind for i in self.incidents
        ):
            return
        self.incidents.append(incident)
        if len(self.incidents) > MAX_INCIDENTS:
            self.incidents = self.incidents[-MAX_INCIDENTS:]

    def record_measure(self, machine_id: int, ratio_to_reference: float, at: datetime) -> None:
        """A benchmark's ratio: kept unless the machine's own task throughput is on record and fresh."""
        known = self.measured.get(machine_id)
        if known is not None and known.source == "tasks" and not known.expired(at):
            return
        self.measured[machine_id] = ThroughputMeasure(at=at, ratio_to_reference=ratio_to_reference)

    def record_task_throughput(self, machine_id: int, ratio_to_reference: float, at: datetime) -> None:
        """The ratio of what the machine produced for us to its model's reference: preferred to any benchmark."""
        self.measured[machine_id] = ThroughputMeasure(at=at, ratio_to_reference=ratio_to_reference, source="tasks")

    def fresh_measure(self, machine_id: int | None, now: datetime) -> ThroughputMeasure | None:
        measure = self.measured.get(machine_id) if machine_id is not None else None
        return measure if measure is not None and not measure.expired(now) else None

    def record_startup(self, machine_id: int, host_id: int | None, seconds: float, at: datetime) -> None:
        self.startups[machine_id] = StartupMeasure(at=at, seconds=seconds, host_id=host_id)
        if len(self.startups) > MAX_STARTUPS:  # the oldest goes
            del self.startups[min(self.startups, key=lambda m: self.startups[m].at)]

    def startup_means(self) -> StartupMeans:
        """Every machine's last startup and each host's mean, gathered once: ranking many offers reads these."""
        totals: dict[int, tuple[float, int]] = {}
        for measure in self.startups.values():
            if measure.host_id is not None:
                total, count = totals.get(measure.host_id, (0.0, 0))
                totals[measure.host_id] = (total + measure.seconds, count + 1)
        return StartupMeans(
            by_machine={machine_id: m.seconds for machine_id, m in self.startups.items()},
            by_host={host_id: total / count for host_id, (total, count) in totals.items()},
        )

    def forget_old(self, now: datetime) -> None:
        self.incidents = [i for i in self.incidents if (now - i.at).total_seconds() < FORGET_AFTER_S]
        self.measured = {machine: m for machine, m in self.measured.items() if not m.expired(now)}

    def penalty(self, host_id: int | None, machine_id: int | None, now: datetime) -> float:
        """Sum of faded incident weights: 0 for a clean record, ~1 just after one failure on this machine."""
        return self.penalties(now).of(host_id, machine_id)

    def penalties(self, now: datetime) -> Penalties:
        """Every incident faded once, summed by machine and by host: ranking many offers reads these sums."""
        penalties = Penalties()
        for incident in self.incidents:
            age_s = max(0.0, (now - incident.at).total_seconds())
            weight = INCIDENT_WEIGHTS[incident.kind] * 0.5 ** (age_s / HALF_LIFE_S)
            if incident.machine_id is not None:
                penalties.by_machine[incident.machine_id] = penalties.by_machine.get(incident.machine_id, 0.0) + weight
            if incident.host_id is not None:
                penalties.by_host[incident.host_id] = penalties.by_host.get(incident.host_id, 0.0) + weight
                if incident.machine_id is not None:
                    pair = (incident.host_id, incident.machine_id)
                    penalties.by_host_machine[pair] = penalties.by_host_machine.get(pair, 0.0) + weight
        return penalties

    def throughput_ratio(self, machine_id: int | None) -> float | None:
        if machine_id is None:
            return None
        measure = self.measured.get(machine_id)
        return measure.ratio_to_reference if measure else None


# a producing machine's window estimate is trusted after this many of our tasks (about 10 min at ~120 tasks/h):
# fewer say more about the window than about the machine
MIN_TASKS_FOR_MEASURE = 20


@dataclass(frozen=True)
class ProductionRatios:
    """What fleet's snapshot says each producing machine did for us, ÷ its model's reference: the ratios to
    record, and those beyond what any card of the model can do, left out for the caller to log."""

    trusted: dict[int, float] = field(default_factory=dict)
    implausible: dict[int, float] = field(default_factory=dict)


# a model's machines needed to tell a miscount from the workload: fewer, and the median is one of the suspects
MIN_MACHINES_TO_JUDGE = 3
# twice what the model's typical machine does: a healthy card's spread over its model is a tenth, and the bench
# fails a card reporting twice its reference (services/bench/verdict.py) for the same reason
IMPLAUSIBLE_ABOVE_MEDIAN = 2.0


def production_ratios(lines: Iterable[InstanceLine]) -> ProductionRatios:
    """machine_id → what each producing machine did for us ÷ its model's reference, from fleet's snapshot lines.

    The model is the one vast lists (fleet has it from the provisioner), never a host's own claim. A machine that
    did more than IMPLAUSIBLE_ABOVE_MEDIAN (2) times the median of its model's machines is a
    miscount, not a machine: a flood of completions named after one instance read as 100 times its model, and as
    the machine's own measure it replaced any benchmark and ranked its offers nearly free per task. It is dropped,
    not clamped (a clamped miscount still ranks at the most flattering figure allowed). The bound is relative to
    the fleet, not to the reference: the reference is a prior for one workload, and a user's tasks may run at
    several times it on every machine alike."""
    measured: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for line in lines:
        reference = gpu_models.reference_tasks_per_h(line.gpu_model)
        if (
            line.state is InstanceState.PRODUCING
            and line.machine_id is not None
            and line.tasks_completed >= MIN_TASKS_FOR_MEASURE
            and line.throughput_tasks_per_h
            and reference
        ):
            ratio = line.throughput_tasks_per_h / (reference * line.num_gpus)
            # compared with machines of the same model and GPU count: a worker per machine on 8 GPUs reads 1/8
            measured.setdefault((line.gpu_model or "", line.num_gpus), []).append((line.machine_id, ratio))
    ratios = ProductionRatios()
    for machines in measured.values():
        typical = statistics.median(r for _, r in machines) if len(machines) >= MIN_MACHINES_TO_JUDGE else math.inf
        for machine_id, ratio in machines:
            into = ratios.trusted if ratio <= IMPLAUSIBLE_ABOVE_MEDIAN * typical else ratios.implausible
            into[machine_id] = ratio
    return ratios


def bench_ratio(
    ratios_to_reference: dict[str, float], metrics: dict[str, float], reference_tasks_per_h: float | None
) -> float | None:
    """The throughput ratio a bench result implies: its task-rate ratio if given, else the worst ratio reported."""
    for key in ("tasks_per_h", "throughput"):
        if ratios_to_reference.get(key, 0) > 0:
            return ratios_to_reference[key]
    positive = [value for value in ratios_to_reference.values() if value > 0]
    if positive:
        return min(positive)
    if reference_tasks_per_h and metrics.get("tasks_per_h", 0) > 0:
        return metrics["tasks_per_h"] / reference_tasks_per_h
    return None
