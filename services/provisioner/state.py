"""The provisioner's state and the steps every operation shares: what is known of the fleet and the account,
the budget's view of it, one fleet-changing operation at a time (an asyncio lock here, a lease in Redis across
replicas), the offers ranked for a launch, and how an operation saves, publishes and answers.

The operations themselves are in reconciling.py, launching.py, removing.py and learning.py; operations.py
puts them together as the Provisioner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from services.provisioner import budget
from services.provisioner.budget import BudgetLimits, Commitment, DaySpend
from services.provisioner.errors import LeaseLost, answer_for
from services.provisioner.host_history import (
    HostHistory,
)
from services.provisioner.metrics import ProvisionerMetrics
from services.provisioner.ranking import (
    URGENT_HORIZON_H,
    OfferConstraints,
    RankedOffer,
    StartupModel,
    ThroughputKnowledge,
    pull_past_meaning,
    rank,
    search_query,
)
from services.provisioner.reconcile import (
    KnownInstance,
    vast_status_label,
)
from services.provisioner.settings import ProvisionerSettings
from services.provisioner.store import ProvisionerStore
from services.provisioner.vast_client import (
    VastClient,
)
from shared.clock import Clock
from shared.contract import (
    DestroyInstance,
    InstanceObserved,
    InstanceState,
    LaunchInstances,
    ProvisionResult,
    RefusalRule,
    RemovalReason,
    ResumeInstance,
    StopInstance,
    VastAccountObserved,
)
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


async def no_heartbeat() -> None:
    return None


class Publisher(Protocol):
    async def instance(self, event: InstanceObserved) -> None: ...

    async def result(self, event: ProvisionResult) -> None: ...

    async def account(self, event: VastAccountObserved) -> None: ...


@dataclass
class ProvisionerState:
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
        # normalised GPU model → mean GPUs of its producing machines, from fleet's latest snapshot; None before one
        self.producer_gpus: dict[str, float] | None = None
        self.day_spend = DaySpend.starting(self.clock.now())
        self.fleet_known = False  # true only right after a successful list
        # instances whose latest observation NATS has not acknowledged: published again after the next list
        self._unpublished: set[int] = set()
        self._foreign_ids: set[int] = set()
        # the fleet lease a command holds (`_exclusive`), and whether it lapsed under it
        self._lease_token = ""
        self._lease_lost = False

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
            gpus_per_machine=self.settings.gpus_per_machine,
        )

    def commitment(self) -> Commitment:
        return budget.commitment_of((i.committed_usd_per_h, i.state) for i in self.known.values())

    @contextlib.asynccontextmanager
    async def _exclusive(self, heartbeat: Heartbeat = no_heartbeat) -> AsyncIterator[None]:
        """One fleet-changing operation at a time, here and across replicas; state reloaded from Redis inside."""
        async with self._acting:
            token = await self.store.try_lease(FLEET_LEASE, self.config.lease_ttl_s)
            while token is None:
                await heartbeat()  # waiting for another replica is progress too: no redelivery meanwhile
                await self.clock.sleep(self.config.lease_poll_s)
                token = await self.store.try_lease(FLEET_LEASE, self.config.lease_ttl_s)
            self._lease_token, self._lease_lost = token, False
            renewing = asyncio.create_task(self._renew_while_held(token), name="provisioner-fleet-lease")
            try:
                await self._load()
                yield
            finally:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing
                await self.store.release_lease(FLEET_LEASE, token)

    async def _renew_while_held(self, token: str) -> None:
        """Renews the lease every third of its life while a command holds it. A vast.ai call with its retries
        (5 × 30 s and the waits between) outlasts the 120 s lease, and renewing only between steps let a second
        replica take the fleet mid-create. Wall time, as Redis expires the lease in wall time."""
        while True:
            await asyncio.sleep(self.config.lease_ttl_s / 3)
            try:
                renewed = await self.store.renew_lease(FLEET_LEASE, token, self.config.lease_ttl_s)
            except Exception:  # Redis away: the lease may still stand; the next step's keep-alive finds out
                log.warning("the fleet lease could not be renewed (Redis?); trying again", exc_info=True)
                continue
            if not renewed:
                self._lease_lost = True
                return

    async def _keep_alive(self, heartbeat: Heartbeat) -> None:
        """Before each slow step: tell JetStream the command is in progress, and stop if the lease lapsed."""
        await heartbeat()
        ttl_s = self.config.lease_ttl_s
        if self._lease_lost or not await self.store.renew_lease(FLEET_LEASE, self._lease_token, ttl_s):
            self._lease_lost = True
            raise LeaseLost(
                f"the fleet lease lapsed mid-command (FLEETPILOT_PROVISIONER_LEASE_TTL_S={ttl_s:g}): "
                "another replica may be changing the fleet; stopped before the next step, the command is retried"
            )

    async def _load(self) -> None:
        self.known = await self.store.load_instances()
        self.history = await self.store.load_history()
        self.day_spend = await self.store.load_day_spend() or DaySpend.starting(self.clock.now())
        observed = await self.store.load_observed_throughput()
        if observed:
            self.knowledge = ThroughputKnowledge(observed)

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

    def _update_gauges(self) -> None:
        self.metrics.spend.set(self.commitment().usd_per_h)
        counts: dict[str, int] = {}
        for instance in self.known.values():
            if instance.state is not InstanceState.GONE:
                label = vast_status_label(instance.vast_actual_status)
                counts[label] = counts.get(label, 0) + 1
        self.metrics.set_instances_by_status(counts)

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
        if past_meaning := [offer.id for offer in offers if pull_past_meaning(offer, startup)]:
            log.warning(
                "vast.ai search: skipped %d offers whose image pull at the host's bandwidth price is no finite "
                "number of dollars (offers %s)",
                len(past_meaning), past_meaning[:10],
            )  # fmt: skip
            self.metrics.vast.rows_skipped.labels("search").inc(len(past_meaning))
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

    async def _remember(self, instance: KnownInstance) -> None:
        self.known[instance.instance_id] = instance
        await self.store.save_instances([instance])
        await self._publish_instance(instance)

    def _moved(
        self, instance: KnownInstance, observed: InstanceState, update: dict[str, object] | None = None
    ) -> KnownInstance:
        """`instance` moved by our own command as the lifecycle allows (KnownInstance.moved), a refusal counted."""
        moved = instance.moved(observed, self.clock.now(), update or {})
        if moved.state is not observed:
            self._refused(instance.instance_id, instance.state, observed)
        return moved

    def _refused(self, instance_id: int, state: InstanceState, observed: InstanceState) -> None:
        self.metrics.refused_moves.inc()
        log.info(
            "instance %s: %s -> %s is no move of the lifecycle (shared/lifecycle.py): kept %s",
            instance_id, state.value, observed.value, state.value,
        )  # fmt: skip

    async def _mark_gone(self, instance: KnownInstance, because: str, reason: RemovalReason | None = None) -> None:
        gone = self._moved(instance, InstanceState.GONE, {"gone_because": because[:300], "removal_reason": reason})
        self.known[instance.instance_id] = gone
        await self.store.save_instances([gone])
        await self._publish_instance(gone)

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

    def _failure(
        self,
        command: Command,
        verb: Verb,
        error: Exception,
        detail: str | None = None,
        instance_ids: list[int] | None = None,
    ) -> ProvisionResult:
        """The answer to a failed call, by the one error table (services/provisioner/errors.py)."""
        outcome, rule = answer_for(error)
        return self._result(command, verb, outcome, rule, detail if detail is not None else str(error), instance_ids)
