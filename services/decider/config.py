"""The decider's own settings (`FLEETPILOT_DECIDER_*`), turned into the pure cores' config objects."""

from __future__ import annotations

import importlib.util
import uuid

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.decider.guardrails import GuardrailConfig
from services.decider.policy import PolicyConfig
from services.decider.triggering import TriggerConfig
from shared.settings import Settings
from shared.streams import DEFAULT_COMMAND_TTL_S


class DeciderSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETPILOT_DECIDER_", env_file=None, extra="ignore", allow_inf_nan=False
    )

    # names this process in run ids and its own trigger consumers (every replica sees every trigger)
    replica_id: str = Field(
        default_factory=lambda: uuid.uuid4().hex[:8],
        pattern=r"^[A-Za-z0-9_-]{1,32}$",
        description="names this replica in run ids and its consumers (default: random)",
    )

    # triggering (see TriggerConfig for where the defaults come from)
    p1_quiet_s: float = Field(default=20.0, gt=0, description="P1 triggers run once none came for this long")
    p1_max_delay_s: float = Field(
        default=120.0, gt=0, description="P1 triggers run at the latest this long after the first"
    )
    heartbeat_s: float = Field(default=300.0, gt=0, description="a run at least this often, triggers or not")
    max_runs_per_h: int = Field(default=20, ge=1, description="most runs per hour (P0 runs counted apart)")
    max_p0_runs_per_h: int = Field(default=120, ge=0, description="most P0 runs per hour")
    run_at_start: bool = Field(default=True, description="run once at start-up")

    # single flight: Redis expires the lock in wall time, so a crashed holder blocks others this long at most
    lock_ttl_s: float = Field(
        default=30.0, gt=0, description="the single-flight lock expires this long after its holder stops renewing it"
    )
    lock_retry_s: float = Field(default=1.0, gt=0, description="clock seconds between tries while another holds it")
    redis_retry_s: float = Field(default=5.0, gt=0, description="clock seconds between tries while Redis is down")

    # inputs older than this are stale: the run only holds and raises an alert
    signal_max_age_s: float = Field(
        default=600.0, gt=0, description="a demand signal older than this is stale: the run holds and alerts"
    )
    snapshot_max_age_s: float = Field(
        default=600.0, gt=0, description="a fleet snapshot older than this is stale: the run holds and alerts"
    )
    # a command is decided on the demand of now; queued through a provisioner outage it must not run on it later
    # (5 min: one heartbeat's worth of demand change, well above a healthy provisioner's pick-up delay), in
    # service-clock seconds; FP_COMMANDS drops any command after COMMANDS_MAX_AGE_S of wall time regardless.
    command_ttl_s: float = Field(
        default=DEFAULT_COMMAND_TTL_S,
        gt=0,
        description="each command expires this long after it is sent: the provisioner refuses it from then on",
    )
    snapshot_request_timeout_s: float = Field(
        default=2.0, gt=0, description="how long a run waits for fleet's snapshot"
    )

    # guardrails beyond the shared budget and max instances
    # unset: as many launches per hour as the fleet may have instances, so a cold start or a step up can reach
    # the fleet it needs within one startup time (20/h against 40 instances took two startups, and a surge
    # building had its launches refused for the rate alone)
    # 0 is refused, not read as "no limit" or as a freeze that no audit line explains: a directive stops launches
    max_launches_per_h: int | None = Field(default=None, ge=1, description="unset: the max_instances setting")
    min_producers_while_queued: int = Field(
        default=1, ge=0, description="guardrail: producers never removed below this while tasks wait"
    )

    # vast's other levers for the policy (sim/world/README.md measures them): parking pays on the world's
    # families and is on; bids do not pay in the guessed market and are off. mpc: the expected-cost launch
    # choice, on (train seeds: sim/world/fitted.py); off falls back to the sizing rules' point target
    park: bool = Field(
        default=True,
        description="stop surplus machines (producers, and those on the way that have loaded) with their disk kept "
        "and resume them before launching",
    )
    mpc: bool = Field(
        default=True, description="choose launches by expected cost over demand scenarios (policy/mpc.py)"
    )
    bid_share: float = Field(
        default=0.0, ge=0, le=1, description="share of forecast or sustained growth launched as interruptible bids"
    )
    standby_fraction: float = Field(
        default=0.0,
        ge=0,
        le=5,
        description="a standby pool of loaded, parked machines kept at this multiple of the machines the demand "
        "needs (with park on): insurance for flash crowds, off by default",
    )

    # the advisor (LLM agent): "package.module:factory", factory(ctx) -> Advisor; empty runs the policy alone
    advisor: str = Field(
        default="", description="package.module:factory of the advisor (the LLM agent); empty: the policy alone"
    )
    advisor_timeout_s: float = Field(
        default=600.0, gt=0, description="the advisor's whole run is cut off after this; the policy then decides"
    )

    @field_validator("advisor")
    @classmethod
    def _advisor_found(cls, spec: str) -> str:
        """A misspelt advisor is named at start-up in one line, not in a traceback once the service is wired."""
        if not spec:
            return spec
        module_name, _, attribute = spec.partition(":")
        if not module_name or not attribute:
            raise ValueError(f"expected 'package.module:factory', got {spec!r}")
        try:
            found = importlib.util.find_spec(module_name) is not None
        except ImportError:  # a parent package that does not exist
            found = False
        if not found:
            raise ValueError(f"no module {module_name!r} to take the advisor from")
        return spec

    def policy_config(self, settings: Settings) -> PolicyConfig:
        return PolicyConfig(
            park=self.park,
            bid_share=self.bid_share,
            mpc=self.mpc,
            standby_fraction=self.standby_fraction,
            gpus_per_machine=settings.gpus_per_machine,
        )

    def trigger_config(self) -> TriggerConfig:
        return TriggerConfig(
            p1_quiet_s=self.p1_quiet_s,
            p1_max_delay_s=self.p1_max_delay_s,
            heartbeat_s=self.heartbeat_s,
            max_runs_per_h=self.max_runs_per_h,
            max_p0_runs_per_h=self.max_p0_runs_per_h,
            run_at_start=self.run_at_start,
        )

    def guardrail_config(self, settings: Settings) -> GuardrailConfig:
        return GuardrailConfig(
            budget_usd_per_h=settings.budget_usd_per_h,
            max_instances=settings.max_instances,
            normal_max_price_usd_per_h=settings.normal_max_price_usd_per_h,
            emergency_max_price_usd_per_h=settings.emergency_max_price_usd_per_h,
            max_launches_per_h=settings.max_instances if self.max_launches_per_h is None else self.max_launches_per_h,
            min_producers_while_queued=self.min_producers_while_queued,
            # one drain horizon for the policy's sizing and the guardrails' removal floor
            backlog_drain_horizon_h=self.policy_config(settings).backlog_drain_target_s / 3600,
        )
