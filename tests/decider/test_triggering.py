"""Triggering on the simulated clock: P0 at once, P1 debounced, follow-ups, heartbeat, wake-ups, rate limit."""

from __future__ import annotations

from datetime import timedelta

from services.decider.triggering import RunBatch, TriggerConfig, TriggerScheduler, uncovered
from shared.clock import SimulatedClock
from shared.contract import TriggerReason, TriggerRef

QUIET = TriggerConfig(run_at_start=False)


def p0(event_id: str) -> TriggerRef:
    return TriggerRef(priority="p0", reason=TriggerReason.INSTANCE_FAILED, event_id=event_id)


def p1(event_id: str) -> TriggerRef:
    return TriggerRef(priority="p1", reason=TriggerReason.INSTANCE_TRANSITION, event_id=event_id)


class Harness:
    """Drives the scheduler the way the runner does: poll, run (taking `run_s`), finish."""

    def __init__(self, clock: SimulatedClock, config: TriggerConfig = QUIET) -> None:
        self.clock = clock
        self.scheduler = TriggerScheduler.starting(config, clock.now())
        self.runs: list[RunBatch] = []
        self.run_started_at: list = []

    def offer(self, ref: TriggerRef) -> None:
        self.scheduler.offer(ref, self.clock.now())

    def tick(self) -> RunBatch | None:
        batch = self.scheduler.poll(self.clock.now())
        if batch is not None:
            self.scheduler.begin(batch, self.clock.now())
            self.runs.append(batch)
            self.run_started_at.append(self.clock.now())
            self.scheduler.finish(self.clock.now())
        return batch

    def run_for(self, seconds: float, step_s: float = 1.0) -> None:
        elapsed = 0.0
        while elapsed < seconds:
            self.tick()
            self.clock.advance(step_s)
            elapsed += step_s
        self.tick()


def test_p0_starts_a_run_immediately(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    assert h.tick() is None
    h.offer(p0("a"))
    assert h.scheduler.next_wake_at(sim_clock.now()) == sim_clock.now()
    batch = h.tick()
    assert batch is not None and batch.label == "p0" and batch.has_p0
    assert [r.event_id for r in batch.triggers] == ["a"]
    assert h.tick() is None


def test_fifty_p1_triggers_within_ten_seconds_give_one_run(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    for i in range(50):
        h.offer(p1(f"t{i}"))
        assert h.tick() is None
        sim_clock.advance(0.2)
    h.run_for(60)
    assert len(h.runs) == 1
    assert len(h.runs[0].triggers) == 50 and h.runs[0].label == "p1"
    # the run came after the quiet period, not before
    assert h.run_started_at[0] - (sim_clock.now() - timedelta(seconds=60)) >= timedelta(seconds=20)


def test_a_p1_storm_runs_at_the_maximum_delay(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    start = sim_clock.now()
    for i in range(150):  # one every 5 s for 12.5 min: never 20 s of quiet
        h.offer(p1(f"s{i}"))
        h.tick()
        sim_clock.advance(5)
    assert 6 <= len(h.runs) <= 7  # one per 2 min, not 150
    assert h.run_started_at[0] == start + timedelta(seconds=120)


def test_a_trigger_during_a_run_gives_exactly_one_follow_up(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    h.offer(p0("first"))
    batch = h.scheduler.poll(sim_clock.now())
    assert batch is not None
    h.scheduler.begin(batch, sim_clock.now())
    for i in range(5):
        sim_clock.advance(2)
        h.offer(p0(f"during-{i}"))
        h.offer(p1(f"during-p1-{i}"))
        assert h.scheduler.poll(sim_clock.now()) is None  # single flight
    assert h.scheduler.follow_up_pending
    h.scheduler.finish(sim_clock.now())
    follow_up = h.tick()
    assert follow_up is not None
    assert {r.event_id for r in follow_up.triggers} == {f"during-{i}" for i in range(5)} | {
        f"during-p1-{i}" for i in range(5)
    }
    h.run_for(400)
    assert len(h.runs) == 1 + 1  # the follow-up, then the heartbeat 5 min later, nothing else
    assert h.runs[1].label == "heartbeat"


def test_a_trigger_arriving_while_the_lock_is_taken_is_kept_for_the_follow_up(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    h.offer(p0("a"))
    batch = h.scheduler.poll(sim_clock.now())
    assert batch is not None
    h.offer(p0("b"))  # between poll and begin
    h.scheduler.begin(batch, sim_clock.now())
    h.scheduler.finish(sim_clock.now())
    follow_up = h.tick()
    assert follow_up is not None and [r.event_id for r in follow_up.triggers] == ["b"]


def test_the_heartbeat_fires_every_five_minutes_without_triggers(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    h.run_for(16 * 60, step_s=5)
    assert [b.label for b in h.runs] == ["heartbeat"] * 3
    gaps = [t - h.run_started_at[0] for t in h.run_started_at]
    assert gaps == [timedelta(0), timedelta(minutes=5), timedelta(minutes=10)]


def test_a_started_decider_runs_at_once_then_on_heartbeat(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock, TriggerConfig())
    assert h.tick() is not None
    h.run_for(299)
    assert len(h.runs) == 1


def test_any_run_resets_the_heartbeat(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    h.run_for(240)
    h.offer(p0("x"))
    h.run_for(290)
    assert [b.label for b in h.runs] == ["p0"]


def test_a_scheduled_wakeup_is_honoured(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    h.scheduler.schedule_wakeup(sim_clock.now() + timedelta(seconds=90))
    h.scheduler.schedule_wakeup(sim_clock.now() + timedelta(seconds=200))
    assert h.scheduler.next_wake_at(sim_clock.now()) == sim_clock.now() + timedelta(seconds=90)
    h.run_for(250)
    assert [b.label for b in h.runs] == ["scheduled", "scheduled"]
    assert h.run_started_at[0] == sim_clock.now() - timedelta(seconds=250) + timedelta(seconds=90)


def test_rate_limit_suppresses_and_counts_and_runs_once_a_slot_frees(sim_clock: SimulatedClock) -> None:
    config = TriggerConfig(run_at_start=False, max_runs_per_h=3, max_p0_runs_per_h=0, p1_quiet_s=1, p1_max_delay_s=1)
    h = Harness(sim_clock, config)
    for i in range(10):  # a runaway loop: a P1 every minute
        h.offer(p1(f"loop-{i}"))
        h.run_for(60, step_s=1)
    assert len(h.runs) == 3
    assert h.scheduler.suppressed_runs["p1"] == 7
    # the suppressed triggers are not lost: the run when a slot frees sees them all
    h.run_for(3600, step_s=10)
    assert len(h.runs) >= 4
    deferred = h.runs[3]
    assert {f"loop-{i}" for i in range(3, 10)} <= {r.event_id for r in deferred.triggers}


def test_p0_is_exempt_from_the_rate_limit_up_to_its_own_cap(sim_clock: SimulatedClock) -> None:
    config = TriggerConfig(run_at_start=False, max_runs_per_h=2, max_p0_runs_per_h=5)
    h = Harness(sim_clock, config)
    for i in range(10):
        h.offer(p0(f"p0-{i}"))
        h.tick()
        sim_clock.advance(10)
    # 5 on the P0 cap, then 2 normal slots, then suppressed
    assert len(h.runs) == 7
    assert h.scheduler.suppressed_runs["p0"] == 3


def test_busy_lock_keeps_the_triggers_and_retries_later(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    h.offer(p0("a"))
    batch = h.scheduler.poll(sim_clock.now())
    assert batch is not None
    h.scheduler.abandon(sim_clock.now() + timedelta(seconds=1))
    assert h.scheduler.poll(sim_clock.now()) is None
    assert h.scheduler.next_wake_at(sim_clock.now()) == sim_clock.now() + timedelta(seconds=1)
    sim_clock.advance(1)
    again = h.tick()
    assert again is not None and [r.event_id for r in again.triggers] == ["a"]


def test_triggers_another_replica_already_ran_are_covered(sim_clock: SimulatedClock) -> None:
    now = sim_clock.now()
    batch = RunBatch((p0("seen"), p0("new"), TriggerRef(priority="heartbeat")), "p0")
    kept = uncovered(
        batch, covered_event_ids=frozenset({"seen"}), last_run_elsewhere_at=now - timedelta(seconds=10),
        now=now, heartbeat_s=300,
    )  # fmt: skip
    assert [r.event_id for r in kept] == ["new"]
    alone = RunBatch((TriggerRef(priority="heartbeat"),), "heartbeat")
    old_run = now - timedelta(seconds=400)
    kept = uncovered(alone, covered_event_ids=frozenset(), last_run_elsewhere_at=old_run, now=now, heartbeat_s=300)
    assert len(kept) == 1


def test_skip_moves_the_heartbeat_to_the_other_replicas_run(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    h.offer(p0("a"))
    batch = h.scheduler.poll(sim_clock.now())
    assert batch is not None
    h.scheduler.skip(batch, sim_clock.now(), covered_by_run_at=sim_clock.now())
    h.run_for(299)
    assert h.runs == []
    h.run_for(2)
    assert [b.label for b in h.runs] == ["heartbeat"]


def test_a_redelivered_trigger_is_one_trigger(sim_clock: SimulatedClock) -> None:
    h = Harness(sim_clock)
    h.offer(p0("same"))
    h.offer(p0("same"))
    batch = h.tick()
    assert batch is not None and len(batch.triggers) == 1
