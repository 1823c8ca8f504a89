"""Launch: offers ranked, the budget and the day's cap checked per rent, each machine created with its label,
bid and benchmark token, and adopted by label after an ambiguous create and a settle wait."""

from __future__ import annotations

from typing import Any

from services.bench.tokens import REPORT_TOKEN_ENV, instance_report_token
from services.provisioner import budget
from services.provisioner.budget import Commitment, Refusal
from services.provisioner.errors import FleetUnknown
from services.provisioner.ranking import (
    RankedOffer,
)
from services.provisioner.reconcile import (
    KnownInstance,
    from_vast,
    launch_label,
    parse_label,
)
from services.provisioner.reconciling import Reconciling
from services.provisioner.state import (
    Heartbeat,
    log,
    no_heartbeat,
)
from services.provisioner.vast_client import (
    AmbiguousCreate,
    BidTooLow,
    OfferGone,
    VastAuthError,
    VastError,
)
from services.provisioner.vast_models import VastInstance
from shared.contract import (
    InstanceState,
    LaunchInstances,
    ProvisionResult,
    RefusalRule,
    bid_usd_per_h,
)

# a bid is sent to the micro-dollar an hour; one that rounds to nothing there is no bid
BID_DECIMALS = 6
# a settle wait is cut into steps this long, each telling JetStream and the fleet lease that the launch goes on
SETTLE_HEARTBEAT_S = 10.0


class Launching(Reconciling):
    async def launch(self, command: LaunchInstances, heartbeat: Heartbeat = no_heartbeat) -> ProvisionResult:
        return await self._once(command, "launch", heartbeat, lambda: self._launch(command, heartbeat))

    async def _launch(self, command: LaunchInstances, heartbeat: Heartbeat) -> ProvisionResult:
        key = command.idempotency_key
        if (unlisted := await self._refreshed(command, "launch", heartbeat)) is not None:
            return unlisted

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
        constraints = self.constraints.narrowed_to(
            command.gpu_models,
            cap,
            excluded_gpu_models=command.exclude_gpu_models,
            excluded_host_ids=command.exclude_host_ids,
        )
        if not constraints.allowed_gpu_models:
            asked = f"{command.gpu_models or 'the allowed models'}" + (
                f" less the excluded {command.exclude_gpu_models}" if command.exclude_gpu_models else ""
            )
            return self._result(
                command, "launch", "refused", RefusalRule.NO_OFFER, f"none of {asked} is an allowed model"
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
            return self._failure(command, "launch", error)
        except VastError as error:
            return self._failure(command, "launch", error, f"offer search failed: {error}")
        ranked, dear_pulls = self._split_by_pull(ranked)
        if dear_pulls and not ranked and (over_day := self._day_refusal(dear_pulls[:1])):
            # every offer is out for its own pull: the day's cap is why nothing can be rented, and is said so
            return self._result(command, "launch", "refused", over_day.rule, over_day.detail, done_ids)

        # fewer acceptable offers than asked: rent those there are, as an autoscaler fills what the market holds
        # (refused whole, a busy morning's launch of 21 rented nothing for its 15 offers, and the queue grew for
        # an hour); the budget and the instance cap still refuse a launch whole
        wanted = len(missing)
        if 0 < len(ranked) < wanted:
            missing = missing[: len(ranked)]
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
                return self._failure(command, "launch", error, instance_ids=done_ids + created)
            except (VastError, FleetUnknown) as error:
                # an ambiguous create that cannot be checked is a failure too: something may have been rented
                detail = f"launched {len(created)} of {len(missing)}: {error}"
                return self._result(command, "launch", "failed", RefusalRule.VAST_ERROR, detail, done_ids + created)
            if instance is None:
                detail = f"launched {len(created)} of {len(missing)}: no offer left within the budget and constraints"
                return self._result(command, "launch", "failed", RefusalRule.NO_OFFER, detail, done_ids + created)
            created.append(instance.instance_id)
            commitment = commitment.plus(self.limits.reserved_usd_per_h(instance.price_usd_per_h))
        if len(missing) < wanted:
            detail = f"launched {len(created)} of {wanted}: {len(ranked)} acceptable offers for {wanted} instances"
            if dear_pulls:
                detail += f" ({len(dear_pulls)} more left out: each one's image pull alone would pass today's cap)"
            return self._result(command, "launch", "failed", RefusalRule.NO_OFFER, detail, sorted(done_ids + created))
        return self._result(command, "launch", "done", None, f"launched {len(created)}", sorted(done_ids + created))

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
                log.warning(
                    "create for %s is ambiguous (%s); looking for its label in %gs before retrying",
                    label, error, self.config.ambiguous_settle_s,
                )  # fmt: skip
                await self._settle(heartbeat)
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

    async def _settle(self, heartbeat: Heartbeat) -> None:
        """Wait out a create that may still be acting at vast.ai (a timeout is the client giving up, not vast; a
        proxy's 5xx can precede the origin's answer), the command kept alive meanwhile: a look-up made at once
        missed such an instance, and the slot was rented twice."""
        remaining = self.config.ambiguous_settle_s
        while remaining > 0:
            await self._keep_alive(heartbeat)
            step = min(remaining, SETTLE_HEARTBEAT_S)
            await self.clock.sleep(step)
            remaining -= step
        await self._keep_alive(heartbeat)

    def _split_by_pull(self, ranked: list[RankedOffer]) -> tuple[list[RankedOffer], list[RankedOffer]]:
        """(the offers a launch may rent, those whose one-off image pull alone puts today's spend over the cap):
        such an offer is left out, the launch rents the others (budget.pull_breaks_the_day)."""
        commitment, now = self.commitment(), self.clock.now()
        kept: list[RankedOffer] = []
        dear_pulls: list[RankedOffer] = []
        for offer in ranked:
            if budget.pull_breaks_the_day(self.limits, self.day_spend, commitment, offer, now):
                log.warning(
                    "offer %s left out: its image pull ($%.2f at the host's $%s/GB) alone would put today's spend "
                    "over the daily cap $%.2f",
                    offer.offer.id, offer.pull_cost_usd, offer.offer.inet_down_cost, self.limits.daily_cap_usd,
                )  # fmt: skip
                dear_pulls.append(offer)
            else:
                kept.append(offer)
        return kept, dear_pulls

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
        refused or silently too high).

        A bid that rounds to nothing (a min_bid of 1e-7 $/h) is a floor vast does not mean either: the slot is
        rented on-demand, as for a min_bid of zero, rather than the offer skipped. The offer passed ranking and
        the budget at its on-demand price, which is what the slot is budgeted at, and a bid of $0 is no request
        vast takes (the client refuses to send it)."""
        min_bid = choice.offer.min_bid
        if index >= command.interruptible or min_bid is None or min_bid <= 0:
            return None
        bid = round(bid_usd_per_h(min_bid, choice.offer.dph_total, command.bid_markup), BID_DECIMALS)
        return bid if bid > 0 else None

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
