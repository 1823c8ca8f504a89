"""Time to productive in the ranking: the provisioner learns each machine's startup from what vast reports, and an
emergency launch weighs it against price; an ordinary one still takes the cheapest per task."""

from __future__ import annotations

from datetime import timedelta

import pytest
from nats.js import JetStreamContext

from services.provisioner.host_history import HostHistory
from services.provisioner.ranking import URGENT_HORIZON_H, OfferConstraints, StartupModel, ThroughputKnowledge, rank
from services.provisioner.reconcile import launch_label
from services.provisioner.vast_models import VastOffer
from shared.clock import SimulatedClock
from shared.contract import LaunchInstances, LaunchPriority, LaunchReason
from shared.settings import Settings
from tests.helpers import eventually
from tests.provisioner.service_harness import (
    NOW,
    OFFER_A,
    OFFER_B,
    QUIET,
    BusRecorder,
    market_scenario,
    running_provisioner,
    send,
)
from tests.sim_vast.harness import StartVast

ANY = OfferConstraints(allowed_gpu_models=("RTX 4090",), max_price_usd_per_h=1.0, verified_only=False)


def offer(offer_id: int, price: float, *, machine: int, host: int, inet_down: float | None = None) -> VastOffer:
    return VastOffer(
        id=offer_id, gpu_name="RTX 4090", dph_total=price, machine_id=machine, host_id=host, reliability2=1.0,
        inet_down=inet_down,
    )  # fmt: skip


def launch(key: str, priority: LaunchPriority) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=NOW, source="decider", idempotency_key=key, requested_by="policy", count=1,
        launch_priority=priority, reason=LaunchReason.BACKLOG,
    )  # fmt: skip


def test_an_urgent_launch_pays_more_for_a_host_that_starts_sooner() -> None:
    history = HostHistory()
    history.record_startup(1, 10, 2 * 3600.0, NOW)  # the cheap machine took two hours last time
    history.record_startup(2, 20, 20 * 60.0, NOW)  # the dearer one twenty minutes
    offers = [offer(1, 0.45, machine=1, host=10), offer(2, 0.55, machine=2, host=20)]
    ordinary = rank(offers, ANY, ThroughputKnowledge(), history, NOW)
    urgent = rank(offers, ANY, ThroughputKnowledge(), history, NOW, urgent_horizon_h=URGENT_HORIZON_H)
    assert [r.offer.id for r in ordinary] == [1, 2]
    assert [r.offer.id for r in urgent] == [2, 1]
    # price × (startup + horizon) ÷ horizon per task-hour
    assert urgent[0].expected_usd_per_task == pytest.approx(0.55 / 120 * (1 / 3 + 2) / 2)


def test_a_host_with_no_record_is_predicted_from_its_siblings_then_from_its_link() -> None:
    history = HostHistory()
    history.record_startup(1, 10, 1800.0, NOW)
    model = StartupModel(image_gb=40.0, typical_startup_s=3600.0)
    known = history.startup_means()
    sibling = offer(3, 0.5, machine=3, host=10)
    assert model.predicted_s(sibling, known) == 1800.0
    fast_link, slow_link, unlisted = (offer(i, 0.5, machine=i, host=i, inet_down=d) for i, d in
                                      ((4, 2000.0), (5, 200.0), (6, None)))  # fmt: skip
    assert model.predicted_s(fast_link, known) == pytest.approx(3600 + 40 * 8000 / 2000)
    assert model.predicted_s(slow_link, known) == pytest.approx(3600 + 40 * 8000 / 200)
    assert model.predicted_s(unlisted, known) > model.predicted_s(slow_link, known)  # never a free pass


async def test_the_provisioner_learns_startups_and_an_emergency_launch_prefers_the_fast_host(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url) as service:
        await send(js, settings, "launch", launch("launch-learn", "normal"))
        result = await bus.result_for("launch-learn")
        assert result.outcome == "done"
        created = [e for e in simulator.world.ledger(sim_clock.now()).entries if e.offer_id == OFFER_A]
        assert created  # the cheapest per task
        # the next scheduled reconciliation sees it running: its startup is learned, at most that late
        sim_clock.advance(QUIET.reconcile_interval_s)
        operations = service.operations
        await eventually(lambda: 500 in operations.history.startups, timeout_s=15)
        learned = operations.history.startups[500].seconds
        assert 600 <= learned <= QUIET.reconcile_interval_s + 60
        # machine 501 (offer A2, host 50) shares the slow record through its host; B's host 60 has none and
        # is predicted at the typical startup. Make the record slow: an emergency now takes B, an ordinary A2
        slow = operations.history.model_copy(deep=True)
        slow.record_startup(500, 50, 4 * 3600.0, sim_clock.now())
        await operations.store.save_history(slow)  # what a slow start would have left (read back per command)
        await send(js, settings, "launch", launch("launch-urgent", "emergency"))
        await bus.result_for("launch-urgent")
        await send(js, settings, "launch", launch("launch-calm", "normal"))
        await bus.result_for("launch-calm")
    rented = {e.label: e.offer_id for e in simulator.world.ledger(sim_clock.now() + timedelta(seconds=1)).entries}
    assert rented[launch_label("launch-urgent", 0)] == OFFER_B
    assert rented[launch_label("launch-calm", 0)] != OFFER_B
