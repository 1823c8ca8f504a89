"""The world moves its machines, and tells fleet of them, only as the one lifecycle allows (shared/lifecycle.py)."""

from __future__ import annotations

import pytest

from shared.contract import InstanceState
from sim.world.engine import Engine
from sim.world.lifecycle import MACHINE_TRANSITIONS, LifecycleBroken, check_move
from sim.world.model import EPOCH, MachineState, WorldConfig
from sim.world.policies.predictive import PredictiveAdapter, _Reported, default_guardrails
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario
from tests.world.scripted import Hold

M = MachineState


def test_the_machine_states_move_by_the_lifecycle_table() -> None:
    assert set(MACHINE_TRANSITIONS) == set(MachineState)
    assert M.PRODUCING in MACHINE_TRANSITIONS[M.LOADING]  # its registration and benchmark are inside loading
    assert MACHINE_TRANSITIONS[M.PARKED] == frozenset({M.RESUMING, M.OFFLINE, M.EXITED, M.GONE})
    assert MACHINE_TRANSITIONS[M.OFFLINE] == MACHINE_TRANSITIONS[M.EXITED] == frozenset({M.GONE})
    assert MACHINE_TRANSITIONS[M.GONE] == frozenset()
    assert M.LOADING not in MACHINE_TRANSITIONS[M.PRODUCING]
    check_move(1, M.PRODUCING, M.PRODUCING)  # staying is no move
    with pytest.raises(LifecycleBroken, match="machine 1: gone -> producing"):
        check_move(1, M.GONE, M.PRODUCING)


def test_the_engine_refuses_a_move_the_lifecycle_has_no_edge_for() -> None:
    engine = Engine(Trace.of([10] * 30, "flat"), Hold(), quiet_scenario(), 0, WorldConfig(initial_machines=1))
    engine._start_initial_fleet()
    [machine] = engine.machines.values()
    assert machine.state is M.PRODUCING
    with pytest.raises(LifecycleBroken):
        engine._set_state(machine, M.LOADING)


def test_the_predictive_adapter_tells_fleet_no_move_vast_view_refuses() -> None:
    world = WorldConfig()
    adapter = PredictiveAdapter(default_guardrails(world, quiet_scenario()))
    gone = _Reported(state=InstanceState.GONE, gpu_model="RTX 4090", price_usd_per_h=0.5)
    assert adapter._tell(7, gone, (InstanceState.RUNNING, None), 60.0, "running", EPOCH) == []
    assert gone.state is InstanceState.GONE and 7 not in adapter.fleet.instances
    loading = _Reported(state=InstanceState.LOADING, gpu_model="RTX 4090", price_usd_per_h=0.5)
    adapter._tell(8, loading, (InstanceState.RUNNING, None), 60.0, "running", EPOCH)
    assert loading.state is InstanceState.RUNNING and adapter.fleet.instances[8].state is InstanceState.RUNNING
