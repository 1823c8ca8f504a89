"""Reconciliation: vast's raw status onto the lifecycle, adoption by label, foreign instances, gone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.provisioner import reconcile as core
from services.provisioner.reconcile import (
    KnownInstance,
    Reconciliation,
    launch_label,
    observed_state,
    parse_label,
    second_rents_of_a_slot,
    vast_status_label,
)
from services.provisioner.vast_models import VastInstance
from shared.contract import FailureReason, InstanceState, ParkReason, RemovalReason

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
PRICE_CAP = 2.0  # what an instance listed without a price is counted at


def reconcile(
    known: dict[int, KnownInstance],
    listed: list[VastInstance],
    now: datetime,
    *,
    gone_after_missing_lists: int,
    unreadable_ids: frozenset[int] = frozenset(),
    deployment_id: str = core.DEFAULT_DEPLOYMENT_ID,
) -> Reconciliation:
    return core.reconcile(
        known,
        listed,
        now,
        gone_after_missing_lists=gone_after_missing_lists,
        unknown_price_usd_per_h=PRICE_CAP,
        unreadable_ids=unreadable_ids,
        deployment_id=deployment_id,
    )


def row(
    instance_id: int, label: str | None, actual: str | None = "loading", msg: str = "", price: float = 0.5
) -> VastInstance:
    return VastInstance(
        id=instance_id, label=label, actual_status=actual, intended_status="running", status_msg=msg,
        dph_total=price, host_id=5, machine_id=50, gpu_name="RTX 4090", start_date=NOW.timestamp(),
    )  # fmt: skip


def known(instance_id: int, label: str, state: InstanceState = InstanceState.REQUESTED) -> KnownInstance:
    parsed = parse_label(label)
    return KnownInstance(
        instance_id=instance_id, label=label, idempotency_key=parsed[0] if parsed else None,
        price_usd_per_h=0.5, state=state, created_at=NOW, state_since=NOW, host_id=5, machine_id=50,
    )  # fmt: skip


def test_labels_round_trip_and_other_labels_are_not_ours() -> None:
    assert parse_label(launch_label("cmd-123", 2)) == ("cmd-123", 2, "default")
    assert launch_label("cmd-123", 2, "staging") == "fleetpilot:staging:cmd-123:2"
    assert parse_label("fleetpilot:staging:cmd-123:2") == ("cmd-123", 2, "staging")
    assert parse_label("fleetpilot:cmd-123:2") == ("cmd-123", 2, "default")  # written before deployment ids
    for other in (
        None, "", "my-notebook", "fleetpilot:x", "fleetpilot::1", "fleetpilot:k:one", "other:k:1",
        "fleetpilot::k:1", "fleetpilot:a:b:c:1",
    ):  # fmt: skip
        assert parse_label(other) is None


def test_another_deployments_instances_are_foreign_never_adopted() -> None:
    """Staging and prod on one account: each adopts its own labels and reports the other's as foreign."""
    listed = [row(1, launch_label("k1", 0, "prod")), row(2, launch_label("k1", 0, "staging")), row(3, "notebook")]
    prod = reconcile({}, listed, NOW, gone_after_missing_lists=2, deployment_id="prod")
    staging = reconcile({}, listed, NOW, gone_after_missing_lists=2, deployment_id="staging")
    assert set(prod.known) == {1} and [r.id for r in prod.foreign] == [2, 3] and prod.foreign_owners == {2: "staging"}
    assert set(staging.known) == {2} and staging.foreign_owners == {1: "prod"}


def test_labels_from_before_deployment_ids_belong_to_the_default_deployment_alone() -> None:
    listed = [row(1, "fleetpilot:old-cmd:0")]
    assert set(reconcile({}, listed, NOW, gone_after_missing_lists=2).known) == {1}
    named = reconcile({}, listed, NOW, gone_after_missing_lists=2, deployment_id="staging")
    assert named.known == {} and named.foreign_owners == {1: "default"}


@pytest.mark.parametrize(
    ("actual", "intended", "msg", "expected"),
    [
        (None, "running", "", (InstanceState.REQUESTED, None)),
        ("created", "running", "", (InstanceState.REQUESTED, None)),
        ("loading", "running", "Pulling image", (InstanceState.LOADING, None)),
        ("running", "running", "success", (InstanceState.RUNNING, None)),
        ("exited", "running", "oops", (InstanceState.FAILED, FailureReason.VAST_ERROR)),
        (
            "loading",
            "running",
            "Error response from daemon: pull failed",
            (InstanceState.FAILED, FailureReason.VAST_ERROR),
        ),
        ("offline", "running", "", (InstanceState.FAILED, FailureReason.DEAD)),
        ("stopped", "stopped", "", (InstanceState.DRAINING, None)),
        ("unknown", "running", "", (InstanceState.LOADING, None)),  # no verdict from one poll: keep the previous
    ],
)
def test_vast_status_maps_onto_the_lifecycle(actual: str | None, intended: str, msg: str, expected: tuple) -> None:
    assert observed_state(actual, intended, msg, InstanceState.LOADING) == expected


def test_status_labels_for_the_gauge() -> None:
    assert [vast_status_label(s) for s in (None, "loading", "frozen")] == ["provisioning", "loading", "other"]


def test_unknown_labelled_instances_are_adopted_and_foreign_ones_only_reported() -> None:
    outcome = reconcile(
        {}, [row(1, launch_label("k1", 0)), row(2, "someone's notebook")], NOW, gone_after_missing_lists=2
    )
    assert [i.instance_id for i in outcome.adopted] == [1]
    assert outcome.adopted[0].adopted and outcome.adopted[0].idempotency_key == "k1"
    assert [r.id for r in outcome.foreign] == [2]
    assert set(outcome.known) == {1}


def test_a_slot_rented_twice_keeps_the_rent_its_launch_recorded_and_gives_up_the_other() -> None:
    recorded = known(7, launch_label("k1", 0))  # our create's answer (not adopted)
    late = row(3, launch_label("k1", 0))  # the same slot, listed later: a create that acted after its look-up
    outcome = reconcile({7: recorded}, [late, row(7, launch_label("k1", 0)), row(8, launch_label("k1", 1))], NOW,
                        gone_after_missing_lists=2)  # fmt: skip
    assert [(i.instance_id, kept.instance_id) for i, kept in second_rents_of_a_slot(outcome.known, "default")] == [
        (3, 7)
    ]
    # both adopted (a resumed launch found them): the lower id stays; another deployment's slot is not ours to judge
    both = {i: known(i, launch_label("k2", 0)).model_copy(update={"adopted": True}) for i in (12, 11)}
    theirs = {i: known(i, launch_label("k2", 0, "staging")) for i in (21, 22)}
    assert [(i.instance_id, kept.instance_id) for i, kept in second_rents_of_a_slot({**both, **theirs}, "default")] == [
        (12, 11)
    ]
    # a gone first rent leaves the slot to the other; different slots of one launch are no duplicate
    gone = {1: known(1, launch_label("k3", 0), InstanceState.GONE), 2: known(2, launch_label("k3", 0))}
    assert second_rents_of_a_slot({**gone, 3: known(3, launch_label("k3", 1))}, "default") == []


def test_changes_are_published_once_and_failures_become_incidents_once() -> None:
    before = {1: known(1, launch_label("k", 0), InstanceState.LOADING)}
    failed = reconcile(
        before, [row(1, launch_label("k", 0), "exited", "Error: no space", price=0.52)], NOW, gone_after_missing_lists=2
    )
    assert [i.state for i in failed.changed] == [InstanceState.FAILED]
    assert failed.known[1].price_usd_per_h == 0.52  # vast's price is the truth
    assert [(i.kind.value, i.machine_id) for i in failed.incidents] == [("vast_error", 50)]
    again = reconcile(
        failed.known,
        [row(1, launch_label("k", 0), "exited", "Error: no space", price=0.52)],
        NOW + timedelta(minutes=1),
        gone_after_missing_lists=2,
    )
    assert again.changed == [] and again.incidents == []


def test_an_instance_vast_stops_listing_is_gone_only_after_consecutive_misses() -> None:
    before = {1: known(1, launch_label("k", 0), InstanceState.RUNNING)}
    first = reconcile(before, [], NOW, gone_after_missing_lists=2)
    assert first.gone == [] and first.known[1].missing_lists == 1
    back = reconcile(first.known, [row(1, launch_label("k", 0), "running")], NOW, gone_after_missing_lists=2)
    assert back.known[1].missing_lists == 0
    second = reconcile(
        reconcile(back.known, [], NOW, gone_after_missing_lists=2).known, [], NOW, gone_after_missing_lists=2
    )
    assert [i.instance_id for i in second.gone] == [1] and second.known[1].state is InstanceState.GONE
    third = reconcile(second.known, [], NOW, gone_after_missing_lists=2)
    assert third.gone == []  # reported once


def test_a_listed_but_unreadable_row_of_ours_is_kept_as_it_was_never_gone() -> None:
    before = {1: known(1, launch_label("k", 0), InstanceState.RUNNING)}
    outcome = before
    for _ in range(3):  # more lists than gone_after_missing_lists
        result = reconcile(outcome, [], NOW, gone_after_missing_lists=2, unreadable_ids=frozenset({1}))
        assert result.gone == [] and result.changed == []
        outcome = result.known
    assert outcome[1] == before[1]


def test_nulls_vast_sends_are_read_and_an_unknown_price_is_never_zero() -> None:
    raw = {
        "id": 7, "label": launch_label("k", 0), "actual_status": None, "intended_status": "running",
        "dph_total": None, "dph_base": None, "start_date": None, "num_gpus": None, "gpu_name": None,
        "some_new_field": {"nested": [1, 2]},
    }  # fmt: skip
    row_read = VastInstance.model_validate(raw)
    assert row_read.model_extra == {"some_new_field": {"nested": [1, 2]}}  # unknown fields are kept
    [adopted] = reconcile({}, [row_read], NOW, gone_after_missing_lists=2).adopted
    assert adopted.price_usd_per_h == PRICE_CAP and adopted.state is InstanceState.REQUESTED
    with_base = VastInstance.model_validate({**raw, "dph_base": 0.4})
    assert reconcile({}, [with_base], NOW, gone_after_missing_lists=2).adopted[0].price_usd_per_h == 0.4
    # a known instance listed with a null price keeps the price it had
    before = {7: known(7, launch_label("k", 0), InstanceState.LOADING)}
    assert reconcile(before, [row_read], NOW, gone_after_missing_lists=2).known[7].price_usd_per_h == 0.5


@pytest.mark.parametrize(
    ("field", "value"),
    [("dph_total", -1.6), ("dph_total", "NaN"), ("dph_total", "Infinity"), ("dph_base", -0.2),
     ("start_date", 1e20), ("start_date", "NaN"), ("start_date", -5), ("num_gpus", -4), ("num_gpus", 1000),
     ("num_gpus", 1.5)],
)  # fmt: skip
def test_a_nonsense_price_moment_or_gpu_count_reads_as_unknown(field: str, value: object) -> None:
    """A stranger's number is read for sense: a negative price made room in the budget, and a moment past any date
    or a price of NaN failed the whole reconciliation at every list. Unknown is what the row says then: an
    adopted instance counts the most we would pay, a known one keeps what it had."""
    raw = {"id": 7, "label": launch_label("k", 0), "actual_status": "running", "intended_status": "running",
           "dph_total": 0.3, "dph_base": 0.25, "start_date": NOW.timestamp(), "num_gpus": 1, field: value}  # fmt: skip
    read = VastInstance.model_validate(raw)
    assert getattr(read, field) is None
    outcome = reconcile({}, [read], NOW, gone_after_missing_lists=2)
    [adopted] = outcome.adopted
    assert adopted.price_usd_per_h in (0.3, 0.25, PRICE_CAP) and adopted.price_usd_per_h >= 0
    assert adopted.num_gpus >= 1 and adopted.created_at <= NOW
    before = {7: known(7, launch_label("k", 0), InstanceState.LOADING)}
    assert reconcile(before, [read], NOW, gone_after_missing_lists=2).known[7].price_usd_per_h >= 0


@pytest.mark.parametrize(
    "prices",
    [{"dph_total": 0}, {"dph_total": "0.0"}, {"dph_total": None, "dph_base": 0}, {"dph_total": 0, "dph_base": 0}],
    ids=["zero", "zero as text", "null total, zero base", "both zero"],
)
def test_a_zero_price_is_unknown_and_never_frees_the_machines_share_of_the_budget(prices: dict[str, object]) -> None:
    """vast listed a running machine at $0/h: read as a price, its share of the budget was freed for another rent
    while vast still billed it. A known instance keeps the price it had; an adopted one counts the most we pay."""
    raw = {"id": 7, "label": launch_label("k", 0), "actual_status": "running", "intended_status": "running",
           "dph_total": 0.5, "num_gpus": 1, "gpu_name": "RTX 4090", **prices}  # fmt: skip
    read = VastInstance.model_validate(raw)
    assert read.price_usd_per_h is None
    before = {7: known(7, launch_label("k", 0), InstanceState.LOADING)}
    kept = reconcile(before, [read], NOW, gone_after_missing_lists=2).known[7]
    assert kept.price_usd_per_h == 0.5 and kept.committed_usd_per_h == 0.5
    [adopted] = reconcile({}, [read], NOW, gone_after_missing_lists=2).adopted
    assert adopted.price_usd_per_h == PRICE_CAP


def test_a_row_that_fails_half_way_is_kept_as_known_and_the_rest_reconciles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever in one row still breaks its reading (a field not yet read for sense) is that row's problem: it is
    kept as it was known, reported with the reason, and every other row reconciles."""
    real_incident_for = core.incident_for

    def breaks_on_8(instance: KnownInstance, now: datetime) -> object:
        if instance.instance_id == 8:
            raise OverflowError("timestamp out of range")
        return real_incident_for(instance, now)

    monkeypatch.setattr(core, "incident_for", breaks_on_8)
    before = {8: known(8, launch_label("k", 1), InstanceState.LOADING)}
    listed = [row(7, launch_label("k", 0), "running"), row(8, launch_label("k", 1), "exited")]
    outcome = reconcile(before, listed, NOW, gone_after_missing_lists=2)
    assert [i.instance_id for i in outcome.adopted] == [7]
    assert outcome.known[8] == before[8] and all(i.instance_id != 8 for i in outcome.changed)
    assert outcome.unreadable == [(8, "timestamp out of range")]


STORAGE_USD_PER_H = 0.003 * 20 / 730
FULL_PRICE = 0.5 + STORAGE_USD_PER_H  # vast's dph_total: the GPU and the disk


def stopped_row(
    instance_id: int, *, intended: str = "stopped", msg: str = "Instance stopped", is_bid: bool = False
) -> VastInstance:
    """A row as the simulator lists a stopped instance: storage $0.003/GB/month on 20 GB, GPU $0.5/h."""
    return VastInstance(
        id=instance_id, label=launch_label("k", 0), actual_status="stopped", intended_status=intended,
        cur_state="stopped", next_state=intended, status_msg=msg, dph_base=0.5, dph_total=FULL_PRICE,
        storage_cost=0.003, disk_space=20, is_bid=is_bid, host_id=5, machine_id=50, gpu_name="RTX 4090",
    )  # fmt: skip


def one(current: KnownInstance, listed: VastInstance) -> KnownInstance:
    return reconcile({current.instance_id: current}, [listed], NOW, gone_after_missing_lists=2).known[
        current.instance_id
    ]


def test_our_parking_stop_reads_parked_and_commits_its_storage_never_gone() -> None:
    ours = known(7, launch_label("k", 0), InstanceState.PARKED).model_copy(
        update={"stop_reason": RemovalReason.PARK, "park_reason": ParkReason.STOPPED}
    )
    after = one(ours, stopped_row(7))
    assert (after.state, after.park_reason) == (InstanceState.PARKED, ParkReason.STOPPED)
    assert after.storage_usd_per_h == pytest.approx(0.06 / 730)
    assert after.committed_usd_per_h == pytest.approx(0.06 / 730)
    # any other stop winds it down, as before: draining until destroyed, its full price still counted
    idle = ours.model_copy(update={"stop_reason": RemovalReason.IDLE, "state": InstanceState.DRAINING})
    wound_down = one(idle, stopped_row(7))
    assert (wound_down.state, wound_down.committed_usd_per_h) == (InstanceState.DRAINING, FULL_PRICE)


def test_a_start_waiting_in_scheduling_reads_resuming_and_running_again_reads_running() -> None:
    resumed = known(7, launch_label("k", 0), InstanceState.RESUMING)
    waiting = stopped_row(7, intended="running", msg="Scheduling: waiting for the machine's GPU")
    assert one(resumed, waiting).state is InstanceState.RESUMING
    assert one(resumed, waiting).committed_usd_per_h == FULL_PRICE  # the full price, the moment it was started
    assert one(resumed, row(7, launch_label("k", 0), "loading")).state is InstanceState.RESUMING
    assert one(resumed, row(7, launch_label("k", 0), "running")).state is InstanceState.RUNNING


def test_an_outbid_bid_reads_parked_outbid_and_keeps_its_bid_committed() -> None:
    bid = known(8, launch_label("k", 0), InstanceState.RUNNING).model_copy(update={"is_bid": True})
    outbid = one(bid, stopped_row(8, msg="Outbid: paused", is_bid=True))
    assert (outbid.state, outbid.park_reason) == (InstanceState.PARKED, ParkReason.OUTBID)
    assert outbid.committed_usd_per_h == FULL_PRICE  # vast resumes it by itself: its bid may come back any moment
    assert one(outbid, row(8, launch_label("k", 0), "running")).state is InstanceState.RUNNING
    # an on-demand machine stopped by someone else is wound down as before, not taken for outbid
    plain = known(9, launch_label("k", 0), InstanceState.RUNNING)
    assert one(plain, stopped_row(9)).state is InstanceState.DRAINING
    # adopted (a restart lost what we knew): a stopped bid is an outbid one
    adopted = reconcile({}, [stopped_row(10, is_bid=True)], NOW, gone_after_missing_lists=2).adopted
    assert [(i.state, i.park_reason) for i in adopted] == [(InstanceState.PARKED, ParkReason.OUTBID)]


def test_storage_is_read_from_the_row_or_unknown() -> None:
    assert stopped_row(1).storage_usd_per_h == pytest.approx(0.06 / 730)
    total_only = VastInstance(id=1, dph_base=0.5, dph_total=0.52)
    assert total_only.storage_usd_per_h == pytest.approx(0.02)
    assert VastInstance(id=1, dph_total=0.52).storage_usd_per_h is None
