"""Policies for tests: one that follows a script, one that does nothing, one that acts at random."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from sim.world.model import Action, Launch, MachineState, Remove, WorldView


class Scripted:
    """Calls `script(view)` at every decision and keeps the views (machines in them are live, not copies)."""

    name = "scripted"

    def __init__(self, script: Callable[[WorldView], Sequence[Action]], decision_interval_s: float = 60.0) -> None:
        self.script = script
        self.decision_interval_s = decision_interval_s
        self.views: list[WorldView] = []

    def decide(self, view: WorldView) -> Sequence[Action]:
        self.views.append(view)
        return self.script(view)


class Hold:
    """Keeps whatever fleet it starts with."""

    name = "hold"
    decision_interval_s = 300.0

    def decide(self, view: WorldView) -> Sequence[Action]:
        return []


class RandomPolicy:
    """Launches and removes at random: the clairvoyant bound must hold whatever a policy does."""

    name = "random"

    def __init__(self, seed: int, decision_interval_s: float = 120.0, launch_p: float = 0.3) -> None:
        self.rng = random.Random(seed)
        self.decision_interval_s = decision_interval_s
        self.launch_p = launch_p

    def decide(self, view: WorldView) -> Sequence[Action]:
        actions: list[Action] = []
        if self.rng.random() < self.launch_p:
            actions.append(Launch(self.rng.randint(1, 4)))
        for machine in view.machines:
            if machine.state is not MachineState.GONE and self.rng.random() < 0.05:
                verb = self.rng.choice(["drain", "stop", "destroy"])
                actions.append(Remove(machine.instance_id, verb))  # type: ignore[arg-type]
        return actions
