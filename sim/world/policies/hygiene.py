"""What every baseline does besides scaling, so comparisons isolate the scaling rule: give back broken machines.

FleetPilot's fleet service detects these by itself; giving the baselines the same rules keeps them from losing
on bookkeeping rather than on when they scale.
"""

from __future__ import annotations

from sim.world.model import MachineState, Remove, WorldView

# services/fleet's default: a machine still loading after 3 h is stuck
STUCK_LOADING_S = 3 * 3600.0


def broken_machines(view: WorldView, stuck_after_s: float = STUCK_LOADING_S) -> list[Remove]:
    removals = []
    for machine in view.machines:
        if machine.state in (MachineState.EXITED, MachineState.OFFLINE):
            removals.append(Remove(machine.instance_id, "destroy", "failed"))
        elif machine.state is MachineState.LOADING and view.now_s - machine.created_s >= stuck_after_s:
            removals.append(Remove(machine.instance_id, "destroy", "stuck_loading"))
    return removals
