"""Ranking by expected cost per task, with this fleet's history of hosts fading over days."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from services.provisioner import budget
from services.provisioner.host_history import (
    HALF_LIFE_S,
    HOST_SHARE,
    INCIDENT_WEIGHTS,
    HostHistory,
    Incident,
    IncidentKind,
    bench_ratio,
    production_ratios,
)
from services.provisioner.ranking import (
    BENCH_RATIO_AT_MOST,
    PULL_AMORTISED_OVER_H,
    OfferConstraints,
    StartupModel,
    ThroughputKnowledge,
    acceptable,
    gpus_per_producer,
    per_gpu_paces,
    rank,
    search_query,
)
from services.provisioner.vast_models import VastOffer
from shared import gpu_models
from shared.contract import InstanceLine, InstanceState, OfferLine, RefusalRule

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
ANY = OfferConstraints(allowed_gpu_models=("RTX 4090", "RTX 5090", "RTX 3090"), max_price_usd_per_h=1.0)


def offer(
    offer_id: int, gpu: str, price: float, *, machine: int | None = None, host: int | None = None, **kw: object
) -> VastOffer:
    return VastOffer(
        id=offer_id,
        gpu_name=gpu,
        dph_total=price,
        machine_id=machine or offer_id,
        host_id=host or offer_id,
        reliability2=kw.pop("reliability", 1.0),
        verified=kw.pop("verified", True),
        cuda_max_good=12.8,
        disk_space=500,
        **kw,
    )


def test_cheapest_per_task_wins_not_cheapest_per_hour() -> None:
    offers = [offer(1, "RTX 3090", 0.30), offer(2, "RTX 4090", 0.50), offer(3, "RTX 5090", 0.43)]
    ordered = rank(offers, ANY, ThroughputKnowledge(), HostHistory(), NOW)
    # 5090: 0.43/162 < 4090: 0.50/120 < 3090: 0.30/66
    assert [r.offer.id for r in ordered] == [3, 2, 1]
    assert ordered[0].expected_usd_per_task == pytest.approx(0.43 / 162.0)


def test_reliability_discounts_the_expected_throughput() -> None:
    offers = [offer(1, "RTX 4090", 0.50, reliability=0.80), offer(2, "RTX 4090", 0.55, reliability=0.99)]
    assert [r.offer.id for r in rank(offers, ANY, ThroughputKnowledge(), HostHistory(), NOW)] == [2, 1]


def test_observed_throughput_replaces_the_reference() -> None:
    offers = [offer(1, "RTX 4090", 0.50), offer(2, "RTX 5090", 0.43)]
    knowledge = ThroughputKnowledge({"RTX 5090": 80.0})  # this fleet's 5090s do worse than the table says
    assert [r.offer.id for r in rank(offers, ANY, knowledge, HostHistory(), NOW)] == [1, 2]


def test_a_failure_penalises_machine_then_host_and_fades_over_days() -> None:
    history = HostHistory()
    history.record(Incident(at=NOW, kind=IncidentKind.STUCK_LOADING, instance_id=9, host_id=50, machine_id=500))
    assert history.penalty(50, 500, NOW) == pytest.approx(1.0)
    assert history.penalty(50, 501, NOW) == pytest.approx(0.5)  # same host, another machine
    assert history.penalty(51, 510, NOW) == 0.0
    assert history.penalty(50, 500, NOW + timedelta(seconds=HALF_LIFE_S)) == pytest.approx(0.5)
    assert history.penalty(50, 500, NOW + timedelta(days=14)) < 0.01
    history.record(Incident(at=NOW, kind=IncidentKind.STUCK_LOADING, instance_id=9, host_id=50, machine_id=500))
    assert len(history.incidents) == 1  # one failure seen twice is one failure
    history.forget_old(NOW + timedelta(days=30))
    assert history.incidents == []


def test_ranking_changes_after_a_hosts_machine_fails_and_recovers_later() -> None:
    offers = [offer(1, "RTX 4090", 0.48, machine=500, host=50), offer(2, "RTX 4090", 0.52, machine=600, host=60)]
    history = HostHistory()
    assert rank(offers, ANY, ThroughputKnowledge(), history, NOW)[0].offer.id == 1
    history.record(Incident(at=NOW, kind=IncidentKind.VAST_ERROR, instance_id=7, host_id=50, machine_id=501))
    assert rank(offers, ANY, ThroughputKnowledge(), history, NOW)[0].offer.id == 2
    assert rank(offers, ANY, ThroughputKnowledge(), history, NOW + timedelta(days=10))[0].offer.id == 1


def test_a_degraded_but_cheap_machine_is_still_the_best_buy_per_unit_of_measured_throughput() -> None:
    offers = [offer(1, "RTX 4090", 0.25, machine=500), offer(2, "RTX 4090", 0.50, machine=600)]
    history = HostHistory()
    history.record_measure(500, 0.7, NOW)  # degraded: 70% of the reference
    ordered = rank(offers, ANY, ThroughputKnowledge(), history, NOW)
    assert [r.offer.id for r in ordered] == [1, 2]
    assert ordered[0].expected_tasks_per_h == pytest.approx(84.0)
    history.record_measure(500, 0.3, NOW)
    assert rank(offers, ANY, ThroughputKnowledge(), history, NOW)[0].offer.id == 2


def test_constraints_filter_and_commands_only_narrow_them() -> None:
    constraints = OfferConstraints(
        allowed_gpu_models=("RTX 4090", "RTX 5090"),
        max_price_usd_per_h=0.8,
        min_reliability=0.95,
        min_cuda=12.4,
        min_disk_gb=100,
        excluded_host_ids=frozenset({66}),
        gpus_per_machine=1,
    )
    assert acceptable(offer(1, "RTX 4090", 0.5), constraints)
    assert not acceptable(offer(7, "RTX 4090", 0.5, num_gpus=2), constraints)  # a machine unlike the others
    assert not acceptable(offer(2, "RTX 3090", 0.2), constraints)
    assert not acceptable(offer(3, "RTX 4090", 0.9), constraints)
    assert not acceptable(offer(4, "RTX 4090", 0.5, reliability=0.9), constraints)
    assert not acceptable(offer(5, "RTX 4090", 0.5, verified=False), constraints)
    assert not acceptable(offer(6, "RTX 4090", 0.5, host=66), constraints)
    narrowed = constraints.narrowed_to(["rtx_5090", "H100 SXM"], 2.0)
    assert narrowed.allowed_gpu_models == ("RTX 5090",) and narrowed.max_price_usd_per_h == 0.8
    assert constraints.narrowed_to([], 0.6).allowed_gpu_models == ("RTX 4090", "RTX 5090")
    query = search_query(constraints, limit=32, disk_gb=60)
    assert query["gpu_name"] == {"in": ["RTX 4090", "RTX 5090"]} and query["dph_total"] == {"lte": 0.8}
    assert query["host_id"] == {"notin": [66]} and query["verified"] == {"eq": True}
    assert query["disk_space"] == {"gte": 100} and query["allocated_storage"] == 60
    assert query["num_gpus"] == {"eq": 1} and narrowed.gpus_per_machine == 1
    assert "num_gpus" not in search_query(ANY, limit=32, disk_gb=60)  # unset: any count


def test_unknown_gpu_models_are_left_out() -> None:
    constraints = OfferConstraints(allowed_gpu_models=("Mystery GPU",), max_price_usd_per_h=1.0)
    assert rank([offer(1, "Mystery GPU", 0.1)], constraints, ThroughputKnowledge(), HostHistory(), NOW) == []


def test_bench_ratio_prefers_the_task_rate() -> None:
    assert bench_ratio({"tasks_per_h": 0.8, "memory_bw": 0.5}, {}, 120.0) == 0.8
    assert bench_ratio({"fp32": 0.9, "memory_bw": 0.6}, {}, 120.0) == 0.6
    assert bench_ratio({}, {"tasks_per_h": 60.0}, 120.0) == 0.5
    assert bench_ratio({}, {}, 120.0) is None


@given(
    incidents=st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(1, 3)),
            st.one_of(st.none(), st.integers(10, 14)),
            st.floats(min_value=0, max_value=400),
            st.sampled_from(list(IncidentKind)),
        ),
        max_size=12,
    ),
    host_id=st.one_of(st.none(), st.integers(1, 3)),
    machine_id=st.one_of(st.none(), st.integers(10, 14)),
)
def test_the_summed_penalties_match_the_definition_incident_by_incident(
    incidents: list[tuple[int | None, int | None, float, IncidentKind]], host_id: int | None, machine_id: int | None
) -> None:
    history = HostHistory()
    expected = 0.0
    for n, (host, machine, age_h, kind) in enumerate(incidents):
        history.record(
            Incident(at=NOW - timedelta(hours=age_h), kind=kind, instance_id=n, host_id=host, machine_id=machine)
        )
        if machine_id is not None and machine == machine_id:
            share = 1.0
        elif host_id is not None and host == host_id:
            share = HOST_SHARE
        else:
            continue
        expected += share * INCIDENT_WEIGHTS[kind] * 0.5 ** (age_h * 3600 / HALF_LIFE_S)
    assert history.penalty(host_id, machine_id, NOW) == pytest.approx(expected, abs=1e-9)


def test_a_machines_own_bench_ratio_is_not_multiplied_by_its_models_observation() -> None:
    """The ratio is measured against the reference, so it already holds the model being slow: counted once."""
    history = HostHistory()
    history.record_measure(1, 0.5, NOW)  # this 5090 benched at half its reference: 81 tasks/h
    knowledge = ThroughputKnowledge({"RTX 5090": 81.0})  # the fleet's 5090s, this one among them, do 81
    ranked = rank([offer(1, "RTX 5090", 0.81), offer(2, "RTX 5090", 0.80)], ANY, knowledge, history, NOW)
    by_id = {r.offer.id: r for r in ranked}
    assert by_id[1].expected_tasks_per_h == pytest.approx(81.0)  # not 81 × 0.5
    assert by_id[2].expected_tasks_per_h == pytest.approx(81.0)  # unmeasured: the model's observation
    assert [r.offer.id for r in ranked] == [2, 1]  # same pace, the cheaper first


def test_a_host_that_prices_its_bandwidth_high_ranks_below_a_dearer_machine_with_a_cheap_pull() -> None:
    """$0.45/h with $1/GB for a 10 GB image is $10 a rent: it must not look cheaper than $0.50/h at $0.005/GB."""
    offers = [offer(1, "RTX 4090", 0.45, inet_down_cost=1.0), offer(2, "RTX 4090", 0.50, inet_down_cost=0.005)]
    ordered = rank(offers, ANY, ThroughputKnowledge(), HostHistory(), NOW, startup=StartupModel(image_gb=10.0))
    assert [r.offer.id for r in ordered] == [2, 1]
    assert [r.pull_cost_usd for r in ordered] == pytest.approx([0.05, 10.0])
    amortised_usd_per_h = 0.45 + 10.0 / PULL_AMORTISED_OVER_H
    assert ordered[1].expected_usd_per_task == pytest.approx(amortised_usd_per_h / 120.0)


def test_a_made_up_fast_benchmark_raises_a_machine_only_a_little() -> None:
    """A host reported every metric a billion times over: its machine may look 10% faster, not free per task."""
    offers = [offer(1, "RTX 4090", 0.50, machine=500), offer(2, "RTX 4090", 0.44, machine=600)]
    history = HostHistory()
    history.record_measure(500, 8e6, NOW)
    ordered = rank(offers, ANY, ThroughputKnowledge(), history, NOW)
    assert [r.offer.id for r in ordered] == [2, 1]
    assert ordered[1].expected_tasks_per_h == pytest.approx(120.0 * BENCH_RATIO_AT_MOST)


def test_a_benchmark_lowers_a_machine_freely_and_expires() -> None:
    offers = [offer(1, "RTX 4090", 0.25, machine=500), offer(2, "RTX 4090", 0.50, machine=600)]
    history = HostHistory()
    history.record_measure(500, 0.3, NOW)
    assert rank(offers, ANY, ThroughputKnowledge(), history, NOW)[0].offer.id == 2
    later = NOW + timedelta(days=8)  # the old figure is no longer this machine's: the model's reference again
    assert rank(offers, ANY, ThroughputKnowledge(), history, later)[0].offer.id == 1
    history.forget_old(later)
    assert history.measured == {}


def test_what_a_machine_produced_outranks_its_benchmark() -> None:
    offers = [offer(1, "RTX 4090", 0.50, machine=500)]
    history = HostHistory()
    history.record_task_throughput(500, 1.3, NOW)  # measured on our tasks: believed beyond the bench clamp
    history.record_measure(500, 0.5, NOW + timedelta(hours=1))  # a later benchmark does not replace it
    [ranked] = rank(offers, ANY, ThroughputKnowledge(), history, NOW + timedelta(hours=2))
    assert ranked.expected_tasks_per_h == pytest.approx(120.0 * 1.3)


def test_a_production_ratio_far_beyond_its_models_other_machines_is_dropped_not_clamped() -> None:
    """400 completions in two minutes named one 4090 (12,000 tasks/h, 100 times its model): a miscount, never the
    machine's measure; its plausible neighbours in the same snapshot are still recorded. The bound is the fleet's
    own machines of the model, not the reference: a workload running at eight times it on every machine is
    believed, and with fewer than three machines of a model there is no typical one to compare with."""

    def producing(machine: int, throughput_tasks_per_h: float, num_gpus: int = 1) -> InstanceLine:
        return InstanceLine(
            instance_id=machine, state=InstanceState.PRODUCING, gpu_model="RTX 4090", num_gpus=num_gpus,
            price_usd_per_h=0.5, machine_id=machine, created_at=NOW, state_since=NOW, tasks_completed=400,
            throughput_tasks_per_h=throughput_tasks_per_h, line=f"#{machine}",
        )  # fmt: skip

    ratios = production_ratios([producing(100, 12_000.0), producing(200, 108.0), producing(300, 240.0)])
    assert ratios.trusted == {200: pytest.approx(0.9), 300: pytest.approx(2.0)}
    assert ratios.implausible == {100: pytest.approx(100.0)}
    fast_workload = production_ratios([producing(m, 960.0 + m) for m in (1, 2, 3, 4)])
    assert sorted(fast_workload.trusted) == [1, 2, 3, 4] and not fast_workload.implausible
    assert production_ratios([producing(100, 12_000.0), producing(200, 108.0)]).implausible == {}
    # a worker per machine on 8 GPUs reads 1/8 per GPU: compared with its own kind, not with the 1-GPU machines
    mixed = [producing(m, 120.0, num_gpus=8) for m in (1, 2, 3)] + [producing(4, 120.0)]
    assert not production_ratios(mixed).implausible


def test_only_a_machine_producing_for_a_while_gives_a_production_ratio() -> None:
    def line(instance_id: int, state: InstanceState, tasks: int, machine: int | None = 500) -> InstanceLine:
        return InstanceLine(
            instance_id=instance_id, state=state, gpu_model="RTX 4090", num_gpus=2, price_usd_per_h=1.0,
            machine_id=machine, created_at=NOW, state_since=NOW, tasks_completed=tasks,
            throughput_tasks_per_h=120.0, line=f"#{instance_id}",
        )  # fmt: skip

    lines = [
        line(1, InstanceState.PRODUCING, 40),  # two 4090s at 120 tasks/h together: half the reference each
        line(2, InstanceState.PRODUCING, 3, machine=501),  # too few tasks yet to say anything of the machine
        line(3, InstanceState.DRAINING, 400, machine=502),
        line(4, InstanceState.PRODUCING, 400, machine=None),
    ]
    assert production_ratios(lines).trusted == {500: pytest.approx(0.5)}


def test_demand_paces_per_machine_are_ranked_per_gpu() -> None:
    """demand measures a machine (its producer); ranking multiplies a pace by an offer's GPUs, so the pace is made
    per GPU with the GPUs of fleet's producing machines of that model: else a 1-GPU 4090 offer, priced per task
    at a 4-GPU machine's pace, ranked ahead of a 5090 it cannot match."""

    def line(instance_id: int, gpu: str, gpus: int, state: InstanceState = InstanceState.PRODUCING) -> InstanceLine:
        return InstanceLine(
            instance_id=instance_id, state=state, gpu_model=gpu, num_gpus=gpus, price_usd_per_h=1.0,
            created_at=NOW, state_since=NOW, line=f"#{instance_id}",
        )  # fmt: skip

    fleet = [
        line(1, "RTX 4090", 4),
        line(2, "RTX 4090", 2),
        line(3, "RTX 5090", 1),
        line(4, "RTX 4090", 8, InstanceState.LOADING),  # not producing: what demand measured is not it
        line(5, "RTX 3090", 8, InstanceState.PARKED),  # none producing: the model's machines are what there is
    ]
    producer_gpus = gpus_per_producer(fleet)
    assert producer_gpus == {
        gpu_models.normalised("RTX 4090"): 3.0,
        gpu_models.normalised("RTX 5090"): 1.0,
        gpu_models.normalised("RTX 3090"): 8.0,
    }
    paces = per_gpu_paces({"RTX 4090": 360.0, "RTX 5090": 150.0, "RTX 3090": 528.0, "A100 SXM4": 80.0}, producer_gpus)
    # a model none of the fleet's machines runs keeps demand's figure
    assert paces == {"RTX 4090": 120.0, "RTX 5090": 150.0, "RTX 3090": 66.0, "A100 SXM4": 80.0}
    assert per_gpu_paces({"RTX 4090": 0.0}, producer_gpus) == {}  # a zero is no measurement

    offers = [offer(1, "RTX 4090", 0.45), offer(2, "RTX 5090", 0.50)]
    per_gpu = rank(offers, ANY, ThroughputKnowledge(paces), HostHistory(), NOW)
    assert [r.offer.id for r in per_gpu] == [2, 1]  # 0.50 / 150 < 0.45 / 120
    per_machine = rank(offers, ANY, ThroughputKnowledge({"RTX 4090": 360.0, "RTX 5090": 150.0}), HostHistory(), NOW)
    assert [r.offer.id for r in per_machine] == [1, 2]  # what the machine's pace read per GPU ranked


def test_a_launch_that_takes_the_last_slots_ranks_the_fastest_machine_per_slot_first() -> None:
    """Slots, not dollars, are short at the instance cap: an RTX 5090 before two cheaper-per-task RTX 3090s."""
    offers = [offer(1, "RTX 3090", 0.20), offer(2, "RTX 5090", 0.75), offer(3, "RTX 3090", 0.21)]
    cheapest_first = rank(offers, ANY_WITH_5090, ThroughputKnowledge(), HostHistory(), NOW)
    assert [r.offer.id for r in cheapest_first] == [1, 3, 2]
    per_slot = rank(offers, ANY_WITH_5090, ThroughputKnowledge(), HostHistory(), NOW, fills_last_slots=True)
    assert [r.offer.id for r in per_slot] == [2, 1, 3]  # then by cost per task among equals


ANY_WITH_5090 = OfferConstraints(allowed_gpu_models=("RTX 3090", "RTX 5090"), max_price_usd_per_h=1.0)


@pytest.mark.parametrize(("field", "value"), [("dph_total", 0.0), ("dph_total", -0.1), ("num_gpus", 1000)])
def test_an_offer_at_no_price_or_with_more_gpus_than_a_machine_has_is_no_offer(field: str, value: float) -> None:
    """A host lists its own offer: at $0/h, or with 1,000 GPUs, it would rank first at nearly nothing per task.
    Such a row does not read as an offer (the client skips it, logged and counted, and ranks the rest)."""
    row = {"id": 1, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.4, "reliability2": 0.99, field: value}
    with pytest.raises(ValidationError, match=field):
        VastOffer.model_validate(row)
    assert VastOffer.model_validate({**row, field: 0.4 if field == "dph_total" else 8}).id == 1


def test_an_offer_whose_image_pull_is_no_finite_number_is_not_ranked_and_the_rest_are() -> None:
    """A host at 1e308 $/GB made its pull inf: ranked, it refused a whole launch on the day's cap, and its inf
    $/task went out as null in the offer list, which then failed validation at the decider."""
    offers = [offer(1, "RTX 4090", 0.50, inet_down_cost=1e308), offer(2, "RTX 4090", 0.55, inet_down_cost=0.01)]
    ranked = rank(offers, ANY, ThroughputKnowledge(), HostHistory(), NOW, startup=StartupModel(image_gb=10.0))
    assert [r.offer.id for r in ranked] == [2]
    assert math.isfinite(ranked[0].expected_usd_per_task) and ranked[0].pull_cost_usd == pytest.approx(0.1)
    urgent = rank(offers, ANY, ThroughputKnowledge(), HostHistory(), NOW, urgent_horizon_h=2.0)
    assert [r.offer.id for r in urgent] == [2]


def test_an_offer_line_with_a_number_json_cannot_carry_is_refused_where_it_is_made() -> None:
    line = {"offer_id": 1, "gpu_model": "RTX 4090", "num_gpus": 1, "price_usd_per_h": 0.5, "reliability": 0.99}
    for bad in ({"expected_usd_per_task": math.inf}, {"expected_usd_per_task": math.nan, "price_usd_per_h": 0.5},
                {"expected_usd_per_task": 0.004, "price_usd_per_h": math.inf}):  # fmt: skip
        with pytest.raises(ValidationError, match="finite number"):
            OfferLine.model_validate({**line, **bad})


def test_an_offer_listed_twice_is_ranked_and_planned_once() -> None:
    """vast's search listed one offer id on two rows: both were ranked, and a launch of two planned the same
    machine twice."""
    twice = [offer(1, "RTX 4090", 0.50), offer(1, "RTX 4090", 0.50), offer(2, "RTX 4090", 0.55)]
    ranked = rank(twice, ANY, ThroughputKnowledge(), HostHistory(), NOW)
    assert [r.offer.id for r in ranked] == [1, 2]
    limits = budget.BudgetLimits(
        budget_usd_per_h=10, max_instances=10, normal_max_price_usd_per_h=0.8, emergency_max_price_usd_per_h=1.2
    )
    only_one = rank(twice[:2], ANY, ThroughputKnowledge(), HostHistory(), NOW)
    plan = budget.plan_launch(limits, budget.Commitment(), only_one, 2)
    assert isinstance(plan, budget.Refusal) and plan.rule is RefusalRule.NO_OFFER


@pytest.mark.parametrize("missing", ["host_id", "machine_id"])
def test_an_offer_that_names_no_host_or_machine_passes_no_exclusion(missing: str) -> None:
    """An operator excluded host 666: a row without a host_id cannot be told apart from it, so while any host (or
    machine) is excluded such a row is not rented. With no exclusion in force it is, as before."""
    row = {"id": 2, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.5, "reliability2": 0.99, "verified": True,
           "cuda_max_good": 12.8, "disk_space": 100, "host_id": 10, "machine_id": 100, missing: None}  # fmt: skip
    unnamed = VastOffer.model_validate(row)
    excluded = {
        "host_id": {"excluded_host_ids": frozenset({666})},
        "machine_id": {"excluded_machine_ids": frozenset({7})},
    }
    constraints = OfferConstraints(allowed_gpu_models=("RTX 4090",), max_price_usd_per_h=0.8, **excluded[missing])
    assert not acceptable(unnamed, constraints)
    assert rank([unnamed], constraints, ThroughputKnowledge(), HostHistory(), NOW) == []
    assert acceptable(VastOffer.model_validate({**row, missing: 5}), constraints)  # named, and not excluded
    assert acceptable(unnamed, OfferConstraints(allowed_gpu_models=("RTX 4090",), max_price_usd_per_h=0.8))
    # an operator's directive narrows the constraints the same way
    directed = OfferConstraints(allowed_gpu_models=("RTX 4090",), max_price_usd_per_h=0.8).narrowed_to(
        [], None, excluded_host_ids=[666]
    )
    assert not acceptable(VastOffer.model_validate({**row, "host_id": None}), directed)
