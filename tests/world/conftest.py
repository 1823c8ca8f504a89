"""Small worlds for the simulator's tests: quiet scenarios, short traces."""

from __future__ import annotations

from sim.vast.scenario import Scenario


def quiet_scenario(**overrides: object) -> Scenario:
    """Healthy machines, 1-2 h startups, a market of 30 RTX 4090s at exactly $0.50/h."""
    base: dict[str, object] = {
        "market": [{"gpu_model": "RTX 4090", "count": 30, "price_usd_per_h": {"min": 0.5, "max": 0.5}}],
        "startup": {"startup_s": {"min": 3600, "max": 7200}},
    }
    base.update(overrides)
    return Scenario.quiet(**base)


def timing(key: str) -> bool:
    """Keys of an evaluation that measure this machine's speed, not the run: excluded when comparing runs."""
    return "_ms_" in key or key.endswith(("wall_s", "cpu_s"))
