"""demand's tunables (environment prefix `FLEETPILOT_DEMAND_`), with the numbers behind each default."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.settings import CommaSeparatedIntTuple

HOUR_S = 3600


class DemandSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETPILOT_DEMAND_", env_file=None, extra="ignore", allow_inf_nan=False
    )

    # Windows: 15 min sees a change quickly, 1 h smooths minute noise, 6 h covers a machine's whole startup.
    windows_s: CommaSeparatedIntTuple = Field(
        default=(900, 3600, 21600),
        description="windows published (s, comma-separated): 15 min sees a change, 1 h smooths noise, 6 h spans a "
        "start-up",
    )
    bucket_s: int = Field(default=60, gt=0, description="width of one counting bucket")
    # A machine takes 1-2 h to arrive, so only demand that has outrun the fleet for half an hour is worth one.
    sustain_s: int = Field(
        default=1800, gt=0, description="demand must outrun the fleet this long before it is worth a machine"
    )
    trend_window_s: int = Field(default=3600, gt=0, description="window the arrival trend is measured over")
    throughput_window_s: int = Field(default=3600, gt=0, description="window of each worker's measured tasks/h")
    # Trend hysteresis: arrivals must change by half over the trend window to call it, and fall back under a
    # fifth to drop it (minute counts at ~2 tasks/min are noisy; without it the trend would flicker).
    trend_enter_ratio: float = Field(
        default=0.5, gt=0, description="change of arrivals over the trend window that starts a trend (0.5: by half)"
    )
    trend_leave_ratio: float = Field(
        default=0.2, ge=0, description="change under which a trend ends (hysteresis, so it does not flicker)"
    )
    trend_min_arrivals: int = Field(
        default=20, ge=0, description="fewest arrivals in the trend window for a trend to be called"
    )
    # One machine finishes a task every ~30 s pipelined (~4 min each): 15 min with work waiting and no
    # completion is several missed tasks on every worker.
    stall_after_s: float = Field(
        default=900, gt=0, description="work waiting and no completion this long: workers_stalled"
    )
    # A missing completion is only missing once demand has read what was sent: with thousands of task events still
    # unread on its consumer (fleet, on a busy machine, read 8,000 behind the clock), the completions may be there.
    stall_unjudged_above_unread: int = Field(
        default=500,
        ge=0,
        description="while more task events than this wait unread on demand's consumer, workers are not called "
        "stalled: that is judged once demand has caught up",
    )
    default_worker_throughput_tasks_per_h: float = Field(
        default=120.0, gt=0, description="a worker's tasks/h assumed until one is measured"
    )
    # Gaps between a worker's completions longer than this are idle time (no work), not slow work.
    busy_gap_cap_s: float = Field(
        default=600, gt=0, description="gaps between a worker's completions longer than this are idle, not slow"
    )
    # a late completion is placed among its producer's recent ones (these, and those within busy_gap_cap_s of
    # the newest); older than those, its gap is unknown
    worker_timeline_len: int = Field(default=16, ge=2, description="recent completions kept per producer, at least")
    # Backlog worth a machine: more than the producing fleet can clear within a machine's startup time.
    max_backlog_drain_h: float = Field(
        default=1.5, gt=0, description="backlog worth a machine: more than the fleet clears in this many hours"
    )
    # Over-provisioned when one machine fewer would still have this much headroom over recent demand.
    over_provisioned_headroom: float = Field(
        default=1.5, ge=1, description="over-provisioned when one machine fewer keeps this headroom (1.5: 50%)"
    )
    over_provisioned_lookback_s: int = Field(
        default=3600, gt=0, description="recent demand the over-provisioned test looks back over"
    )
    over_provisioned_max_drain_h: float = Field(default=0.25, ge=0, description="backlog one machine fewer clears")
    fleet_snapshot_stale_s: float = Field(
        default=600, gt=0, description="a fleet snapshot older than this is not used for capacity"
    )
    # A rate over the first few minutes of observation overstates; never divide by less than this.
    min_rate_span_s: float = Field(
        default=300, gt=0, description="a rate is never divided by less time than this (early rates overstate)"
    )
    max_task_types: int = Field(
        default=64, ge=1, description="most task types tracked (a bad job system cannot grow memory without end)"
    )
    max_gpu_models: int = Field(
        default=32, ge=1, description="most GPU models measured apart (a fleet rents a handful; the rest count overall)"
    )
    seen_event_ids: int = Field(
        default=50_000,
        ge=100,
        description="event ids remembered for de-duplication (the latest this many at least, twice at most)",
    )
    # 40 machines at 120 tasks/h complete 28,800 tasks in the 6 h window: 50,000 reach back ten hours at that pace,
    # so a completion resent within any window is recognised
    completions_remembered: int = Field(
        default=50_000,
        ge=100,
        description="completions remembered as reported (the latest this many at least, twice at most), so one "
        "resent under a new event id counts once",
    )
    max_producers: int = Field(
        default=10_000,
        ge=1,
        description="most producers (machines, or workers without one) and worker names remembered, least "
        "recently active forgotten first (a job system naming a worker per task cannot grow memory or the saved "
        "state without end)",
    )

    # Inputs from the job system that one mistake can swing: `fleetpilot publish queue default=10^20` was once
    # accepted and rented 19 machines in three minutes. A million tasks is ~9 days of a 40-machine fleet's
    # work (40 x 120 tasks/h x 24 h is 115,200 a day): beyond it a snapshot is a mistake, not a queue.
    max_plausible_queue_tasks: int = Field(
        default=1_000_000,
        ge=1,
        description="a queue snapshot with more pending or running tasks than this (one type or all) is "
        "dead-lettered as implausible",
    )
    # 240 tasks are 2 worker-hours at 120/h: two machines over the policy's 1 h drain target, a small step
    unconfirmed_rise_tasks: int = Field(
        default=240,
        ge=0,
        description="a task type's queue rise beyond this over the previous snapshot counts only once a second "
        "snapshot shows it (one outlier cannot rent the budget)",
    )

    # Job systems keep a daily rhythm: what followed this moment a day ago is published with every signal once
    # a whole season (plus an hour, for the level then) has been watched, so the decider sees the next hours
    # of yesterday's shape (0 turns it off). Quarter hours are fine enough for machines that take hours.
    season_s: int = Field(default=86400, ge=0, description="period of the rhythm; 0: no echo")
    season_bucket_s: int = Field(default=900, gt=0, description="resolution of the day-ago echo")
    season_ahead_s: int = Field(default=6 * HOUR_S, gt=0, description="how far past one season ago the echo goes")

    # publication (the service, not the core's arithmetic)
    evaluate_interval_s: float = Field(default=15, gt=0, description="how often the state is evaluated")
    publish_interval_s: float = Field(
        default=60, gt=0, description="the signal is published at least this often, and on material change"
    )
    material_pending_change: int = Field(
        default=10, ge=1, description="a change of pending tasks at least this large is published at once"
    )
    material_pending_ratio: float = Field(
        default=0.25, gt=0, description="a relative change of pending tasks this large is published at once"
    )
    material_capacity_ratio: float = Field(
        default=0.25, gt=0, description="a relative change of fleet capacity this large is published at once"
    )

    # ingestion: acks wait for the state holding the event to be in Redis
    batch_size: int = Field(default=500, ge=1, description="task events pulled per batch")
    batch_wait_s: float = Field(default=0.2, gt=0, description="wall time a pull waits to fill a batch")
    checkpoint_every_events: int = Field(
        default=4000, ge=1, description="state is saved to Redis at least every this many events"
    )

    @model_validator(mode="after")
    def _windows_fit_buckets(self) -> DemandSettings:
        if not self.windows_s:
            raise ValueError("windows_s must name at least one window")
        for name, value in [("windows_s", w) for w in self.windows_s] + [
            ("sustain_s", self.sustain_s),
            ("trend_window_s", self.trend_window_s),
            ("throughput_window_s", self.throughput_window_s),
            ("over_provisioned_lookback_s", self.over_provisioned_lookback_s),
        ]:
            if value <= 0 or value % self.bucket_s:
                raise ValueError(f"{name}={value} must be a positive multiple of bucket_s={self.bucket_s}")
        if self.season_s and (self.season_s % self.season_bucket_s or self.season_ahead_s > self.season_s):
            raise ValueError(
                f"season_s={self.season_s} must be a multiple of season_bucket_s={self.season_bucket_s}"
                f" and at least season_ahead_s={self.season_ahead_s}"
            )
        if list(self.windows_s) != sorted(set(self.windows_s)):
            raise ValueError(f"windows_s={self.windows_s} must be distinct and ascending")
        return self

    @property
    def tracked_windows_s(self) -> tuple[int, ...]:
        """Published windows plus those the state rules need (sustain, trend, throughput, look-back)."""
        extra = {self.sustain_s, self.trend_window_s, self.throughput_window_s, self.over_provisioned_lookback_s}
        return tuple(sorted(set(self.windows_s) | extra))

    @property
    def longest_window_s(self) -> int:
        return max(self.tracked_windows_s)
