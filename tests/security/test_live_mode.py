"""Live mode (the real vast.ai API, FLEETPILOT_DECIDER_MODE=live) refuses cleartext bench URLs and the
repository's development secrets: each service's real entry point, one line naming the variable, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import SecretStr

from shared.live_mode import is_live, live_refusal
from shared.settings import Settings

REAL_API = "https://console.vast.ai"
OWN_SECRETS = {
    "FLEETPILOT_VAST_API_KEY": "a-real-looking-key-9f2c",
    "FLEETPILOT_BENCH_REPORT_TOKEN": "5be1c0a7d2e94f7f8a1b3c6d9e0f1a2b",
    "FLEETPILOT_PROVISIONER_BENCH_URL": "https://bench.example.com",
    "FLEETPILOT_NATS_URL": "nats://127.0.0.1:1",
    "FLEETPILOT_REDIS_URL": "redis://127.0.0.1:1/0",
}


def start(service: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The entry point `fleetpilot run <service>` calls, in its own process with only these settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPILOT_")}
    return subprocess.run(
        [sys.executable, "-c", f"from services.{service}.app import create_app; create_app()"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("service", "changed", "named"),
    [
        ("bench", {"FLEETPILOT_BENCH_REPORT_TOKEN": "preport-dev"}, "FLEETPILOT_BENCH_REPORT_TOKEN"),
        ("provisioner", {"FLEETPILOT_PROVISIONER_BENCH_URL": "http://bench.example.com"}, "BENCH_URL"),
        ("fleet", {"FLEETPILOT_NATS_USER": "fleet", "FLEETPILOT_NATS_PASSWORD": "pfleet-dev"}, "NATS_PASSWORD"),
        ("bench", {"FLEETPILOT_REDIS_URL": "redis://bench:pbench-dev@127.0.0.1:1/0"}, "FLEETPILOT_REDIS_URL"),
        ("bench", {"FLEETPILOT_BENCH_CPU_REPORTS": "correctness_only"}, "FLEETPILOT_BENCH_CPU_REPORTS"),
    ],
)
def test_live_mode_refuses_to_start_with_a_development_secret_or_cleartext(
    service: str, changed: dict[str, str], named: str
) -> None:
    done = start(
        service, {**OWN_SECRETS, "FLEETPILOT_VAST_API_URL": REAL_API, "FLEETPILOT_DECIDER_MODE": "live", **changed}
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], done.stderr
    for value in changed.values():
        if "dev" in value:
            assert value not in done.stderr  # the line names the variable, never the secret


def test_the_same_settings_pass_against_the_stand_in_or_in_shadow_mode() -> None:
    development = Settings(
        vast_api_url="http://vast-sim:8080", decider_mode="live", nats_password=SecretStr("pfleet-dev")
    )
    shadow = Settings(vast_api_url=REAL_API, decider_mode="shadow", nats_password=SecretStr("pfleet-dev"))
    live = Settings(vast_api_url=REAL_API, decider_mode="live", nats_password=SecretStr("pfleet-dev"))
    assert not is_live(development) and not is_live(shadow) and is_live(live)
    cleartext = {"FLEETPILOT_PROVISIONER_BENCH_URL": "http://bench.example.com"}
    assert live_refusal(development, public_urls=cleartext) is None
    assert live_refusal(shadow, public_urls=cleartext) is None
    assert "FLEETPILOT_NATS_PASSWORD" in (live_refusal(live) or "")


def test_live_mode_with_own_secrets_and_https_is_accepted() -> None:
    live = Settings(
        vast_api_url="https://cloud.vast.ai/",
        decider_mode="live",
        vast_api_key=SecretStr(OWN_SECRETS["FLEETPILOT_VAST_API_KEY"]),
        nats_password=SecretStr("9c1d0e7a5b3f"),
        redis_url="redis://fleet:8a7b6c5d@redis:6379/0",
    )
    own = {"FLEETPILOT_BENCH_REPORT_TOKEN": SecretStr(OWN_SECRETS["FLEETPILOT_BENCH_REPORT_TOKEN"])}
    assert live_refusal(live, own, {"FLEETPILOT_PROVISIONER_BENCH_URL": "https://bench.example.com"}) is None
