"""Interruptible machines in the world: billed at their bid, paused by a higher bid (disk kept, GPU not billed,
no capacity) and started again when theirs is the highest; the vast simulator's rules and bid walk."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from services.decider.policy import PolicyConfig
from sim.world.engine import Engine
from sim.world.model import Action, Launch, MachineState, WorldConfig, WorldView
from sim.world.policies.predictive import PredictiveAdapter, default_guardrails
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario
from tests.world.scripted import Scripted

DISK_USD_PER_H = 0.15 * 50 / 730
QUIET_6H = Trace.of([0] * 360, "quiet")
ON_DEMAND, MIN_BID = 0.5, 0.25  # the scenario's min_bid is half the on-demand price
RESTART_S, REGISTRATION_S, STARTUP_S = 120.0, 600.0, 3600.0


def scenario(competing_share: float):
    """One RTX 4090 at 0.50 $/h, other renters bidding a fixed share of that (no walk)."""
    return quiet_scenario(
        market=[{"gpu_model": "RTX 4090", "count": 1, "price_usd_per_h": {"min": ON_DEMAND, "max": ON_DEMAND}}],
        startup={"startup_s": {"min": STARTUP_S, "max": STARTUP_S}},
        bids={"start_share": {"min": competing_share, "max": competing_share}, "volatility_per_h": 0},
    )


def run(script, competing_share: float):
    engine = Engine(QUIET_6H, Scripted(script), scenario(competing_share), 0, WorldConfig(initial_machines=0))
    return engine, engine.run()


def test_an_interruptible_machine_is_billed_at_its_bid_while_no_one_bids_more() -> None:
    def script(view):
        return [Launch(1, interruptible=1, bid_markup=0.2)] if view.now_s == 60.0 else []

    _, result = run(script, competing_share=0.4)  # others bid 0.20 $/h, ours 0.30
    bid = MIN_BID * 1.2
    assert result.outbid_pauses == 0
    assert result.cost_usd == pytest.approx((bid + DISK_USD_PER_H) * (result.end_s - 60) / 3600)


def test_a_bid_is_never_above_the_on_demand_price() -> None:
    def script(view):
        return [Launch(1, interruptible=1, bid_markup=5.0)] if view.now_s == 60.0 else []

    _, result = run(script, competing_share=0.4)
    assert result.cost_usd == pytest.approx((ON_DEMAND + DISK_USD_PER_H) * (result.end_s - 60) / 3600)


def test_an_outbid_machine_pauses_and_resumes_when_its_bid_is_highest_again() -> None:
    states: dict[float, MachineState] = {}
    engine_ref: list[Engine] = []
    outbid_at, back_at = 2 * 3600.0, 3 * 3600.0

    def script(view):
        if view.machines:
            states[view.now_s] = view.machines[0].state
        bids = engine_ref[0].bid_levels
        if view.now_s == outbid_at:
            bids.set_share("RTX 4090", 0.9)  # an on-demand-like renter bids 0.45 $/h
        if view.now_s == back_at:
            bids.set_share("RTX 4090", 0.3)
        return [Launch(1, interruptible=1)] if view.now_s == 60.0 else []

    engine = Engine(QUIET_6H, Scripted(script), scenario(0.3), 0, WorldConfig(initial_machines=0))
    engine_ref.append(engine)
    result = engine.run()
    assert result.outbid_pauses == 1
    producing_at = 60 + STARTUP_S + REGISTRATION_S
    assert states[producing_at + 60] is MachineState.PRODUCING
    assert states[outbid_at + 120] is MachineState.PARKED  # paused within a bid tick
    assert states[back_at + 120] is MachineState.RESUMING
    assert states[back_at + 60 + RESTART_S + REGISTRATION_S + 60] is MachineState.PRODUCING
    # the GPU at the bid, except from the pause to the restart (each within a minute's tick); the disk throughout
    paused_s = result.cost_usd * 3600 - DISK_USD_PER_H * (result.end_s - 60)
    assert MIN_BID * (result.end_s - 60 - 3600 - RESTART_S - 120) <= paused_s <= MIN_BID * (result.end_s - 60 - 3600)


def test_a_losing_bid_is_created_paused_and_starts_when_it_wins() -> None:
    states: dict[float, MachineState] = {}
    engine_ref: list[Engine] = []

    def script(view):
        if view.machines:
            states[view.now_s] = view.machines[0].state
        if view.now_s == 3600.0:
            engine_ref[0].bid_levels.set_share("RTX 4090", 0.3)
        return [Launch(1, interruptible=1)] if view.now_s == 60.0 else []

    engine = Engine(QUIET_6H, Scripted(script), scenario(0.8), 0, WorldConfig(initial_machines=0))
    engine_ref.append(engine)
    result = engine.run()
    assert states[120.0] is MachineState.PARKED
    # it had not loaded at all: the whole startup is still ahead once it wins
    assert states[3600 + 120 + STARTUP_S] is MachineState.RESUMING
    assert states[3600 + 60 + STARTUP_S + REGISTRATION_S + 60] is MachineState.PRODUCING
    assert result.outbid_pauses == 1


class _Outbidding:
    """FleetPilot's policy in a market where, for ten minutes every `period_h`, other renters bid 0.6 of the
    on-demand price: above a bid at min_bid × 1.1 (0.55 of it), below one at min_bid × 1.3. Records every
    machine's bid by its instance id (ids grow with creation)."""

    name = "predictive-bids"
    decision_interval_s = 60.0

    def __init__(self, adapter: PredictiveAdapter, period_h: int) -> None:
        self.adapter = adapter
        self.period_h = period_h
        self.engine: Engine | None = None
        self.bids: dict[int, float] = {}

    def decide(self, view: WorldView) -> Sequence[Action]:
        assert self.engine is not None
        hour, minute = divmod(int(view.now_s // 60), 60)
        outbidding = hour % self.period_h == self.period_h - 1 and minute < 10
        self.engine.bid_levels.set_share("RTX 4090", 0.6 if outbidding else 0.3)
        for machine in view.machines:
            if machine.bid_usd_per_h is not None:
                self.bids.setdefault(machine.instance_id, machine.bid_usd_per_h)
        return self.adapter.decide(view)


def test_bids_the_market_keeps_outbidding_are_raised_for_later_launches() -> None:
    rise = Trace.of([4 + m * 36 / 960 for m in range(960)], "a 16-hour rise from 240 to 2400 tasks/h")
    world = WorldConfig(initial_machines=2)
    market = quiet_scenario(bids={"start_share": {"min": 0.3, "max": 0.3}, "volatility_per_h": 0})
    # every launch for the rise a bid: it launches a machine or two at a time, and half of one is none
    adapter = PredictiveAdapter(default_guardrails(world, market, rise), PolicyConfig(bid_share=1.0))
    policy = _Outbidding(adapter, period_h=3)
    engine = Engine(rise, policy, market, 0, world)
    policy.engine = engine
    result = engine.run()
    first_bid, base_bid = min(policy.bids.values()), MIN_BID * 1.1
    assert result.outbid_pauses > 0 and first_bid == pytest.approx(base_bid)
    # the pauses seen raised the markup: the latest bids outbid the market's 0.6 of on-demand and go unpaused
    latest_bid = policy.bids[max(policy.bids)]
    assert latest_bid > 0.6 * ON_DEMAND
    assert any("bids at min_bid × " in text and "outbid pauses" in text for _, text in adapter.explanations)
