"""The simulator fixture (see harness.py)."""

from tests.sim_vast.harness import start_vast

__all__ = ["start_vast"]
