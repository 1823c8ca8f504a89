"""Which policy constants were fitted by measuring them in the world simulator, on which demand and seeds.

Constants chosen by measurement are only honest if the figures reported for them come from demand they were
not fitted on. Each entry names the constant as it is spelled in the code, its value, the families of demand
(sim/world/families.py) or bundled traces it was measured on, and the seeds: only TRAIN_SEEDS (and SELECTION_SEEDS,
more seeds on the train side for close variants) belong here, figures are reported on TEST_SEEDS. The family
benchmark (benchmarks/policy.py) copies this list into its results.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sim.world.families import SELECTION_SEEDS, TRAIN_SEEDS


@dataclass(frozen=True)
class FittedConstant:
    name: str  # as the config field or module constant is spelled, e.g. "PolicyConfig.launch_headroom"
    value: float | int | str
    families: tuple[str, ...]  # family names (sim/world/families.py) or bundled trace names
    seeds: tuple[int, ...]
    note: str = ""  # what was measured to choose it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# the nine families of sim/world/families.py, for a constant measured on all of them
EVERY_FAMILY = (
    "diurnal",
    "weekly",
    "growth",
    "decline",
    "flash-crowd",
    "batch",
    "quiet-surges",
    "random-walk",
    "mixture",
)

# the seed sets as sim/world/families.py defines them, for a constant measured on the whole of one
EVERY_TRAIN_SEED = tuple(TRAIN_SEEDS)
EVERY_TRAIN_AND_SELECTION_SEED = (*TRAIN_SEEDS, *SELECTION_SEEDS)

FITTED_CONSTANTS: list[FittedConstant] = [
    FittedConstant(
        name="PolicyConfig.arriving_keep_factor",
        value=2.0,
        families=("diurnal", "weekly", "growth", "decline", "flash-crowd"),
        seeds=EVERY_TRAIN_SEED,
        note="machines on the way given back only beyond this multiple of the kept fleet; first tried on the"
        " bundled traces (1.0: bursty 209 → 372 $), then compared on the train seeds, 2 days each, mean"
        " objective 1.0 → 2.0: diurnal 437 → 420, weekly 346 → 316, growth 263 → 271, decline 257 → 229,"
        " flash-crowd 2050 → 2010",
    ),
    FittedConstant(
        name="PolicyConfig.arriving_kept_min_slope_z",
        value=0.0,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="machines on the way kept while the hour's slope is this many standard errors above zero (before: only"
        " while the launch's gate found the slope significant or the quarter hour ran above the hour). Every family,"
        " each trace ÷ its best runnable baseline, geometric mean over seeds then families (traces worse): train"
        " seeds 100-104, the rule before 0.6951 (8), z > 0 0.6913 (7), z > 1 0.6967 (6); selection seeds 105-109,"
        " 0.7520 (6), 0.7402 (4), 0.7461 (5); z > 0 kept, the lowest on both. Reported on the test seeds 200-209"
        " (the README): 0.7298 (10 of 90) before, 0.7202 (13 of 90) after",
    ),
    FittedConstant(
        name="PolicyConfig.surge_drain_target_s",
        value=1200.0,
        families=("batch", "flash-crowd"),
        seeds=EVERY_TRAIN_SEED,
        note="derived from the objective (√(2 s p / (μ d)) ≈ 0.35 h), then checked on the train seeds, 2 days"
        " each, before the world's task-event feed and machine pace spread: 3600 → 1200 → 600 s gave batch"
        " 5218 → 4707 → 4518 and flash-crowd 2010 → 1904 → 1852 (the policy before the surge rule: 3787, 1879);"
        " again with them (and 100 launches a decision): 600 s gave batch 4541 → 4406, flash-crowd 1845 → 1805,"
        " quiet-surges 1122 → 1123, but 22 tasks on a cold start would then launch 2 machines where one clears"
        " them within the startup: kept at the derived value",
    ),
    FittedConstant(
        name="PolicyConfig.max_launches_per_decision",
        value=100,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_SEED,
        note="20 → 100 (the contract's cap on one command), 2 days each, mean objective: batch 4709 → 4541,"
        " flash-crowd 1869 → 1845, mixture 864 → 844, weekly 336 → 332, random-walk 403 → 420, quiet-surges"
        " 1114 → 1122, diurnal, growth and decline within 0.5; sum over families 10236 → 10045",
    ),
    FittedConstant(
        name="PolicyConfig.bid_markup",
        value=0.1,
        families=("diurnal",),
        seeds=(100, 101, 102),
        note="bids at min_bid × 1.1 against × 1.3 with bid_share 0.5, 2 days each, summed objective 1383 → 1745"
        " (seed 101's delay 295 → 645: a higher bid was paused about as often in the simulator's bid walk and"
        " its pauses fell at the peak); kept at 0.1. The walk is the simulator's guess, not vast's data",
    ),
    FittedConstant(
        name="PolicyConfig.bid_outbid_target_per_h",
        value=0.1,
        families=("diurnal", "weekly"),
        seeds=EVERY_TRAIN_SEED,
        note="derived (a markup step costs ≈ 0.05 of the on-demand price an hour, a pause ≈ a replacement's"
        " startup), then measured with bid_share 0.5 (diurnal 2 days, weekly 7) at commit 26a7b5f, geometric"
        " mean of objective ÷ on-demand only, diurnal / weekly: the fixed markup 0.1 (before) 0.992 / 1.012,"
        " this rule 0.984 / 1.020, outbid pauses 223 → 125 and 512 → 332. Neutral within the seeds' spread:"
        " the simulator's bid walk has no regime beyond its level, which 'no bids while one is paused' already"
        " reads. Exploratory runs (while other policy changes landed, so not comparable among themselves):"
        " target 0.02 or a 6 h window no better; the rate rule in place of the pause rule worse on weekly",
    ),
    FittedConstant(
        name="PolicyConfig.bid_markup_cap",
        value=0.4,
        families=("diurnal", "weekly"),
        seeds=EVERY_TRAIN_SEED,
        note="reasoned (a bid at 0.7 of on-demand saves less than a pause every 1.25 h costs); in the same"
        " exploratory runs a cap of 0.6 (bids stop past 3.2 pauses a machine-hour, never reached) was no better;"
        " measured with bid_outbid_target_per_h as above",
    ),
    FittedConstant(
        name="PolicyConfig.resume_s",
        value=900.0,
        families=("diurnal",),
        seeds=EVERY_TRAIN_SEED,
        note="not tuned; the rule it serves was: parked machines cover the startup horizon's need but are resumed"
        " only for what the next resume_s needs (resumed at a new machine's lead time they idled at full price"
        " for an hour): summed objective 2334 (on-demand only) against 2322 with it. Early parking trials"
        " looked at diurnal test seeds 200-201 before switching to these train seeds. Re-checked on every family,"
        " train seeds 100-102, at 68ea027: resuming a startup ahead of the need (the most recently parked until"
        " their chances add up to the launch) so that a GPU found taken is known in time measured 0.742 of the"
        " best baseline against 0.722 (weekly 0.909 → 1.137); not kept",
    ),
    FittedConstant(
        name="PolicyConfig.trend_window_s",
        value=3600.0,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_SEED,
        note="a judgement (an hour smooths minute noise and still follows a morning ramp); checked at 35234e7"
        " against a slow ramp's fallback: a rising slope the hour cannot tell from noise counted when the 6 h"
        " window shows it significant, at no more than the hour's own. Every family, train seeds 100-104, each"
        " trace ÷ its best runnable baseline: 0.7040 against 0.7013 with the hour alone, 6 traces worse against"
        " 8; growth 0.983 → 0.958 but growth seed 102 1.18 → 2.02, flash-crowd 0.895 → 0.939; not kept. The same"
        " on the first morning only (no echo of a day ago yet): 0.7034, 6 worse, growth 102 1.90, so the loss is the"
        " first morning's own overshoot; not kept either",
    ),
    FittedConstant(
        name="PolicyConfig.trend_min_z",
        value=2.5,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="a judgement first (three Poisson standard errors), swept at f4d613f on every family, train seeds 100-104,"
        " each trace ÷ its best runnable baseline (geometric mean over seeds, then families; traces worse than the"
        " best): 2.0 0.7133 (8 worse), 2.25 0.7007 (7), 2.5 0.6958 (4), 2.75 0.7028 (7), 3.0 0.7013 (8). 2.5 stood"
        " out and its neighbours did not follow it, so 3.0 was kept then. Swept again at 796bfb2 (machines on the"
        " way kept while the hour still rises) on the train seeds 100-104 and the selection seeds 105-109: 2.25"
        " 0.7012 (7) / 0.7273 (4), 2.5 0.6887 (6) / 0.7371 (3), 2.75 0.6848 (4) / 0.7501 (7), 3.0 0.6913 (7) /"
        " 0.7402 (4). 2.5 is below 3.0 on both sets, in the ratio and in traces lost, as it was on the first sweep;"
        " the step is small (0.7125 against 0.7153 over both sets) and 2.25-2.75 scatter around it, so it is a"
        " slightly better gate, not a cure. Also tried and not kept: a slope between 1 (or 2) and 3 standard errors"
        " as a scenario of its own in the expected-cost choice, weighted by where it lies between the two: 0.7112"
        " (9 worse) and 0.7048 (6 worse, growth seed 102 1.18 → 1.56). Tried at ad4bf04 and not kept: the slope's"
        " standard error measured by demand from the arrivals' own scatter (quarter-hour blocks over 6 h around a"
        " quadratic, neighbours correlated as AR(1); about three times Poisson's on the diurnal family) in place of"
        " Poisson's: as the gate at 2.5, 0.7224 (9 worse); with Poisson's kept for the decline gate, 0.6948 (7);"
        " the same at 1.0 and 1.5, 0.7175 (6) and 0.7155 (7); Poisson's gate with the slope shrunk by"
        " 1 − (error ÷ slope)², the error from a median-based scatter, 0.6877 (5) on train and 0.7437 (6) against"
        " 0.7371 (3) on the selection seeds. The smooth families gained (diurnal 0.976 → 0.942; diurnal seed 103"
        " 1.19 → 1.05, where a busy half hour had been extrapolated into a ramp to 1.5 × the demand that came) and"
        " mixture lost (0.566 → 0.621: the rises after its crowds and batches that the Poisson gate let through"
        " were real). Tried at dd2e6fc (the world of c747ffc) and not kept, train seeds only, against 0.6752 (3):"
        " Poisson's gate with the slope shrunk by 1 − (2.5 × error ÷ slope)², 0.6780 (5), and by"
        " 1 − (error ÷ slope)², 0.6768 (3); the first took decline 0.891 → 0.873 and diurnal 0.944 → 0.924, and"
        " flash crowds 0.883 → 0.913 and mixture 0.536 → 0.574 paid for it",
    ),
    FittedConstant(
        name="PolicyConfig.scale_down_margin_fraction",
        value=0.2,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="a judgement first (idle producers given back only while capacity exceeds the kept fleet by a fifth),"
        " swept at dbadae6 on every family, each trace ÷ its best runnable baseline (geometric mean over seeds, then"
        " families; traces worse than the best), train seeds 100-104: 0.05 0.6848 (4 worse), 0.1 0.6817 (4), 0.15"
        " 0.6880 (5), 0.2 0.6887 (6); 0.1 on the selection seeds 105-109: 0.7417 (5) against 0.7371 (3) at 0.2"
        " (diurnal 0.820 → 0.832, random-walk 0.883 → 0.897, mixture 0.599 → 0.621). The train side's gain did not"
        " hold on the selection seeds, so 0.2 stays",
    ),
    FittedConstant(
        name="PolicyConfig.busy_drain_headroom_fraction",
        value=0.5,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="first chosen on the bundled traces (0.2: diurnal 323 → 310 $, decline 55 → 50 $, bursty 211 → 275 $;"
        " 0.5 neutral on bursty), measured at 959eda2 on every family, each trace ÷ its best runnable baseline"
        " (geometric mean over seeds, then families; traces worse): 0.3 gave 0.6746 (5) against 0.6887 (6) on train"
        " seeds 100-104 and 0.7497 (7) against 0.7371 (3) on the selection seeds 105-109 (decline 0.844 → 0.898,"
        " mixture 0.599 → 0.633), so 0.5 stays",
    ),
    FittedConstant(
        name="PolicyConfig.trend_cap_factor",
        value=2.0,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_SEED,
        note="a judgement first (a slope extrapolated at most to twice today's rate), swept at 1e43a13 on every"
        " family, train seeds 100-104, each trace ÷ its best runnable baseline (geometric mean over seeds, then"
        " families; traces worse than the best): 1.25 0.7510 (12 worse), 1.5 0.7010 (10), 1.75 0.7071 (7), 2.0"
        " 0.6951 (8), 3.0 0.7016 (7); kept at 2.0. A lower cap helps the smooth days (diurnal 0.961 → 0.905 at"
        " 1.5: the first day's hour slope, extrapolated three hours at its peak, launched machines that landed in"
        " the evening) and costs the growing ones (growth 0.931 → 1.092). Tried at the same commit and not kept: a"
        " curvature damping (the hour's slope against the 6 h window's) never fired, the hour's slope standing"
        " above the 6 h one up to the peak (0.6951, unchanged); no producer drained while arrivals rise (0.7146,"
        " 10 worse); a surge's rate read from its queue (producers' pace + pending ÷ the surge's age) while it is"
        " younger than the short window, at 1, 0.5 of the queue, or from a 5-minute age: 0.6970 (7 worse),"
        " 0.6981 (8), 0.7002 (8), flash-crowd 0.914 → 0.929 / 0.903 / 0.927",
    ),
    FittedConstant(
        name="PolicyConfig.trend_damping_s",
        value=3 * 3600.0,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="the damped trend's time (forecast.damped_ahead_s), swept at 969b82f on every family, each trace ÷ its"
        " best runnable baseline (geometric mean over seeds, then families; traces worse than the best): train"
        " seeds 100-104, straight line (before) 0.6752 (3), 1.5 h 0.6819 (7), 2 h 0.6843 (7), 3 h 0.6634 (5), 6 h"
        " 0.6703 (5); selection seeds 105-109, straight 0.7403 (6), 3 h 0.7335 (7), 6 h 0.7411 (6). At 3 h on"
        " both sets: growth 0.882 → 0.830 / 0.852 → 0.837, decline 0.891 → 0.872 / 0.878 → 0.845, weekly 0.811 →"
        " 0.783 / 0.801 → 0.781; flash-crowd 0.883 → 0.929 / 1.092 → 1.119 (a crowd's climb is read later)."
        " The sweep is not smooth (mixture moves 0.51-0.62 between neighbouring values), so the choice was"
        " checked on a second draw of the world (world seed + 1000, train seeds): straight 0.6663 (6), 3 h 0.6503"
        " (4), diurnal 0.867 → 0.814, random-walk 0.845 → 0.777, flash-crowd 0.908 → 0.915",
    ),
    FittedConstant(
        name="PolicyConfig.planning_window_s",
        value=7200.0,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_SEED,
        note="chosen on the bundled week and diurnal traces (one hour to two: the week's delay 11.5k → 5.8k USD),"
        " checked at 98b92e2 on every family, train seeds 100-104, each trace ÷ its best runnable baseline"
        " (geometric mean over seeds, then families; traces worse): 3600 s 0.6751 (4), 7200 s 0.6634 (5),"
        " 10800 s 0.6835 (7; growth-102 1.30). Flash crowds move most (0.975 / 0.929 / 0.920), weekly the other way"
        " (0.822 / 0.783 / 0.787): kept",
    ),
    FittedConstant(
        name="PolicyConfig.standby_fraction",
        value=0.0,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="the standby pool of loaded, parked machines (growth.standby_short), off: measured at a52b27c on every"
        " family, each trace ÷ its best runnable baseline (geometric mean over seeds, then families; traces worse):"
        " train seeds 100-104, off 0.6634 (5), ×0.25 0.6743 (4), ×0.5 0.6825 (3), ×1 0.7065 (11); selection seeds"
        " 105-109, off 0.7335 (7), ×1 0.7697 (10). Flash crowds gain (train 0.929 → 0.803 at ×1, 0.775 at ×2;"
        " selection 1.119 → 0.976 at ×1, 0.857 at ×2), every smooth family loses (train diurnal 0.932 → 1.017,"
        " weekly 0.783 → 0.960, where delay was already nil and the pool is machine-hours only). ×0.25 and ×0.5 were"
        " measured on a draft that also topped the pool up in runs that resumed parked machines and kept its"
        " machines on the way without counting surplus producers; a draft that counted parked machines at their"
        " chance of resuming and topped up in any run gave 0.7144 (11) at ×1. The same idea as a default had been"
        " tried at 7937059 and not kept (PolicyConfig.park's note): this is it as an opt-in",
    ),
    FittedConstant(
        name="PolicyConfig.season_level_window_s",
        value=900.0,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_SEED,
        note="today's level for the ratio that scales a day ago's shape, against that day's rate at the same time"
        " (forecast.echo_level_per_h); every family, train seeds 100-104, each trace ÷ its best runnable baseline,"
        " geometric mean over seeds, then families: the last hour (3600 s, before) 0.7013, 8 traces worse, growth"
        " 0.983 (seed 102 1.18: its second day outgrew the first by more each hour, the ratio read an hour late and"
        " 41 machines launched with the peak); the last quarter hour against that day's hour 0.6968, 7 worse, growth"
        " 0.920 (seed 102 0.96); against that day's rate at the same time (kept) 0.6951, 8 worse, growth 0.931 (seed"
        " 102 1.02), batch 0.378 → 0.367. The scale-down margin at 0.1 instead of 0.2 measured 0.6998, 8 worse, with"
        " the hour, and 0.6965 with the quarter hour: within the seeds' noise, kept at 0.2",
    ),
    FittedConstant(
        name="PolicyConfig.park",
        value=True,
        families=EVERY_FAMILY,
        seeds=(100, 101),
        note="the lever turned on by default: each policy ÷ the best runnable baseline on each trace (target"
        " tracking, aws-predictive, demand-based, vast-serverless), geometric mean over seeds and families, 2 days"
        " each (the weekly family 7), bench market: on-demand 1.064, parking 0.800, parking and bids 0.837;"
        " parking per family: diurnal 1.06, weekly 0.92, growth 0.93, decline 1.02, flash-crowd 1.09, batch 0.44,"
        " quiet-surges 0.39, random-walk 1.02, mixture 0.76. Tried at 7937059 and not kept: a standing parked"
        " reserve for crowds not seen yet, as vast Serverless keeps its cold workers (launched to refill it while"
        " nothing else launched, machines on the way kept for it, the surplus parked as before). Every family,"
        " each trace ÷ its best runnable baseline, geometric mean over seeds then families (traces worse): train"
        " seeds 100-104, none 0.6913 (7), reserve = the kept fleet capped at 4 machines 0.7030 (5; flash-crowd"
        " 0.909 → 0.836, diurnal 0.942 → 0.980, weekly 0.816 → 0.856, growth 0.854 → 0.899); selection seeds"
        " 105-109, 0.7402 (4) against 0.7621 (8): fewer losses on train did not hold. On four families (flash"
        " crowd, diurnal, weekly, growth; train): reserve 0.25 × the kept fleet 0.907 (5 of 20), 1 × 0.965 (10),"
        " none 0.878 (6); kept without refill launches 0.888 (5)",
    ),
    FittedConstant(
        name="PolicyConfig.park_max_s",
        value=48 * 3600.0,
        families=EVERY_FAMILY,
        seeds=(100, 101, 102),
        note="how long a parked machine is kept before it is given back; ÷ the best runnable baseline per trace"
        " (geometric mean over seeds, then families; bench market, 2 days, the weekly family 7), with the"
        " seasonal shape kept above its ratio bound: 24 h 0.718, 48 h 0.707, 72 h 0.707 (only the 7-day weekly"
        " traces differ: 0.909 → 0.900). Per family 24 → 48 h: flash-crowd 1.04 → 0.93 (seed 101, whose crowd"
        " came back the next evening: 1.49 → 1.04), diurnal 0.95 → 0.92, the others within 0.01",
    ),
    FittedConstant(
        name="PolicyConfig.level_spread_fraction",
        value=0.0,
        families=EVERY_FAMILY,
        seeds=(100, 101),
        note="the forecast level's spread in the mpc scenarios; with parking, ÷ the best baseline (as above): 0.0"
        " gave 0.789, 0.1 gave 0.801 (growth 0.95 → 1.37, flash-crowd 1.14 → 1.30); on-demand alone 0.2 cost"
        " 12% more on diurnal-100 (69 wasted launches against 12 at 0.0). The surge's remaining life stays"
        " uncertain (mpc.py's Lindy bins); only the level's is off",
    ),
    FittedConstant(
        name="PolicyConfig.idle_before_scale_down_s",
        value=600.0,
        families=EVERY_FAMILY,
        seeds=(100, 101, 102),
        note="with parking on, ÷ the best runnable baseline per trace (geometric mean over seeds and families):"
        " 1800 s 0.793, 900 s 0.753, 600 s 0.748, 300 s 0.724, 180 s 1.480, 60 s 2.605. 300 s sits next to a"
        " cliff (the world's tasks take 240 s: a worker between two tasks looked idle and was shed), so 600 s,"
        " with idle_task_multiple 2.5 (reasoned, not swept) keeping it above the measured task duration on"
        " traces whose tasks are longer; the same run: on-demand at 300 s 1.118",
    ),
    FittedConstant(
        name="PolicyConfig.mpc",
        value=True,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_SEED,
        note="the expected-cost launch choice turned on by default, parking on: ÷ the best runnable baseline per"
        " trace (geometric mean over seeds, then families; bench market, its own world seed) 0.755 with the"
        " sizing rules, 0.723 with mpc; per family rules → mpc: diurnal 0.971 → 0.964, weekly 0.850 → 0.823,"
        " growth 0.917 → 0.945, decline 0.931 → 0.908, flash-crowd 0.946 → 0.930, batch 0.502 → 0.428,"
        " quiet-surges 0.426 → 0.377, random-walk 0.844 → 0.822, mixture 0.660 → 0.643. Two design fixes were"
        " found by the unit tests, not by these figures: the search is no longer capped at the busiest"
        " scenario's rate (it missed the backlog built while machines start), and machines just lost count as"
        " having served the arrivals (capacity lost read as a surge ending in minutes). Re-measured on seeds"
        " 100-101 once parked machines counted at their chance of resuming and that chance was learned from"
        " how parks ended: rules 0.819, mpc 0.722, on-demand only 1.070",
    ),
    FittedConstant(
        name="PolicyConfig.round_slack_machines",
        value=0.1,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_SEED,
        note="a judgement first (a need within a tenth of a machine buys none), swept at f276089 (the decisions of"
        " 519c4b6) on every family, each trace ÷ its best runnable baseline (geometric mean over seeds, then"
        " families; traces worse than the best); the default gave train seeds 100-104 0.6634 (5), selection seeds"
        " 105-109 0.7335 (7). 0.0: train 0.6672 (5); 0.25: 0.6682 (6) (diurnal 0.931 → 0.908, weekly 0.783 →"
        " 0.817, mixture 0.510 → 0.568); kept",
    ),
    FittedConstant(
        name="PolicyConfig.backlog_drain_target_s",
        value=3600.0,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_SEED,
        note="a judgement first (a backlog drained within the hour), swept at f276089 (the decisions of 519c4b6) on"
        " every family, each trace ÷ its best runnable baseline (geometric mean over seeds, then families; traces"
        " worse than the best); the default gave train seeds 100-104 0.6634 (5), selection seeds 105-109 0.7335"
        " (7). 1800 s: train 0.6696 (6); 7200 s: 0.6783 (5); kept",
    ),
    FittedConstant(
        name="PolicyConfig.backlog_tolerance_machine_h",
        value=0.25,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="a judgement first (a backlog worth a quarter machine-hour launches for itself), swept at f276089 (the"
        " decisions of 519c4b6) on every family, each trace ÷ its best runnable baseline (geometric mean over"
        " seeds, then families; traces worse than the best); the default gave train seeds 100-104 0.6634 (5),"
        " selection seeds 105-109 0.7335 (7). 0.1: train 0.6610 (5), selection 0.7344 (7); 0.5: train 0.6666 (5);"
        " kept (the train gain is not on the selection seeds)",
    ),
    FittedConstant(
        name="PolicyConfig.falling_margin_fraction",
        value=0.05,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_SEED,
        note="a judgement first, swept at f276089 (the decisions of 519c4b6) on every family, each trace ÷ its best"
        " runnable baseline (geometric mean over seeds, then families; traces worse than the best); the default"
        " gave train seeds 100-104 0.6634 (5), selection seeds 105-109 0.7335 (7). 0.0: train 0.6632 (5); 0.15:"
        " 0.6688 (7) (diurnal 0.932 → 0.968); kept",
    ),
    FittedConstant(
        name="PolicyConfig.sustained_for_s",
        value=900.0,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="a judgement first (arrivals above capacity for a quarter hour are sustained), swept at f276089 (the"
        " decisions of 519c4b6) on every family, each trace ÷ its best runnable baseline (geometric mean over"
        " seeds, then families; traces worse than the best); the default gave train seeds 100-104 0.6634 (5),"
        " selection seeds 105-109 0.7335 (7). 600 s: train 0.6760 (4) (mixture 0.510 → 0.573); 1800 s: train"
        " 0.6610 (5), selection 0.7340 (7); kept",
    ),
    FittedConstant(
        name="PolicyConfig.trend_max_jump_fraction",
        value=0.2,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="a judgement first, swept at f276089 (the decisions of 519c4b6) on every family, each trace ÷ its best"
        " runnable baseline (geometric mean over seeds, then families; traces worse than the best); the default"
        " gave train seeds 100-104 0.6634 (5), selection seeds 105-109 0.7335 (7). 0.1: train 0.6638 (7); 0.4:"
        " train 0.6588 (5), selection 0.7385 (7) (flash-crowd 1.119 → 1.135, mixture 0.601 → 0.624); kept",
    ),
    FittedConstant(
        name="PolicyConfig.park_history_min_ends",
        value=5,
        families=EVERY_FAMILY,
        seeds=EVERY_TRAIN_AND_SELECTION_SEED,
        note="the parked pool judged from at least this many ended parks (parking.parking_pays); swept at f276089 (the"
        " decisions of 519c4b6) on every family, each trace ÷ its best runnable baseline (geometric mean over"
        " seeds, then families; traces worse than the best); the default gave train seeds 100-104 0.6634 (5),"
        " selection seeds 105-109 0.7335 (7). never judged (parking always pays): train 0.6636 (5), selection"
        " 0.7325 (7), flash-crowd-109 1.27 → 1.18; the verdict seldom fires, kept",
    ),
]
