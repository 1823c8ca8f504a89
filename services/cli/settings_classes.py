"""Every settings class of FleetPilot, by module: `fleetpilot config` lists them, and bad settings are described
by the variable a person sets (services/cli/errors.py)."""

from __future__ import annotations

import importlib

from pydantic_settings import BaseSettings

SETTINGS_CLASSES = (
    ("shared (every service)", "shared.settings:Settings"),
    ("demand", "services.demand.config:DemandSettings"),
    ("fleet", "services.fleet.config:FleetSettings"),
    ("provisioner", "services.provisioner.settings:ProvisionerSettings"),
    ("decider", "services.decider.config:DeciderSettings"),
    ("agent", "services.decider.agent.config:AgentConfig"),
    ("bench", "services.bench.config:BenchSettings"),
)


def load_class(spec: str) -> type[BaseSettings]:
    module, _, name = spec.partition(":")
    settings_class: type[BaseSettings] = getattr(importlib.import_module(module), name)
    return settings_class
