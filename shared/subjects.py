"""Every NATS subject name FleetPilot uses, built from one configurable prefix (default `fp`)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.contract import InstanceState, TaskEventKind, TriggerPriority, TriggerReason

ProvisionVerb = str  # "launch" | "stop" | "destroy" | "resume"
PROVISION_VERBS = ("launch", "stop", "destroy", "resume")


@dataclass(frozen=True)
class Subjects:
    prefix: str = "fp"

    # demand
    def task(self, kind: TaskEventKind) -> str:
        return f"{self.prefix}.demand.task.{kind}"

    @property
    def tasks_all(self) -> str:
        return f"{self.prefix}.demand.task.*"

    @property
    def queue(self) -> str:
        return f"{self.prefix}.demand.queue"

    @property
    def demand_signal(self) -> str:
        return f"{self.prefix}.demand.signal"

    # provisioner → fleet
    def provision_instance(self, state: InstanceState) -> str:
        return f"{self.prefix}.provision.instance.{state.value}"

    @property
    def provision_instance_all(self) -> str:
        return f"{self.prefix}.provision.instance.*"

    @property
    def provision_result(self) -> str:
        return f"{self.prefix}.provision.result"

    @property
    def provision_account(self) -> str:
        """The vast.ai account beyond FleetPilot's instances (foreign ones), kept as a last value in JetStream."""
        return f"{self.prefix}.provision.account"

    @property
    def provision_offers(self) -> str:
        """Request/reply (core NATS): ranked offers from the provisioner."""
        return f"{self.prefix}.provision.offers"

    @property
    def provision_charges(self) -> str:
        """Request/reply (core NATS): what vast.ai charged the account, per instance, kind and day."""
        return f"{self.prefix}.provision.charges"

    # fleet
    def fleet_instance(self, state: InstanceState) -> str:
        return f"{self.prefix}.fleet.instance.{state.value}"

    @property
    def fleet_instance_all(self) -> str:
        return f"{self.prefix}.fleet.instance.*"

    @property
    def fleet_snapshot(self) -> str:
        """Request/reply (core NATS): ask fleet for its current view."""
        return f"{self.prefix}.fleet.snapshot"

    @property
    def fleet_snapshot_published(self) -> str:
        """The periodic snapshot, kept as a last value in JetStream."""
        return f"{self.prefix}.fleet.snapshot.latest"

    # decider
    @property
    def decider_directives(self) -> str:
        """Request/reply (core NATS): list, add or revoke an operator's directives (reply: DirectiveList or
        DirectiveAnswer)."""
        return f"{self.prefix}.decider.directives"

    # decider triggers
    def trigger(self, priority: TriggerPriority, reason: TriggerReason) -> str:
        return f"{self.prefix}.trigger.{priority}.{reason.value}"

    def triggers_of(self, priority: TriggerPriority) -> str:
        return f"{self.prefix}.trigger.{priority}.*"

    # provisioner commands
    def provision_command(self, verb: ProvisionVerb) -> str:
        if verb not in PROVISION_VERBS:
            raise ValueError(f"unknown provision verb {verb!r}; expected one of {PROVISION_VERBS}")
        return f"{self.prefix}.cmd.provision.{verb}"

    @property
    def provision_commands_all(self) -> str:
        return f"{self.prefix}.cmd.provision.*"

    # fleet commands (from the decider)
    @property
    def fleet_drain(self) -> str:
        return f"{self.prefix}.cmd.fleet.drain"

    # bench
    @property
    def bench_request(self) -> str:
        return f"{self.prefix}.bench.request"

    @property
    def bench_result(self) -> str:
        return f"{self.prefix}.bench.result"

    # operator
    @property
    def operator_message(self) -> str:
        return f"{self.prefix}.operator.message"

    @property
    def operator_reply(self) -> str:
        return f"{self.prefix}.operator.reply"

    # audit and dead letters
    @property
    def decision_audit(self) -> str:
        return f"{self.prefix}.decision.audit"

    def dead_letter(self, service: str) -> str:
        return f"{self.prefix}.dlq.{service}"

    @property
    def dead_letters_all(self) -> str:
        return f"{self.prefix}.dlq.*"
