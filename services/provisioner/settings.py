"""The provisioner's own configuration (env prefix `FLEETPILOT_PROVISIONER_`): what to rent, how, and how often to look.

The budget and the price caps are shared with the decider and live in `shared.settings.Settings`.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# vast.ai's documented per-endpoint minimum intervals (s) between requests; it sends no Retry-After, so the
# client spaces its own calls by these. Search is "10 per minute per IP".
DOCUMENTED_SPACING_S = {
    "search": 6.0,
    "create": 4.5,
    "destroy": 3.0,
    "show": 2.0,
    "list_v1": 1.0,
    "list_v0": 1.0,
    "manage": 1.0,
}
# after a 429 the create endpoint stays closed for a documented 12 s penalty, so a retry waits that long
DOCUMENTED_RATE_LIMITED_WAIT_S = {**DOCUMENTED_SPACING_S, "create": 12.5}


class ProvisionerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLEETPILOT_PROVISIONER_", env_file=None, extra="ignore")

    # offer constraints
    allowed_gpu_models: list[str] = Field(
        default_factory=lambda: ["RTX 4090", "RTX 5090", "RTX 3090", "RTX PRO 6000", "A100 SXM4", "A100 PCIE"],
        description="GPU models that may be rented (JSON list in the environment)",
    )
    min_reliability: float = Field(
        default=0.95, ge=0, le=1, description="offers with a lower vast.ai reliability are skipped"
    )
    verified_only: bool = Field(default=True, description="rent only machines vast.ai has verified")
    min_cuda: float = Field(default=12.2, ge=0, description="offers whose driver supports less are skipped")
    min_disk_gb: float = Field(default=50.0, ge=0, description="offers with less free disk are skipped")
    excluded_host_ids: list[int] = Field(default_factory=list, description="hosts never rented from (JSON list)")
    excluded_machine_ids: list[int] = Field(default_factory=list, description="machines never rented (JSON list)")
    search_limit: int = Field(default=64, ge=1, le=1000, description="offers asked for per search")

    # what runs on a rented machine
    image: str = Field(default="fleetpilot/worker:latest", description="docker image to run")
    disk_gb: float = Field(default=50.0, gt=0, description="disk allocated to each instance")
    onstart: str = Field(
        default="bash -lc 'echo fleetpilot worker starting'",
        description="shell run at container start; the bench engineer's benchmark script goes here",
    )
    worker_env: dict[str, str] = Field(default_factory=dict, description="passed to every instance as-is")
    worker_ports: list[int] = Field(
        default_factory=lambda: [8000], description="container ports each instance exposes (JSON list)"
    )

    # reconciliation and budget
    reconcile_interval_s: float = Field(
        default=60.0, gt=0, description="how often vast.ai's instance list is compared with what is known"
    )
    gone_after_missing_lists: int = Field(
        default=2, ge=1, description="an instance vast stops listing is gone after this many successful lists"
    )
    price_margin: float = Field(
        default=0.05, ge=0, le=1, description="budget checks add this share to an offer's price (drift before rent)"
    )

    # launches
    max_create_attempts: int = Field(
        default=4, ge=1, description="per instance: creates of unknown outcome, each followed by a label look-up"
    )
    max_offer_fallbacks: int = Field(default=6, ge=1, description="offers tried per instance when they are gone")

    # the vast.ai client
    request_timeout_s: float = Field(default=30.0, gt=0, description="a vast.ai call without an answer this long fails")
    connect_timeout_s: float = Field(default=10.0, gt=0, description="a connection to vast.ai not made this fast fails")
    max_attempts: int = Field(default=5, ge=1, description="per API call, for 429, 5xx and connection errors")
    backoff_initial_s: float = Field(
        default=1.0, ge=0, description="first wait before retrying a failed vast.ai call (doubles each time)"
    )
    backoff_max_s: float = Field(default=30.0, ge=0, description="longest wait between retries")
    spacing_s: dict[str, float] = Field(
        default_factory=lambda: dict(DOCUMENTED_SPACING_S),
        description="least time between two calls per endpoint (vast.ai's documented limits; JSON)",
    )
    rate_limited_wait_s: dict[str, float] = Field(
        default_factory=lambda: dict(DOCUMENTED_RATE_LIMITED_WAIT_S), description="wait after a 429 per endpoint (JSON)"
    )
    instance_list_api: str = Field(
        default="v1",
        pattern="^(v1|v0)$",
        description="v0 only for accounts not yet moved; its 410 is an error, never an empty list",
    )

    # NATS: a launch can outlive the default ack wait (create spacing × count); the handler also signals progress
    command_ack_wait_s: float = Field(
        default=120.0, gt=0, description="JetStream ack wait for a command (a launch may take several creates)"
    )
    # replicas take turns changing the fleet through a Redis lease; a crashed holder's lease expires after this
    lease_ttl_s: float = Field(
        default=120.0,
        gt=0,
        description="replicas take turns through a Redis lease; a crashed holder's expires after this",
    )
    lease_poll_s: float = Field(default=0.5, gt=0, description="how often a replica tries to take the lease")
