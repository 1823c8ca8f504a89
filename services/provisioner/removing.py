"""Stop, destroy and resume: what vast.ai says of each, the host's record of why a machine went, and gone
published with what removed it."""

from __future__ import annotations

from typing import Literal

from services.provisioner import budget
from services.provisioner.host_history import (
    REMOVAL_INCIDENTS,
    Incident,
)
from services.provisioner.reconcile import (
    KnownInstance,
)
from services.provisioner.reconciling import Reconciling
from services.provisioner.state import (
    Heartbeat,
    no_heartbeat,
)
from services.provisioner.vast_client import (
    InstanceNotFound,
    VastError,
)
from shared.contract import (
    DestroyInstance,
    InstanceState,
    ParkReason,
    ProvisionResult,
    RefusalRule,
    RemovalReason,
    ResumeInstance,
    StopInstance,
)


class Removing(Reconciling):
    async def stop(self, command: StopInstance, heartbeat: Heartbeat = no_heartbeat) -> ProvisionResult:
        return await self._remove(command, "stop", heartbeat)

    async def destroy(self, command: DestroyInstance, heartbeat: Heartbeat = no_heartbeat) -> ProvisionResult:
        return await self._remove(command, "destroy", heartbeat)

    async def _remove(
        self, command: StopInstance | DestroyInstance, verb: Literal["stop", "destroy"], heartbeat: Heartbeat
    ) -> ProvisionResult:
        return await self._once(command, verb, heartbeat, lambda: self._remove_unlocked(command, verb, heartbeat))

    async def _remove_unlocked(
        self, command: StopInstance | DestroyInstance, verb: Literal["stop", "destroy"], heartbeat: Heartbeat
    ) -> ProvisionResult:
        instance_id = command.instance_id
        # not known: it may carry our label and be adopted by a fresh list
        if instance_id not in self.known and (unlisted := await self._refreshed(command, verb, heartbeat)):
            return unlisted
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
        except VastError as error:
            return self._failure(command, verb, error, instance_ids=[instance_id])
        await self._learn_from_removal(instance, command)
        if verb == "destroy":
            by = f"destroyed ({command.reason.value}) by {command.requested_by}, key {command.idempotency_key}"
            await self._mark_gone(instance, by, command.reason)
            return self._result(command, verb, "done", None, f"{verb} sent", [instance_id])
        parking = command.reason is RemovalReason.PARK
        # parked: kept with its disk to be started again; any other stop winds it down until destroyed (a failed
        # machine stays failed: the lifecycle takes it nowhere but gone)
        if parking:
            stopped = self._moved(instance, InstanceState.PARKED, {"park_reason": ParkReason.STOPPED})
        else:
            stopped = self._moved(instance, InstanceState.DRAINING, {"park_reason": None})
        stopped = stopped.model_copy(update={"stop_reason": command.reason, "vast_intended_status": "stopped"})
        await self._remember(stopped)
        detail = "stop sent: parked, its disk kept (storage billed only)" if parking else "stop sent"
        return self._result(command, verb, "done", None, detail, [instance_id])

    async def resume(self, command: ResumeInstance, heartbeat: Heartbeat = no_heartbeat) -> ProvisionResult:
        """Start a parked instance again (vast start), budgeted like a launch at its full price."""
        return await self._once(command, "resume", heartbeat, lambda: self._resume(command, heartbeat))

    async def _resume(self, command: ResumeInstance, heartbeat: Heartbeat) -> ProvisionResult:
        instance_id = command.instance_id
        # the budget is checked against the fleet as vast lists it now, as for a launch
        if (unlisted := await self._refreshed(command, "resume", heartbeat)) is not None:
            return unlisted
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
        except VastError as error:
            return self._failure(command, "resume", error, instance_ids=[instance_id])
        resuming = self._moved(instance, InstanceState.RESUMING, {"park_reason": None, "stop_reason": None})
        resuming = resuming.model_copy(update={"vast_intended_status": "running"})
        await self._remember(resuming)
        detail = f"start sent: resuming at ${instance.price_usd_per_h:.2f}/h ({command.reason.value})"
        return self._result(command, "resume", "done", None, detail, [instance_id])

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
