"""What a valid configuration must also be, beyond each setting's own type: every FLEETPILOT_* variable is one
FleetPilot reads (a typo is otherwise silently ignored and its default enforced), and settings that bound each
other agree. Pure: the environment and the loaded settings in, one line per problem out."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from services.decider.config import DeciderSettings
from services.provisioner.settings import ProvisionerSettings
from shared import gpu_models
from shared.settings import Settings

PREFIX = "FLEETPILOT_"
# FLEETPILOT_* variables that are no setting of a service, each read where its comment says
NOT_SETTINGS = frozenset(
    {
        "FLEETPILOT_LLM_DIR",  # `fleetpilot llm` and `agent eval`: where the local model is cached
        "FLEETPILOT_BENCH_TOKEN",  # on a rented machine: the token its suite reports with
        "FLEETPILOT_INSTANCE_LABEL",  # on a rented machine: its label, set by the provisioner
        "FLEETPILOT_IDEMPOTENCY_KEY",  # on a rented machine: the launch command's key
        "FLEETPILOT_IMAGE",  # compose.yaml: which image to run
        "FLEETPILOT_EXTRAS",  # the Dockerfile's build argument
        "FLEETPILOT_BENCH_PUBLISH",  # compose.yaml: where bench's intake is published
    }
)
# the test suite's plug-ins (a slow advisor, kept fault runs) read their own FLEETPILOT_TEST_* variables
TEST_PREFIX = "FLEETPILOT_TEST_"


def unknown_variables(environment: Mapping[str, str], settings_variables: Iterable[str]) -> list[str]:
    """One line per FLEETPILOT_* variable nobody reads, naming the known one closest to it."""
    known = sorted({*settings_variables, *NOT_SETTINGS})
    problems = []
    for variable in sorted(environment):
        if not variable.startswith(PREFIX) or variable in known or variable.startswith(TEST_PREFIX):
            continue
        closest = difflib.get_close_matches(variable, known, n=1, cutoff=0.6)
        hint = f"did you mean {closest[0]}?" if closest else "see `fleetpilot config` for the known ones"
        problems.append(f"{variable}: not a FleetPilot setting; {hint}")
    return problems


def inconsistencies(settings: Settings, provisioner: ProvisionerSettings, decider: DeciderSettings) -> list[str]:
    """One line per pair of settings that contradict each other, naming both variables and their values."""
    problems = []
    if decider.min_producers_while_queued > settings.max_instances:
        # more producers kept than may exist: no producer is ever removed while work waits, even for the budget
        # or an operator's cap
        problems.append(
            f"FLEETPILOT_DECIDER_MIN_PRODUCERS_WHILE_QUEUED={decider.min_producers_while_queued} is above "
            f"FLEETPILOT_MAX_INSTANCES={settings.max_instances}: expected at most the instances the fleet may have"
        )
    normal, emergency = settings.normal_max_price_usd_per_h, settings.emergency_max_price_usd_per_h
    if normal > emergency:
        problems.append(
            f"FLEETPILOT_NORMAL_MAX_PRICE_USD_PER_H={normal:g} is above FLEETPILOT_EMERGENCY_MAX_PRICE_USD_PER_H="
            f"{emergency:g}: expected the normal cap at most the emergency cap"
        )
    if emergency > settings.budget_usd_per_h:
        problems.append(
            f"FLEETPILOT_EMERGENCY_MAX_PRICE_USD_PER_H={emergency:g} is above FLEETPILOT_BUDGET_USD_PER_H="
            f"{settings.budget_usd_per_h:g}: expected a per-instance cap within the whole fleet's budget"
        )
    unknown = [name for name in provisioner.allowed_gpu_models if gpu_models.find(name) is None]
    if unknown:
        problems.append(
            f"FLEETPILOT_PROVISIONER_ALLOWED_GPU_MODELS: unknown GPU {', '.join(map(repr, unknown))}; expected "
            f"names from shared/gpu_models.py: {', '.join(gpu_models.CATALOG)}"
        )
    return problems
