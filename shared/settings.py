"""One place for FleetPilot's configuration: environment variables prefixed `FLEETPILOT_`.

Secrets are `SecretStr`: they print as '**********' and reach the wire only through `.get_secret_value()`
at the one adapter that needs them.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BeforeValidator, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from shared.clock import Clock, ClockControl, GovernedClock, RealClock, ScaledClock
from shared.contract.audit import DeciderMode
from shared.gpu_models import MOST_GPUS
from shared.subjects import Subjects


class Settings(BaseSettings):
    # every settings class refuses inf and NaN: inf passes gt=0, and a heartbeat of inf never ran again while
    # /health said healthy, a budget of inf switched the provisioner's budget off
    model_config = SettingsConfigDict(env_prefix="FLEETPILOT_", env_file=None, extra="ignore", allow_inf_nan=False)

    # bus
    nats_url: str = Field(default="nats://127.0.0.1:4222", description="comma-separated for a cluster")
    nats_user: str | None = Field(default=None, description="NATS user (each service has its own in deploy/nats)")
    nats_password: SecretStr | None = Field(default=None, description="NATS password (secret)")
    nats_creds_file: str | None = Field(default=None, description="NATS .creds file (JWT + NKEY seed)")
    nats_tls_ca_file: str | None = Field(default=None, description="CA bundle to verify a TLS NATS server")
    stream_replicas: int = Field(
        default=1, ge=1, le=5, description="JetStream replicas per stream (3 on a 3-node cluster, for HA)"
    )
    subject_prefix: str = Field(
        default="fp", pattern=r"^[a-z][a-z0-9_-]{0,31}$", description="first token of every subject and stream name"
    )
    # written into every vast.ai label: two deployments on one account (staging, prod) never adopt, count or
    # remove each other's machines; labels from before it belong to the default (see services/provisioner/README.md)
    deployment_id: str = Field(
        default="default",
        pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$",
        description="names this deployment in its vast.ai labels; give each deployment sharing an account its own",
    )

    # state
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="locks, sessions, service checkpoints; deployed, each service's own user: redis://<user>:<pw>@...",
    )

    # Shadow by default: the default vast.ai URL is the real API, so a first try with a real key must not rent.
    # Live is a deliberate step (README: "First day on a real account"); the demo and `fleetpilot up` set it.
    decider_mode: DeciderMode = Field(
        default="shadow",
        description="shadow: the decider decides, audits and explains but sends no command, and the provisioner "
        "refuses any; live: commands are sent and carried out on vast.ai",
    )

    # vast.ai
    vast_api_url: str = Field(default="https://console.vast.ai", description="the vast.ai REST API (or the simulator)")
    vast_api_key: SecretStr = Field(default=SecretStr(""), description="vast.ai API key (secret; provisioner only)")

    # the LLM agent
    ollama_host: str = Field(default="http://127.0.0.1:11434", description="Ollama server for the agent")
    ollama_model: str = Field(default="qwen3:8b", description="a model that supports tool calling")

    # budget: the provisioner and the decider's guardrails both enforce it
    budget_usd_per_h: float = Field(default=20.0, gt=0, description="most the whole fleet may cost per hour")
    daily_budget_usd: float | None = Field(
        default=None,
        gt=0,
        description="most a UTC day may cost, image pulls included (a launch or resume that would pass it by "
        "midnight is refused); unset: FLEETPILOT_BUDGET_USD_PER_H x 24",
    )
    max_instances: int = Field(default=40, ge=1, description="most instances alive at once")
    # one fact two services read: the provisioner rents only machines of this many GPUs, and the decider plans a
    # machine at that many GPUs' pace until one produces (planned at one GPU's, a first launch of 8-GPU machines
    # rented eight times the machines the demand needed)
    gpus_per_machine: int = Field(
        default=1,
        ge=1,
        le=MOST_GPUS,
        description="rent only machines with this many GPUs; the decider sizes the fleet in such machines (the price"
        " caps are per machine: raise them with it)",
    )
    normal_max_price_usd_per_h: float = Field(default=0.80, gt=0, description="per-instance cap, normal launches")
    emergency_max_price_usd_per_h: float = Field(default=1.20, gt=0, description="per-instance cap, emergencies")

    # HTTP: /metrics and /health
    http_host: str = Field(default="0.0.0.0", description="address of /metrics and /health")
    http_port: int = Field(default=8000, ge=0, le=65535, description="port of /metrics and /health")

    # time: speed 1 is the real clock; the demo runs a scaled one from a shared epoch
    clock_speed: float = Field(default=1.0, gt=0, description="simulated seconds per wall second (demo only)")
    clock_sim_epoch: datetime | None = Field(default=None, description="simulated time at the wall epoch (demo)")
    clock_wall_epoch_s: float | None = Field(default=None, description="wall time (epoch s) of that moment (demo)")
    clock_control_file: Path | None = Field(
        default=None, description="a governed clock's shared anchors and speed (the demo's stack writes it)"
    )
    clock_offset_s: float = Field(default=0.0, description="how far this process's governed clock runs ahead (tests)")

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str) -> str:
        # redis-py's own rule, said at start-up rather than in a traceback from the first connection
        if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"expected redis://, rediss:// or unix://, e.g. redis://127.0.0.1:6379/0; got {url!r}")
        return url

    @field_validator("vast_api_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        # (Ollama's own client reads a bare host:port, so ollama_host is left to it)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"expected an http:// or https:// URL with a host, got {url!r}")
        return url

    @cached_property
    def subjects(self) -> Subjects:
        return Subjects(self.subject_prefix)

    @property
    def nats_servers(self) -> list[str]:
        return [url.strip() for url in self.nats_url.split(",") if url.strip()]

    @property
    def nats_url_for_humans(self) -> str:
        """The NATS URL(s) without any user or password written into them: safe for logs and error lines."""
        return ",".join(without_credentials(url) for url in self.nats_servers)

    def make_clock(self) -> Clock:
        if self.clock_control_file is not None:
            return GovernedClock(ClockControl(self.clock_control_file), self.clock_offset_s)
        if self.clock_speed == 1.0 and self.clock_sim_epoch is None:
            return RealClock()
        sim_epoch = self.clock_sim_epoch or datetime.now(UTC)
        return ScaledClock(sim_epoch, self.clock_wall_epoch_s or time.time(), self.clock_speed)


def without_credentials(url: str) -> str:
    """`nats://user:secret@host:4222` → `nats://host:4222`."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def split_commas(value: Any) -> Any:
    """`RTX 4090,RTX 5090` → `["RTX 4090", "RTX 5090"]`: a list as people write it in a shell. A JSON list
    (`["RTX 4090"]`, what the reference said before) is still read, since a GPU name never starts with `[`."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        return json.loads(text)
    return [item.strip() for item in text.split(",") if item.strip()]


# a list-typed setting: comma-separated in the environment (pydantic-settings would want JSON, and say a
# wrong value in a 50-line traceback); NoDecode hands the raw string to split_commas instead
CommaSeparatedStrings = Annotated[list[str], NoDecode, BeforeValidator(split_commas)]
CommaSeparatedInts = Annotated[list[int], NoDecode, BeforeValidator(split_commas)]
CommaSeparatedIntTuple = Annotated[tuple[int, ...], NoDecode, BeforeValidator(split_commas)]
