"""The discrete-event loop: one heap of events on simulated time, the fluid queue between them, the fleet's ledger.

Events are minute boundaries of the trace (the arrival rate changes), machine milestones (running, producing,
exited, offline, drained), policy decisions and plot samples. Each costs O(log n) on the heap plus the queue
segments it consumes, so a run is a few events per simulated minute whatever the fleet size.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import itertools
import math
import random
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Protocol

from services.decider.guardrails import GuardrailConfig, SentLaunch, worst_price_usd_per_h
from services.decider.step import judge, ledger_of_totals
from services.provisioner.host_history import IncidentKind
from shared.contract import LaunchInstances, LaunchReason, RemovalReason, bid_usd_per_h
from sim.vast.economics import BidLevels, outbid, storage_usd_per_h
from sim.vast.scenario import Fate, Scenario
from sim.world.fluid import FluidQueue, ServicePiece
from sim.world.lifecycle import check_move
from sim.world.model import (
    EPOCH,
    Action,
    FleetEvent,
    Launch,
    LaunchDraws,
    Machine,
    MachineState,
    MachineView,
    Market,
    Offer,
    Remove,
    Resume,
    ResumeDraws,
    Schedule,
    WorldConfig,
    WorldView,
    initial_fleet_size,
    offers_from_scenario,
    startup_model,
    startup_s,
)
from sim.world.objective import ObjectiveConfig, WaitStats
from sim.world.trace import Trace

INF = math.inf
# event kinds, in the order they are handled when they fall on the same moment
MINUTE, RUNNING, READY, EXIT, OFFLINE, GONE, PARK, BIDS, DECIDE, SAMPLE, END = range(11)
BID_TICK_S = 60.0  # how often other renters' bids move and interruptible machines are paused or resumed
OUTBID_PAUSES = frozenset({MachineState.LOADING, MachineState.PRODUCING, MachineState.DRAINING, MachineState.RESUMING})
TARGET_SAMPLES = 1500
LAUNCH_COMMAND_MAX = 100  # shared.contract.LaunchInstances.count's upper bound


class WorldPolicy(Protocol):
    """A scaling policy as the world drives it: asked every `decision_interval_s`, answers with actions."""

    name: str
    decision_interval_s: float

    def decide(self, view: WorldView) -> Sequence[Action]: ...


@dataclass
class Sample:
    at_s: float
    queue_tasks: float
    loading: int
    producing: int
    draining: int
    failed: int  # offline (billed) or exited
    spend_usd_per_h: float
    cost_usd: float
    parked: int = 0  # stopped with the disk kept: billed storage only, a resume away from producing
    resuming: int = 0  # started again: minutes from producing, or waiting for a GPU someone else took


@dataclass
class RunResult:
    policy: str
    trace: str
    seed: int
    tasks_submitted: int
    tasks_started: float
    tasks_completed: float
    tasks_unserved: float
    cost_usd: float
    delay_cost_usd: float
    wait_p50_s: float
    wait_p95_s: float
    wait_max_s: float
    machine_hours: float
    producing_machine_hours: float
    idle_machine_hours: float
    launches: int
    launches_refused: int
    wasted_launches: int
    peak_instances: int
    end_s: float
    decisions: int
    decision_wall_s: list[float]
    samples: list[Sample]
    sim_wall_s: float = 0.0
    sim_cpu_s: float = 0.0  # this process's CPU time: on a shared, busy machine closer to an idle core's wall time
    waits: WaitStats | None = None
    # (simulated s, limit, machines) for each launch the world could not carry out: "market" (no free offer
    # within its GPU models and price cap) or "world_max_instances" (the world's own instance cap)
    launch_refusals: list[tuple[float, str, int]] = field(default_factory=list)
    storage_cost_usd: float = 0.0  # the disks' share of cost_usd (parked machines pay only this)
    parks: int = 0
    resumes: int = 0
    resumes_gpu_taken: int = 0  # resumes that found their GPU rented by someone else
    # of those, the ones a policy gave up on while they waited for their GPU; how many of these decisions also
    # launched or resumed a machine (replaced within the same decider run), and the longest wait before giving up
    failed_resumes_given_up: int = 0
    failed_resumes_short: int = 0  # given up while the rest of the fleet was short of the next hour's arrivals
    failed_resumes_replaced_same_run: int = 0  # of those short, by a decision that also launched or resumed
    failed_resume_wait_max_s: float = 0.0
    outbid_pauses: int = 0  # interruptible machines paused by a higher bid

    @property
    def objective_usd(self) -> float:
        return self.cost_usd + self.delay_cost_usd


class _LastBusy:
    """When did the task rate last exceed a level? Machines are filled in order, so a machine with capacity
    `ahead` in front of it last had work when the rate was last above `ahead`. A stack of (rate, until) with
    rates strictly falling towards the top answers in O(log n)."""

    def __init__(self) -> None:
        self._neg_rates: list[float] = []
        self._until_s: list[float] = []

    def record(self, rate_per_s: float, until_s: float) -> None:
        while self._neg_rates and -self._neg_rates[-1] <= rate_per_s:
            self._neg_rates.pop()
            self._until_s.pop()
        self._neg_rates.append(-rate_per_s)
        self._until_s.append(until_s)

    def last_above(self, ahead_per_s: float) -> float | None:
        # entries with rate > ahead form the bottom of the stack; the topmost of them is the latest
        n = bisect.bisect_left(self._neg_rates, -ahead_per_s - 1e-12)
        return self._until_s[n - 1] if n else None


@dataclass
class _Ledger:
    cost_usd: float = 0.0  # storage included
    storage_cost_usd: float = 0.0
    billed_machine_s: float = 0.0
    producing_machine_s: float = 0.0
    idle_machine_s: float = 0.0


# the cyclic collector's youngest-generation threshold during a run (CPython's default is 700 allocations)
RUN_GC_THRESHOLD0 = 50_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """A run allocates millions of short-lived objects (snapshot lines, task events, plans) that reference
    counting frees and that form almost no cycles, so the collector's passes found little to free: on the week's
    replay (bench scenario, seed 7, `predictive`) they took 11.8 s of 142 s over 7,346 youngest-generation
    passes; with the threshold below, 0.2 s in all, the peak resident memory unchanged (135-138 MB) and the objective
    the same to the cent. The interpreter's thresholds are put back afterwards."""
    before = gc.get_threshold()
    gc.set_threshold(RUN_GC_THRESHOLD0, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


@dataclass
class Engine:
    trace: Trace
    policy: WorldPolicy
    scenario: Scenario = field(default_factory=Scenario)
    seed: int = 0
    world: WorldConfig = field(default_factory=WorldConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    # the decider's own guardrails (services/decider/guardrails.check) applied to every launch of a policy that
    # does not run them itself, so every policy meets the same limits; None: only the market and the world cap
    guardrails: GuardrailConfig | None = None

    def __post_init__(self) -> None:
        self.now_s = 0.0
        self.trace_end_s = self.trace.minutes * 60.0
        self.horizon_s = self.trace_end_s + self.world.drain_max_s
        self.market = Market(offers_from_scenario(self.scenario), startup_model(self.scenario))
        self.draws = LaunchDraws(self.scenario, self.seed)
        self.resume_draws = ResumeDraws(self.scenario, self.seed)
        self.storage_usd_per_h = storage_usd_per_h(self.scenario.billing.storage_usd_per_gb_month, self.world.disk_gb)
        self.parks = self.resumes = self.resumes_gpu_taken = self.outbid_pauses = 0
        self.failed_resumes_given_up = self.failed_resumes_short = self.failed_resumes_replaced_same_run = 0
        self.failed_resume_wait_max_s = 0.0
        # other renters' bids per GPU model: the vast simulator's walk, on its own stream of the seed
        self.bid_levels = BidLevels(self.scenario.bids, random.Random(self.seed * 7919 + 41))
        self.bid_machines: dict[int, Machine] = {}
        self._bids_ticking = False
        self.queue = FluidQueue(WaitStats(self.objective.grace_s))
        self.machines: dict[int, Machine] = {}
        self.producing_order: list[Machine] = []  # the job system fills these first to last
        self.arrival_per_s = 0.0
        self.service_per_s = 0.0
        self.spend_usd_per_h = 0.0
        self.billed = 0
        self.non_gone = 0
        self.peak_instances = 0
        self.ledger = _Ledger()
        self.launches = 0
        self.launches_refused = 0
        self._launch_refusals: list[tuple[float, str, int]] = []
        self._guarded_launches: list[SentLaunch] = []
        self.committed_usd_per_h = 0.0  # every non-gone machine's price, billed yet or not (the guardrails' view)
        self.wasted: set[int] = set()
        self._events: list[tuple[float, int, int, int]] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        self._launch_index = 0
        self._order = itertools.count()
        self._fleet_events: list[FleetEvent] = []
        self._last_busy = _LastBusy()
        self._started_checkpoints: deque[tuple[float, float]] = deque([(0.0, 0.0)])
        self._last_view_s = 0.0
        self._started_by_model: dict[str, float] = {}
        self._busy_s_by_model: dict[str, float] = {}
        self._started_at_last_view = 0.0
        self._decision_wall_s: list[float] = []
        self._samples: list[Sample] = []
        self._end_scheduled = False
        self._ended = False
        span_s = self.trace_end_s + 3600.0
        self.sample_s = self.world.sample_s or max(60.0, 60.0 * math.ceil(span_s / TARGET_SAMPLES / 60.0))

    # --- the loop ------------------------------------------------------------------------------------------

    def run(self) -> RunResult:
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        self._start_initial_fleet()
        self._push(0.0, MINUTE, 0)
        self._push(self.policy.decision_interval_s, DECIDE, 0)
        self._push(0.0, SAMPLE, 0)
        self._push(self.horizon_s, END, 0)
        with fewer_collections():
            while self._events and not self._ended:
                at_s, kind, _, arg = heapq.heappop(self._events)
                if at_s > self.now_s:
                    self._advance(at_s)
                self._handle(kind, arg)
        result = self._result(time.perf_counter() - wall_start)
        result.sim_cpu_s = time.process_time() - cpu_start
        return result

    def _push(self, at_s: float, kind: int, arg: int) -> None:
        if at_s <= self.horizon_s:
            heapq.heappush(self._events, (at_s, kind, next(self._seq), arg))

    def _advance(self, to_s: float) -> None:
        dt = to_s - self.now_s
        storage_usd = self.storage_usd_per_h * self.non_gone * dt / 3600.0
        self.ledger.storage_cost_usd += storage_usd
        self.ledger.cost_usd += self.spend_usd_per_h * dt / 3600.0 + storage_usd
        self.ledger.billed_machine_s += self.billed * dt
        producing = len(self.producing_order)
        self.ledger.producing_machine_s += producing * dt
        pieces = self.queue.advance(self.now_s, to_s, self.arrival_per_s, self.service_per_s)
        busy_s = sum((p.end_s - p.start_s) * p.rate_per_s for p in pieces) / self.service_per_s if pieces else 0.0
        self.ledger.idle_machine_s += producing * (dt - busy_s) if self.service_per_s > 0 else 0.0
        self._record_busy(pieces)
        self.now_s = to_s
        self._started_checkpoints.append((to_s, self.queue.started))
        horizon_back = to_s - self.world.task_s
        while len(self._started_checkpoints) > 2 and self._started_checkpoints[1][0] <= horizon_back:
            self._started_checkpoints.popleft()
        if (
            not self._end_scheduled
            and self.now_s >= self.trace_end_s
            and self.queue.count <= 1e-9
            and self.queue.last_empty_at_s is not None
        ):
            # the last tasks are running: the run ends when they finish
            self._end_scheduled = True
            self._push(max(self.queue.last_empty_at_s, self.trace_end_s) + self.world.task_s, END, 0)

    def _record_busy(self, pieces: list[ServicePiece]) -> None:
        for piece in pieces:
            self._last_busy.record(piece.rate_per_s, piece.end_s)

    def _handle(self, kind: int, arg: int) -> None:
        if kind == MINUTE:
            self._on_minute(arg)
        elif kind == DECIDE:
            self._decide()
            self._push(self.now_s + self.policy.decision_interval_s, DECIDE, 0)
        elif kind == SAMPLE:
            self._sample()
            self._push(self.now_s + self.sample_s, SAMPLE, 0)
        elif kind == END:
            self._end()
        elif kind == BIDS:
            self._on_bids()
        else:
            machine = self.machines.get(arg)
            if machine is not None:
                self._on_machine(kind, machine)

    def _on_minute(self, minute: int) -> None:
        if minute < self.trace.minutes:
            self.arrival_per_s = self.trace.arrivals_per_min[minute] / 60.0
            self._push((minute + 1) * 60.0, MINUTE, minute + 1)
        else:
            self.arrival_per_s = 0.0
            self._advance(self.now_s)  # lets an already-empty queue schedule the end

    # --- machines --------------------------------------------------------------------------------------------

    def _start_initial_fleet(self) -> None:
        # they went through an ordinary startup before t=0 (unbilled here), so learned startup times stay honest
        startup = self.scenario.startup.startup_s
        running_s = -self.world.registration_s
        created_s = running_s - (startup.min + startup.max) / 2
        for offer in self.market.rent(count=initial_fleet_size(self.market, self.trace.arrivals_per_min, self.world)):
            rate = offer.tasks_per_h
            schedule = Schedule(running_s, 0.0, INF, INF)
            machine = Machine(next(self._ids), offer, Fate.HEALTHY, rate, created_s, schedule, running_s=running_s)
            machine.launched = False
            self.market.image_on_disk(offer)
            self._add_machine(machine)
            self._set_billed(machine, True)
            self._set_state(machine, MachineState.PRODUCING)

    def _launch(self, launch: Launch) -> None:
        refused: dict[str, int] = {}
        room = max(0, min(launch.count, self.world.max_instances - self.non_gone))
        if room < launch.count:
            refused["world_max_instances"] = launch.count - room
        # as the provisioner ranks a launch that takes the cap's last slots: the fastest machines per slot first
        last_slots = self.non_gone + launch.count >= self._instance_cap()
        offers = self.market.rent(
            launch.gpu_models, launch.max_price_usd_per_h, count=room, now_s=self.now_s, urgent=launch.urgent,
            fills_last_slots=last_slots,
        )  # fmt: skip
        if len(offers) < room and launch.gpu_models and self.world.gpu_preference == "fallback":
            offers += self.market.rent(
                (), launch.max_price_usd_per_h, count=room - len(offers), now_s=self.now_s, urgent=launch.urgent,
                fills_last_slots=last_slots,
            )  # fmt: skip
        if len(offers) < room:
            refused["market"] = room - len(offers)
        for n, offer in enumerate(offers):
            self._create(offer, launch.bid_markup if n < launch.interruptible else None)
        for limit, count in refused.items():
            self.launches_refused += count
            self._launch_refusals.append((self.now_s, limit, count))

    def _instance_cap(self) -> int:
        """The cap that binds first, as the provisioner's FLEETPILOT_MAX_INSTANCES: the world's, or the guardrails'
        the engine or the policy runs under."""
        caps = [self.world.max_instances]
        for config in (self.guardrails, getattr(self.policy, "guardrails", None)):
            if isinstance(config, GuardrailConfig):
                caps.append(config.max_instances)
        return min(caps)

    def _create(self, offer: Offer, bid_markup: float | None = None) -> None:
        draw = self.draws[self._launch_index]
        self._launch_index += 1
        self.launches += 1
        fate = offer.fate or draw.fate
        now = self.now_s
        running_s = ready_s = exit_s = offline_s = INF
        rate = offer.tasks_per_h
        startup = startup_s(self.scenario, offer, draw.startup_s, cached=self.market.has_image(offer))
        if fate is Fate.EXIT_ERROR:
            exit_s = now + startup
        elif fate is not Fate.STUCK_LOADING:
            running_s = now + startup
            ready_s = running_s + self.world.registration_s
            if fate is Fate.OFFLINE_LATER:
                offline_s = max(ready_s, running_s + draw.offline_after_s)
            if fate is Fate.SLOW:
                rate *= draw.slow_factor
        machine = Machine(next(self._ids), offer, fate, rate, now, Schedule(running_s, ready_s, exit_s, offline_s))
        if bid_markup is not None:
            min_bid = offer.price_usd_per_h * self.scenario.bids.min_bid_share
            machine.bid_usd_per_h = bid_usd_per_h(min_bid, offer.price_usd_per_h, bid_markup)
        self._add_machine(machine)
        self._fleet_events.append(FleetEvent(now, machine.instance_id, "created"))
        if self.world.billed_from == "created":
            self._set_billed(machine, True)
        for at_s, kind in ((running_s, RUNNING), (ready_s, READY), (exit_s, EXIT), (offline_s, OFFLINE)):
            if at_s < INF:
                self._push(at_s, kind, machine.instance_id)
        if machine.bid_usd_per_h is not None:
            self.bid_levels.add_model(offer.gpu_model)
            self.bid_machines[machine.instance_id] = machine
            if self._losing(machine):
                self._pause(machine)  # vast creates a losing bid paused
            if not self._bids_ticking:
                self._bids_ticking = True
                self._push(self.now_s + BID_TICK_S, BIDS, 0)

    def _add_machine(self, machine: Machine) -> None:
        machine.state_since_s = self.now_s
        self.machines[machine.instance_id] = machine
        self.non_gone += 1
        self.committed_usd_per_h += machine.price_usd_per_h
        self.peak_instances = max(self.peak_instances, self.non_gone)

    def _set_billed(self, machine: Machine, billed: bool) -> None:
        if (machine.billed_since_s is not None) == billed:
            return
        sign = 1 if billed else -1
        self.billed += sign
        self.spend_usd_per_h += sign * machine.price_usd_per_h
        machine.billed_since_s = self.now_s if billed else None
        if self.billed == 0:
            self.spend_usd_per_h = 0.0  # no drift from float sums when nothing is billed

    def _set_state(self, machine: Machine, state: MachineState) -> None:
        was = machine.state
        check_move(machine.instance_id, was, state)
        if was is MachineState.PRODUCING and state is not MachineState.PRODUCING:
            if not machine.worked:
                self._note_work(machine)
            self.producing_order.remove(machine)
            self.service_per_s -= machine.tasks_per_h / 3600.0
            if not self.producing_order:
                self.service_per_s = 0.0
        if state is MachineState.PRODUCING and was is not MachineState.PRODUCING:
            machine.prefix_order = next(self._order)
            self.producing_order.append(machine)
            self.service_per_s += machine.tasks_per_h / 3600.0
        machine.state = state
        machine.state_since_s = self.now_s
        if state is MachineState.GONE:
            self.non_gone -= 1
            self.bid_machines.pop(machine.instance_id, None)
            # a machine we parked left the commitment then; an outbid one keeps its bid committed until now
            if was is not MachineState.PARKED or machine.outbid:
                self.committed_usd_per_h = max(0.0, self.committed_usd_per_h - machine.price_usd_per_h)
            self._set_billed(machine, False)
            self.market.release(machine.offer)
            self.machines.pop(machine.instance_id, None)
        if state in (MachineState.GONE, MachineState.EXITED) and machine.launched and not machine.worked:
            self.wasted.add(machine.instance_id)

    def _note_work(self, machine: Machine) -> None:
        """Did this producer ever get a task? It did if the task rate ever exceeded the capacity ahead of it."""
        ahead = 0.0
        for other in self.producing_order:
            if other is machine:
                break
            ahead += other.tasks_per_h / 3600.0
        last = self._last_busy.last_above(ahead)
        machine.worked = last is not None and last > machine.state_since_s

    def _on_machine(self, kind: int, machine: Machine) -> None:
        if machine.state is MachineState.RESUMING:
            self._on_resuming(kind, machine)
            return
        loading = machine.state is MachineState.LOADING
        if kind == RUNNING and loading:
            machine.running_s = self.now_s
            self.market.started(machine.offer, self.now_s - machine.created_s, self.now_s)
            if self.world.billed_from == "running":
                self._set_billed(machine, True)
            self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "running"))
        elif kind == READY and loading:
            self.market.measured(machine.offer, machine.tasks_per_h, self.now_s)  # its benchmark
            self._set_state(machine, MachineState.PRODUCING)
            self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "producing"))
        elif kind == EXIT and loading:
            self.market.failed(machine.offer, IncidentKind.VAST_ERROR, machine.instance_id, self.now_s)
            self._set_billed(machine, False)
            self._set_state(machine, MachineState.EXITED)
            self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "exited"))
        elif kind == OFFLINE and machine.state is MachineState.PRODUCING:
            self.market.failed(machine.offer, IncidentKind.OFFLINE, machine.instance_id, self.now_s)
            self._set_state(machine, MachineState.OFFLINE)
            self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "offline"))
        elif kind == GONE and machine.state is MachineState.DRAINING and not machine.parking:
            self._set_state(machine, MachineState.GONE)
            self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "gone"))
        elif kind == PARK and machine.state is MachineState.DRAINING and machine.parking:
            self._park(machine)

    # --- parking: vast's stop and start --------------------------------------------------------------------

    def _park(self, machine: Machine) -> None:
        """Stopped: the GPU is no longer billed nor committed, the disk (and the image on it) is kept."""
        self._set_billed(machine, False)
        self.committed_usd_per_h = max(0.0, self.committed_usd_per_h - machine.price_usd_per_h)
        machine.parking = False
        machine.waiting_for_gpu_since_s = None  # a start called off while it waited is no longer waiting
        self._set_state(machine, MachineState.PARKED)
        self.parks += 1
        self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "parked"))

    def _resume(self, resume: Resume) -> None:
        """Started again: running after the scenario's restart time, producing after the worker registers; if the
        GPU was rented meanwhile, vast holds the start in "scheduling" until it is free (or for ever)."""
        machine = self.machines.get(resume.instance_id)
        # an outbid machine is vast's to start, once its bid is the highest again: its owner's start would not win
        if machine is None or machine.state is not MachineState.PARKED or machine.outbid:
            return
        draw = self.resume_draws.draw(self.resumes, self.now_s - machine.state_since_s)
        self.resumes += 1
        self.committed_usd_per_h += machine.price_usd_per_h
        if draw.gpu_taken:
            self.resumes_gpu_taken += 1
            machine.waiting_for_gpu_since_s = self.now_s
        # a GPU taken for good: it waits in scheduling until a policy gives up on it
        running_in_s = INF if draw.gpu_taken and draw.free_after_s is None else (draw.free_after_s or 0.0)
        # a machine stopped before it ever ran still has the rest of its first startup to load
        self._start_again(machine, max(running_in_s + self.scenario.startup.restart_s, machine.loading_left_s))

    # --- interruptible machines: other renters' bids -------------------------------------------------------

    def _losing(self, machine: Machine) -> bool:
        assert machine.bid_usd_per_h is not None
        share = self.bid_levels.share(machine.gpu_model)
        return outbid(machine.bid_usd_per_h, machine.offer.price_usd_per_h, share)

    def _on_bids(self) -> None:
        self.bid_levels.tick(BID_TICK_S / 3600.0)
        for machine in list(self.bid_machines.values()):
            losing = self._losing(machine)
            if losing and not machine.outbid and machine.state in OUTBID_PAUSES:
                self._pause(machine)
            elif not losing and machine.outbid and machine.state is MachineState.PARKED:
                self._unpause(machine)
        if self.bid_machines:
            self._push(self.now_s + BID_TICK_S, BIDS, 0)
        else:
            self._bids_ticking = False

    def _pause(self, machine: Machine) -> None:
        """Outbid: vast pauses the machine (its disk kept, its GPU no longer billed, its bid still committed)."""
        if machine.state is MachineState.DRAINING:
            self._set_state(machine, MachineState.GONE)  # it was being given back anyway
            self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "gone"))
            return
        if machine.state is MachineState.LOADING:
            machine.loading_left_s = max(0.0, machine.schedule.running_at_s - self.now_s)
        elif machine.state is MachineState.RESUMING:
            self._keep_loading_left(machine)
        machine.outbid = True
        self._set_billed(machine, False)
        self._set_state(machine, MachineState.PARKED)
        self.outbid_pauses += 1
        self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "outbid"))

    def _unpause(self, machine: Machine) -> None:
        """Its bid is the highest again: vast starts it (same machine and disk, so no GPU can be taken)."""
        machine.outbid = False
        self._start_again(machine, max(self.scenario.startup.restart_s, machine.loading_left_s))

    def _keep_loading_left(self, machine: Machine) -> None:
        """A start called off before running: what is left of a first startup stays to load (kept until the
        machine runs, so no pause, stop or resume shortens a startup)."""
        machine.loading_left_s = min(machine.loading_left_s, max(0.0, machine.resume_running_s - self.now_s))

    def _start_again(self, machine: Machine, running_in_s: float) -> None:
        """Resuming: running (GPU billed) after `running_in_s` (inf: never), producing once its worker registers."""
        self._set_state(machine, MachineState.RESUMING)
        self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "resuming"))
        machine.resume_running_s = self.now_s + running_in_s
        machine.resume_ready_s = machine.resume_running_s + self.world.registration_s
        self._push(machine.resume_running_s, RUNNING, machine.instance_id)
        self._push(machine.resume_ready_s, READY, machine.instance_id)

    def _on_resuming(self, kind: int, machine: Machine) -> None:
        if kind == RUNNING and self.now_s == machine.resume_running_s:
            machine.waiting_for_gpu_since_s = None  # its GPU came free after all
            machine.loading_left_s = 0.0
            self._set_billed(machine, True)  # vast bills a restarted GPU from running
            self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "running"))
        elif kind == READY and self.now_s == machine.resume_ready_s:
            self._set_state(machine, MachineState.PRODUCING)
            self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "producing"))

    def _remove(self, removal: Remove) -> None:
        machine = self.machines.get(removal.instance_id)
        if machine is None:
            return
        machine.removal_reason = removal.reason
        if machine.state is MachineState.LOADING and removal.reason == RemovalReason.STUCK_LOADING.value:
            self.market.failed(machine.offer, IncidentKind.STUCK_LOADING, machine.instance_id, self.now_s)
        parking = removal.parks  # parked once its tasks are done
        if machine.state is MachineState.PRODUCING:
            # no new task; the in-flight ones finish (billed) before the machine is given back or parked
            machine.parking = parking
            self._set_state(machine, MachineState.DRAINING)
            self._push(self.now_s + self.world.task_s, PARK if parking else GONE, machine.instance_id)
        elif (machine.state is MachineState.DRAINING and removal.verb != "destroy") or (
            machine.state is MachineState.PARKED and parking
        ):
            return
        elif machine.state is MachineState.RESUMING and parking:
            self._keep_loading_left(machine)
            self._park(machine)  # the start is called off before its worker came back
        elif machine.state is MachineState.LOADING and parking and machine.running_s is not None:
            self._park(machine)  # its image pulled and its container run: a start brings it back in minutes
        else:
            self._set_state(machine, MachineState.GONE)
            self._fleet_events.append(FleetEvent(self.now_s, machine.instance_id, "gone"))

    # --- decisions -------------------------------------------------------------------------------------------

    def completed_total(self) -> float:
        """Tasks started at least one task duration ago (the started curve is piecewise linear)."""
        at_s = self.now_s - self.world.task_s
        points = self._started_checkpoints
        if at_s <= points[0][0]:
            return points[0][1] if at_s >= points[0][0] else 0.0
        for (t0, s0), (t1, s1) in itertools.pairwise(points):
            if t0 <= at_s <= t1:
                return s0 + (s1 - s0) * (at_s - t0) / (t1 - t0) if t1 > t0 else s1
        return points[-1][1]

    def view(self) -> WorldView:
        self._account_machine_tasks()
        machines: list[MachineView] = list(self.machines.values())
        completed = self.completed_total()
        minute = min(self.trace.minutes, int(self.now_s // 60) + 1)
        events, self._fleet_events = self._fleet_events, []
        return WorldView(
            now_s=self.now_s,
            pending_tasks=self.queue.count,
            running_tasks=max(0.0, self.queue.started - completed),
            arrivals_total=self.queue.arrived,
            started_total=self.queue.started,
            completed_total=completed,
            arrivals_by_minute=self.trace.arrivals_per_min[:minute],
            prehistory_arrivals_per_min=self.trace.arrivals_per_min[:60],
            machines=machines,
            machines_by_id=self.machines,
            events=events,
            task_s=self.world.task_s,
            started_by_gpu_model=dict(self._started_by_model),
            busy_s_by_gpu_model=dict(self._busy_s_by_model),
            disk_usd_per_h=self.storage_usd_per_h,
        )

    def _account_machine_tasks(self) -> None:
        """Share the tasks started since the last view among producing machines, first in order first."""
        previous_view_s = self._last_view_s
        dt = self.now_s - previous_view_s
        started = self.queue.started - self._started_at_last_view
        self._last_view_s, self._started_at_last_view = self.now_s, self.queue.started
        mean_rate = started / dt if dt > 0 else 0.0
        ahead = 0.0
        # every producer, every simulated minute: the names below are looked up once, not once per machine
        now_s, last_above = self.now_s, self._last_busy.last_above
        started_by_model, busy_s_by_model = self._started_by_model, self._busy_s_by_model
        for machine in self.producing_order:
            rate = machine.tasks_per_h / 3600.0
            share = min(rate, max(0.0, mean_rate - ahead))
            if share > 0:
                model = machine.offer.gpu_model
                tasks = share * dt
                machine.tasks_started += tasks
                started_by_model[model] = started_by_model.get(model, 0.0) + tasks
                busy_s_by_model[model] = busy_s_by_model.get(model, 0.0) + tasks / rate
            last = last_above(ahead)
            if share <= 0 and (last is None or last <= previous_view_s):
                # no work reached this far down the line since the last view, so none reached anyone behind it
                break
            if last is not None and last > machine.state_since_s:
                machine.last_task_s = min(last, now_s)
                machine.worked = True
            ahead += rate

    def _decide(self) -> None:
        view = self.view()
        wall_start = time.perf_counter()
        actions = self.policy.decide(view)
        self._decision_wall_s.append(time.perf_counter() - wall_start)
        self._note_failed_resumes_given_up(actions)
        for action in actions:
            if isinstance(action, Launch):
                for launch in self._granted(action):
                    self._launch(launch)
            elif isinstance(action, Resume):
                self._resume(action)
            else:
                self._remove(action)

    def _note_failed_resumes_given_up(self, actions: Sequence[Action]) -> None:
        """A resume waiting for a GPU someone else took, removed by this decision, is replaced in the same run when
        the decision also launches or resumes (the issue's "a parked machine whose start fails is replaced within
        one decider run"). A replacement is owed only when the rest of the fleet (producing, or on its way and
        bound to produce) is short of the next hour's arrivals, which the world knows and a policy does not."""
        given_up = 0
        removed = {action.instance_id for action in actions if isinstance(action, Remove)}
        for action in actions:
            if not isinstance(action, Remove):
                continue
            machine = self.machines.get(action.instance_id)
            if machine is None or machine.state is not MachineState.RESUMING or action.parks:
                continue  # parked again, not given up: a later resume draws its GPU anew
            if machine.waiting_for_gpu_since_s is None:
                continue
            given_up += 1
            waited_s = self.now_s - machine.waiting_for_gpu_since_s
            self.failed_resume_wait_max_s = max(self.failed_resume_wait_max_s, waited_s)
            machine.waiting_for_gpu_since_s = None
        if not given_up:
            return
        self.failed_resumes_given_up += given_up
        if self._capacity_bound_to_produce(removed) >= self._next_hour_arrivals_per_h():
            return
        self.failed_resumes_short += given_up
        if any(isinstance(a, Resume) or (isinstance(a, Launch) and a.count > 0) for a in actions):
            self.failed_resumes_replaced_same_run += given_up

    def _capacity_bound_to_produce(self, leaving: set[int]) -> float:
        """Tasks/h of the machines producing or on their way that will produce (fates and GPUs known here)."""
        total = 0.0
        for machine in self.machines.values():
            if machine.instance_id in leaving or machine.waiting_for_gpu_since_s is not None:
                continue
            on_its_way = machine.state is MachineState.LOADING and machine.schedule.ready_at_s < INF
            if machine.state in (MachineState.PRODUCING, MachineState.RESUMING) or on_its_way:
                total += machine.tasks_per_h
        return total

    def _next_hour_arrivals_per_h(self) -> float:
        minute = int(self.now_s // 60)
        return float(sum(self.trace.arrivals_per_min[minute : minute + 60]))

    def _granted(self, launch: Launch) -> list[Launch]:
        """The launches the guardrails allow of a policy's launch, when the engine runs them for the policy."""
        if self.guardrails is None or getattr(self.policy, "runs_guardrails", False):
            return [launch]
        granted = []
        # one launch command carries at most LAUNCH_COMMAND_MAX machines (the contract's limit): a larger launch
        # goes to the guardrails as several commands, as the decider would send it
        for start in range(0, launch.count, LAUNCH_COMMAND_MAX):
            chunk = replace(launch, count=min(LAUNCH_COMMAND_MAX, launch.count - start))
            allowed = self._through_guardrails(chunk, self.guardrails)
            if allowed.count > 0:
                granted.append(allowed)
        return granted

    def _through_guardrails(self, launch: Launch, config: GuardrailConfig) -> Launch:
        """What the decider's guardrails grant of a launch, the rest recorded with the rule that refused it."""
        now = EPOCH + timedelta(seconds=self.now_s)
        ledger = ledger_of_totals(self.committed_usd_per_h, self.non_gone, self._guarded_launches)
        key = f"world-launch-{len(self._guarded_launches)}-{int(self.now_s)}"
        command = LaunchInstances(
            occurred_at=now, source="world", idempotency_key=key,
            requested_by="policy", count=launch.count, launch_priority="normal", reason=LaunchReason.BACKLOG,
            max_price_usd_per_h=launch.max_price_usd_per_h,
        )  # fmt: skip
        verdict, ledger = judge(command, ledger, now, config)
        granted = verdict.action.count if verdict.verdict == "allowed" else 0  # type: ignore[union-attr]
        if granted < launch.count and verdict.rule:
            self.launches_refused += launch.count - granted
            self._launch_refusals.append((self.now_s, verdict.rule, launch.count - granted))
        self._guarded_launches = [s for s in ledger.launches if (now - s.sent_at).total_seconds() < 3600]
        return replace(launch, count=granted, max_price_usd_per_h=worst_price_usd_per_h(command, config))

    def _sample(self) -> None:
        counts = {state: 0 for state in MachineState}
        for machine in self.machines.values():
            counts[machine.state] += 1
        self._samples.append(
            Sample(
                at_s=self.now_s,
                queue_tasks=self.queue.count,
                loading=counts[MachineState.LOADING],
                producing=counts[MachineState.PRODUCING],
                draining=counts[MachineState.DRAINING],
                failed=counts[MachineState.OFFLINE] + counts[MachineState.EXITED],
                spend_usd_per_h=self.spend_usd_per_h,
                cost_usd=self.ledger.cost_usd,
                parked=counts[MachineState.PARKED],
                resuming=counts[MachineState.RESUMING],
            )
        )

    def _end(self) -> None:
        self._sample()
        self._ended = True
        for machine in list(self.producing_order):
            if not machine.worked:
                self._note_work(machine)
        for machine in self.machines.values():
            if machine.launched and not machine.worked:
                self.wasted.add(machine.instance_id)

    def _result(self, wall_s: float) -> RunResult:
        unserved = self.queue.charge_unserved(self.now_s)
        waits = self.queue.waits
        delay_task_h = waits.excess_task_s / 3600.0
        completed = self.completed_total() if unserved > 1e-6 else self.queue.started
        return RunResult(
            policy=self.policy.name,
            trace=self.trace.name,
            seed=self.seed,
            tasks_submitted=self.trace.total_tasks,
            tasks_started=self.queue.started,
            tasks_completed=completed,
            tasks_unserved=unserved,
            cost_usd=self.ledger.cost_usd,
            delay_cost_usd=delay_task_h * self.objective.delay_usd_per_task_h,
            wait_p50_s=waits.percentile_s(0.50),
            wait_p95_s=waits.percentile_s(0.95),
            wait_max_s=waits.max_wait_s,
            machine_hours=self.ledger.billed_machine_s / 3600.0,
            producing_machine_hours=self.ledger.producing_machine_s / 3600.0,
            idle_machine_hours=self.ledger.idle_machine_s / 3600.0,
            launches=self.launches,
            launches_refused=self.launches_refused,
            wasted_launches=len(self.wasted),
            peak_instances=self.peak_instances,
            end_s=self.now_s,
            decisions=len(self._decision_wall_s),
            decision_wall_s=self._decision_wall_s,
            samples=self._samples,
            sim_wall_s=wall_s,
            waits=waits,
            launch_refusals=self._launch_refusals,
            storage_cost_usd=self.ledger.storage_cost_usd,
            parks=self.parks,
            resumes=self.resumes,
            resumes_gpu_taken=self.resumes_gpu_taken,
            failed_resumes_given_up=self.failed_resumes_given_up,
            failed_resumes_short=self.failed_resumes_short,
            failed_resumes_replaced_same_run=self.failed_resumes_replaced_same_run,
            failed_resume_wait_max_s=self.failed_resume_wait_max_s,
            outbid_pauses=self.outbid_pauses,
        )
