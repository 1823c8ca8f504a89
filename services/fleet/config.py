"""fleet's tunables (environment prefix `FLEETPILOT_FLEET_`), with the numbers behind each default."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class FleetSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETPILOT_FLEET_", env_file=None, extra="ignore", allow_inf_nan=False
    )

    # A healthy machine goes from rent to running in 1-2 h (image pull included); three is stuck.
    stuck_loading_s: float = Field(
        default=3 * 3600,
        gt=0,
        description="loading longer than this: failed (stuck_loading); healthy machines take 1-2 h",
    )
    # A running machine's worker registers within minutes of the container starting; 45 min is lost.
    never_registered_s: float = Field(
        default=45 * 60, gt=0, description="running but no worker registered this long: failed (never_registered)"
    )
    # A producing worker completes a task every ~30 s while work waits; 15 min of silence is dead.
    silent_dead_s: float = Field(
        default=15 * 60, gt=0, description="a producer with no task event this long while work waits: failed (silent)"
    )
    # Silence is judged from what fleet has read: with thousands of task events still unread on its consumer (a
    # fleet slowed by its machine read 8,000 behind the clock), a worker silent by the clock may have spoken in them.
    silence_unjudged_above_unread: int = Field(
        default=500,
        ge=0,
        description="while more task events than this wait unread on fleet's consumer, no worker is failed as silent "
        "(dead, never registered) and no all-silent alert is raised: they are judged once fleet has caught up",
    )
    # Every producer silent at once points at something bigger (the job system, the network): say so first.
    all_silent_s: float = Field(
        default=10 * 60, gt=0, description="every producer silent this long at once raises one alert first"
    )
    # "Tasks are queued" is only believed from a recent queue snapshot; a stale one never kills machines.
    queue_stale_s: float = Field(
        default=10 * 60, gt=0, description="a queue snapshot older than this is not believed (never kills machines)"
    )
    # A kept disk restarts in minutes when its GPU is free (vast: "minutes"; the simulator's restart_s is 2 min);
    # a start still waiting ("Scheduling") after half an hour waits for another renter, maybe for ever, and a new
    # launch is then the faster way back.
    resume_wait_s: float = Field(
        default=30 * 60,
        gt=0,
        description="a resume still waiting for its GPU this long: failed (gpu_taken), so it can be replaced",
    )
    # Bids are set from how often the market paused ours lately: a day holds a day's peak and trough (the rate
    # other renters bid at follows the same daily demand we do), and is short enough to follow a market that moved.
    bid_window_s: float = Field(
        default=24 * 3600, gt=0, description="trailing window of interruptible machine-hours and outbid pauses"
    )
    # The parked pool is sized from how parks ended lately (the decider's parking.py): a week holds a weekly
    # pattern's gaps (a weekend's), and the book keeps at most 200 ends of each kind whatever the window.
    park_window_s: float = Field(
        default=7 * 24 * 3600, gt=0, description="trailing window of park ends: resumed, GPU taken, given back"
    )
    throughput_window_s: float = Field(default=3600, gt=0, description="window of an instance's tasks/h")
    gone_retention_s: float = Field(default=24 * 3600, gt=0, description="how long a gone instance is remembered")
    ignored_moves_kept: int = Field(default=10, ge=0, description="ignored moves kept per instance")

    # the service's timer
    tick_s: float = Field(default=5, gt=0, description="time-in-state checks and snapshot-on-change cadence")
    snapshot_interval_s: float = Field(
        default=60, gt=0, description="a fleet snapshot is published at least this often"
    )
    seen_event_ids: int = Field(
        default=20_000,
        ge=100,
        description="event ids remembered for de-duplication (the latest this many at least, twice at most)",
    )
    # a resent batch comes minutes to hours after the original: 40 machines at 120 tasks/h complete 4,800 tasks an
    # hour, so 20,000 reach back four hours at that pace (longer for a smaller fleet), past the throughput window
    completions_remembered: int = Field(
        default=20_000,
        ge=100,
        description="completions remembered as reported (the latest this many at least, twice at most), so one "
        "resent under a new event id counts once",
    )
