"""Live mode, told from the settings, and what a service refuses to start with in it: cleartext URLs for
rented machines and the repository's development secrets.

Live means money and strangers: the decider's commands are carried out (`FLEETPILOT_DECIDER_MODE=live`)
against vast.ai's real API (`FLEETPILOT_VAST_API_URL` on a vast.ai host), not the stand-in in sim/. Every
secret below is published in this repository (compose.yaml, sim/stack.py), so anyone can read it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import NoReturn
from urllib.parse import urlsplit

from pydantic import SecretStr

from shared.settings import Settings

# vast.ai's API hosts (the CLI's default is console.vast.ai; cloud.vast.ai serves the same API)
VAST_API_DOMAIN = "vast.ai"

# compose.yaml's `${VAR:-default}` values, the demo stack's token and Grafana's factory password
DEVELOPMENT_SECRETS = frozenset(
    {
        "pdemand-dev",
        "pfleet-dev",
        "pprovisioner-dev",
        "pdecider-dev",
        "pbench-dev",
        "pjobs-dev",
        "poperator-dev",
        "padmin-dev",
        "preport-dev",
        "sim-key",
        "admin",
        "demo-bench-token-not-a-secret",
    }
)
# the development passwords of compose's Redis users share this ending (deploy/redis/users.acl)
DEVELOPMENT_SECRET_SUFFIX = "-dev"


def is_live(settings: Settings) -> bool:
    host = (urlsplit(settings.vast_api_url).hostname or "").lower()
    real_api = host == VAST_API_DOMAIN or host.endswith("." + VAST_API_DOMAIN)
    return settings.decider_mode == "live" and real_api


def is_development_secret(value: str) -> bool:
    return value in DEVELOPMENT_SECRETS or value.endswith(DEVELOPMENT_SECRET_SUFFIX)


def redis_password(redis_url: str) -> str | None:
    return urlsplit(redis_url).password


def live_refusal(
    settings: Settings,
    secrets: Mapping[str, SecretStr | None] | None = None,
    public_urls: Mapping[str, str | None] | None = None,
) -> str | None:
    """The one line naming the variable a live service must not start with, or None (also when not live).

    `secrets` and `public_urls` are a service's own, by variable name, on top of the shared settings'."""
    if not is_live(settings):
        return None
    named: dict[str, str | None] = {
        "FLEETPILOT_NATS_PASSWORD": settings.nats_password.get_secret_value() if settings.nats_password else None,
        "FLEETPILOT_REDIS_URL (its password)": redis_password(settings.redis_url),
        "FLEETPILOT_VAST_API_KEY": settings.vast_api_key.get_secret_value(),
        **{name: secret.get_secret_value() if secret else None for name, secret in (secrets or {}).items()},
    }
    for variable, value in named.items():
        if value and is_development_secret(value):
            return (
                f"{variable} is a development default published in this repository, refused in live mode "
                f"(the real vast.ai API with FLEETPILOT_DECIDER_MODE=live): set your own (e.g. `openssl rand -hex 24`)"
            )
    for variable, url in (public_urls or {}).items():
        if url and urlsplit(url).scheme != "https":
            return (
                f"{variable}={url}: rented machines reach it over the internet, so live mode needs an https:// URL "
                "(cleartext would show their reports and tokens to every network on the way)"
            )
    return None


def exit_for_setting(line: str) -> NoReturn:
    """A service that cannot run as configured says so in one line naming the variable, and exits with 2."""
    print(f"error: {line}", file=sys.stderr)
    raise SystemExit(2)


def refuse_unsafe_live_start(
    settings: Settings,
    secrets: Mapping[str, SecretStr | None] | None = None,
    public_urls: Mapping[str, str | None] | None = None,
) -> None:
    refusal = live_refusal(settings, secrets, public_urls)
    if refusal is not None:
        exit_for_setting(refusal)
