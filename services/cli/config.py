"""`fleetpilot config`: every setting of every service, with its environment variable and default.

The README's configuration reference is this command's output; a test keeps the two in step.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
from pydantic import SecretStr
from pydantic_settings import BaseSettings

# (title, "module:Class"): the settings classes, in the order an operator meets them
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


def describe_default(field: Any) -> str:
    if field.default_factory is not None:
        return "(computed)"
    default = field.default
    if isinstance(default, SecretStr):
        return '""' if not default.get_secret_value() else "(secret)"
    if default is None:
        return "unset"
    if isinstance(default, tuple | list | frozenset | set):
        return ", ".join(str(item) for item in default) or "(empty)"
    return str(default)


def reference_rows() -> list[tuple[str, str, str, str]]:
    """(section, environment variable, default, description) for every setting."""
    rows = []
    for title, spec in SETTINGS_CLASSES:
        settings_class = load_class(spec)
        prefix = str(settings_class.model_config.get("env_prefix", ""))
        for name, field in settings_class.model_fields.items():
            rows.append((title, f"{prefix}{name}".upper(), describe_default(field), field.description or ""))
    return rows


def markdown_reference() -> str:
    lines = []
    section = None
    for title, env, default, description in reference_rows():
        if title != section:
            section = title
            lines += ["", f"#### {title}", "", "| variable | default | meaning |", "|---|---|---|"]
        lines.append(f"| `{env}` | `{default}` | {description} |")
    return "\n".join(lines).strip() + "\n"


def config() -> None:
    """Print every setting: environment variable, default and meaning (markdown)."""
    typer.echo(markdown_reference())
