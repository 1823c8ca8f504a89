"""bench's own settings (`FLEETPILOT_BENCH_*`): report intake, waiting for reports, verdict lines, the sweep."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.bench.collect import DEFAULT_REPORT_TIMEOUT_S
from services.bench.serving_stats import DEFAULT_LEVELS, ServingWorkload
from services.bench.verdict import Thresholds


class BenchSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLEETPILOT_BENCH_", env_file=None, extra="ignore")

    # Instances prove a report is theirs with this token; unset, the intake refuses every report.
    report_token: SecretStr | None = None
    report_timeout_s: float = Field(default=DEFAULT_REPORT_TIMEOUT_S, gt=0)
    report_ttl_s: float = Field(default=86_400.0, gt=0, description="how long an unclaimed report is kept")
    sweep_interval_s: float = Field(default=30.0, gt=0, description="how often overdue requests are failed")
    report_max_bytes: int = Field(default=256 * 1024, gt=0)

    degraded_below_share: float = Field(default=0.8, gt=0, le=1)
    fail_below_share: float = Field(default=0.4, gt=0, le=1)
    local_min_time_s: float | None = Field(default=None, gt=0, description="per measurement, for local runs")

    serving_levels: tuple[int, ...] = Field(default=DEFAULT_LEVELS, description="JSON in the environment: [1,8,32]")
    serving_requests_per_level: int | None = Field(default=None, ge=1)
    serving_prompt_tokens: int = Field(default=512, ge=1)
    serving_output_tokens: int = Field(default=256, ge=1)
    serving_model: str | None = None
    serving_api_key: SecretStr | None = None

    def thresholds(self) -> Thresholds:
        return Thresholds(degraded_below_share=self.degraded_below_share, fail_below_share=self.fail_below_share)

    def serving_workload(self) -> ServingWorkload:
        return ServingWorkload(
            levels=self.serving_levels,
            requests_per_level=self.serving_requests_per_level,
            prompt_tokens=self.serving_prompt_tokens,
            output_tokens=self.serving_output_tokens,
            model=self.serving_model,
        )
