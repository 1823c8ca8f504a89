"""The provisioner's log line for each carried-out launch, stop, destroy and resume: which instances, at what
price and why, so the log alone says what was rented and removed (the results on the bus say it to services)."""

from __future__ import annotations

from collections.abc import Mapping

from services.provisioner.reconcile import KnownInstance
from shared.contract import LaunchInstances, ProvisionCommand, ProvisionResult


def instance_phrase(instance_id: int, known: Mapping[int, KnownInstance]) -> str:
    record = known.get(instance_id)
    if record is None:
        return f"instance {instance_id} (price unknown)"
    model = f"{record.gpu_model}, " if record.gpu_model else ""
    return f"instance {instance_id} ({model}${record.price_usd_per_h:.3f}/h)"


def outcome_line(command: ProvisionCommand, result: ProvisionResult, known: Mapping[int, KnownInstance]) -> str:
    """`launch done: instance 7 (RTX 4090, $0.450/h); reason backlog, requested by policy [launch-ab12]: ...`"""
    instances = "; ".join(instance_phrase(instance_id, known) for instance_id in result.instance_ids) or "no instance"
    reason = getattr(command, "reason", None)
    why = f"reason {reason}" if reason is not None else "no reason given"
    if isinstance(command, LaunchInstances):
        why += f", {command.launch_priority}"
    return (
        f"{result.command} {result.outcome}: {instances}; {why}, requested by {command.requested_by} "
        f"[{command.idempotency_key}]: {result.detail}"
    )
