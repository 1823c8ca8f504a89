"""The provisioner's operations against vast.ai: launch, stop, destroy, resume, reconcile, offer look-ups,
learning.

Each operation loads state, asks the pure cores (ranking, budget, reconcile, host history) what to do, calls
vast.ai through the client, saves, and publishes. Operations that change the fleet run one at a time: an
asyncio lock in this process and a lease in Redis across replicas, so two budget checks never overlap. The
seams are modules: state.py (what every operation shares), reconciling.py, launching.py, removing.py,
learning.py.
"""

from __future__ import annotations

from services.provisioner.errors import FleetUnknown
from services.provisioner.launching import Launching
from services.provisioner.learning import Learning
from services.provisioner.removing import Removing
from services.provisioner.state import Publisher

__all__ = ["FleetUnknown", "Provisioner", "Publisher"]


class Provisioner(Launching, Removing, Learning):
    """Every operation, on one shared state (services/provisioner/state.py)."""
