"""What keeps the provisioner from changing a real account: the dry run's client and shadow mode's refusal.

`fleetpilot run provisioner --dry-run` reads for real (search, list, show) and turns every call that would
change the account (create, stop/label, destroy) into a log line naming the request it would send.
`FLEETPILOT_DECIDER_MODE=shadow` refuses every command before anything is looked up.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, SecretStr

from services.provisioner.vast_client import VastClient, VastRequestError
from shared.contract import (
    DestroyInstance,
    LaunchInstances,
    ProvisionResult,
    RefusalRule,
    ResumeInstance,
    StopInstance,
)
from shared.settings import Settings

# the endpoints (as the client names them) whose calls change what is rented
MUTATING_ENDPOINTS = frozenset({"create", "manage", "destroy", "bid_price"})

log = logging.getLogger("fleetpilot.provisioner.dry_run")


class NotSentInDryRun(VastRequestError):
    """The dry run kept a mutating call from being sent: retrying cannot help, and nothing happened."""

    outcome = "dry_run"


def describe_call(method: str, path: str, json_body: Any, params: dict[str, str] | None) -> str:
    """The request as one line: method, path, query and body (no credentials: they travel in a header)."""
    query = "?" + "&".join(f"{key}={value}" for key, value in params.items()) if params else ""
    body = "" if json_body is None else " " + json.dumps(json_body, sort_keys=True, separators=(",", ":"))
    return f"{method} {path}{query}{body}"


def secret_values(settings: BaseModel) -> list[str]:
    """The non-empty secrets among `settings`' fields (the bench report token rides in the onstart line)."""
    values = (getattr(settings, name) for name in type(settings).model_fields)
    return [value.get_secret_value() for value in values if isinstance(value, SecretStr) and value.get_secret_value()]


def redacted(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "**********")
    return text


class DryRunVastClient(VastClient):
    """The real client for reads; a mutating call is logged as the request it would be and raises instead."""

    async def _call(
        self,
        endpoint: str,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, str] | None = None,
        idempotent: bool = True,
    ) -> Any:
        if endpoint not in MUTATING_ENDPOINTS:
            return await super()._call(
                endpoint, method, path, json_body=json_body, params=params, idempotent=idempotent
            )
        request = redacted(describe_call(method, path, json_body, params), secret_values(self._settings))
        log.warning("dry run: would call vast.ai %s", request)
        self._observe(endpoint, NotSentInDryRun.outcome, None)
        raise NotSentInDryRun(endpoint, f"dry run, not sent: {request}")


Command = LaunchInstances | StopInstance | DestroyInstance | ResumeInstance
Verb = Literal["launch", "stop", "destroy", "resume"]


def refused_in_shadow_mode(command: Command, verb: Verb, settings: Settings, now: datetime) -> ProvisionResult | None:
    """The refusal a shadow-mode provisioner answers every command with, before any look-up; None in live mode."""
    if settings.decider_mode != "shadow":
        return None
    return ProvisionResult(
        occurred_at=now,
        source="provisioner",
        idempotency_key=command.idempotency_key,
        command=verb,
        outcome="refused",
        refusal_rule=RefusalRule.SHADOW_MODE,
        detail="FLEETPILOT_DECIDER_MODE=shadow: nothing is sent to vast.ai (set it to live to act)",
    )
