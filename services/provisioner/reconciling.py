"""Reconciliation: vast.ai's instance list against what is known, startups learned, the account's view
published, destroyed instances vast still lists destroyed again, a launch slot's second rent destroyed, long-gone
ones forgotten."""

from __future__ import annotations

from datetime import datetime

from services.provisioner.errors import FleetUnknown
from services.provisioner.reconcile import (
    KnownInstance,
    reconcile,
    second_rents_of_a_slot,
)
from services.provisioner.state import (
    GONE_KEPT_S,
    SOURCE,
    STARTED,
    STARTING,
    Command,
    Heartbeat,
    ProvisionerState,
    Verb,
    log,
)
from services.provisioner.vast_client import (
    InstanceNotFound,
    VastAuthError,
    VastError,
)
from services.provisioner.vast_models import InstanceListing, VastInstance
from shared.contract import (
    ForeignInstance,
    InstanceState,
    ProvisionResult,
    RemovalReason,
    VastAccountObserved,
)
from shared.contract.account import FOREIGN_INSTANCES_KEPT


class Reconciling(ProvisionerState):
    async def reconcile(self) -> bool:
        """Compare vast's list with what is known; True if the list was read (False: the fleet is unknown)."""
        async with self._exclusive():
            try:
                await self._refresh()
            except (FleetUnknown, VastAuthError):
                return False
            return True

    async def _refreshed(self, command: Command, verb: Verb, heartbeat: Heartbeat) -> ProvisionResult | None:
        """The fleet as vast lists it now, before a command acts on it; the command's answer when the list fails."""
        try:
            await self._keep_alive(heartbeat)
            await self._refresh()
        except FleetUnknown as unknown:
            return self._failure(command, verb, unknown, f"instance list failed: {unknown}")
        except VastAuthError as error:
            return self._failure(command, verb, error)
        return None

    def _list_endpoint(self) -> str:
        return "list_v0" if self.config.instance_list_api == "v0" else "list_v1"

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
        for instance_id, state, observed in outcome.refused:
            self._refused(instance_id, state, observed)
        for instance_id, why in outcome.unreadable:
            log.warning(
                "vast.ai listed instance %s with a row that makes no sense, kept as known: %s", instance_id, why
            )
            self.metrics.vast.rows_skipped.labels(self._list_endpoint()).inc()
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
        await self._destroy_second_rents()
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
            await self._destroyed_unbidden(instance.instance_id, "again")

    async def _destroy_second_rents(self) -> None:
        """A launch slot rented twice (a create that acted after its label look-up had missed it) bills for a
        machine nobody asked for: the second is destroyed at once, whatever made it; a failure is logged and
        tried at the next list."""
        for extra, first in second_rents_of_a_slot(self.known, self.settings.deployment_id):
            because = f"a second instance for launch slot {extra.label}: destroyed, the slot keeps {first.instance_id}"
            log.error("instance %s is %s", extra.instance_id, because)
            if not await self._destroyed_unbidden(extra.instance_id, "a second rent of its slot"):
                continue
            self.metrics.second_rents_destroyed.inc()
            # our own removal of a machine nobody asked for: planned (no P0 for fleet), not a failure
            await self._mark_gone(extra, because, RemovalReason.OVER_PROVISIONED)

    async def _destroyed_unbidden(self, instance_id: int, what: str) -> bool:
        """A destroy reconciliation sends on its own, with no command to answer: True when vast has the instance no
        more (destroyed now, or already gone); a failure is logged and the next list tries again."""
        try:
            await self.client.destroy_instance(instance_id)
        except InstanceNotFound:
            pass
        except VastError as error:
            log.warning("destroying %s (%s) failed: %s", instance_id, what, error)
            return False
        return True

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
