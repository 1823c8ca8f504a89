"""bench's own settings (`FLEETPILOT_BENCH_*`): report intake, waiting for reports, verdict lines, the sweep."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.bench.collect import DEFAULT_REPORT_TIMEOUT_S
from services.bench.serving_stats import DEFAULT_LEVELS, ServingWorkload
from services.bench.verdict import CpuReports, Thresholds
from shared.settings import CommaSeparatedIntTuple


class BenchSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETPILOT_BENCH_", env_file=None, extra="ignore", allow_inf_nan=False
    )

    # The deployment's report secret: each instance's token is an HMAC of its label under it (tokens.py);
    # `fleetpilot run bench` refuses to start without it.
    report_token: SecretStr | None = Field(
        default=None,
        description="required: the report secret each instance's own report token derives from (provisioner too)",
    )
    report_timeout_s: float = Field(
        default=DEFAULT_REPORT_TIMEOUT_S, gt=0, description="how long a request waits for its report each time"
    )
    report_retries: int = Field(
        default=3, ge=0, description="waits after the first missed deadline (each publishes `unknown`) before giving up"
    )
    report_ttl_s: float = Field(default=86_400.0, gt=0, description="how long an unclaimed report is kept")
    sweep_interval_s: float = Field(default=30.0, gt=0, description="how often overdue requests are looked at")
    # a real report is a few KB; the largest the SuiteReport model allows is under 40 KB
    report_max_bytes: int = Field(
        default=64 * 1024, gt=0, description="largest suite report accepted (checked before the body is read)"
    )
    report_burst: int = Field(default=6, ge=1, description="report posts one instance may make at once")
    report_per_minute: float = Field(default=2.0, gt=0, description="report posts per minute one instance regains")
    cpu_reports: CpuReports = Field(
        default="fail",
        description="a CPU run from a rented instance: fail, or correctness_only (GPU-less stand-ins, the demo)",
    )
    degraded_below_share: float = Field(
        default=0.8, gt=0, le=1, description="verdict degraded below this share of the reference speed"
    )
    fail_below_share: float = Field(
        default=0.4, gt=0, le=1, description="verdict fail below this share of the reference speed"
    )
    local_min_time_s: float | None = Field(default=None, gt=0, description="per measurement, for local runs")

    serving_levels: CommaSeparatedIntTuple = Field(
        default=DEFAULT_LEVELS, description="concurrency levels of the serving sweep, comma-separated: 1,8,32"
    )
    serving_requests_per_level: int | None = Field(
        default=None, ge=1, description="requests per concurrency level (default: max(4 x level, 16))"
    )
    serving_prompt_tokens: int = Field(default=512, ge=1, description="mean prompt length of the serving sweep")
    serving_output_tokens: int = Field(default=256, ge=1, description="mean output length of the serving sweep")
    serving_model: str | None = Field(
        default=None, description="model the serving sweep asks for (default: the server's first)"
    )
    serving_api_key: SecretStr | None = Field(
        default=None, description="API key of the endpoint the serving sweep measures (secret)"
    )
    # Hard deadlines, not httpx's per-read timeout: a host that drips a byte a second, or streams without end,
    # held a sweep (and its bench request) forever.
    serving_request_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="longest one serving request may take, sent to last byte, before it counts as failed",
    )
    serving_sweep_budget_s: float = Field(
        default=3600.0,
        gt=0,
        description="longest a serving sweep may take; levels it leaves unfinished count as failed",
    )

    @model_validator(mode="after")
    def _fail_below_degraded(self) -> BenchSettings:
        # checked here, where the variables are named, not when the service builds its verdict lines
        if self.fail_below_share > self.degraded_below_share:
            raise ValueError(
                f"FLEETPILOT_BENCH_FAIL_BELOW_SHARE={self.fail_below_share:g} is above "
                f"FLEETPILOT_BENCH_DEGRADED_BELOW_SHARE={self.degraded_below_share:g}: expected fail at most degraded"
            )
        return self

    def thresholds(self) -> Thresholds:
        return Thresholds(degraded_below_share=self.degraded_below_share, fail_below_share=self.fail_below_share)

    def serving_workload(self) -> ServingWorkload:
        return ServingWorkload(
            levels=self.serving_levels,
            requests_per_level=self.serving_requests_per_level,
            prompt_tokens=self.serving_prompt_tokens,
            output_tokens=self.serving_output_tokens,
            model=self.serving_model,
            request_timeout_s=self.serving_request_timeout_s,
            sweep_budget_s=self.serving_sweep_budget_s,
        )
