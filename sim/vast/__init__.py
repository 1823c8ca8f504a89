"""A faithful vast.ai stand-in: the REST API over HTTP, a market, machines that start slowly or fail, a ledger."""

from sim.vast.scenario import Endpoint, Fate, Scenario
from sim.vast.server import ScriptedFault, VastSimulator

__all__ = ["Endpoint", "Fate", "Scenario", "ScriptedFault", "VastSimulator"]
