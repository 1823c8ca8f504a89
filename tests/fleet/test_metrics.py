"""fleet's per-instance series: the on-call table and the stuck-machine alert read them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from services.fleet.core import FleetCore
from services.fleet.metrics import FleetMetrics
from shared.contract import InstanceObserved, InstanceState

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def observed(instance_id: int, state: InstanceState, at: datetime) -> InstanceObserved:
    return InstanceObserved(
        occurred_at=at,
        source="provisioner",
        instance_id=instance_id,
        state=state,
        gpu_model="RTX 4090",
        price_usd_per_h=0.5,
        storage_usd_per_h=0.02,
        vast_actual_status=state.value,
    )


def test_each_instance_has_its_state_entry_time_price_and_storage() -> None:
    core, registry = FleetCore(), CollectorRegistry()
    metrics = FleetMetrics(registry)
    core.observe_instance(observed(1, InstanceState.LOADING, T0), T0)
    later = T0 + timedelta(hours=1)
    core.observe_instance(observed(2, InstanceState.LOADING, later), later)
    metrics.snapshot(core.snapshot(later))

    def since(instance_id: str) -> float | None:
        labels = {"instance_id": instance_id, "state": "loading", "gpu_model": "RTX 4090"}
        return registry.get_sample_value("fleetpilot_fleet_instance_state_since_timestamp_seconds", labels)

    assert since("1") == T0.timestamp()
    assert since("2") == later.timestamp()
    per_instance = {"instance_id": "1", "gpu_model": "RTX 4090"}
    assert registry.get_sample_value("fleetpilot_fleet_instance_price_usd_per_hour", per_instance) == 0.5
    assert registry.get_sample_value("fleetpilot_fleet_instance_storage_usd_per_hour", per_instance) == 0.02


def test_an_instance_that_left_the_fleet_leaves_its_series() -> None:
    core, registry = FleetCore(), CollectorRegistry()
    metrics = FleetMetrics(registry)
    core.observe_instance(observed(1, InstanceState.LOADING, T0), T0)
    metrics.snapshot(core.snapshot(T0))
    labels = {"instance_id": "1", "state": "loading", "gpu_model": "RTX 4090"}
    assert registry.get_sample_value("fleetpilot_fleet_instance_state_since_timestamp_seconds", labels) is not None
    gone_at = T0 + timedelta(minutes=5)
    core.observe_instance(observed(1, InstanceState.GONE, gone_at), gone_at)
    metrics.snapshot(core.snapshot(gone_at))
    assert registry.get_sample_value("fleetpilot_fleet_instance_state_since_timestamp_seconds", labels) is None
    assert (
        registry.get_sample_value(
            "fleetpilot_fleet_instance_price_usd_per_hour", {"instance_id": "1", "gpu_model": "RTX 4090"}
        )
        is None
    )
