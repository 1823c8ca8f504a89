"""The event loop: billing from creation (the disk in every state), fates, draining, the instance cap, determinism."""

from __future__ import annotations

import gc

import pytest

from services.decider.guardrails import GuardrailConfig
from sim.vast.scenario import Scenario
from sim.world.bound import clairvoyant_bound
from sim.world.engine import RUN_GC_THRESHOLD0, Engine
from sim.world.evaluate import evaluate
from sim.world.model import Launch, MachineState, Remove, WorldConfig, offers_from_scenario
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario, timing
from tests.world.scripted import Hold, Scripted

FIXED_HOUR = {"startup": {"startup_s": {"min": 3600, "max": 3600}}}
QUIET_3H = Trace.of([0] * 180, "quiet")
END_S = 180 * 60 + 240.0  # trace end + one task duration
DISK_USD_PER_H = 0.15 * 50 / 730  # vast's storage price ($/GB-month) × the 50 GB disk, in every state but gone


def launch_once(view):  # type: ignore[no-untyped-def]
    return [Launch(1)] if view.now_s == 60.0 else []


def run(trace: Trace, policy, scenario: Scenario | None = None, **world: object):  # type: ignore[no-untyped-def]
    config = WorldConfig(**{"initial_machines": 0, **world})  # type: ignore[arg-type]
    return Engine(trace, policy, scenario or quiet_scenario(**FIXED_HOUR), 0, config).run()


def test_a_machine_is_billed_from_creation_and_produces_after_startup_and_registration() -> None:
    states: dict[float, MachineState] = {}

    def script(view):  # type: ignore[no-untyped-def]
        if view.machines:
            states[view.now_s] = view.machines[0].state
        return launch_once(view)

    result = run(QUIET_3H, Scripted(script))
    assert result.end_s == pytest.approx(END_S)
    assert result.launches == 1
    assert result.cost_usd == pytest.approx((0.5 + DISK_USD_PER_H) * (END_S - 60) / 3600)
    assert result.storage_cost_usd == pytest.approx(DISK_USD_PER_H * (END_S - 60) / 3600)
    assert result.machine_hours == pytest.approx((END_S - 60) / 3600)
    producing_from = 60 + 3600 + 600
    assert result.producing_machine_hours == pytest.approx((END_S - producing_from) / 3600)
    assert result.idle_machine_hours == pytest.approx(result.producing_machine_hours)  # no task ever came
    assert result.wasted_launches == 1  # a launch that never started a task
    assert states[producing_from - 60] is MachineState.LOADING
    assert states[producing_from + 60] is MachineState.PRODUCING


def test_billing_from_running_skips_the_startup() -> None:
    result = run(QUIET_3H, Scripted(launch_once), billed_from="running")
    # the GPU from running, the disk from creation
    assert result.cost_usd == pytest.approx((0.5 * (END_S - 60 - 3600) + DISK_USD_PER_H * (END_S - 60)) / 3600)


def test_a_machine_given_back_before_producing_is_a_wasted_launch() -> None:
    def script(view):  # type: ignore[no-untyped-def]
        if view.now_s == 60.0:
            return [Launch(1)]
        if view.now_s == 1860.0:
            return [Remove(view.machines[0].instance_id, "destroy")]
        return []

    result = run(QUIET_3H, Scripted(script))
    assert result.wasted_launches == 1
    assert result.cost_usd == pytest.approx((0.5 + DISK_USD_PER_H) * 1800 / 3600)


def test_a_drained_machine_finishes_its_tasks_before_it_stops_billing() -> None:
    def script(view):  # type: ignore[no-untyped-def]
        return [Remove(view.machines[0].instance_id, "drain")] if view.now_s == 600.0 else []

    result = run(QUIET_3H, Scripted(script), initial_machines=1)
    assert result.cost_usd == pytest.approx((0.5 + DISK_USD_PER_H) * (600 + 240) / 3600)
    assert result.wasted_launches == 0


def test_launches_beyond_the_instance_cap_or_the_market_are_refused() -> None:
    capped = run(QUIET_3H, Scripted(lambda v: [Launch(5)] if v.now_s == 60.0 else []), max_instances=3)
    assert (capped.launches, capped.launches_refused, capped.peak_instances) == (3, 2, 3)
    assert capped.launch_refusals == [(60.0, "world_max_instances", 2)]  # when, which limit, how many
    scenario = quiet_scenario(market=[{"gpu_model": "RTX 4090", "count": 2}], **FIXED_HOUR)
    market = run(QUIET_3H, Scripted(lambda v: [Launch(5)] if v.now_s == 60.0 else []), scenario)
    assert (market.launches, market.launches_refused) == (2, 3)
    assert market.launch_refusals == [(60.0, "market", 3)]


@pytest.mark.parametrize(
    ("fate", "billed_h", "wasted"),
    [("stuck_loading", (END_S - 60) / 3600, 1), ("exit_error", 1.0, 1), ("offline_later", (END_S - 60) / 3600, 1)],
)
def test_fates_from_the_scenario(fate: str, billed_h: float, wasted: int) -> None:
    shares = {"stuck_loading": 0.0, "exit_error": 0.0, "offline_later": 0.0, "slow": 0.0, fate: 1.0}
    shares["offline_after_s"] = {"min": 1800, "max": 1800}  # type: ignore[assignment]
    scenario = quiet_scenario(fates=shares, **FIXED_HOUR)
    policy = Scripted(launch_once)
    result = run(QUIET_3H, policy, scenario)
    assert result.machine_hours == pytest.approx(billed_h)
    assert result.wasted_launches == wasted
    if fate == "offline_later":  # produced from 1h10m, offline 30 min after running: billed until the end
        assert result.producing_machine_hours == pytest.approx((3600 + 1800 - 3600 - 600) / 3600)
        assert any(e.kind == "offline" for v in policy.views for e in v.events)


def test_tasks_go_to_the_oldest_machines_first_so_the_others_fall_idle() -> None:
    trace = Trace.of([1] * 120, "light")  # 60 tasks/h: half of one RTX 4090
    seen: dict[int, tuple[float | None, float]] = {}

    def script(view):  # type: ignore[no-untyped-def]
        if view.now_s == 3600.0:
            seen.update({m.instance_id: (m.last_task_s, m.tasks_started) for m in view.machines})
            seen[0] = (view.now_s, view.started_total)
        return []

    run(trace, Scripted(script), initial_machines=3)
    now_s, started = seen.pop(0)
    (first_last, first_started), *others = [seen[i] for i in sorted(seen)]
    assert first_last == pytest.approx(now_s)
    assert all(last is None for last, _ in others)
    assert first_started == pytest.approx(started, rel=1e-6)


def test_the_same_seed_gives_the_same_result_and_another_seed_another() -> None:
    scenario = quiet_scenario(fates={"stuck_loading": 0.2, "exit_error": 0.2, "offline_later": 0.2, "slow": 0.2})
    trace = Trace.of([30 if 60 <= m < 150 else 5 for m in range(240)], "step")

    def record(seed: int, policy: str) -> dict[str, object]:
        s = scenario.model_copy(update={"seed": seed})
        out = evaluate(trace, policy, s, seed).as_dict()
        return {key: value for key, value in out.items() if not timing(key)}

    for policy in ("reactive", "target-tracking"):
        assert record(3, policy) == record(3, policy)
    assert record(3, "reactive") != record(4, "reactive")


def test_a_run_that_cannot_drain_stops_at_the_horizon_and_charges_the_queue() -> None:
    trace = Trace.of([60] * 30, "flood")
    result = run(trace, Hold(), drain_max_s=3600.0)
    assert result.end_s == pytest.approx(30 * 60 + 3600)
    assert result.tasks_unserved == pytest.approx(1800)
    assert result.tasks_completed == 0
    assert result.delay_cost_usd > 0


@pytest.mark.parametrize("slow_factor", [{"min": 0.5, "max": 1.2}, {"min": 0.0, "max": 0.5}])
def test_a_slow_factor_outside_0_to_1_is_refused_with_its_name(slow_factor: dict[str, float]) -> None:
    # a "slow" machine faster than its reference would let a run score below the world's lower bound
    with pytest.raises(ValueError, match="slow_factor must lie within"):
        Scenario.model_validate({"fates": {"slow_factor": slow_factor}})


def test_machines_run_at_their_own_pace_and_the_bound_prices_work_at_it() -> None:
    spread = quiet_scenario(speed={"model_spread": 0.15, "host_spread": 0.15},
                            market=[{"gpu_model": "RTX 4090", "count": 20, "price_usd_per_h": {"min": 0.5, "max": 0.5}},
                                    {"gpu_model": "RTX 5090", "count": 20}])  # fmt: skip
    offers = offers_from_scenario(spread)
    paces = {offer.tasks_per_h / offer.reference_tasks_per_h for offer in offers}
    assert len(paces) == len(offers) and min(paces) < 0.95 and max(paces) > 1.05  # each its own, some faster
    assert all(0.85**2 - 1e-9 <= pace <= 1.15**2 + 1e-9 for pace in paces)
    assert {o.tasks_per_h for o in offers_from_scenario(quiet_scenario(market=spread.market))} == {120.0, 162.0}
    trace = Trace.of([20] * 120 + [60] * 60 + [10] * 120, "step")
    bound = clairvoyant_bound(trace, spread, WorldConfig(drain_max_s=4 * 3600)).objective_usd
    for policy in ("reactive", "target-tracking", "predictive"):
        run = evaluate(trace, policy, spread, 0, WorldConfig(drain_max_s=4 * 3600))
        assert run.objective_usd >= bound - 1e-6, policy


def test_guardrails_given_to_the_world_bind_every_policy_and_each_refusal_is_recorded() -> None:
    limits = GuardrailConfig(budget_usd_per_h=2.0, max_instances=10, normal_max_price_usd_per_h=0.8,
                             emergency_max_price_usd_per_h=1.2, max_launches_per_h=10)  # fmt: skip
    world = WorldConfig(initial_machines=0)
    engine = Engine(QUIET_3H, Scripted(lambda v: [Launch(5)] if v.now_s in (60.0, 120.0) else []),
                    quiet_scenario(**FIXED_HOUR), 0, world, guardrails=limits)  # fmt: skip
    result = engine.run()
    # $2/h at up to $0.80 each: 2 of the first 5; then those 2 cost their real $0.50 each, which leaves room for 1
    assert result.launches == 3 and result.peak_instances == 3
    assert result.launch_refusals == [(60.0, "budget_usd_per_h", 3), (120.0, "budget_usd_per_h", 4)]
    assert result.launches_refused == 7
    # without them, only the market binds
    free = Engine(QUIET_3H, Scripted(lambda v: [Launch(5)] if v.now_s in (60.0, 120.0) else []),
                  quiet_scenario(**FIXED_HOUR), 0, world).run()  # fmt: skip
    assert free.launches == 10 and free.launch_refusals == []


def test_a_run_collects_cycles_less_often_and_puts_the_interpreters_thresholds_back() -> None:
    seen: list[tuple[int, int, int]] = []

    def script(view):  # type: ignore[no-untyped-def]
        seen.append(gc.get_threshold())
        if view.now_s >= 120.0:
            raise RuntimeError("a policy bug")
        return []

    before = gc.get_threshold()
    run(QUIET_3H, Scripted(launch_once))
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError, match="a policy bug"):
        run(QUIET_3H, Scripted(script))
    assert seen and all(threshold == (RUN_GC_THRESHOLD0, *before[1:]) for threshold in seen)
    assert gc.get_threshold() == before  # put back when a run stops with an error, too
