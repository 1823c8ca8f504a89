"""The provisioner's own configuration (env prefix `FLEETPILOT_PROVISIONER_`): what to rent, how, and how often to look.

The budget and the price caps are shared with the decider and live in `shared.settings.Settings`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from services.bench.config import BenchSettings
from services.bench.onstart import onstart_command
from shared.live_mode import exit_for_setting
from shared.settings import CommaSeparatedInts, CommaSeparatedStrings, split_commas

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
    "bid_price": 5.5,  # vast-cli's change bid: "rate limit 5.5 s"
}
# after a 429 the create endpoint stays closed for a documented 12 s penalty, so a retry waits that long
DOCUMENTED_RATE_LIMITED_WAIT_S = {**DOCUMENTED_SPACING_S, "create": 12.5}
# every endpoint the client spaces by name (vast_client.py); the invoices query has no documented limit, so it
# is spaced only when an operator sets one
ENDPOINTS = frozenset({*DOCUMENTED_SPACING_S, "invoices"})

# A public image with python3, numpy and a CUDA build of PyTorch, all the onstart suite needs. CUDA 12.8 is the
# first with kernels for Blackwell (RTX 5090, RTX PRO 6000) and runs the Ampere/Ada cards too; it needs a host
# driver that supports 12.8, hence `min_cuda` 12.8. Replace both with your worker image and its CUDA.
DEFAULT_IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
DEFAULT_MIN_CUDA = 12.8

# a TCP port is 1..65535: -5 or 99999 passed `config --check` and went into every create request as a port
# mapping no container can have; refused with the setting's name instead, before anything is rented
ContainerPort = Annotated[int, Field(ge=1, le=65_535)]
CommaSeparatedPorts = Annotated[list[ContainerPort], NoDecode, BeforeValidator(split_commas)]


class ProvisionerSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETPILOT_PROVISIONER_", env_file=None, extra="ignore", allow_inf_nan=False
    )

    # offer constraints
    allowed_gpu_models: CommaSeparatedStrings = Field(
        default_factory=lambda: ["RTX 4090", "RTX 5090", "RTX 3090", "RTX PRO 6000", "A100 SXM4", "A100 PCIE"],
        description="GPU models that may be rented, comma-separated (names as in `shared/gpu_models.py`)",
    )
    min_reliability: float = Field(
        default=0.95, ge=0, le=1, description="offers with a lower vast.ai reliability are skipped"
    )
    verified_only: bool = Field(default=True, description="rent only machines vast.ai has verified")
    min_cuda: float = Field(default=DEFAULT_MIN_CUDA, ge=0, description="offers whose driver supports less are skipped")
    min_disk_gb: float = Field(default=50.0, ge=0, description="offers with less free disk are skipped")
    excluded_host_ids: CommaSeparatedInts = Field(
        default_factory=list, description="hosts never rented from (comma-separated)"
    )
    excluded_machine_ids: CommaSeparatedInts = Field(
        default_factory=list, description="machines never rented (comma-separated)"
    )
    search_limit: int = Field(default=64, ge=1, le=1000, description="offers asked for per search")

    # what runs on a rented machine
    image: str = Field(default=DEFAULT_IMAGE, min_length=1, max_length=1024, description="docker image to run")
    disk_gb: float = Field(default=50.0, gt=0, description="disk allocated to each instance")
    image_gb: float = Field(
        default=10.0, ge=0, description="the image's download size: its pull over each offer's link counts in ranking"
    )
    typical_startup_s: float = Field(
        default=5400.0,
        gt=0,
        description="create → running besides the pull, for hosts with no startup on record (vast: 1-2 h)",
    )
    bench_url: str | None = Field(
        default=None,
        description="where rented machines reach bench's HTTP intake (public), e.g. https://bench.example.com",
    )
    report_token: SecretStr | None = Field(
        default=None,
        description="the report secret: each instance is created with its own token, an HMAC of its label under "
        "it; unset: FLEETPILOT_BENCH_REPORT_TOKEN (bench's), so one variable serves both",
    )
    onstart: str | None = Field(
        default=None,
        description="shell run at container start; unset: fetch bench's suite, run it and report (needs "
        "FLEETPILOT_PROVISIONER_BENCH_URL and FLEETPILOT_BENCH_REPORT_TOKEN); set it to run your own",
    )
    worker_env: dict[str, str] = Field(default_factory=dict, description="passed to every instance as-is")
    worker_ports: CommaSeparatedPorts = Field(
        default_factory=lambda: [8000], description="container ports each instance exposes (comma-separated)"
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
    ambiguous_settle_s: float = Field(
        default=60.0,
        ge=0,
        description="after a create of unknown outcome, wait this long before looking for its label: a request "
        "that timed out may still be acting at vast.ai, and renting the slot again would rent it twice",
    )

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
    # at least a second: Redis counts it in whole milliseconds, and the holder renews it every third of it
    lease_ttl_s: float = Field(
        default=120.0,
        ge=1.0,
        description="replicas take turns through a Redis lease; a crashed holder's expires after this",
    )
    lease_poll_s: float = Field(default=0.5, gt=0, description="how often a replica tries to take the lease")

    @field_validator("allowed_gpu_models")
    @classmethod
    def _some_gpu_model(cls, models: list[str]) -> list[str]:
        # an empty variable (an unset shell variable in `...=$MODELS`) would allow nothing: no launch, ever
        if not models:
            raise ValueError("empty: name at least one GPU model, or leave the variable unset for the default list")
        return models

    @field_validator("spacing_s", "rate_limited_wait_s")
    @classmethod
    def _per_endpoint(cls, waits: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        """The endpoints named change; the others keep vast.ai's documented waits (one endpoint set replaced the
        whole table, and every other endpoint went unspaced into vast's rate limits). A name vast has no endpoint
        for, or a negative wait, is refused."""
        documented = DOCUMENTED_SPACING_S if info.field_name == "spacing_s" else DOCUMENTED_RATE_LIMITED_WAIT_S
        unknown = sorted(set(waits) - ENDPOINTS)
        if unknown:
            expected = ", ".join(sorted(ENDPOINTS))
            raise ValueError(f"no endpoint {', '.join(map(repr, unknown))}; expected some of {expected}")
        negative = sorted(name for name, wait_s in waits.items() if wait_s < 0)
        if negative:
            raise ValueError(f"a negative wait for {', '.join(map(repr, negative))}; expected 0 or more seconds")
        return {**documented, **waits}

    @classmethod
    def from_environment(cls) -> ProvisionerSettings:
        """The settings as `fleetpilot run provisioner` reads them: the report token falls back to bench's, so
        one FLEETPILOT_BENCH_REPORT_TOKEN serves both services."""
        config = cls()
        if config.report_token is None:
            config = config.model_copy(update={"report_token": BenchSettings().report_token})
        return config

    def onstart_line(self) -> str:
        """What vast runs at container start: the configured line, or the bench suite built from the settings."""
        if self.onstart is not None:
            return self.onstart
        if not self.bench_url or self.report_token is None or not self.report_token.get_secret_value():
            raise ValueError(
                "the default onstart needs FLEETPILOT_PROVISIONER_BENCH_URL and FLEETPILOT_BENCH_REPORT_TOKEN"
            )
        return onstart_command(self.bench_url)

    def check_onstart(self) -> None:
        """At start, not at the first launch: a machine rented without its benchmark would be paid for and
        then judged on a report that can never come. One line naming the variable, exit code 2."""
        if self.onstart is not None:
            return
        if not self.bench_url:
            exit_for_setting(
                "FLEETPILOT_PROVISIONER_BENCH_URL is not set: expected the URL rented machines reach bench's "
                "intake at (e.g. https://bench.example.com), or FLEETPILOT_PROVISIONER_ONSTART for your own line"
            )
        if self.report_token is None or not self.report_token.get_secret_value():
            exit_for_setting(
                "FLEETPILOT_BENCH_REPORT_TOKEN is not set: expected the token bench checks suite reports against "
                "(the same value for bench and the provisioner; e.g. `openssl rand -hex 24`)"
            )
        try:
            self.onstart_line()
        except ValueError as error:  # too long for vast's limit
            exit_for_setting(f"FLEETPILOT_PROVISIONER_BENCH_URL: {error}")
