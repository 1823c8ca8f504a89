"""The provisioner service end to end: commands over real NATS, state in real Redis, vast.ai simulated over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from pydantic import SecretStr

from services.bench.tokens import label_of_token
from services.provisioner.app import ProvisionerService
from services.provisioner.reconcile import launch_label, parse_label
from services.provisioner.settings import DEFAULT_IMAGE, ProvisionerSettings
from shared.clock import RealClock, SimulatedClock
from shared.contract import (
    BenchResult,
    DeadLetter,
    DemandSignal,
    DemandState,
    DemandTrend,
    DestroyInstance,
    FleetSnapshot,
    InstanceLine,
    InstanceObserved,
    InstanceState,
    LaunchInstances,
    LaunchReason,
    OfferList,
    OfferQuery,
    RefusalRule,
    RemovalReason,
    StopInstance,
)
from shared.settings import Settings
from shared.streams import COMMANDS
from sim.infra import NatsServer
from sim.vast.scenario import Endpoint, Fate, OfferSpec
from sim.vast.server import ScriptedFault
from sim.vast.world import CreateRequest
from tests.helpers import eventually, request_when_subscribed
from tests.provisioner.service_harness import (
    MARKET,
    NOW,
    OFFER_A,
    OFFER_A2,
    OFFER_B,
    OFFER_C,
    QUIET,
    BusRecorder,
    market_scenario,
    running_provisioner,
    send,
)
from tests.sim_vast.harness import StartVast


def launch(key: str, count: int = 1, **fields: object) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=NOW,
        source="decider",
        idempotency_key=key,
        requested_by="policy",
        count=count,
        launch_priority=fields.pop("launch_priority", "normal"),
        reason=LaunchReason.BACKLOG,
        **fields,
    )


def destroy(key: str, instance_id: int, reason: RemovalReason = RemovalReason.IDLE) -> DestroyInstance:
    return DestroyInstance(
        occurred_at=NOW, source="decider", idempotency_key=key, requested_by="policy", instance_id=instance_id,
        reason=reason,
    )  # fmt: skip


def refusals(service: ProvisionerService, rule: str) -> float:
    registry = service.context.metrics.registry
    return registry.get_sample_value("fleetpilot_provisioner_launches_refused_total", {"rule": rule}) or 0.0


async def ask_offers(nc: NatsClient, settings: Settings, **fields: object) -> OfferList:
    query = OfferQuery(occurred_at=NOW, source="agent", **fields)
    reply = await request_when_subscribed(nc, settings.subjects.provision_offers, query.model_dump_json().encode())
    return OfferList.model_validate_json(reply.data)


async def test_a_provisioner_without_its_onstart_settings_rents_nothing(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    blind = QUIET.model_copy(update={"bench_url": None})
    async with running_provisioner(settings, sim_clock, url, blind):
        await send(js, settings, "launch", launch("launch-blind", 1))
        result = await bus.result_for("launch-blind")
    assert result.outcome == "failed" and "FLEETPILOT_PROVISIONER_BENCH_URL" in result.detail
    assert simulator.calls_to(Endpoint.CREATE) == []


async def test_launch_rents_the_best_offer_per_task_and_reports_it(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        offers = await ask_offers(nc, settings)
        assert offers.error is None
        assert [o.offer_id for o in offers.offers] == [OFFER_A, OFFER_A2, OFFER_B, OFFER_C]
        await send(js, settings, "launch", launch("launch-001", 2))
        result = await bus.result_for("launch-001")
    assert result.outcome == "done" and result.command == "launch", result.detail
    ledger = simulator.world.ledger(sim_clock.now())
    assert {(e.offer_id, e.label) for e in ledger.entries} == {
        (OFFER_A, launch_label("launch-001", 0)),
        (OFFER_A2, launch_label("launch-001", 1)),
    }
    assert sorted(result.instance_ids) == sorted(e.instance_id for e in ledger.entries)
    requested = [o for o in bus.observed if o.state is InstanceState.REQUESTED]
    assert {o.instance_id for o in requested} == set(result.instance_ids)
    assert {(o.idempotency_key, o.price_usd_per_h) for o in requested} == {("launch-001", 0.48), ("launch-001", 0.49)}
    # the instance carries what the worker needs
    view = simulator.world.sim_view(simulator.world.instances[result.instance_ids[0]], sim_clock.now())
    assert view["container_env"]["FLEETPILOT_INSTANCE_LABEL"].startswith("fleetpilot:default:launch-001:")
    assert view["container_env"]["CONTAINER_ID"] == str(result.instance_ids[0])
    # the default onstart runs bench's suite: fetched from the bench URL, reported with this instance's own token
    assert view["onstart"] == QUIET.onstart_line()
    assert "http://bench.test:8000/bench/suite.py" in view["onstart"]
    assert "http://bench.test:8000/bench/report" in view["onstart"] and "report-token-for-tests" not in view["onstart"]
    envs = [simulator.world.sim_view(simulator.world.instances[i], sim_clock.now()) for i in result.instance_ids]
    tokens = {v["container_env"]["FLEETPILOT_BENCH_TOKEN"] for v in envs}
    assert len(tokens) == 2  # one per machine: neither host can file the other's report
    for each in envs:
        label = each["container_env"]["FLEETPILOT_INSTANCE_LABEL"]
        token = each["container_env"]["FLEETPILOT_BENCH_TOKEN"]
        assert label_of_token(token, SecretStr("report-token-for-tests")) == label
    assert simulator.world.instances[result.instance_ids[0]].request.image == DEFAULT_IMAGE


async def test_ranking_changes_after_a_hosts_machine_fails(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
) -> None:
    simulator, url = await start_vast(market_scenario())
    simulator.world.set_machine_fate(500, Fate.EXIT_ERROR)
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-fail", 1))
        [instance_id] = (await bus.result_for("launch-fail")).instance_ids
        before = [o.offer_id for o in (await ask_offers(nc, settings)).offers]
        assert before == [OFFER_A2, OFFER_B, OFFER_C]  # A is rented; its host's sibling A2 leads
        # an hour later the scheduled reconciliation sees the machine exited with an error
        sim_clock.advance(QUIET.reconcile_interval_s)
        failed = await eventually(
            lambda: [o for o in bus.observed_of(instance_id) if o.state is InstanceState.FAILED], timeout_s=15
        )
        assert failed[0].vast_actual_status == "exited" and "Error" in (failed[0].vast_status_msg or "")
        after = [o.offer_id for o in (await ask_offers(nc, settings)).offers]
    assert after == [OFFER_B, OFFER_C, OFFER_A2]  # host 50 is penalised now, below even the 3090


async def test_an_offer_taken_between_search_and_rent_gives_the_next_best(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.SEARCH, kind="take_offers", offer_ids=[OFFER_A]))
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-race", 1))
        result = await bus.result_for("launch-race")
    assert result.outcome == "done"
    assert [c.status for c in simulator.calls_to(Endpoint.CREATE)] == [410, 200]
    [entry] = simulator.world.ledger(sim_clock.now()).entries
    assert entry.offer_id == OFFER_A2 and result.instance_ids == [entry.instance_id]


async def test_a_timeout_after_the_create_yields_exactly_one_instance_found_by_label(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="slow", delay_wall_s=1.5))
    config = QUIET.model_copy(update={"request_timeout_s": 0.4})
    async with running_provisioner(settings, sim_clock, url, config):
        await send(js, settings, "launch", launch("launch-slow", 1))
        result = await bus.result_for("launch-slow")
        await eventually(lambda: len(simulator.calls_to(Endpoint.CREATE)) == 1)  # the slow answer went out
    [entry] = simulator.world.ledger(sim_clock.now()).entries
    assert result.outcome == "done" and result.instance_ids == [entry.instance_id]
    assert entry.label == launch_label("launch-slow", 0)
    label_lookups = [c for c in simulator.calls_to(Endpoint.LIST_V1) if c.at >= entry.created_at]
    assert label_lookups, "the provisioner looked for the label before anything else"
    [observed] = bus.observed_of(entry.instance_id)
    assert observed.adopted and observed.state is InstanceState.REQUESTED


async def test_a_create_still_acting_when_the_client_gave_up_is_found_after_the_settle_not_rented_twice(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    # the create acts (and answers) only after 1 s; the client gives up at 0.3 s. A look-up at once finds nothing,
    # the next create waits out a 429 meanwhile, finds the offer taken (by our own late create) and rents the
    # next best: the slot rented twice (vast.ai has no idempotency key)
    simulator, url = await start_vast(market_scenario())
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="late", delay_wall_s=1.0))
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="rate_limit", retry_after_s=1.5))
    config = QUIET.model_copy(update={"request_timeout_s": 0.3, "ambiguous_settle_s": 3.0})
    async with running_provisioner(settings, RealClock(), url, config) as service:
        await send(js, settings, "launch", launch("launch-late", 1))
        result = await bus.result_for("launch-late", timeout_s=30)
        second_rents = service.context.metrics.registry.get_sample_value(
            "fleetpilot_provisioner_second_rents_destroyed_total"
        )
        await eventually(lambda: simulator.late_acts_pending == 0)  # the late create has acted by now
    [entry] = simulator.world.ledger(sim_clock.now()).entries
    assert entry.label == launch_label("launch-late", 0)
    assert result.outcome == "done" and result.instance_ids == [entry.instance_id]
    assert len(simulator.calls_to(Endpoint.CREATE)) == 1 and second_rents == 0


async def test_a_launch_slot_listed_twice_loses_its_second_rent_at_once(
    settings: Settings, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    label = launch_label("cmd-9", 0)
    first = simulator.world.create(OFFER_A, CreateRequest(image="x", disk=20, label=label), NOW)
    second = simulator.world.create(OFFER_B, CreateRequest(image="x", disk=20, label=label), NOW)
    other_slot = simulator.world.create(OFFER_C, CreateRequest(image="x", disk=20, label=launch_label("cmd-9", 1)), NOW)
    async with running_provisioner(settings, sim_clock, url) as service:
        gone = await eventually(
            lambda: [o for o in bus.observed_of(second.instance_id) if o.state is InstanceState.GONE]
        )
        registry = service.context.metrics.registry
        assert registry.get_sample_value("fleetpilot_provisioner_second_rents_destroyed_total") == 1
    assert "second instance for launch slot" in (gone[0].gone_because or "")
    assert gone[0].removal_reason is RemovalReason.OVER_PROVISIONED  # ours, planned: no P0 for fleet
    live = {e.instance_id for e in simulator.world.ledger(sim_clock.now()).entries if e.destroyed_at is None}
    assert live == {first.instance_id, other_slot.instance_id}


async def test_a_create_answered_503_is_checked_by_label_then_retried_once(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="error", status=503))
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-503", 1))
        result = await bus.result_for("launch-503")
    assert result.outcome == "done"
    assert [c.status for c in simulator.calls_to(Endpoint.CREATE)] == [503, 200]
    assert len(simulator.world.ledger(sim_clock.now()).entries) == 1


async def test_a_v0_list_answering_410_never_leads_to_a_launch(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    config = QUIET.model_copy(update={"instance_list_api": "v0"})
    async with running_provisioner(settings, sim_clock, url, config) as service:
        await send(js, settings, "launch", launch("launch-v0", 1))
        result = await bus.result_for("launch-v0")
        assert not service.operations.fleet_known
    assert result.outcome == "refused" and result.refusal_rule is RefusalRule.UNKNOWN_FLEET
    assert "410" in result.detail
    assert simulator.calls_to(Endpoint.CREATE) == [] and simulator.calls_to(Endpoint.SEARCH) == []
    assert simulator.world.ledger(sim_clock.now()).entries == []


async def test_a_failing_v1_list_never_leads_to_a_launch(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url) as service:
        await eventually(lambda: service.operations.fleet_known)  # the start-up reconciliation went fine
        simulator.faults.append(ScriptedFault(endpoint=Endpoint.LIST_V1, kind="error", status=502, count=1000))
        await send(js, settings, "launch", launch("launch-v1-down", 1))
        result = await bus.result_for("launch-v1-down")
        refused = refusals(service, "unknown_fleet")
    assert result.outcome == "refused" and result.refusal_rule is RefusalRule.UNKNOWN_FLEET
    assert simulator.calls_to(Endpoint.CREATE) == []
    assert len([c for c in simulator.calls_to(Endpoint.LIST_V1) if c.status == 502]) == QUIET.max_attempts
    assert refused == 1


async def test_a_bad_key_answered_404_is_a_clear_auth_failure_without_a_retry_loop(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario(), api_key="the-real-key")
    async with running_provisioner(settings, sim_clock, url):
        await eventually(lambda: len(simulator.calls) == 1)  # the start-up reconciliation, refused
        await send(js, settings, "launch", launch("launch-badkey", 1))
        result = await bus.result_for("launch-badkey")
        await asyncio.sleep(0.5)  # room for a retry loop to show itself, were there one
        consumer = await js.consumer_info(COMMANDS.name(settings.subjects), "provisioner-launch")
    assert result.outcome == "failed" and result.refusal_rule is RefusalRule.AUTH
    assert "refused" in result.detail and "404" in result.detail
    assert [(c.endpoint, c.status) for c in simulator.calls] == [(Endpoint.LIST_V1, 404), (Endpoint.LIST_V1, 404)]
    assert consumer.num_ack_pending == 0 and consumer.num_redelivered == 0  # answered and acknowledged, once


async def test_the_budget_refuses_whole_commands_and_the_ledger_never_exceeds_it(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    cheap = [OfferSpec(offer_id=300 + i, gpu_model="RTX 4090", price_usd_per_h=0.45) for i in range(6)]
    simulator, url = await start_vast(market_scenario(offers=cheap))
    async with running_provisioner(settings, sim_clock, url, budget_usd_per_h=1.0, max_instances=3) as service:
        await send(js, settings, "launch", launch("launch-three", 3))
        too_much = await bus.result_for("launch-three")
        await send(js, settings, "launch", launch("launch-two", 2))
        fits = await bus.result_for("launch-two")
        await send(js, settings, "launch", launch("launch-one-more", 1))
        over = await bus.result_for("launch-one-more")
        refused = refusals(service, "budget_usd_per_h")
        spend = service.context.metrics.registry.get_sample_value("fleetpilot_spend_usd_per_hour")
    assert too_much.outcome == "refused" and too_much.refusal_rule is RefusalRule.BUDGET_USD_PER_H
    assert fits.outcome == "done" and len(fits.instance_ids) == 2
    assert over.outcome == "refused" and over.refusal_rule is RefusalRule.BUDGET_USD_PER_H
    ledger = simulator.world.ledger(sim_clock.now())
    assert ledger.peak_instances == 2 and ledger.peak_committed_usd_per_h <= 1.0
    assert len(simulator.calls_to(Endpoint.CREATE)) == 2  # refused commands never reached vast
    assert refused == 2 and spend == 0.9


async def test_emergency_launches_may_pay_more_but_normal_ones_may_not(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    dear = [OfferSpec(offer_id=400, gpu_model="RTX 5090", price_usd_per_h=1.0)]
    simulator, url = await start_vast(market_scenario(offers=dear))
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-normal", 1))
        normal = await bus.result_for("launch-normal")
        await send(js, settings, "launch", launch("launch-emergency", 1, launch_priority="emergency"))
        emergency = await bus.result_for("launch-emergency")
    assert normal.outcome == "refused" and normal.refusal_rule is RefusalRule.NO_OFFER
    assert emergency.outcome == "done"
    assert [e.offer_id for e in simulator.world.ledger(sim_clock.now()).entries] == [400]


async def test_fewer_acceptable_offers_than_asked_rents_those_there_are_and_says_how_many_were_short(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    two = [
        OfferSpec(offer_id=500, gpu_model="RTX 4090", price_usd_per_h=0.4),
        OfferSpec(offer_id=501, gpu_model="RTX 4090", price_usd_per_h=0.45),
    ]
    simulator, url = await start_vast(market_scenario(offers=two))
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-five", 5))
        result = await bus.result_for("launch-five")
    assert result.outcome == "failed" and result.refusal_rule is RefusalRule.NO_OFFER
    assert "launched 2 of 5: 2 acceptable offers for 5 instances" in result.detail
    assert len(result.instance_ids) == 2
    assert sorted(e.offer_id for e in simulator.world.ledger(sim_clock.now()).entries) == [500, 501]


async def test_stop_and_destroy_act_on_ours_only_and_teach_the_host_history(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
) -> None:
    simulator, url = await start_vast(market_scenario())
    foreign = simulator.world.create(OFFER_C, CreateRequest(image="x", disk=20, label="my-notebook"), sim_clock.now())
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-sd", 1))
        [instance_id] = (await bus.result_for("launch-sd")).instance_ids
        stop = StopInstance(
            occurred_at=NOW, source="decider", idempotency_key="stop-0001", requested_by="policy",
            instance_id=instance_id, reason=RemovalReason.IDLE,
        )  # fmt: skip
        await send(js, settings, "stop", stop)
        assert (await bus.result_for("stop-0001")).outcome == "done"
        await send(js, settings, "destroy", destroy("destroy-001", instance_id, RemovalReason.STUCK_LOADING))
        assert (await bus.result_for("destroy-001")).outcome == "done"
        await send(js, settings, "destroy", destroy("destroy-foreign", foreign.instance_id))
        refused = await bus.result_for("destroy-foreign")
        await send(js, settings, "destroy", destroy("destroy-001", instance_id))  # the same command again
        await asyncio.sleep(0.3)
        offers = [o.offer_id for o in (await ask_offers(nc, settings)).offers]
    states = [o.state for o in bus.observed_of(instance_id)]
    assert states == [InstanceState.REQUESTED, InstanceState.DRAINING, InstanceState.GONE]
    assert refused.outcome == "refused" and refused.refusal_rule is RefusalRule.UNKNOWN_INSTANCE
    ledger = {e.instance_id: e for e in simulator.world.ledger(sim_clock.now()).entries}
    assert ledger[instance_id].destroyed_at is not None
    assert ledger[foreign.instance_id].destroyed_at is None  # never touched
    assert len(simulator.calls_to(Endpoint.DESTROY)) == 1  # the repeated command was answered, not re-acted
    assert len([r for r in bus.results if r.idempotency_key == "destroy-001"]) == 2
    # destroyed for being stuck: its machine (500, the best offer before) now ranks below B
    assert offers.index(OFFER_A) > offers.index(OFFER_B)


async def test_a_command_older_than_the_newest_fencing_token_is_refused(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    """A decider that lost the lock between its check and its publish: its command carries the older token."""
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url) as service:
        await send(js, settings, "launch", launch("fenced-new", 1, fencing_token=8))
        [instance_id] = (await bus.result_for("fenced-new")).instance_ids
        await send(js, settings, "launch", launch("fenced-old", 1, fencing_token=7))
        stale_launch = await bus.result_for("fenced-old")
        stale = destroy("fenced-destroy", instance_id).model_copy(update={"fencing_token": 7})
        await send(js, settings, "destroy", stale)
        stale_destroy = await bus.result_for("fenced-destroy")
        await send(js, settings, "launch", launch("unfenced", 1))  # an operator's command carries no token
        unfenced = await bus.result_for("unfenced")
        await send(js, settings, "launch", launch("fenced-same", 1, fencing_token=8))  # the same run, later
        same_run = await bus.result_for("fenced-same")
        refused = refusals(service, "stale_fencing_token")
    assert stale_launch.outcome == "refused" and stale_launch.refusal_rule is RefusalRule.STALE_FENCING_TOKEN
    assert "fencing token 7 is older than 8" in stale_launch.detail
    assert stale_destroy.outcome == "refused" and stale_destroy.refusal_rule is RefusalRule.STALE_FENCING_TOKEN
    assert unfenced.outcome == "done" and same_run.outcome == "done" and refused == 1
    ledger = simulator.world.ledger(sim_clock.now()).entries
    assert sorted(parse_label(e.label).idempotency_key for e in ledger) == ["fenced-new", "fenced-same", "unfenced"]
    assert all(e.destroyed_at is None for e in ledger)


async def test_reconciliation_adopts_ours_reports_foreign_and_marks_gone(
    settings: Settings, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    ours = simulator.world.create(OFFER_B, CreateRequest(image="x", disk=20, label="fleetpilot:old-cmd:0"), NOW)
    simulator.world.create(OFFER_C, CreateRequest(image="x", disk=20, label="my-notebook"), NOW)
    async with running_provisioner(settings, sim_clock, url) as service:
        [adopted] = await eventually(lambda: bus.observed_of(ours.instance_id))
        assert adopted.adopted and adopted.idempotency_key == "old-cmd" and adopted.label == "fleetpilot:old-cmd:0"
        registry = service.context.metrics.registry
        assert registry.get_sample_value("fleetpilot_vast_foreign_instances") == 1
        simulator.world.destroy(ours.instance_id, sim_clock.now())  # destroyed behind our back
        # each step waits for its list to be done, not for a fixed time: a loaded machine runs it late (and a
        # list still running when the clock moves is counted for that step: a few more steps are allowed)

        def lists_done() -> float:
            return registry.get_sample_value("fleetpilot_provisioner_reconciliations_total", {"outcome": "ok"}) or 0

        def gone_seen() -> list[InstanceObserved]:
            return [o for o in bus.observed_of(ours.instance_id) if o.state is InstanceState.GONE]

        for _ in range(3 * QUIET.gone_after_missing_lists):
            if gone_seen():
                break
            before = lists_done()
            sim_clock.advance(QUIET.reconcile_interval_s)
            await eventually(lambda before=before: lists_done() > before)
        gone = await eventually(gone_seen)
        # and no second gone from the lists that follow
        before = lists_done()
        sim_clock.advance(QUIET.reconcile_interval_s)
        await eventually(lambda: lists_done() > before)
    assert len(gone) == 1
    assert all(o.instance_id == ours.instance_id for o in bus.observed)  # the notebook was never reported as ours


async def test_a_host_pricing_its_bandwidth_high_is_ranked_down_and_a_rent_past_the_daily_cap_is_refused(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    """Offer A is the cheapest per hour but charges $2/GB: its 10 GB image pull is $20 a rent, in no hourly price.
    Ranked by its effective price, the launch rents A2; a launch only A can serve would pass the daily cap."""
    dear_pull = [spec.model_copy(update={"inet_down_cost_usd_per_gb": 2.0}) if spec.offer_id == OFFER_A else spec
                 for spec in market_scenario().offers]  # fmt: skip
    simulator, url = await start_vast(market_scenario(offers=dear_pull))
    async with running_provisioner(settings, sim_clock, url, daily_budget_usd=30.0) as service:
        await send(js, settings, "launch", launch("cheap-pull", 1))
        first = await bus.result_for("cheap-pull")
        # 08:00 UTC: 16 h to midnight at ~$1.02/h for both machines is ~$16, plus A's $20 pull passes $30
        await send(js, settings, "launch", launch("dear-pull", 1, gpu_models=["RTX 4090"], max_price_usd_per_h=0.485))
        second = await bus.result_for("dear-pull")
        refused = refusals(service, "daily_budget_usd")
        bandwidth = service.context.metrics.registry.get_sample_value("fleetpilot_provisioner_bandwidth_usd_total")
    assert first.outcome == "done", first.detail
    assert bandwidth == pytest.approx(10 * 0.005)  # the one rent, A2: its 10 GB pull at A2's $0.005/GB
    assert second.outcome == "refused" and second.refusal_rule is RefusalRule.DAILY_BUDGET_USD, second.detail
    assert "$20.00 one-off" in second.detail and refused == 1
    rented = [e.offer_id for e in simulator.world.ledger(sim_clock.now()).entries]
    assert rented == [OFFER_A2]


async def test_another_deployments_machines_on_the_account_are_foreign_never_adopted_counted_or_removed(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    nats_server: NatsServer,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
) -> None:
    """A staging FleetPilot rents a machine on prod's vast.ai account; prod's provisioner then neither adopts nor
    budgets it, refuses a destroy naming it, and labels its own launch with prod's deployment id."""
    simulator, url = await start_vast(market_scenario())
    # staging: subjects and Redis keys of its own (its own prefix), the same vast.ai account
    staging = Settings.model_validate({**settings.model_dump(), "subject_prefix": "fps", "deployment_id": "staging"})
    nats_server.ensure_streams(staging.subjects)
    staging_bus = BusRecorder(nc, staging)
    await staging_bus.start()
    async with running_provisioner(staging, sim_clock, url):
        await send(js, staging, "launch", launch("staging-cmd", 1))
        [theirs] = (await staging_bus.result_for("staging-cmd")).instance_ids
    # a budget with room for one machine only: staging's machine counted as prod's would refuse prod's launch
    async with running_provisioner(settings, sim_clock, url, deployment_id="prod", budget_usd_per_h=0.8):
        await send(js, settings, "launch", launch("prod-launch", 1))
        launched = await bus.result_for("prod-launch")
        await send(js, settings, "destroy", destroy("destroy-theirs", theirs))
        destroyed = await bus.result_for("destroy-theirs")
        account = await eventually(lambda: [a for a in bus.accounts if a.foreign_count])
    assert all(o.instance_id != theirs for o in bus.observed)  # never adopted
    assert launched.outcome == "done", launched.detail
    assert destroyed.outcome == "refused" and destroyed.refusal_rule is RefusalRule.UNKNOWN_INSTANCE
    [shown] = account[-1].foreign_instances
    assert (shown.instance_id, shown.deployment_id) == (theirs, "staging")
    ledger = {e.instance_id: e for e in simulator.world.ledger(sim_clock.now()).entries}
    assert ledger[theirs].destroyed_at is None and ledger[theirs].label == launch_label("staging-cmd", 0, "staging")
    [ours] = [e for e in ledger.values() if e.instance_id != theirs]
    assert ours.label == launch_label("prod-launch", 0, "prod")


async def test_odd_rows_and_foreign_instances_do_not_blind_the_fleet(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    """A `dph_total: null` on someone's notebook, and an unreadable row of our own, on the same account."""
    simulator, url = await start_vast(market_scenario())
    ours = simulator.world.create(OFFER_B, CreateRequest(image="x", disk=20, label="fleetpilot:old-cmd:0"), NOW)
    notebook = simulator.world.create(OFFER_C, CreateRequest(image="x", disk=20, label="my-notebook"), NOW)
    simulator.world.row_overrides[notebook.instance_id] = {"dph_total": None, "dph_base": None, "new_field": [1]}
    async with running_provisioner(settings, sim_clock, url) as service:
        await eventually(lambda: bus.observed_of(ours.instance_id))
        # (an odd count or moment alone now reads as unknown: the row stays readable, see test_reconcile)
        simulator.world.row_overrides[ours.instance_id] = {"gpu_name": ["two"], "actual_status": {"at": "yesterday"}}
        for _ in range(QUIET.gone_after_missing_lists + 1):  # lists in which our row is unreadable
            sim_clock.advance(QUIET.reconcile_interval_s)
            await asyncio.sleep(0.3)
        await send(js, settings, "launch", launch("launch-odd", 1))
        launched = await bus.result_for("launch-odd")
        registry = service.context.metrics.registry
        skipped = registry.get_sample_value("fleetpilot_vast_rows_skipped_total", {"endpoint": "list_v1"}) or 0
        foreign_gauge = registry.get_sample_value("fleetpilot_vast_foreign_instances")
    assert launched.outcome == "done"  # the fleet was known: one odd row did not refuse the launch
    assert skipped >= QUIET.gone_after_missing_lists + 1  # our unreadable row, once per list
    # unreadable is not gone: our instance was never reported gone while vast still listed it
    assert all(o.state is not InstanceState.GONE for o in bus.observed_of(ours.instance_id))
    assert foreign_gauge == 1
    last = bus.accounts[-1]
    assert last.foreign_count == 1 and last.unreadable_rows == 1
    [shown] = last.foreign_instances
    assert (shown.instance_id, shown.label, shown.price_usd_per_h) == (notebook.instance_id, "my-notebook", None)
    assert all(o.instance_id != notebook.instance_id for o in bus.observed)
    ledger = {e.instance_id: e for e in simulator.world.ledger(sim_clock.now()).entries}
    assert ledger[notebook.instance_id].destroyed_at is None  # never touched


async def test_bench_verdicts_teach_the_ranking(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-bench", 2))  # A (machine 500) and A2 (machine 501)
        ids = (await bus.result_for("launch-bench")).instance_ids
        by_machine = {simulator.world.instances[i].offer.machine_id: i for i in ids}
        for machine_id, verdict, ratio in ((500, "fail", 0.1), (501, "degraded", 0.5)):
            result = BenchResult(
                occurred_at=NOW, source="bench", instance_id=by_machine[machine_id], kind="gpu", device="cuda",
                gpu_model="RTX 4090", verdict=verdict, ratios_to_reference={"tasks_per_h": ratio},
            )  # fmt: skip
            await js.publish(settings.subjects.bench_result, result.model_dump_json().encode())
        for instance_id in ids:  # free both machines: their offers come back to the market
            await send(js, settings, "destroy", destroy(f"destroy-{instance_id}", instance_id))
            await bus.result_for(f"destroy-{instance_id}")

        async def b_leads() -> list[int] | None:
            order = [o.offer_id for o in (await ask_offers(nc, settings)).offers]
            return order if order and order[0] == OFFER_B else None

        # A failed its bench (machine and host penalised), A2 measured at half its reference: B leads now
        order = await eventually(b_leads, timeout_s=10)
    assert order.index(OFFER_B) < order.index(OFFER_A) and order.index(OFFER_B) < order.index(OFFER_A2)


async def test_a_malformed_command_is_dead_lettered_and_the_next_is_handled(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
) -> None:
    _, url = await start_vast(market_scenario())
    letters: list[DeadLetter] = []

    async def collect(msg) -> None:
        letters.append(DeadLetter.model_validate_json(msg.data))

    await nc.subscribe(settings.subjects.dead_letter("provisioner"), cb=collect)
    async with running_provisioner(settings, sim_clock, url):
        bad = launch("launch-bad1", 1).model_dump(mode="json") | {"count": 0}
        await js.publish(
            settings.subjects.provision_command("launch"),
            json.dumps(bad).encode(),
            stream=COMMANDS.name(settings.subjects),
        )
        await send(js, settings, "launch", launch("launch-good", 1))
        assert (await bus.result_for("launch-good")).outcome == "done"
        await eventually(lambda: letters)
    assert letters[0].reason == "invalid_message" and "count" in letters[0].error


async def test_offer_query_reports_a_failed_search_as_unknown_not_empty(
    settings: Settings, nc: NatsClient, start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url, QUIET.model_copy(update={"max_attempts": 1})):
        simulator.faults.append(ScriptedFault(endpoint=Endpoint.SEARCH, kind="error", status=500))
        failed = await ask_offers(nc, settings)
        narrowed = await ask_offers(nc, settings, gpu_models=["RTX 3090"], limit=1)
    assert failed.offers == [] and failed.error and "500" in failed.error
    assert [o.offer_id for o in narrowed.offers] == [OFFER_C] and narrowed.error is None


def test_the_default_worker_is_a_real_image_with_the_bench_suite_as_onstart(monkeypatch) -> None:
    monkeypatch.setenv("FLEETPILOT_PROVISIONER_BENCH_URL", "https://bench.example.com")
    monkeypatch.setenv("FLEETPILOT_BENCH_REPORT_TOKEN", "tok-123")  # bench's: one token for both
    config = ProvisionerSettings.from_environment()
    assert config.image == "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime" and config.min_cuda == 12.8
    line = config.onstart_line()
    assert "https://bench.example.com/bench/suite.py" in line and "tok-123" not in line
    assert "--device cuda" in line and "--report-url https://bench.example.com/bench/report" in line
    config.check_onstart()  # complete: no exit


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"FLEETPILOT_BENCH_REPORT_TOKEN": "tok"}, "FLEETPILOT_PROVISIONER_BENCH_URL"),
        ({"FLEETPILOT_PROVISIONER_BENCH_URL": "https://bench.example.com"}, "FLEETPILOT_BENCH_REPORT_TOKEN"),
    ],
)
def test_the_provisioner_will_not_start_without_what_its_onstart_needs(env: dict[str, str], named: str) -> None:
    """A real process through the service's entry point (what `fleetpilot run provisioner` and `faststream run
    --factory` call): one line naming the variable, exit code 2, no traceback, nothing rented."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPILOT_")}
    done = subprocess.run(
        [sys.executable, "-c", "from services.provisioner.app import create_app; create_app()"],
        env={**clean, **env, "FLEETPILOT_NATS_URL": "nats://127.0.0.1:1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: {named} is not set"), done.stderr
    assert "Traceback" not in done.stderr


def test_settings_come_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("FLEETPILOT_PROVISIONER_ALLOWED_GPU_MODELS", '["RTX 5090"]')
    monkeypatch.setenv("FLEETPILOT_PROVISIONER_ONSTART", "bash /opt/bench.sh")
    monkeypatch.setenv("FLEETPILOT_PROVISIONER_EXCLUDED_HOST_IDS", "[7, 8]")
    config = ProvisionerSettings()
    assert config.allowed_gpu_models == ["RTX 5090"] and config.onstart == "bash /opt/bench.sh"
    assert config.excluded_host_ids == [7, 8]


async def test_only_machines_of_the_configured_gpu_count_are_rented(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
) -> None:
    """An 8-GPU 4090 at $3.60/h is the cheapest per task listed (0.45 a GPU); the decider asks for machines at one
    machine's pace, so with the default of one GPU a machine the launch rents the 1-GPU one, and a job system whose
    workers use eight GPUs says so and gets the eight."""
    eight = OfferSpec(offer_id=250, gpu_model="RTX 4090", num_gpus=8, price_usd_per_h=3.60, host_id=80, machine_id=800)
    simulator, url = await start_vast(market_scenario(offers=[*MARKET, eight]))
    # the price caps are per machine: eight GPUs need higher ones
    caps: dict[str, object] = {"emergency_max_price_usd_per_h": 4.0, "normal_max_price_usd_per_h": 4.0}
    async with running_provisioner(settings, sim_clock, url, **caps):
        assert [o.offer_id for o in (await ask_offers(nc, settings)).offers] == [OFFER_A, OFFER_A2, OFFER_B, OFFER_C]
        await send(js, settings, "launch", launch("launch-one-gpu", 1))
        one = await bus.result_for("launch-one-gpu")
    assert one.outcome == "done", one.detail
    assert [e.offer_id for e in simulator.world.ledger(sim_clock.now()).entries] == [OFFER_A]

    async with running_provisioner(settings, sim_clock, url, gpus_per_machine=8, **caps):
        assert [o.offer_id for o in (await ask_offers(nc, settings)).offers] == [250]
        await send(js, settings, "launch", launch("launch-eight-gpus", 1))
        result = await bus.result_for("launch-eight-gpus")
    assert result.outcome == "done", result.detail
    assert [e.offer_id for e in simulator.world.ledger(sim_clock.now()).entries] == [OFFER_A, 250]


async def test_observed_throughput_from_the_demand_signal_reorders_offers(
    settings: Settings, nc: NatsClient, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    """demand measures a producer per machine: this fleet's 4090s are 2-GPU machines doing 200 tasks/h, 100 per GPU
    against the table's 120, so a 1-GPU 4090 offer (0.48 / 100) falls behind the 3090 (0.30 / 66). Read as 200 per
    GPU, the 4090 would have ranked far ahead (0.48 / 200): the pace is learnt only once fleet says what a producer
    is."""
    _, url = await start_vast(market_scenario())
    producer = InstanceLine(
        instance_id=78, state=InstanceState.PRODUCING, gpu_model="RTX 4090", num_gpus=2, price_usd_per_h=0.96,
        created_at=NOW, state_since=NOW, line="#78 2x RTX 4090 producing",
    )  # fmt: skip
    snapshot = FleetSnapshot(
        occurred_at=NOW, source="fleet", instances=[producer], counts_by_state={InstanceState.PRODUCING: 1},
        spend_usd_per_h=0.96, producing_instances=1, arriving_instances=0,
    )  # fmt: skip
    signal = DemandSignal(
        occurred_at=NOW, source="demand", state=DemandState.SERVED, explanation="steady", trend=DemandTrend.STEADY,
        pending_tasks=0, running_tasks=4, windows=[], sustained_arrival_rate_per_h=100, producing_workers=1,
        fleet_capacity_tasks_per_h=200, backlog_worker_hours=0, above_capacity_for_s=0, signal_seq=1,
        throughput_by_gpu_model_tasks_per_h={"RTX 4090": 200.0},
    )  # fmt: skip
    async with running_provisioner(settings, sim_clock, url) as service:
        assert (await ask_offers(nc, settings)).offers[0].offer_id == OFFER_A
        published = 0

        async def best() -> int:
            return (await ask_offers(nc, settings)).offers[0].offer_id

        async def signal_learnt() -> bool:
            # demand publishes a signal every tick; one sent before the provisioner's subscription was bound (a
            # loaded machine starts it late) is not delivered to it, so the next one is, as in production
            nonlocal published
            published += 1
            fresh = signal.model_copy(update={"signal_seq": published})
            await js.publish(settings.subjects.demand_signal, fresh.model_dump_json().encode())
            return _received(service, "demand") > 0

        await eventually(signal_learnt, timeout_s=10)
        assert await best() == OFFER_A  # no snapshot yet: what a producer is is unknown, so nothing was learnt

        async def the_3090_leads() -> bool:
            await js.publish(settings.subjects.fleet_snapshot_published, snapshot.model_dump_json().encode())
            await signal_learnt()
            return await best() == OFFER_C

        await eventually(the_3090_leads, timeout_s=10)
        offers = (await ask_offers(nc, settings)).offers
    four_090 = next(o for o in offers if o.offer_id == OFFER_A)
    assert four_090.expected_usd_per_task == pytest.approx(0.48 / 100.0, rel=0.05)


async def test_what_a_machine_produced_reorders_offers_on_its_machine(
    settings: Settings, nc: NatsClient, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    """fleet's snapshot says the 4090 on machine 500 makes a third of its model's reference: offer A on that
    machine falls behind A2, whatever a benchmark its host ran said."""
    _, url = await start_vast(market_scenario())
    line = InstanceLine(
        instance_id=77, state=InstanceState.PRODUCING, gpu_model="RTX 4090", price_usd_per_h=0.48, host_id=50,
        machine_id=500, created_at=NOW, state_since=NOW, tasks_completed=40, throughput_tasks_per_h=40.0,
        line="#77 RTX 4090 producing",
    )  # fmt: skip
    snapshot = FleetSnapshot(
        occurred_at=NOW, source="fleet", instances=[line], counts_by_state={InstanceState.PRODUCING: 1},
        spend_usd_per_h=0.48, producing_instances=1, arriving_instances=0,
    )  # fmt: skip
    async with running_provisioner(settings, sim_clock, url) as service:
        service.operations.history.record_measure(500, 8e6, NOW)  # a made-up benchmark, clamped
        assert (await ask_offers(nc, settings)).offers[0].offer_id == OFFER_A

        async def a2_leads() -> bool:
            # re-sent until the provisioner's subscription is bound, as fleet publishes one every tick
            await js.publish(settings.subjects.fleet_snapshot_published, snapshot.model_dump_json().encode())
            return (await ask_offers(nc, settings)).offers[0].offer_id == OFFER_A2

        await eventually(a2_leads, timeout_s=10)
        measure = service.operations.history.measured[500]
    assert measure.source == "tasks" and measure.ratio_to_reference == pytest.approx(40.0 / 120.0)


async def test_two_replicas_share_the_commands_and_the_budget(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    same_price = [OfferSpec(offer_id=600 + i, gpu_model="RTX 4090", price_usd_per_h=0.5) for i in range(8)]
    simulator, url = await start_vast(market_scenario(offers=same_price))
    keys = [f"launch-replica-{n}" for n in range(6)]
    # the real clock: replicas waiting for each other's lease must see time pass
    limits: dict[str, object] = {"budget_usd_per_h": 2.2, "max_instances": 10}  # four at $0.50 (+5%) fit, not five
    async with (
        running_provisioner(settings, RealClock(), url, QUIET, **limits) as one,
        running_provisioner(settings, RealClock(), url, QUIET, **limits) as two,
    ):
        for key in keys:
            await send(js, settings, "launch", launch(key, 1))
        results = [await bus.result_for(key, timeout_s=30) for key in keys]
        received = sum(_launches_received(service) for service in (one, two))
    assert sorted(r.outcome for r in results) == ["done"] * 4 + ["refused"] * 2
    assert {r.refusal_rule for r in results if r.outcome == "refused"} == {RefusalRule.BUDGET_USD_PER_H}
    ledger = simulator.world.ledger(sim_clock.now())
    assert ledger.peak_instances == 4 and ledger.peak_committed_usd_per_h <= 2.2
    assert len(simulator.calls_to(Endpoint.CREATE)) == 4
    assert received == len(keys)  # each command delivered to one replica, once


def _launches_received(service: ProvisionerService) -> float:
    return _received(service, "launch")


def _received(service: ProvisionerService, handler: str) -> float:
    """Messages the service's handlers named like `handler` received (FastStream's counter)."""
    registry = service.context.metrics.registry
    return sum(
        sample.value
        for metric in registry.collect()
        if metric.name == "fleetpilot_bus_received_messages"
        for sample in metric.samples
        if sample.name.endswith("_total") and handler in sample.labels.get("handler", "")
    )
