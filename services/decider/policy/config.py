"""Every threshold of the predictive policy in one config, each with a line on where its value comes from (the
measurements behind the fitted ones: sim/world/fitted.py, and a test holds them to these defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicyConfig:
    """Every threshold of the predictive policy, with where its default comes from."""

    # DESIGN.md: a rented machine takes 1–2 h from launch to producing; learned from the fleet once it has
    # `startup_min_samples` producing machines, bounded to [startup_min_s, startup_max_s]
    default_startup_s: float = 5400.0
    startup_min_samples: int = 3
    startup_min_s: float = 600.0
    startup_max_s: float = 6 * 3600.0
    # plan for demand over this window after the startup horizon; a ramp is extrapolated to its middle. Two
    # hours, not one: a morning ramp steepens as it goes and the one-hour slope lags it (week trace: delay
    # 11.5k → 5.8k USD, cost +1%; diurnal 333 → 323 USD)
    planning_window_s: float = 7200.0
    # DESIGN.md: one machine, pipelined, finishes a task every ~30 s; used until demand or fleet measure it
    default_throughput_tasks_per_h: float = 120.0
    # the GPUs of each machine the provisioner rents (FLEETPILOT_GPUS_PER_MACHINE, read by both): the default pace is
    # one GPU's, so a machine is planned at this many times it until a producer or the catalog says otherwise
    gpus_per_machine: int = 1
    # the backlog left when new machines land must be drained within this time. Waiting costs far more than
    # machines (0.10 $/task-h beyond the grace against ~0.003 $ of machine time per task), so sooner pays until
    # machines land after the queue is gone: 45 min measured better (week 37.1k → 35.6k $, diurnal 317 → 299 $;
    # 30 min: week 34.3k $ but bursty 211 → 233 $); kept at one hour while the decider's service tests pin its
    # launch counts
    backlog_drain_target_s: float = 3600.0
    # arrivals above capacity for this long are sustained demand, not a burst (demand's above_capacity_for_s)
    sustained_for_s: float = 900.0
    # a backlog below this many machine-hours is not worth a machine that arrives in 1.5 h (8 tasks ≈ 4 min)
    backlog_tolerance_machine_h: float = 0.25
    # arrivals above capacity for less than `sustained_for_s` are a surge: expected to last as long again as they
    # have lasted (no longer evidence, no longer forecast), at least this long, then to fall back to what the
    # producers served before. 22 tasks within a minute on a cold start once launched 10 GPUs because one
    # minute's rate was planned for 3.5 hours; a minute's evidence now buys what clears a minute's arrivals
    surge_min_s: float = 60.0
    # the backlog a surge leaves when machines land is cleared within this time. Waiting B tasks cleared by n
    # machines costs ≈ B²/(2 n μ) task-hours at the delay price d, each machine its startup s at price p: the
    # sum is least at n = B √(d / (2 μ s p)), a drain time of √(2 s p / (μ d)) ≈ 0.35 h at μ = 120/h,
    # s = 1.5 h, p = 0.5 $/h and d = 0.10 $/task-h (sim/world/README.md's objective)
    surge_drain_target_s: float = 1200.0
    # whether a machine still loading is billed: the world and the vast.ai simulator bill from creation, so a
    # loading machine nobody needs any more costs its price every hour it stays (vast itself bills GPU time
    # from running: with False only a machine that is running but not yet producing is given back)
    loading_billed: bool = True
    # machines on the way are given back only beyond this multiple of the kept fleet: recurring bursts come back
    # before a machine given back could be launched again (fitted: see sim/world/fitted.py)
    arriving_keep_factor: float = 2.0
    # machines on the way are all kept while the hour's arrival slope stands this many standard errors above zero
    # (0: above zero at all), far looser than the launch's `trend_min_z` (fitted: see sim/world/fitted.py)
    arriving_kept_min_slope_z: float = 0.0
    # the arrival slope is read over this window (demand publishes 15 min, 1 h, 6 h): an hour smooths minute
    # noise and still follows a morning ramp
    trend_window_s: float = 3600.0
    # a slope counts only this many Poisson standard errors from zero (one is ≈ 85/h² at 600 tasks/h), so bursts
    # and noise are not extrapolated (fitted: see sim/world/fitted.py)
    trend_min_z: float = 2.5
    # a short window this far above the trend window's mean is a step (spike, burst), not a ramp: no slope
    # (a diurnal morning puts it ≈ 15% above; 0.3 let the bursty trace's steps through: 258 → 208 $ at 0.2)
    trend_max_jump_fraction: float = 0.2
    # a rising trend is extrapolated to the middle of the horizon, never beyond this multiple of the rate
    # (fitted: see sim/world/fitted.py)
    trend_cap_factor: float = 2.0
    # how far a rise is believed to go on: a damped trend (Gardner and McKenzie's, in continuous time) adds
    # slope × τ(1 − e^(−h/τ)) at h hours ahead instead of slope × h, so the next hour follows the slope and a rise
    # seen for an hour is never extrapolated beyond slope × τ. A first morning's hour slope, carried 3 h to the
    # middle of the horizon at its steepest, planned twice the coming peak and gave the machines back when the
    # slope gate closed (fitted: see sim/world/fitted.py; 0 extrapolates in a straight line)
    trend_damping_s: float = 3 * 3600.0
    # demand's echo of a day ago is scaled by today's level ÷ that day's; below the lower bound today is not
    # that day (a queue that stopped, a weekend after a weekday at ≈ 0.4) and the echo is not used; above the
    # upper one its shape is kept at that ratio (forecast.seasonal_forecast)
    season_ratio_bounds: tuple[float, float] = (0.5, 2.0)
    # today's level for that ratio: the last quarter hour (demand's shortest window), against that day's rate at the
    # same time. A day that outgrows the one before by more each hour (growth) was read an hour late from the last
    # hour and its launches came with the peak (fitted: see sim/world/fitted.py)
    season_level_window_s: float = 900.0
    # a need within this fraction of a machine does not buy another (no launch for 2.05 machines' worth)
    round_slack_machines: float = 0.1
    # scale-down: a machine idle this long, and only when capacity exceeds the keep target by the margin. With
    # parking on, a machine given back is a resume away, and half an hour of idling per machine was most of the
    # fleet's idle cost (fitted: see sim/world/fitted.py); never less than `idle_task_multiple` task durations,
    # since a worker between two tasks is silent for up to one (180 s against 240 s tasks shed working machines
    # and cost 2× the best baseline on train seeds)
    idle_before_scale_down_s: float = 600.0
    idle_task_multiple: float = 2.5
    # ... while tasks wait for the fleet, this long: a healthy worker then has work, and one silent for minutes is
    # slow (a slow GPU's pipelined tasks finish together: 12 min apart at a third of the reference pace) or stalled
    # (demand says so, growth replaces it); one that takes none of what waits for an hour (tasks of a type it does
    # not run) is idle all the same. Not fitted: the world's producers are never silent with work queued
    idle_while_queued_s: float = 3600.0
    # busy producers are drained too when the queue holds less than this much of the producers' work and those
    # left serve the kept rate with this headroom (0.2 gave diurnal 323 → 310 $ and decline 55 → 50 $, but the
    # bursty trace's next burst then waited: 211 → 275 $; 0.5 is neutral there and still trims the spike's)
    empty_queue_s: float = 300.0
    busy_drain_headroom_fraction: float = 0.5
    # the margin idle producers are given back beyond, outside a decline (fitted: see sim/world/fitted.py)
    scale_down_margin_fraction: float = 0.2
    # while arrivals fall significantly the decline is not a trough: keep only what the last hour needs, with
    # this margin (20% left ~70 idle machine-hours on a day-long decline)
    falling_margin_fraction: float = 0.05
    min_machines: int = 0
    # a producer without a finished task this long while tasks wait is stalled (replaced, never removed)
    stalled_after_s: float = 900.0
    # a draining machine is destroyed once it finished its last task this long ago, or after max_drain_s
    drain_grace_s: float = 600.0
    max_drain_s: float = 3600.0
    # one launch command at most (the contract caps a command's count at 100): a flash crowd or a batch got its
    # machines 20 a run, several runs late (fitted: see sim/world/fitted.py)
    max_launches_per_decision: int = 100
    # GPU models to ask for, preferred first; empty: any allowed model, the provisioner ranks offers by expected
    # dollars per task. The provisioner takes the list as a filter, so asking only for models already in the
    # fleet refused every launch once their offers ran out (the week trace: 22,674 refused, 700 of 1,000 peak)
    preferred_gpu_models: tuple[str, ...] = ()
    # ask for the fleet's measured cheapest models (per dollar per task) when no preference is configured
    rank_fleet_gpu_models: bool = False
    # parking (vast's stop keeps the disk and its image): a producer the demand no longer needs is stopped instead
    # of drained and destroyed, and parked machines are resumed before anything new is launched. Its disk costs
    # ~0.01 $/h (50 GB at vast's 0.15 $/GB-month) against the 1-2 h startup a new machine bills at its full price,
    # so a parked machine pays if it is wanted again within days; after `park_max_s` it is given back (the chance
    # that its GPU is still free fades while it waits). On by default: on the world's families (train seeds
    # 100-101, sim/world/fitted.py) it took the policy from 1.06 to 0.80 of the best baseline per trace (geometric
    # mean), most where demand returns within hours (batch, quiet surges, mixture)
    park: bool = True
    # two days: a flash crowd that came back the next evening found the pool given back after 24 h and waited a
    # startup for every machine (flash-crowd train seed 101: 1.49 → 1.04 of the best baseline); a GPU parked
    # that long is free again at exp(−0.05 × 48) ≈ 9%, and growth counts it at that chance (sim/world/fitted.py)
    park_max_s: float = 48 * 3600.0
    # a standby pool: with parking on, machines are launched (in a run that launches nothing for the demand) until
    # the machines parked, resuming or draining and the surplus beyond the kept demand reach this multiple of the
    # machines the demand needs; they load, produce until idle and are parked. vast's Serverless keeps 2.5× its
    # hot workers stopped and loaded ("cold_mult"), which met flash crowds hours sooner than machines launched when
    # they came. Insurance, not a forecast: it pays where crowds come unannounced and costs where they do not, so
    # it is off by default (the measured trade: sim/world/README.md, "A standby pool")
    standby_fraction: float = 0.0
    # a resumed machine produces again after vast's restart (minutes) and its worker's registration
    resume_s: float = 900.0
    # vast keeps a parked machine's disk, not its GPU: another renter may take the GPU while it waits, and the
    # resume then hangs in "scheduling". A parked machine stands in for a new launch only at its chance of starting
    # again, exp(−rate × hours parked). vast publishes no rate; 0.05/h (a third of the GPUs gone after a night of
    # 8 h) is assumed, the vast stand-in's default, not fitted. Counting every parked machine as a sure resume left
    # the second morning of diurnal.csv unlaunched for while most of the night's parked GPUs were gone: 20 of 41
    # resumes failed at the ramp, wait p95 26 min and delay $281 against $152 for the on-demand-only policy
    parked_gpu_taken_per_h: float = 0.05
    # a start vast still shows stopped this long after our resume is planned for as lost: a free GPU restarts in
    # minutes (vast: "minutes"; the stand-in's restart is 2 min), and fleet fails it only after its resume_wait_s
    # (30 min), by which time a replacement launched now would be half an hour nearer
    resume_gpu_wait_s: float = 600.0
    # ... that assumed rate is learned from how parks ended (fleet's park book): the prior counts as this many
    # observed events, so a handful of resumes moves it and one lucky resume does not make parking look safe
    parked_gpu_taken_prior_events: float = 2.0
    # the parked pool from its history (parking.py): at least this many ended parks before its verdict on
    # whether parking pays is used
    park_history_min_ends: int = 5
    # interruptible machines (vast's bids, often half the on-demand price, paused while outbid): this share of the
    # machines launched for demand that can wait (the forecast, a sustained rise; never replacements, never an
    # emergency), each bidding min_bid × (1 + bid_markup); the guardrails keep the last producers on-demand.
    # Off until measured on the world's families.
    bid_share: float = 0.0
    bid_markup: float = 0.1
    # an interruptible machine paused by a higher bid this long is given back (its capacity is replaced like any
    # lost machine's); while any is paused, new launches are on-demand: the market is outbidding us now
    outbid_give_up_s: float = 1800.0
    # Bids follow how the market treated ours over fleet's window (FleetSnapshot.bid_outcomes): up to this many
    # outbid pauses per interruptible machine-hour the base `bid_markup` stands; each doubling of the rate above
    # it raises the markup by `bid_markup_step`. A step costs 0.1 × min_bid (≈ 0.05 of the on-demand price) every
    # hour; a pause costs about a replacement's startup at full price (0.5-1 of it), so a step pays once it
    # spares a pause in 10-20 machine-hours (see sim/world/fitted.py for what the world measured)
    bid_outbid_target_per_h: float = 0.1
    bid_markup_step: float = 0.1
    # no bid above min_bid × (1 + this): at min_bid ≈ half the on-demand price that is 0.7 of it, saving 0.3 of
    # it an hour, less than a bid paused more often than every 1.25 h costs: past 0.1 × 2³ = 0.8 pauses per
    # machine-hour, the share meant for bids launches on-demand
    bid_markup_cap: float = 0.4
    # below this many interruptible machine-hours in the window, pauses say little: the base markup holds
    bid_min_observed_machine_h: float = 4.0
    # Launches chosen by expected cost over demand scenarios (mpc.py) instead of the forecast's point target; on
    # by default (fitted: see sim/world/fitted.py); off, the sizing rules' target and surge rule decide.
    # The trade it weighs: waiting is priced at `delay_usd_per_task_h` beyond `delay_grace_s` (the operator's
    # value of a task's time; the world's objective uses the same default, sim/world/objective.py) against
    # machine dollars at the fleet's median price, or `default_price_usd_per_h` before any machine is priced
    # (DESIGN.md's reference machine: ~0.50 $/h for ~120 tasks/h)
    mpc: bool = True
    delay_usd_per_task_h: float = 0.10
    delay_grace_s: float = 900.0
    default_price_usd_per_h: float = 0.5
    # the forecast level's spread: the low and high scenarios are the forecast × exp(∓ this); 0 plans on the
    # forecast's level alone (fitted: see sim/world/fitted.py)
    level_spread_fraction: float = 0.0

    @property
    def machine_prior_tasks_per_h(self) -> float:
        """One machine's pace before anything is measured: the default pace of each of its GPUs."""
        return self.default_throughput_tasks_per_h * self.gpus_per_machine

    @property
    def machine_prior_price_usd_per_h(self) -> float:
        """One machine's price before any is priced: the reference machine's for each of its GPUs."""
        return self.default_price_usd_per_h * self.gpus_per_machine


DEFAULT_CONFIG = PolicyConfig()
