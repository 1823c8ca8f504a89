"""One line per instance, for people and the agent: `#33032712 RTX 4090 producing $0.50/h 2.3h up 118 tasks/h`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.fleet.lifecycle import EXPECTED_VAST_STATUS

if TYPE_CHECKING:
    from services.fleet.core import InstanceRecord


def format_line(record: InstanceRecord, now_s: float, throughput_tasks_per_h: float | None) -> str:
    """State (with its failure reason), vast's raw status only where it says something else, price, uptime
    since the rent (vast bills from creation) and the measured throughput once there is one."""
    gpu = record.gpu_model or "unknown GPU"
    if record.num_gpus > 1:
        gpu = f"{record.num_gpus}x {gpu}"
    state = record.state.value
    if record.failure_reason is not None:
        state += f"({record.failure_reason.value})"
    parts = [f"#{record.instance_id}", gpu, state]
    if record.vast_status is not None and record.vast_status not in EXPECTED_VAST_STATUS[record.state]:
        parts.append(f"[vast: {record.vast_status}]")
    parts.append(f"${record.price_usd_per_h:.2f}/h")
    parts.append(f"{max(0.0, now_s - record.created_at_s) / 3600:.1f}h up")
    if throughput_tasks_per_h is not None:
        parts.append(f"{throughput_tasks_per_h:.0f} tasks/h")
    return " ".join(parts)
