"""AWS-style predictive scaling beside target tracking, as EC2 Auto Scaling runs the two together.

Predictive scaling forecasts each hour's load from the same hour of the previous days (it needs a day of
history and looks back at most 14 days) and, `SchedulingBufferTime` before the hour starts, raises the group's
minimum capacity to what that load needs at the target utilisation. It only ever raises the floor: scaling
in is left to target tracking, which keeps the group at load ÷ target utilisation above the floor, and
scales in slowly (stabilisation window and cooldown, `target_tracking.py`).

One departure from AWS: its buffer time must stay under an hour (EC2 instances start in minutes), while a
vast.ai machine takes 1-2 h to produce. A user moving this rule to vast.ai would launch a startup ahead, so
the buffer here is two hours; with AWS's own limit, capacity would land an hour late every morning. The
forecast carries a capacity buffer (10%) against the days' noise, the way a user sizes predictive scaling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sim.world.model import WorldView
from sim.world.policies.target_tracking import TargetTrackingConfig, TargetTrackingPolicy

HOUR_MIN = 60
DAY_H = 24


@dataclass(frozen=True)
class AwsPredictiveConfig:
    target_tracking: TargetTrackingConfig = field(default_factory=TargetTrackingConfig)
    # vast.ai's startup horizon (AWS caps SchedulingBufferTime below 3600 s, for instances that start in minutes)
    scheduling_buffer_s: float = 2 * 3600.0
    # predictive scaling needs 24 h of history and uses at most 14 days of it
    min_history_days: int = 1
    max_history_days: int = 14
    capacity_buffer: float = 0.10


class AwsPredictivePolicy(TargetTrackingPolicy):
    name = "aws-predictive"

    def __init__(self, config: AwsPredictiveConfig = AwsPredictiveConfig()) -> None:
        super().__init__(config.target_tracking)
        self.predictive = config
        self._forecast_by_hour: dict[int, float | None] = {}

    def forecast_tasks_per_h(self, view: WorldView, hour: int) -> float | None:
        """Mean arrivals in this hour of the day over the previous days seen in full; None before a day of them."""
        if hour in self._forecast_by_hour:
            return self._forecast_by_hour[hour]
        arrivals = view.arrivals_by_minute
        seen_minutes = len(arrivals) - 1  # the current minute is still filling
        past = []
        for days_back in range(1, self.predictive.max_history_days + 1):
            start = (hour - days_back * DAY_H) * HOUR_MIN
            if start < 0:
                break
            if start + HOUR_MIN <= seen_minutes:
                past.append(sum(arrivals[start : start + HOUR_MIN]))
        forecast = sum(past) / len(past) if len(past) >= self.predictive.min_history_days else None
        # asked at most a buffer ahead, an hour's past days all lie before now: its forecast will not change
        if seen_minutes >= (hour - DAY_H + 1) * HOUR_MIN:
            self._forecast_by_hour[hour] = forecast
        return forecast

    def minimum_capacity(self, view: WorldView, per_machine_per_h: float) -> int:
        # the capacity scheduled for an hour takes effect one buffer before the hour starts
        hour = int((view.now_s + self.predictive.scheduling_buffer_s) // 3600)
        forecast = self.forecast_tasks_per_h(view, hour)
        if forecast is None:
            return 0
        target = self.config.target_utilisation
        return math.ceil(forecast * (1 + self.predictive.capacity_buffer) / (per_machine_per_h * target) - 1e-9)
