"""The provisioner's operations against vast.ai: launch, stop, destroy, reconcile, offer look-ups, learning.

Each operation loads state, asks the pure cores (ranking, budget, reconcile, host history) what to do, calls
vast.ai through the client, saves, and publishes. Operations that change the fleet run one at a time: an
asyncio lock in this process and a lease in Redis across replicas, so two budget checks never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, time
from typing import Any, Literal, Protocol

from services.bench.tokens import REPORT_TOKEN_ENV, instance_report_token
from services.provisioner import budget
from services.provisioner.budget import BudgetLimits, Commitment, DaySpend, Refusal
from services.provisioner.charges import charge_lines
from services.provisioner.host_history import (
    REMOVAL_INCIDENTS,
    HostHistory,
    Incident,
    IncidentKind,
    bench_ratio,
    production_ratios,
)
from services.provisioner.metrics import ProvisionerMetrics
from services.provisioner.ranking import (
    URGENT_HORIZON_H,
    OfferConstraints,
    RankedOffer,
    StartupModel,
    ThroughputKnowledge,
    rank,
    search_query,
)
from services.provisioner.reconcile import (
    KnownInstance,
    from_vast,
    launch_label,
    parse_label,
    reconcile,
    vast_status_label,
)
from services.provisioner.settings import ProvisionerSettings
from services.provisioner.store import ProvisionerStore
from services.provisioner.vast_client import (
    AmbiguousCreate,
    BidTooLow,
    InstanceNotFound,
    OfferGone,
    VastAuthError,
    VastClient,
    VastError,
)
from services.provisioner.vast_models import InstanceListing, VastInstance
from shared import gpu_models
from shared.clock import Clock
from shared.contract import (
    BenchResult,
    ChargeList,
    ChargesQuery,
    DemandSignal,
    DestroyInstance,
    FleetSnapshot,
    ForeignInstance,
    InstanceObserved,
    InstanceState,
    LaunchInstances,
    OfferLine,
    OfferList,
    OfferQuery,
    ParkReason,
    ProvisionResult,
    RefusalRule,
    RemovalReason,
    ResumeInstance,
    StopInstance,
    VastAccountObserved,
    bid_usd_per_h,
)
from shared.contract.account import FOREIGN_INSTANCES_KEPT
from shared.settings import Settings

SOURCE = "provisioner"
FLEET_LEASE = "fleet"
# a launch seen in one of these and then in one of the next has just started: its startup is learned
STARTING = frozenset({InstanceState.REQUESTED, InstanceState.LOADING})
STARTED = frozenset(
    {InstanceState.RUNNING, InstanceState.REGISTERED, InstanceState.BENCHMARKED, InstanceState.PRODUCING}
)
GONE_KEPT_S = 86_400.0  # a gone instance is remembered a day, so a late stop/destroy for it is answered sensibly

Heartbeat = Callable[[], Awaitable[None]]
Verb = Literal["launch", "stop", "destroy", "resume"]
Command = LaunchInstances | StopInstance | DestroyInstance | ResumeInstance

log = logging.getLogger("fleetpilot.provisioner")


async def _no_heartbeat() -> None:
    return None


class Publisher(Protocol):
    async def instance(self, event: InstanceObserved) -> None: ...

    async def result(self, event: ProvisionResult) -> None: ...

    async def account(self, event: VastAccountObserved) -> None: ...


class FleetUnknown(Exception):
    """The instance list could not be read: the fleet is unknown, not empty."""


@dataclass
class Provisioner:
    client: VastClient
    store: ProvisionerStore
    clock: Clock
    settings: Settings
    config: ProvisionerSettings
    metrics: ProvisionerMetrics
    publisher: Publisher

    def __post_init__(self) -> None:
        self._acting = asyncio.Lock()
        self.known: dict[int, KnownInstance] = {}
        self.history = HostHistory()
        self.knowledge = ThroughputKnowledge()
        self.day_spend = DaySpend.starting(self.clock.now())
        self.fleet_known = False  # true only right after a successful list
        # instances whose latest observation NATS has not acknowledged: published again after the next list
        self._unpublished: set[int] = set()
        self._foreign_ids: set[int] = set()

    @property
    def unknown_price_usd_per_h(self) -> float:
        """The price counted for an instance vast lists without one: the most FleetPilot would pay, never zero."""
        return self.settings.emergency_max_price_usd_per_h

    @property
    def limits(self) -> BudgetLimits:
        s = self.settings
        return BudgetLimits(
            budget_usd_per_h=s.budget_usd_per_h,
            max_instances=s.max_instances,
            normal_max_price_usd_per_h=s.normal_max_price_usd_per_h,
            emergency_max_price_usd_per_h=s.emergency_max_price_usd_per_h,
            price_margin=self.config.price_margin,
            daily_budget_usd=s.daily_budget_usd,
        )

    @property
    def constraints(self) -> OfferConstraints:
        c = self.config
        return OfferConstraints(
            allowed_gpu_models=tuple(c.allowed_gpu_models),
            max_price_usd_per_h=self.settings.emergency_max_price_usd_per_h,
            min_reliability=c.min_reliability,
            verified_only=c.verified_only,
            min_cuda=c.min_cuda,
            min_disk_gb=c.min_disk_gb,
            excluded_host_ids=frozenset(c.excluded_host_ids),
            excluded_machine_ids=frozenset(c.excluded_machine_ids),
        )

    def commitment(self) -> Commitment:
        return budget.commitment_of((i.committed_usd_per_h, i.state) for i in self.known.values())

    # ---- serialising fleet changes ------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _exclusive(self, heartbeat: Heartbeat = _no_heartbeat) -> AsyncIterator[None]:
        """One fleet-changing operation at a time, here and across replicas; state reloaded from Redis inside."""
        async with self._acting:
            token = await self.store.try_lease(FLEET_LEASE, self.config.lease_ttl_s)
            while token is None:
                await heartbeat()  # waiting for another replica is progress too: no redelivery meanwhile
                await self.clock.sleep(self.config.lease_poll_s)
                token = await self.store.try_lease(FLEET_LEASE, self.config.lease_ttl_s)
            self._lease_token = token
            try:
                await self._load()
                yield
            finally:
                await self.store.release_lease(FLEET_LEASE, token)

    async def _keep_alive(self, heartbeat: Heartbeat) -> None:
        """Before each slow step: tell JetStream the command is in progress and keep the lease."""
        await heartbeat()
        await self.store.renew_lease(FLEET_LEASE, self._lease_token, self.config.lease_ttl_s)

    async def _load(self) -> None:
        self.known = await self.store.load_instances()
        self.history = await self.store.load_history()
        self.day_spend = await self.store.load_day_spend() or DaySpend.starting(self.clock.now())
        observed = await self.store.load_observed_throughput()
        if observed:
            self.knowledge = ThroughputKnowledge(observed)

    # ---- reconciliation -----------------------------------------------------------------------------------
    async def reconcile(self) -> bool:
        """Compare vast's list with what is known; True if the list was read (False: the fleet is unknown)."""
        async with self._exclusive():
            try:
                await self._refresh()
            except (FleetUnknown, VastAuthError):
                return False
            return True

    async def _list_all(self) -> InstanceListing:
        if self.config.instance_list_api == "v0":
            return await self.client.list_instances_v0()
        return await self.client.list_instances()

    async def _refresh(self) -> None:
        """List, diff, save, publish. A failed list raises (VastAuthError for a refused key, FleetUnknown for
        anything else): never treat it as zero instances."""
        try:
            listed = await self._list_all()
        except VastError as error:
            self.fleet_known = False
            self.metrics.reconciliations.labels("failed").inc()
            log.warning("instance list failed, the fleet is unknown until the next good list: %s", error)
            if isinstance(error, VastAuthError):
                await self._say_key_refused(error)
                raise
            raise FleetUnknown(str(error)) from None
        now = self.clock.now()
        # what the fleet as known until this list cost since the last one (before the list changes it)
        self.day_spend = self.day_spend.accrued(self.commitment().usd_per_h, now)
        await self.store.save_day_spend(self.day_spend)
        outcome = reconcile(
            self.known,
            listed.instances,
            now,
            gone_after_missing_lists=self.config.gone_after_missing_lists,
            unknown_price_usd_per_h=self.unknown_price_usd_per_h,
            unreadable_ids=listed.unreadable_ids,
            deployment_id=self.settings.deployment_id,
        )
        started = self._learn_startups(outcome.known, now)
        self.known = outcome.known
        for incident in outcome.incidents:
            self.history.record(incident)
        await self.store.save_instances(list(outcome.known.values()))
        await self._destroy_listed_after_gone()
        await self._forget_long_gone()
        if outcome.incidents or started:
            await self.store.save_history(self.history)
        self._unpublished.update(instance.instance_id for instance in outcome.to_publish)
        for instance in [*outcome.to_publish, *self._still_unpublished(outcome.to_publish)]:
            await self._publish_instance(instance)
        new_foreign = {row.id for row in outcome.foreign} - self._foreign_ids
        for row in outcome.foreign:
            if row.id in new_foreign:  # once per instance, not at every list
                whose = outcome.foreign_owners.get(row.id)
                log.warning(
                    "instance %s on the account is %s (%r): shown as foreign, never touched",
                    row.id, f"FleetPilot deployment {whose!r}'s" if whose else "not FleetPilot's", row.label,
                )  # fmt: skip
        self._foreign_ids = {row.id for row in outcome.foreign}
        self.metrics.foreign_instances.set(len(outcome.foreign))
        view = self._account_view(outcome.foreign, outcome.foreign_owners, len(listed.unreadable_ids))
        await self.publisher.account(view)
        self.metrics.reconciliations.labels("ok").inc()
        self.fleet_known = True
        self._update_gauges()

    def _learn_startups(self, updated: dict[int, KnownInstance], now: datetime) -> int:
        """Each of our launches seen running for the first time: how long its machine took, for the ranking."""
        learned = 0
        for instance_id, instance in updated.items():
            before = self.known.get(instance_id)
            if (
                before is None
                or before.state not in STARTING
                or instance.state not in STARTED
                or instance.adopted
                or instance.machine_id is None
            ):
                continue
            seconds = (now - instance.created_at).total_seconds()
            if seconds > 0:
                self.history.record_startup(instance.machine_id, instance.host_id, seconds, now)
                learned += 1
        return learned

    async def _say_key_refused(self, error: VastAuthError) -> None:
        """For `fleetpilot status`: the key was refused (a log line alone is missed); never fatal to the caller."""
        refused = VastAccountObserved(
            occurred_at=self.clock.now(),
            source=SOURCE,
            foreign_count=len(self._foreign_ids),
            api_key="refused",
            api_key_detail=str(error)[:500],
        )
        try:
            await self.publisher.account(refused)
        except Exception as publish_error:
            log.error("could not publish that vast.ai refused the key: %r", publish_error)

    def _account_view(
        self, foreign: list[VastInstance], owners: dict[int, str], unreadable_rows: int
    ) -> VastAccountObserved:
        shown = sorted(foreign, key=lambda row: row.id)[:FOREIGN_INSTANCES_KEPT]
        return VastAccountObserved(
            occurred_at=self.clock.now(),
            source=SOURCE,
            foreign_count=len(foreign),
            foreign_instances=[
                ForeignInstance(
                    instance_id=row.id,
                    label=(row.label or "")[:256] or None,
                    deployment_id=owners.get(row.id),
                    gpu_model=(row.gpu_name or "")[:128] or None,
                    num_gpus=row.num_gpus,
                    vast_actual_status=(row.actual_status or "")[:64] or None,
                    price_usd_per_h=row.price_usd_per_h,
                )
                for row in shown
            ],
            unreadable_rows=unreadable_rows,
        )

    async def _destroy_listed_after_gone(self) -> None:
        """An instance we destroyed that vast still lists after a few lists may still bill: destroy it again,
        once every `gone_after_missing_lists` lists (a failure is logged and tried at the next round)."""
        every = max(1, self.config.gone_after_missing_lists)
        for instance in list(self.known.values()):
            if instance.state is not InstanceState.GONE or instance.listed_after_gone < every:
                continue
            if instance.listed_after_gone % every:
                continue
            log.warning(
                "instance %s is gone (%s) but vast still lists it after %d lists: destroying it again",
                instance.instance_id, instance.gone_because, instance.listed_after_gone,
            )  # fmt: skip
            try:
                await self.client.destroy_instance(instance.instance_id)
            except InstanceNotFound:
                pass
            except VastError as error:
                log.warning("destroying %s again failed: %s", instance.instance_id, error)

    async def _forget_long_gone(self) -> None:
        now = self.clock.now()
        stale = [
            i.instance_id
            for i in self.known.values()
            if i.state is InstanceState.GONE and (now - i.state_since).total_seconds() > GONE_KEPT_S
        ]
        for instance_id in stale:
            self.known.pop(instance_id, None)
        await self.store.forget_instances(stale)

    def _update_gauges(self) -> None:
        self.metrics.spend.set(self.commitment().usd_per_h)
        counts: dict[str, int] = {}
        for instance in self.known.values():
            if instance.state is not InstanceState.GONE:
                label = vast_status_label(instance.vast_actual_status)
                counts[label] = counts.get(label, 0) + 1
        self.metrics.set_instances_by_status(counts)

    # ---- launch -------------------------------------------------------------------------------------------
    async def launch(self, command: LaunchInstances, heartbeat: Heartbeat = _no_heartbeat) -> ProvisionResult:
        return await self._once(command, "launch", heartbeat, lambda: self._launch(command, heartbeat))

    async def _once(
        self, command: Command, verb: Verb, heartbeat: Heartbeat, carry_out: Callable[[], Awaitable[ProvisionResult]]
    ) -> ProvisionResult:
        """A command at most once: under the fleet lease, answered with its saved result when it came before,
        refused when it expired or its fencing token is stale, else carried out; the result saved and counted."""
        async with self._exclusive(heartbeat):
            previous = await self.store.result_for(command.idempotency_key)
            if previous is not None:
                return previous
            refusal = self._expiry_refusal(command, verb) or await self._fence_refusal(command, verb)
            result = refusal or await carry_out()
            await self.store.save_result(result)
            self.metrics.commands.labels(verb, result.outcome).inc()
            if verb == "launch" and result.outcome == "refused" and result.refusal_rule is not None:
                self.metrics.launches_refused.labels(result.refusal_rule.value).inc()
            self._update_gauges()
            return result

    async def _launch(self, command: LaunchInstances, heartbeat: Heartbeat) -> ProvisionResult:
        key = command.idempotency_key
        try:
            await self._keep_alive(heartbeat)
            await self._refresh()
        except FleetUnknown as unknown:
            return self._result(
                command, "launch", "refused", RefusalRule.UNKNOWN_FLEET, f"instance list failed: {unknown}"
            )
        except VastAuthError as error:
            return self._result(command, "launch", "failed", RefusalRule.AUTH, str(error))

        # instances of this very launch that already exist (a redelivery after a crash): adopted, not re-created
        # (by slot, not by label text: a label written before deployment ids names the same slot)
        mine = {
            parsed.slot: i
            for i in self.known.values()
            if i.idempotency_key == key
            and i.state is not InstanceState.GONE
            and (parsed := parse_label(i.label)) is not None
        }
        missing = [n for n in range(command.count) if n not in mine]
        done_ids = sorted(i.instance_id for i in mine.values())
        if not missing:
            return self._result(command, "launch", "done", None, "already launched", done_ids)

        try:  # checked when the service starts; a provisioner assembled without it must not rent blind
            self.config.onstart_line()
        except ValueError as error:
            return self._result(command, "launch", "failed", None, f"nothing rented: {error}", done_ids)
        cap = self.limits.price_cap(command.launch_priority, command.max_price_usd_per_h)
        constraints = self.constraints.narrowed_to(command.gpu_models, cap)
        if not constraints.allowed_gpu_models:
            return self._result(
                command, "launch", "refused", RefusalRule.NO_OFFER, f"none of {command.gpu_models} is an allowed model"
            )
        try:
            await self._keep_alive(heartbeat)
            ranked = await self._ranked_offers(
                constraints,
                self.history,
                urgent=command.launch_priority == "emergency",
                fills_last_slots=self.commitment().instances + len(missing) >= self.limits.max_instances,
            )
        except VastAuthError as error:
            return self._result(command, "launch", "failed", RefusalRule.AUTH, str(error))
        except VastError as error:
            return self._result(command, "launch", "failed", RefusalRule.VAST_ERROR, f"offer search failed: {error}")

        plan = budget.plan_launch(self.limits, self.commitment(), ranked, len(missing))
        if isinstance(plan, Refusal):
            return self._result(command, "launch", "refused", plan.rule, plan.detail, done_ids)
        if over_day := self._day_refusal(plan):
            return self._result(command, "launch", "refused", over_day.rule, over_day.detail, done_ids)

        created: list[int] = []
        candidates = list(ranked)
        commitment = self.commitment()
        for position, index in enumerate(missing):
            still_needed = len(missing) - position
            try:
                instance = await self._launch_one(command, index, candidates, commitment, still_needed, heartbeat)
            except VastAuthError as error:
                return self._result(command, "launch", "failed", RefusalRule.AUTH, str(error), done_ids + created)
            except (VastError, FleetUnknown) as error:
                detail = f"launched {len(created)} of {len(missing)}: {error}"
                return self._result(command, "launch", "failed", RefusalRule.VAST_ERROR, detail, done_ids + created)
            if instance is None:
                detail = f"launched {len(created)} of {len(missing)}: no offer left within the budget and constraints"
                return self._result(command, "launch", "failed", RefusalRule.NO_OFFER, detail, done_ids + created)
            created.append(instance.instance_id)
            commitment = commitment.plus(self.limits.reserved_usd_per_h(instance.price_usd_per_h))
        return self._result(command, "launch", "done", None, f"launched {len(created)}", sorted(done_ids + created))

    async def _ranked_offers(
        self,
        constraints: OfferConstraints,
        history: HostHistory,
        *,
        urgent: bool = False,
        fills_last_slots: bool = False,
    ) -> list[RankedOffer]:
        """An emergency launch (nobody serving queued tasks) weighs each host's expected startup against price; one
        that takes the instance cap's last slots puts the fastest machines first (`ranking.rank`)."""
        query = search_query(constraints, limit=self.config.search_limit, disk_gb=self.config.disk_gb)
        offers = await self.client.search_offers(query)
        startup = StartupModel(image_gb=self.config.image_gb, typical_startup_s=self.config.typical_startup_s)
        return rank(
            offers,
            constraints,
            self.knowledge,
            history,
            self.clock.now(),
            urgent_horizon_h=URGENT_HORIZON_H if urgent else None,
            startup=startup,
            fills_last_slots=fills_last_slots,
        )

    async def _launch_one(
        self,
        command: LaunchInstances,
        index: int,
        candidates: list[RankedOffer],
        commitment: Commitment,
        still_needed: int,
        heartbeat: Heartbeat,
    ) -> KnownInstance | None:
        """Rent one instance for slot `index`: best affordable offer first, next best when one is gone; after
        an ambiguous create, look for the label before trying again. Removes used offers from `candidates`."""
        label = self._label(command.idempotency_key, index)
        ambiguous = 0  # creates that may or may not have happened, each followed by a label look-up
        offers_tried = 0  # offers found gone
        while ambiguous < self.config.max_create_attempts and offers_tried < self.config.max_offer_fallbacks:
            choice = budget.pick_next(self.limits, commitment, candidates, still_needed)
            if choice is None:
                return None
            # the budget again, for this one rent, just before it happens (never trust the plan alone)
            if not budget.fits(self.limits, commitment, choice.price_usd_per_h) or self._day_refusal(
                [choice], commitment
            ):
                return None
            bid = self._bid_for(command, index, choice)
            await self._keep_alive(heartbeat)
            try:
                instance_id = await self.client.create_instance(
                    choice.offer.id, self._create_request(command, label), bid_usd_per_h=bid
                )
            except OfferGone:
                log.info("offer %s was taken before we rented it; trying the next best", choice.offer.id)
                candidates.remove(choice)
                offers_tried += 1
                continue
            except BidTooLow as error:  # its min_bid rose since the search: the next offer, with its own floor
                log.info("bid %s on offer %s refused (%s); trying the next best", bid, choice.offer.id, error)
                candidates.remove(choice)
                offers_tried += 1
                continue
            except AmbiguousCreate as error:
                ambiguous += 1
                log.warning("create for %s is ambiguous (%s); looking for its label before retrying", label, error)
                await self._keep_alive(heartbeat)
                found = await self._find_by_label(label)
                if found is not None:
                    if choice in candidates:
                        candidates.remove(choice)
                    adopted = from_vast(
                        found, self.clock.now(), adopted=True, unknown_price_usd_per_h=choice.offer.dph_total
                    )
                    await self._remember_new(adopted, choice)
                    self.metrics.instances_launched.labels("adopted_after_ambiguity").inc()
                    return adopted
                continue
            candidates.remove(choice)
            now = self.clock.now()
            instance = KnownInstance(
                instance_id=instance_id,
                label=label,
                idempotency_key=command.idempotency_key,
                offer_id=choice.offer.id,
                gpu_model=choice.offer.gpu_name,
                num_gpus=choice.offer.num_gpus,
                price_usd_per_h=bid if bid is not None else choice.offer.dph_total,
                is_bid=bid is not None,
                host_id=choice.offer.host_id,
                machine_id=choice.offer.machine_id,
                state=InstanceState.REQUESTED,
                created_at=now,
                state_since=now,
            )
            await self._remember_new(instance, choice)
            self.metrics.instances_launched.labels("created").inc()
            return instance
        return None

    def _day_refusal(self, rents: list[RankedOffer], commitment: Commitment | None = None) -> Refusal | None:
        """Would these rents, on top of `commitment` (the fleet's now by default), pass today's cap?"""
        return budget.day_refusal(
            self.limits,
            self.day_spend,
            self.commitment() if commitment is None else commitment,
            sum(self.limits.reserved_usd_per_h(r.price_usd_per_h) for r in rents),
            sum(r.pull_cost_usd for r in rents),
            self.clock.now(),
        )

    def _label(self, idempotency_key: str, index: int) -> str:
        return launch_label(idempotency_key, index, self.settings.deployment_id)

    @staticmethod
    def _bid_for(command: LaunchInstances, index: int, choice: RankedOffer) -> float | None:
        """The first `interruptible` slots of a launch bid the offer's min_bid × (1 + markup), never above its
        on-demand price; an offer that lists no min_bid is rented on-demand (a bid of unknown floor would be
        refused or silently too high)."""
        min_bid = choice.offer.min_bid
        if index >= command.interruptible or min_bid is None or min_bid <= 0:
            return None
        return round(bid_usd_per_h(min_bid, choice.offer.dph_total, command.bid_markup), 6)

    async def _find_by_label(self, label: str) -> VastInstance | None:
        try:
            rows = (await self.client.list_instances(select_filters={"label": {"eq": label}})).instances
        except VastError as error:
            raise FleetUnknown(f"cannot check for {label} after an ambiguous create: {error}") from None
        matching = [row for row in rows if row.label == label]
        return min(matching, key=lambda row: row.id) if matching else None

    async def _remember_new(self, instance: KnownInstance, choice: RankedOffer) -> None:
        """Saved before anything is published: a crash after this point is recovered from Redis and the label.
        The rent's image pull is charged to the day now: vast bills it once, whatever the hourly price."""
        if instance.offer_id is None:
            instance = instance.model_copy(update={"offer_id": choice.offer.id})
        self.day_spend = self.day_spend.charged(choice.pull_cost_usd)
        self.metrics.bandwidth_usd.inc(choice.pull_cost_usd)
        await self.store.save_day_spend(self.day_spend)
        self.known[instance.instance_id] = instance
        await self.store.save_instances([instance])
        await self._publish_instance(instance)

    def _create_request(self, command: LaunchInstances, label: str) -> dict[str, Any]:
        config = self.config
        env: dict[str, str] = {
            **config.worker_env,
            # the worker learns its instance id from vast's own CONTAINER_ID / VAST_CONTAINERLABEL; the label
            # ties it to this launch before any id is known
            "FLEETPILOT_INSTANCE_LABEL": label,
            "FLEETPILOT_IDEMPOTENCY_KEY": command.idempotency_key,
        }
        if config.report_token is not None:
            # this machine's own token: its host can report for this instance and no other (bench/tokens.py)
            env[REPORT_TOKEN_ENV] = instance_report_token(config.report_token, label)
        for port in config.worker_ports:
            env[f"-p {port}:{port}"] = "1"  # vast's SDK passes port mappings as env keys
        return {
            "client_id": "me",
            "image": config.image,
            "disk": config.disk_gb,
            "label": label,
            "env": env,
            "onstart": config.onstart_line(),
            "runtype": "ssh",
            "target_state": "running",
            "cancel_unavail": True,
        }

    # ---- stop and destroy ---------------------------------------------------------------------------------
    async def stop(self, command: StopInstance, heartbeat: Heartbeat = _no_heartbeat) -> ProvisionResult:
        return await self._remove(command, "stop", heartbeat)

    async def destroy(self, command: DestroyInstance, heartbeat: Heartbeat = _no_heartbeat) -> ProvisionResult:
        return await self._remove(command, "destroy", heartbeat)

    async def _remove(
        self, command: StopInstance | DestroyInstance, verb: Literal["stop", "destroy"], heartbeat: Heartbeat
    ) -> ProvisionResult:
        return await self._once(command, verb, heartbeat, lambda: self._remove_unlocked(command, verb, heartbeat))

    async def _remove_unlocked(
        self, command: StopInstance | DestroyInstance, verb: Literal["stop", "destroy"], heartbeat: Heartbeat
    ) -> ProvisionResult:
        instance_id = command.instance_id
        if instance_id not in self.known:
            try:
                await self._keep_alive(heartbeat)
                await self._refresh()  # it may carry our label and be adopted now
            except FleetUnknown as unknown:
                return self._result(command, verb, "refused", RefusalRule.UNKNOWN_FLEET, str(unknown))
            except VastAuthError as error:
                return self._result(command, verb, "failed", RefusalRule.AUTH, str(error))
        instance = self.known.get(instance_id)
        if instance is None:
            return self._result(
                command, verb, "refused", RefusalRule.UNKNOWN_INSTANCE,
                f"instance {instance_id} is not this deployment's (no label of ours): not touched",
            )  # fmt: skip
        if instance.state is InstanceState.GONE:
            # said again: a fleet that missed the first word (or asks because it still shows the machine) hears it
            await self._publish_instance(instance)
            outcome: Literal["done", "refused"] = "done" if verb == "destroy" else "refused"
            rule = None if verb == "destroy" else RefusalRule.UNKNOWN_INSTANCE
            detail = f"instance {instance_id} is already gone ({instance.gone_because or 'reason not recorded'})"
            return self._result(command, verb, outcome, rule, detail, [instance_id])
        await self._keep_alive(heartbeat)
        try:
            if verb == "stop":
                await self.client.set_state(instance_id, "stopped")
            else:
                await self.client.destroy_instance(instance_id)
        except InstanceNotFound:
            await self._mark_gone(
                instance,
                f"vast no longer has it (answered a {verb} by {command.idempotency_key})",
                command.reason if verb == "destroy" else None,
            )
            if verb == "destroy":
                return self._result(command, verb, "done", None, "vast no longer has it", [instance_id])
            return self._result(command, verb, "failed", RefusalRule.UNKNOWN_INSTANCE, "vast no longer has it")
        except VastAuthError as error:
            return self._result(command, verb, "failed", RefusalRule.AUTH, str(error))
        except VastError as error:
            return self._result(command, verb, "failed", RefusalRule.VAST_ERROR, str(error), [instance_id])
        await self._learn_from_removal(instance, command)
        if verb == "destroy":
            by = f"destroyed ({command.reason.value}) by {command.requested_by}, key {command.idempotency_key}"
            await self._mark_gone(instance, by, command.reason)
            return self._result(command, verb, "done", None, f"{verb} sent", [instance_id])
        parking = command.reason is RemovalReason.PARK
        stopped = instance.model_copy(
            update={
                # parked: kept with its disk to be started again; any other stop winds it down until destroyed
                "state": InstanceState.PARKED if parking else InstanceState.DRAINING,
                "park_reason": ParkReason.STOPPED if parking else None,
                "stop_reason": command.reason,
                "vast_intended_status": "stopped",
                "state_since": self.clock.now(),
            }
        )
        await self._remember(stopped)
        detail = "stop sent: parked, its disk kept (storage billed only)" if parking else "stop sent"
        return self._result(command, verb, "done", None, detail, [instance_id])

    async def _remember(self, instance: KnownInstance) -> None:
        self.known[instance.instance_id] = instance
        await self.store.save_instances([instance])
        await self._publish_instance(instance)

    # ---- resume -------------------------------------------------------------------------------------------
    async def resume(self, command: ResumeInstance, heartbeat: Heartbeat = _no_heartbeat) -> ProvisionResult:
        """Start a parked instance again (vast start), budgeted like a launch at its full price."""
        return await self._once(command, "resume", heartbeat, lambda: self._resume(command, heartbeat))

    async def _resume(self, command: ResumeInstance, heartbeat: Heartbeat) -> ProvisionResult:
        instance_id = command.instance_id
        try:  # the budget is checked against the fleet as vast lists it now, as for a launch
            await self._keep_alive(heartbeat)
            await self._refresh()
        except FleetUnknown as unknown:
            return self._result(command, "resume", "refused", RefusalRule.UNKNOWN_FLEET, str(unknown))
        except VastAuthError as error:
            return self._result(command, "resume", "failed", RefusalRule.AUTH, str(error))
        instance = self.known.get(instance_id)
        if instance is None or instance.state is InstanceState.GONE:
            detail = f"instance {instance_id} is not FleetPilot's or is gone: nothing to resume"
            return self._result(command, "resume", "refused", RefusalRule.UNKNOWN_INSTANCE, detail)
        if instance.state is InstanceState.RESUMING:
            return self._result(command, "resume", "done", None, "already resuming", [instance_id])
        if instance.state is not InstanceState.PARKED or instance.park_reason is not ParkReason.STOPPED:
            why = (
                "outbid: vast resumes it when its bid is the highest again"
                if instance.park_reason is ParkReason.OUTBID
                else f"it is {instance.state.value}"
            )
            detail = f"instance {instance_id} was not parked by FleetPilot ({why}): not started"
            return self._result(command, "resume", "refused", RefusalRule.NOT_PARKED, detail)
        refusal = budget.resume_refusal(
            self.limits, self.commitment(), instance.committed_usd_per_h, instance.price_usd_per_h
        ) or budget.day_refusal(  # its disk was kept: no pull to pay again
            self.limits,
            self.day_spend,
            self.commitment(),
            self.limits.reserved_usd_per_h(instance.price_usd_per_h) - instance.committed_usd_per_h,
            0.0,
            self.clock.now(),
        )
        if refusal is not None:
            return self._result(command, "resume", "refused", refusal.rule, refusal.detail)
        await self._keep_alive(heartbeat)
        try:
            await self.client.start_instance(instance_id)
        except InstanceNotFound:
            await self._mark_gone(instance, f"vast no longer has it (answered a resume by {command.idempotency_key})")
            return self._result(command, "resume", "failed", RefusalRule.UNKNOWN_INSTANCE, "vast no longer has it")
        except VastAuthError as error:
            return self._result(command, "resume", "failed", RefusalRule.AUTH, str(error))
        except VastError as error:
            return self._result(command, "resume", "failed", RefusalRule.VAST_ERROR, str(error), [instance_id])
        resuming = instance.model_copy(
            update={
                "state": InstanceState.RESUMING,
                "park_reason": None,
                "stop_reason": None,
                "vast_intended_status": "running",
                "state_since": self.clock.now(),
            }
        )
        await self._remember(resuming)
        detail = f"start sent: resuming at ${instance.price_usd_per_h:.2f}/h ({command.reason.value})"
        return self._result(command, "resume", "done", None, detail, [instance_id])

    async def _mark_gone(self, instance: KnownInstance, because: str, reason: RemovalReason | None = None) -> None:
        gone = instance.model_copy(
            update={
                "state": InstanceState.GONE,
                "state_since": self.clock.now(),
                "gone_because": because[:300],
                "removal_reason": reason,
            }
        )
        self.known[instance.instance_id] = gone
        await self.store.save_instances([gone])
        await self._publish_instance(gone)

    async def _learn_from_removal(self, instance: KnownInstance, command: StopInstance | DestroyInstance) -> None:
        kind = REMOVAL_INCIDENTS.get(command.reason)
        if kind is None:
            return
        self.history.record(
            Incident(
                at=self.clock.now(),
                kind=kind,
                instance_id=instance.instance_id,
                host_id=instance.host_id,
                machine_id=instance.machine_id,
            )
        )
        await self.store.save_history(self.history)

    # ---- offers for the agent -----------------------------------------------------------------------------
    async def offers(self, query: OfferQuery) -> OfferList:
        """Ranked offers within the configuration (the emergency cap at most); an error means unknown, not none."""
        now = self.clock.now()
        try:
            # read-only, outside the fleet lease: its own copy of the history, never the operations' one
            history = await self.store.load_history()
            cap = query.max_price_usd_per_h or self.settings.emergency_max_price_usd_per_h
            constraints = self.constraints.narrowed_to(query.gpu_models, cap)
            ranked = await self._ranked_offers(constraints, history) if constraints.allowed_gpu_models else []
        except VastError as error:
            return OfferList(occurred_at=now, source=SOURCE, error=str(error)[:1000])
        lines = [
            OfferLine(
                offer_id=r.offer.id,
                gpu_model=r.offer.gpu_name,
                num_gpus=r.offer.num_gpus,
                price_usd_per_h=r.offer.dph_total,
                reliability=r.offer.reliability_score,
                expected_usd_per_task=r.expected_usd_per_task,
                host_id=r.offer.host_id,
                machine_id=r.offer.machine_id,
                geolocation=r.offer.geolocation,
            )
            for r in ranked[: query.limit]
        ]
        return OfferList(occurred_at=now, source=SOURCE, offers=lines)

    async def charges(self, query: ChargesQuery) -> ChargeList:
        """What vast.ai charged since the query's day; an error means unknown, never $0."""
        now = self.clock.now()
        since_s = datetime.combine(query.since, time(0), tzinfo=UTC).timestamp()
        try:
            rows = await self.client.list_charges(since_s)
        except VastError as error:
            return ChargeList(occurred_at=now, source=SOURCE, error=str(error)[:1000])
        return ChargeList(occurred_at=now, source=SOURCE, lines=charge_lines(rows, self.known))

    # ---- learning -----------------------------------------------------------------------------------------
    async def learn_bench(self, result: BenchResult) -> None:
        """A failed bench penalises the machine and its host; any verdict leaves a measured throughput ratio."""
        if result.instance_id is None:
            return
        async with self._exclusive():
            instance = self.known.get(result.instance_id)
            if instance is None:
                return
            history = self.history
            now = self.clock.now()
            if result.verdict == "fail":
                history.record(
                    Incident(
                        at=now,
                        kind=IncidentKind.BENCH_FAILED,
                        instance_id=instance.instance_id,
                        host_id=instance.host_id,
                        machine_id=instance.machine_id,
                    )
                )
            reference = gpu_models.reference_tasks_per_h(instance.gpu_model or result.gpu_model)
            ratio = bench_ratio(result.ratios_to_reference, result.metrics, reference)
            if ratio is not None and instance.machine_id is not None and result.verdict != "fail":
                history.record_measure(instance.machine_id, ratio, now)
            history.forget_old(now)
            await self.store.save_history(history)

    async def learn_production(self, snapshot: FleetSnapshot) -> None:
        """What each producing machine did for us: the measure ranking prefers to any benchmark its host ran."""
        ratios = production_ratios(snapshot.instances)
        if not ratios:
            return
        async with self._exclusive():
            for machine_id, ratio in ratios.items():
                self.history.record_task_throughput(machine_id, ratio, snapshot.occurred_at)
            await self.store.save_history(self.history)

    async def learn_demand(self, signal: DemandSignal) -> None:
        observed = {k: v for k, v in signal.throughput_by_gpu_model_tasks_per_h.items() if v > 0}
        if observed:
            await self.store.save_observed_throughput(observed)
            self.knowledge = ThroughputKnowledge({**self.knowledge.observed_tasks_per_h_by_model, **observed})

    # ---- events -------------------------------------------------------------------------------------------
    def _still_unpublished(self, publishing: list[KnownInstance]) -> list[KnownInstance]:
        """Known instances whose last observation never reached NATS, in their current state."""
        ids = {instance.instance_id for instance in publishing}
        return [self.known[i] for i in sorted(self._unpublished) if i in self.known and i not in ids]

    async def _publish_instance(self, instance: KnownInstance) -> None:
        # Saved first, published second: fleet learns of an instance only from these events, so one the broker
        # never acknowledged (NATS restarting, a cluster without quorum) is sent again after the next list, or
        # fleet would never hear of a machine vast.ai bills for (found by the fault suite's cluster test).
        self._unpublished.add(instance.instance_id)
        await self.publisher.instance(
            InstanceObserved(
                occurred_at=self.clock.now(),
                source=SOURCE,
                instance_id=instance.instance_id,
                state=instance.state,
                failure_reason=instance.failure_reason,
                idempotency_key=instance.idempotency_key,
                label=instance.label,
                gpu_model=instance.gpu_model,
                num_gpus=max(1, instance.num_gpus),
                price_usd_per_h=instance.price_usd_per_h,
                storage_usd_per_h=instance.storage_usd_per_h,
                park_reason=instance.park_reason,
                host_id=instance.host_id,
                machine_id=instance.machine_id,
                offer_id=instance.offer_id,
                vast_actual_status=instance.vast_actual_status,
                vast_intended_status=instance.vast_intended_status,
                vast_status_msg=(instance.vast_status_msg or "")[:1000] or None,
                adopted=instance.adopted,
                interruptible=bool(instance.is_bid),
                gone_because=instance.gone_because if instance.state is InstanceState.GONE else None,
                removal_reason=instance.removal_reason if instance.state is InstanceState.GONE else None,
            )
        )
        self._unpublished.discard(instance.instance_id)

    def _expiry_refusal(self, command: Command, verb: Verb) -> ProvisionResult | None:
        """A command taken after its expires_at was decided on inputs that no longer hold (a backlog queued
        through a provisioner outage): refused, counted, and its result kept like any other."""
        now = self.clock.now()
        if not command.expired(now):
            return None
        self.metrics.commands_expired.labels(verb).inc()
        return self._result(
            command, verb, "refused", RefusalRule.EXPIRED,
            f"expired at {command.expires_at:%Y-%m-%d %H:%M:%S} UTC, taken at {now:%Y-%m-%d %H:%M:%S} UTC",
        )  # fmt: skip

    async def _fence_refusal(self, command: Command, verb: Verb) -> ProvisionResult | None:
        """A decider's command older than the newest token seen was sent by a holder that had lost the lock.

        The decider checks its lock before each publish; this closes the gap between that check and the
        publish. Commands without a token (an operator's, a script's) are not fenced.
        """
        token = command.fencing_token
        if token is None:
            return None
        newest = await self.store.admit_fencing_token(token)
        if token >= newest:
            return None
        return self._result(
            command, verb, "refused", RefusalRule.STALE_FENCING_TOKEN,
            f"fencing token {token} is older than {newest}: its decider no longer held the lock",
        )  # fmt: skip

    def _result(
        self,
        command: Command,
        verb: Verb,
        outcome: Literal["done", "refused", "failed"],
        rule: RefusalRule | None,
        detail: str,
        instance_ids: list[int] | None = None,
    ) -> ProvisionResult:
        if outcome != "done":
            log.warning("%s %s %s (%s): %s", verb, command.idempotency_key, outcome, rule, detail)
        return ProvisionResult(
            occurred_at=self.clock.now(),
            source=SOURCE,
            idempotency_key=command.idempotency_key,
            command=verb,
            outcome=outcome,
            refusal_rule=rule,
            detail=detail[:1000],
            instance_ids=instance_ids or [],
        )
