"""AWS-style predictive scaling beside target tracking, as EC2 Auto Scaling runs the two together.

Predictive scaling forecasts each hour's load from the load history (it needs a day of it, uses at most the last
14 days, and finds daily and weekly patterns) and, `SchedulingBufferTime` before the hour starts, raises the
group's minimum capacity to what that load needs at the target utilisation. It only ever raises the floor:
scaling in is left to target tracking, which keeps the group at load ÷ target utilisation above the floor, and
scales in slowly (stabilisation window and cooldown, `target_tracking.py`).

The forecast here: the mean of the same hour over the previous days (the daily pattern); once a week of history
exists, the mean of the same hour of the same weekday one and two weeks back (the weekly pattern, which sees a
weekend coming). A capacity buffer (10%) covers the days' noise, the way a user sizes predictive scaling.

`SchedulingBufferTime` is at most 3600 s (AWS's API reference, PredictiveScalingConfiguration): capacity can be
launched at most an hour before the forecast needs it. EC2 instances start in minutes; a vast.ai machine takes
1-2 h to produce, so on vast.ai this rule's capacity lands up to an hour late every morning. That is what a user
moving AWS's rule to vast.ai gets, and the baseline keeps AWS's limit rather than a buffer AWS does not offer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sim.world.model import WorldView
from sim.world.policies.target_tracking import TargetTrackingConfig, TargetTrackingPolicy

HOUR_MIN = 60
DAY_H = 24
WEEK_H = 7 * DAY_H
# AWS's API reference: SchedulingBufferTime, "the maximum value is 3600 seconds"
MAX_SCHEDULING_BUFFER_S = 3600.0


@dataclass(frozen=True)
class AwsPredictiveConfig:
    target_tracking: TargetTrackingConfig = field(default_factory=TargetTrackingConfig)
    scheduling_buffer_s: float = MAX_SCHEDULING_BUFFER_S
    # predictive scaling needs 24 h of history and uses at most 14 days of it
    min_history_days: int = 1
    max_history_days: int = 14
    capacity_buffer: float = 0.10

    def __post_init__(self) -> None:
        if not 0 <= self.scheduling_buffer_s <= MAX_SCHEDULING_BUFFER_S:
            raise ValueError(
                f"scheduling_buffer_s={self.scheduling_buffer_s:g}: AWS allows 0 to {MAX_SCHEDULING_BUFFER_S:g} s"
            )


class AwsPredictivePolicy(TargetTrackingPolicy):
    name = "aws-predictive"

    def __init__(self, config: AwsPredictiveConfig = AwsPredictiveConfig()) -> None:
        super().__init__(config.target_tracking)
        self.predictive = config
        self._forecast_by_hour: dict[int, float | None] = {}

    def forecast_tasks_per_h(self, view: WorldView, hour: int) -> float | None:
        """This hour's forecast arrivals from the past days seen in full (the same weekday's once a week is
        behind the hour); None before a day of them."""
        if hour in self._forecast_by_hour:
            return self._forecast_by_hour[hour]
        arrivals = view.arrivals_by_minute
        seen_minutes = len(arrivals) - 1  # the current minute is still filling
        step_h = WEEK_H if hour >= WEEK_H else DAY_H
        past = []
        for hours_back in range(step_h, self.predictive.max_history_days * DAY_H + 1, step_h):
            start = (hour - hours_back) * HOUR_MIN
            if start < 0:
                break
            if start + HOUR_MIN <= seen_minutes:
                past.append(sum(arrivals[start : start + HOUR_MIN]))
        enough = len(past) >= (1 if step_h == WEEK_H else self.predictive.min_history_days)
        forecast = sum(past) / len(past) if enough else None
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
