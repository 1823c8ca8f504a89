"""Target tracking tuned per trace with hindsight: the best any fixed-rule autoscaler of its kind could have done.

Each trace is replayed under target tracking (`target_tracking.py`) for every point of a small grid of its three
knobs a user would tune: the utilisation target, the time the backlog is spread over (drain time) and the
scale-in delay (HPA's stabilisation window and KEDA's cooldown, set together); the best objective is kept. The
choice reads the whole trace's outcome, so this is a reference, not a runnable baseline: no user could pick the
knobs before the trace happened. It splits FleetPilot's gap to the clairvoyant bound as the handbook's
online-scaling notes do: hindsight-best rule ÷ bound (what knowing the future is worth) and FleetPilot ÷
hindsight-best rule (the gap a better rule could close).

The grid spans the knobs' usual ranges (HPA and KEDA users pick targets of 60-95%; drain times and delays from
minutes to an hour), two values each, and target tracking's own defaults, so the reference is never worse
than the `target-tracking` baseline.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from sim.world.policies.target_tracking import TargetTrackingConfig, TargetTrackingPolicy

NAME = "target-tracking-hindsight"
UTILISATION_TARGETS = (0.7, 0.9)
BACKLOG_DRAIN_S = (1800.0, 7200.0)
SCALE_IN_DELAY_S = (300.0, 3600.0)


def grid() -> list[TargetTrackingConfig]:
    """Target tracking's defaults first, then every combination of the knobs' values."""
    default = TargetTrackingConfig()
    configs = [default]
    for utilisation, drain_s, delay_s in itertools.product(UTILISATION_TARGETS, BACKLOG_DRAIN_S, SCALE_IN_DELAY_S):
        config = replace(
            default,
            target_utilisation=utilisation,
            backlog_drain_s=drain_s,
            scale_down_stabilisation_s=delay_s,
            scale_down_cooldown_s=delay_s,
        )
        if config not in configs:
            configs.append(config)
    return configs


def knobs(config: TargetTrackingConfig) -> dict[str, float]:
    """The grid point as the benchmark reports it."""
    return {
        "target_utilisation": config.target_utilisation,
        "backlog_drain_s": config.backlog_drain_s,
        "scale_in_delay_s": config.scale_down_stabilisation_s,
    }


class TargetTrackingGridPoint(TargetTrackingPolicy):
    """One point of the grid, named as the reference so its run is reported under it."""

    name = NAME
