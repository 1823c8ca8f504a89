"""Each planner of the predictive policy on its own: sizing, cleanup, growth (resumes first) and scale-down.
`recommend` composes them (tests/decider/test_policy.py covers the whole)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from services.decider.policy import PolicyConfig, recommend
from services.decider.policy.cleanup import cleanup
from services.decider.policy.fleet_view import split_fleet
from services.decider.policy.growth import grow, growth_reason, resumes_for
from services.decider.policy.parking import ParkHistory, gpu_taken_per_h, park_limit_s, parking_pays
from services.decider.policy.scale_down import arriving_needed, scale_down_plan
from services.decider.policy.sizing import numbers, size
from shared.contract import (
    DemandState,
    FailureReason,
    InstanceLine,
    InstanceState,
    LaunchReason,
    ParkOutcomes,
    ParkReason,
    RemovalReason,
)
from tests.decider.factories import HOUR_S, line, loading, producing, signal, snapshot, window

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
CONFIG = PolicyConfig()


def parked(instance_id: int, parked_for_s: float) -> InstanceLine:
    stopped = line(instance_id, InstanceState.PARKED, NOW, state_for_s=parked_for_s, last_task_ago_s=parked_for_s)
    return stopped.model_copy(update={"park_reason": ParkReason.STOPPED})


def test_sizing_plans_for_the_forecast_rate_and_the_backlog_left_when_machines_land() -> None:
    demand = signal(NOW, rate_per_h=600, pending=240, above_capacity_for_s=HOUR_S, producing_workers=2)
    fleet = split_fleet(snapshot(NOW, producing(2, NOW)))
    sized = size(demand, fleet, NOW, CONFIG, unobserved_launches=0)
    # 600 tasks/h at 120/h each: 5 machines, plus what drains the backlog the two producers leave in 1.5 h
    backlog_then = 240 + (600 - 2 * 120) * 1.5
    assert sized.sustained and sized.planned_from_rate
    assert sized.backlog_at_horizon == backlog_then
    assert sized.target == math.ceil(600 / 120 + backlog_then / 120)  # 5 + 6.5 machines
    assert f"need {sized.target} machines for 600 tasks/h" in numbers(sized, CONFIG)


def test_sizing_counts_launches_the_snapshot_does_not_show_yet_as_arriving() -> None:
    demand = signal(NOW, rate_per_h=600, above_capacity_for_s=HOUR_S, producing_workers=2)
    fleet = split_fleet(snapshot(NOW, producing(2, NOW)))
    assert size(demand, fleet, NOW, CONFIG, unobserved_launches=3).capacity == 5


def test_cleanup_destroys_failed_machines_and_gives_up_parked_ones_held_too_long() -> None:
    failed = line(700, InstanceState.FAILED, NOW, failure_reason=FailureReason.STUCK_LOADING)
    old, fresh = parked(801, CONFIG.park_max_s + 60), parked(802, 600)
    fleet = split_fleet(snapshot(NOW, [*producing(1, NOW), failed, old, fresh]))
    removals = cleanup(fleet, NOW, CONFIG, stalled_state=False)
    assert [(r.verb, r.instance_id, r.reason) for r in removals] == [
        ("destroy", 700, RemovalReason.STUCK_LOADING),
        ("destroy", 801, RemovalReason.IDLE),
    ]
    assert [p.instance_id for p in fleet.parked] == [802]  # growth must not count the one given up


def test_a_failed_machine_given_back_names_its_failure_where_the_reason_does_not() -> None:
    """The busy demo's audit read `destroy 1 (failed)` of two resumes whose GPUs another renter had taken: the
    removal's reason is `failed` for several failures, so fleet's own word is added; a stuck machine's is not
    repeated."""
    taken = line(701, InstanceState.FAILED, NOW, last_task_ago_s=None, failure_reason=FailureReason.GPU_TAKEN)
    stuck = line(702, InstanceState.FAILED, NOW, last_task_ago_s=None, failure_reason=FailureReason.STUCK_LOADING)
    quiet = signal(NOW, rate_per_h=100, pending=0, producing_workers=2)
    rec = recommend(quiet, snapshot(NOW, [*producing(2, NOW), taken, stuck]), NOW, CONFIG)
    assert [(plan.verb, plan.instance_id) for plan in rec.removals] == [("destroy", 701), ("destroy", 702)]
    assert rec.explanation.startswith("destroy 2 (failed: gpu_taken, stuck_loading): need "), rec.explanation


def test_while_workers_are_stalled_cleanup_gives_back_no_drained_machine() -> None:
    drained = line(300, InstanceState.DRAINING, NOW, state_for_s=3 * HOUR_S, last_task_ago_s=3 * HOUR_S)
    fleet = split_fleet(snapshot(NOW, [drained]))
    on_demand = PolicyConfig(park=False)
    assert cleanup(fleet, NOW, on_demand, stalled_state=True) == []
    assert [r.verb for r in cleanup(fleet, NOW, on_demand, stalled_state=False)] == ["destroy"]


def test_growth_resumes_parked_machines_before_launching_new_ones() -> None:
    demand = signal(NOW, rate_per_h=600, pending=100, above_capacity_for_s=HOUR_S, producing_workers=2)
    shown = snapshot(NOW, [*producing(2, NOW), parked(801, 1800), parked(802, 600)])
    fleet = split_fleet(shown)
    sized = size(demand, fleet, NOW, CONFIG, unobserved_launches=0)
    growth = grow(sized, fleet, shown, CONFIG)
    # the most recently parked first: its GPU is the likeliest still free
    assert [r.instance_id for r in growth.resumes] == [802, 801]
    [launch] = growth.launches
    assert launch.count == sized.target - sized.capacity - 2 and launch.reason is LaunchReason.SUSTAINED_DEMAND


def test_resumes_never_exceed_what_is_parked() -> None:
    fleet = split_fleet(snapshot(NOW, [parked(801, 600)]))
    assert [r.instance_id for r in resumes_for(fleet, 5, None)] == [801]
    assert resumes_for(fleet, 0, None) == []


def test_the_growth_reason_names_what_drove_it() -> None:
    fleet = split_fleet(snapshot(NOW, producing(1, NOW)))
    stalled = size(signal(NOW, state=DemandState.WORKERS_STALLED, pending=50), fleet, NOW, CONFIG, 0)
    assert growth_reason(stalled) is LaunchReason.REPLACEMENT
    burst = size(signal(NOW, rate_per_h=6000, pending=2000, producing_workers=1), fleet, NOW, CONFIG, 0)
    assert not burst.planned_from_rate and burst.undrainable
    assert growth_reason(burst) is LaunchReason.BACKLOG


def test_scale_down_gives_back_the_last_machine_on_the_way_first_and_keeps_what_the_queue_needs() -> None:
    quiet = signal(NOW, rate_per_h=120, windows=[window(300, 100), window(3600, 120)], producing_workers=1)
    on_the_way = loading(6, NOW)  # created 10 minutes ago, all at once
    fleet = split_fleet(snapshot(NOW, [*producing(1, NOW), *on_the_way]))
    sized = size(quiet, fleet, NOW, CONFIG, 0)
    assert arriving_needed(quiet, sized, CONFIG) == max(0, sized.keep - 1)
    removals = scale_down_plan(quiet, fleet, sized, NOW, CONFIG)
    assert removals and all(r.verb == "destroy" and r.reason is RemovalReason.OVER_PROVISIONED for r in removals)
    kept = 1 + len(on_the_way) - len(removals)
    assert kept >= sized.keep * CONFIG.arriving_keep_factor


def test_a_machine_on_the_way_that_has_loaded_is_parked_not_destroyed_when_the_demand_no_longer_needs_it() -> None:
    """The quiet fleet above, its machines on the way past loading (running, registered, benchmarked): the startup
    they paid for is kept on their disks, a start brings them back in minutes, so they are stopped for parking
    while parking pays; with parking off, and for a machine still pulling its image, they are destroyed."""
    quiet = signal(NOW, rate_per_h=120, windows=[window(300, 100), window(3600, 120)], producing_workers=1)
    loaded_states = (InstanceState.RUNNING, InstanceState.REGISTERED, InstanceState.BENCHMARKED)
    loaded = [on_the_way.model_copy(update={"state": loaded_states[i % 3]}) for i, on_the_way in
              enumerate(loading(6, NOW, created_ago_s=2 * HOUR_S))]  # fmt: skip
    still_loading = loading(1, NOW, first_id=600, created_ago_s=300)
    fleet = split_fleet(snapshot(NOW, [*producing(1, NOW), *loaded, *still_loading]))
    sized = size(quiet, fleet, NOW, CONFIG, 0)
    removals = scale_down_plan(quiet, fleet, sized, NOW, CONFIG)
    given_back = {r.instance_id: (r.verb, r.reason) for r in removals}
    assert given_back[600] == ("destroy", RemovalReason.OVER_PROVISIONED)  # the last on the way goes first
    parked_ids = [i for i, (verb, reason) in given_back.items() if (verb, reason) == ("stop", RemovalReason.PARK)]
    assert parked_ids and set(parked_ids) | {600} == set(given_back)
    on_demand = PolicyConfig(park=False)
    assert all(r.verb == "destroy" for r in scale_down_plan(quiet, fleet, sized, NOW, on_demand))


def test_machines_on_the_way_stay_while_the_hour_still_rises_however_faintly() -> None:
    """The same fleet and rates as above, the hour's slope faintly up (far below the launch's significance gate):
    nothing on the way is given back, where a flat hour gives back all but what the kept rate needs."""
    faint = signal(NOW, rate_per_h=120, windows=[window(300, 100), window(3600, 120, trend_per_h2=5.0)],
                   producing_workers=1)  # fmt: skip
    fleet = split_fleet(snapshot(NOW, [*producing(1, NOW), *loading(6, NOW)]))
    sized = size(faint, fleet, NOW, CONFIG, 0)
    assert sized.slope_per_h2 == 0  # not significant: the launch does not extrapolate it
    assert arriving_needed(faint, sized, CONFIG) == sized.arriving == 6
    assert scale_down_plan(faint, fleet, sized, NOW, CONFIG) == []
    falling = signal(NOW, rate_per_h=120, windows=[window(300, 100), window(3600, 120, trend_per_h2=-5.0)],
                     producing_workers=1)  # fmt: skip
    assert arriving_needed(falling, size(falling, fleet, NOW, CONFIG, 0), CONFIG) < 6


def test_scale_down_never_drains_the_last_producer_while_tasks_wait() -> None:
    busy_queue = signal(NOW, rate_per_h=0, pending=5, windows=[window(300, 0), window(3600, 0)])
    idle = producing(3, NOW, last_task_ago_s=2 * HOUR_S)
    fleet = split_fleet(snapshot(NOW, idle))
    sized = size(busy_queue, fleet, NOW, CONFIG, 0)
    removals = scale_down_plan(busy_queue, fleet, sized, NOW, CONFIG)
    assert len(removals) <= 2 and all(r.verb == "drain" for r in removals)


def test_a_producer_is_idle_only_after_a_few_task_durations_of_silence() -> None:
    """Silent 12 minutes: idle when tasks take 4 minutes (scale-down drains it), not when they take 10 (a worker
    between two such tasks is silent that long). The queue is empty (with tasks waiting, a silent producer is not
    idle at all: tests/decider/test_policy.py), and the six serve the kept 480/h with no more than the headroom
    kept, so the empty-queue drain of busy producers takes none: only idleness decides."""
    quiet = [line(100 + i, InstanceState.PRODUCING, NOW, last_task_ago_s=720) for i in range(6)]

    def drained(task_s: float) -> int:
        windows = [window(300, 480), window(3600, 480)]
        windows = [w.model_copy(update={"mean_task_duration_s": task_s}) for w in windows]
        demand = signal(NOW, rate_per_h=480, pending=0, windows=windows, producing_workers=6)
        fleet = split_fleet(snapshot(NOW, quiet))
        sized = size(demand, fleet, NOW, CONFIG, unobserved_launches=0)
        return sum(1 for plan in scale_down_plan(demand, fleet, sized, NOW, CONFIG) if plan.verb == "drain")

    assert drained(240) == 2  # 480/h keeps four of the six
    assert drained(600) == 0


def test_a_parked_machine_is_given_up_once_its_disk_has_cost_what_a_startup_saves() -> None:
    """Parked 5 h: a disk at 0.20 $/h has cost more than a 1.5 h startup at 0.50 $/h saves (break-even 3.75 h),
    so that machine is destroyed; one whose disk costs 0.01 $/h (break-even 75 h) is kept until park_max_s."""
    dear, cheap = (
        parked(instance_id, 5 * HOUR_S).model_copy(update={"storage_usd_per_h": storage})
        for instance_id, storage in ((701, 0.20), (702, 0.01))
    )
    fleet = split_fleet(snapshot(NOW, [*producing(2, NOW), dear, cheap]))
    removals = cleanup(fleet, NOW, CONFIG, stalled_state=False)
    assert [(r.verb, r.instance_id) for r in removals] == [("destroy", 701)]
    assert [line.instance_id for line in fleet.parked] == [702]


def test_a_pool_parked_overnight_stands_in_for_fewer_launches_than_one_parked_an_hour_ago() -> None:
    """Another renter may take a parked machine's GPU: each covers a launch at exp(−rate × hours parked)."""
    demand = signal(NOW, rate_per_h=3000, pending=500, above_capacity_for_s=HOUR_S, producing_workers=2)

    def launched_beside(parked_for_s: float) -> tuple[int, int]:
        shown = snapshot(NOW, [*producing(2, NOW), *(parked(800 + i, parked_for_s) for i in range(10))])
        fleet = split_fleet(shown)
        sized = size(demand, fleet, NOW, CONFIG, unobserved_launches=0)
        growth = grow(sized, fleet, shown, CONFIG, now=NOW)
        return sum(plan.count for plan in growth.launches), sized.target - sized.capacity

    fresh_launches, wanted = launched_beside(HOUR_S)
    night_launches, _ = launched_beside(16 * HOUR_S)
    assert wanted > 10
    assert fresh_launches == wanted - 10  # ten at 0.95 each: all ten expected back
    # ten at exp(−0.05 × 16) ≈ 0.45 each: 4.5 expected back, so the rest is launched now, not after they fail
    assert night_launches == wanted - math.floor(10 * math.exp(-CONFIG.parked_gpu_taken_per_h * 16) + 0.5)
    assert night_launches > fresh_launches


def test_a_resume_vast_still_shows_stopped_past_a_restart_is_not_counted_as_on_its_way() -> None:
    demand = signal(NOW, rate_per_h=600, pending=100, above_capacity_for_s=HOUR_S, producing_workers=2)

    def resuming(instance_id: int, for_s: float, vast_status: str) -> InstanceLine:
        waking = line(instance_id, InstanceState.RESUMING, NOW, state_for_s=for_s, last_task_ago_s=for_s)
        return waking.model_copy(update={"vast_status": vast_status})

    just_started = resuming(901, 120, "stopped")
    restarting = resuming(902, CONFIG.resume_gpu_wait_s + 60, "loading")
    waiting = resuming(903, CONFIG.resume_gpu_wait_s + 60, "stopped")  # its GPU is likely someone else's
    fleet = split_fleet(snapshot(NOW, [*producing(2, NOW), just_started, restarting, waiting]))
    sized = size(demand, fleet, NOW, CONFIG, unobserved_launches=0)
    assert sized.arriving == 2 and sized.capacity == 4


def test_a_resume_waiting_for_its_gpu_is_the_spare_it_makes() -> None:
    """Arrivals above capacity for an hour keep every machine on the way that sizing counts; a resume past its GPU
    wait is not one of them, so it is the one parked again, not the newest loading machine (destroyed, then
    launched again within the hour: a busy demo's first morning)."""
    demand = signal(NOW, rate_per_h=300, pending=100, above_capacity_for_s=HOUR_S, producing_workers=2)
    waiting = line(903, InstanceState.RESUMING, NOW, state_for_s=CONFIG.resume_gpu_wait_s + 60, last_task_ago_s=HOUR_S)
    waiting = waiting.model_copy(update={"vast_status": "stopped"})
    fleet = split_fleet(snapshot(NOW, [*producing(2, NOW), *loading(6, NOW), waiting]))
    sized = size(demand, fleet, NOW, CONFIG, unobserved_launches=0)
    # more on the way than twice what is kept: only the sustained rise keeps them all
    assert sized.sustained and sized.arriving == 6 and sized.capacity > 2 * sized.keep
    [removal] = scale_down_plan(demand, fleet, sized, NOW, CONFIG)
    assert (removal.verb, removal.instance_id, removal.reason) == ("stop", 903, RemovalReason.PARK)
    # the audit says which machine it is: a stop beside 100 queued tasks read as capacity taken from a fleet short
    rec = recommend(demand, snapshot(NOW, [*producing(2, NOW), *loading(6, NOW), waiting]), NOW, CONFIG)
    assert rec.explanation.startswith("stop 1 whose resume waits for its GPU (park): need "), rec.explanation


def test_a_resume_parked_again_before_it_produced_says_so() -> None:
    """The busy demo parked a machine resumed a quarter of an hour earlier, twice in a morning, as `stop 1 (park)`
    beside 118 queued tasks: the need had fallen between the runs (the morning's slope gate closed)."""
    resumed = line(904, InstanceState.RESUMING, NOW, state_for_s=300, last_task_ago_s=HOUR_S)
    resumed = resumed.model_copy(update={"vast_status": "running"})
    quiet = signal(NOW, rate_per_h=120, pending=0, producing_workers=2)
    rec = recommend(quiet, snapshot(NOW, [*producing(2, NOW), resumed]), NOW, CONFIG)
    assert [(plan.verb, plan.instance_id) for plan in rec.removals] == [("stop", 904)]
    assert rec.explanation.startswith("stop 1 still resuming (park): need "), rec.explanation


def outcomes(resumed: list[float], taken: tuple[float, ...] = (), given_back: tuple[float, ...] = ()) -> ParkOutcomes:
    return ParkOutcomes(
        window_s=7 * 86400, resumed_after_h=resumed, taken_after_h=list(taken), given_back_after_h=list(given_back)
    )


def test_a_parked_pool_is_given_back_when_its_gaps_grow_longer_than_its_break_even() -> None:
    """A pool whose machines wait longer than their break-even before anyone wants them is not kept at all."""
    line_ = parked(801, 0).model_copy(update={"price_usd_per_h": 0.5, "storage_usd_per_h": 0.01})
    break_even_s = CONFIG.default_startup_s * 0.5 / 0.01  # 75 h
    assert park_limit_s(line_, None, CONFIG) == min(CONFIG.park_max_s, break_even_s)  # no history: the fixed limit
    nightly = ParkHistory.of(outcomes(resumed=[8.0, 9.0, 10.0, 8.5, 9.5, 10.5]))  # a night's gap, every night
    assert parking_pays(line_, nightly, CONFIG)
    assert park_limit_s(line_, nightly, CONFIG) == park_limit_s(line_, None, CONFIG)
    # the gaps grow past the break-even: resumed after days, or never
    rare = outcomes(resumed=[100.0], given_back=(75.0, 80.0, 90.0, 75.0, 75.0))
    assert not parking_pays(line_, ParkHistory.of(rare), CONFIG)
    assert park_limit_s(line_, ParkHistory.of(rare), CONFIG) == 0.0
    # and the whole decision then drains its surplus to give it back, saying why
    demand = signal(NOW, rate_per_h=0, pending=0, producing_workers=4)
    idle = [
        line(500 + i, InstanceState.PRODUCING, NOW, state_for_s=5 * HOUR_S, last_task_ago_s=HOUR_S).model_copy(
            update={"storage_usd_per_h": 0.01}
        )
        for i in range(4)
    ]
    kept = snapshot(NOW, [*idle, line_]).model_copy(update={"park_outcomes": rare})
    from services.decider.policy.predictive import recommend

    rec = recommend(demand, kept, NOW, CONFIG)
    assert "parking does not pay now (of 6 parks ended in 7 d, 1 resumed" in rec.explanation
    assert all(r.reason is not RemovalReason.PARK for r in rec.removals)
    assert ("destroy", 801) in [(r.verb, r.instance_id) for r in rec.removals]  # the parked one given back


def test_the_rate_at_which_parked_gpus_are_taken_is_learned_from_how_resumes_ended() -> None:
    prior = CONFIG.parked_gpu_taken_per_h
    assert gpu_taken_per_h(None, CONFIG) == prior
    # ten resumes after 10 h each, none taken: the rate falls well below the prior
    safe = gpu_taken_per_h(outcomes(resumed=[10.0] * 10), CONFIG)
    assert safe < prior / 2
    # eight of ten taken: it rises above it
    risky = gpu_taken_per_h(outcomes(resumed=[10.0] * 2, taken=(10.0,) * 8), CONFIG)
    assert risky > prior
    # one resume does not make parking look safe
    assert gpu_taken_per_h(outcomes(resumed=[10.0]), CONFIG) > prior / 2
