"""Trace families: the same seed gives the same trace, and each family has the property that defines it."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from services.cli.main import app
from sim.world.families import (
    DAY_MIN,
    FAMILIES,
    LEVEL_MACHINES,
    REFERENCE_TASKS_PER_H,
    TEST_SEEDS,
    TRAIN_SEEDS,
    demand,
    generate,
)
from sim.world.fitted import FITTED_CONSTANTS
from sim.world.trace import load_trace

SEEDS = [*TRAIN_SEEDS, *TEST_SEEDS]


def _hourly(counts: np.ndarray) -> np.ndarray:
    return counts[: len(counts) // 60 * 60].reshape(-1, 60).sum(axis=1).astype(float)


def _daily_means(rates: np.ndarray) -> np.ndarray:
    return rates[: len(rates) // DAY_MIN * DAY_MIN].reshape(-1, DAY_MIN).mean(axis=1)


def _fitted_factor(rates: np.ndarray) -> float:
    hourly = rates.reshape(-1, 60).mean(axis=1)
    slope = np.polyfit(np.arange(len(hourly)), np.log(hourly), 1)[0]
    return float(np.exp(slope * len(hourly)))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_seed_gives_the_same_trace_and_another_seed_another(family: str) -> None:
    first, again, other = generate(family, 200, 2), generate(family, 200, 2), generate(family, 201, 2)
    assert first == again
    assert first.arrivals_per_min != other.arrivals_per_min
    assert first.minutes == 2 * DAY_MIN
    assert first.name == f"{family}-200"


def test_train_and_test_seeds_do_not_overlap() -> None:
    assert not set(TRAIN_SEEDS) & set(TEST_SEEDS)
    assert len(TEST_SEEDS) >= 10


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_draws_a_different_shape_per_seed_from_its_own_stream(family: str) -> None:
    # the family's name is in the seed: two families never share their draws
    others = [name for name in FAMILIES if name != family]
    for other in others:
        assert generate(family, 200, 1).arrivals_per_min != generate(other, 200, 1).arrivals_per_min


@pytest.mark.parametrize("family", ["diurnal", "weekly", "random-walk"])
def test_ordinary_demand_is_sized_in_reference_machines_like_the_bundled_traces(family: str) -> None:
    low, high = LEVEL_MACHINES
    for seed in SEEDS:
        trace = generate(family, seed, 3)
        peak_machines = trace.peak_tasks_per_h / REFERENCE_TASKS_PER_H
        assert low * 0.2 <= peak_machines <= high * 4, (seed, peak_machines)


def test_arrivals_are_poisson_around_the_rate() -> None:
    drawn = demand("diurnal", 200, 3)
    counts = np.array(generate("diurnal", 200, 3).arrivals_per_min, dtype=float)
    expected = drawn.rates_per_h / 60.0
    assert counts.sum() == pytest.approx(expected.sum(), rel=0.02)
    # where the rate is flat (a quarter hour), the counts' variance is about their mean, as Poisson's is
    residual = (counts - expected) / np.sqrt(np.maximum(expected, 1e-9))
    assert 0.8 < float(np.var(residual)) < 1.2


def test_diurnal_peaks_in_the_afternoon_and_is_quiet_at_night() -> None:
    for seed in SEEDS:
        rates = demand("diurnal", seed, 2).rates_per_h
        by_hour = rates.reshape(-1, 60).mean(axis=1)[:24]
        assert 11 <= int(np.argmax(by_hour)) <= 18, seed
        assert by_hour[2:5].mean() < 0.5 * by_hour.max(), seed


def test_weekly_has_a_weekend_dip() -> None:
    for seed in SEEDS:
        days = _daily_means(demand("weekly", seed, 7).rates_per_h)
        weekday, weekend = days[:5].mean(), days[5:].mean()
        assert weekend <= 0.75 * weekday, (seed, weekend / weekday)
        assert days[:5].min() > weekend, seed


def test_growth_grows_and_decline_declines() -> None:
    for seed in SEEDS:
        # the trend over the whole trace, fitted through every hour's log rate (the daily cycle averages out)
        rising = _fitted_factor(demand("growth", seed, 4).rates_per_h)
        falling = _fitted_factor(demand("decline", seed, 4).rates_per_h)
        assert rising >= 1.3, (seed, rising)
        assert falling <= 1 / 1.3, (seed, falling)


def test_a_flash_crowd_rises_fast_and_decays_slowly_far_above_the_base() -> None:
    for seed in SEEDS:
        rates = demand("flash-crowd", seed, 3).rates_per_h
        peak = int(np.argmax(rates))
        assert rates[peak] >= 3 * np.median(rates), seed
        # up from below half the peak within ten minutes; down to half takes longer than that
        before = rates[max(0, peak - 10) : peak + 1]
        assert before.min() <= rates[peak] / 2 or peak < 10, seed
        after = rates[peak : peak + 12]
        assert after.min() > rates[peak] / 2, seed


def test_batches_are_lumpy_and_heavy_tailed() -> None:
    sizes: list[int] = []
    for seed in SEEDS:
        drawn = demand("batch", seed, 3)
        counts = np.array(generate("batch", seed, 3).arrivals_per_min)
        # most tasks come in lumps: the busiest 2% of minutes carry over a third of all tasks
        busiest = np.sort(counts)[::-1][: len(counts) // 50]
        assert busiest.sum() >= counts.sum() / 3, seed
        assert drawn.lumps.sum() >= (drawn.rates_per_h / 60).sum(), seed
        lumps = drawn.lumps
        starts = np.flatnonzero((lumps > 0) & (np.concatenate([[0], lumps[:-1]]) == 0))
        sizes += [int(lumps[s : s + 10].sum()) for s in starts]
    sizes_array = np.array(sizes, dtype=float)
    # heavy tail: the largest batch is many times the median one
    assert sizes_array.max() >= 8 * np.median(sizes_array)


def test_quiet_surges_are_mostly_quiet_with_short_surges() -> None:
    for seed in SEEDS:
        rates = demand("quiet-surges", seed, 3).rates_per_h
        quiet = np.median(rates)
        assert rates.max() >= 8 * quiet, seed
        surging = rates > 4 * quiet
        assert surging.mean() < 0.3, seed
        # no surge lasts an hour
        longest = max(
            (len(run) for run in np.split(surging, np.flatnonzero(np.diff(surging)) + 1) if run[0]), default=0
        )
        assert longest < 60 * 2, seed


def test_a_random_walk_wanders_without_a_daily_cycle() -> None:
    day_to_day = []
    for seed in SEEDS:
        rates = demand("random-walk", seed, 4).rates_per_h
        hourly = rates.reshape(-1, 60).mean(axis=1)
        assert hourly.max() >= 1.5 * hourly.min(), seed
        steps = np.diff(np.log(rates[::5]))
        assert 0.05 < float(np.std(steps)) < 0.25, seed
        day_to_day.append(np.corrcoef(hourly[:-24], hourly[24:])[0, 1])
    diurnal = [
        np.corrcoef(h[:-24], h[24:])[0, 1]
        for h in (demand("diurnal", seed, 4).rates_per_h.reshape(-1, 60).mean(axis=1) for seed in SEEDS)
    ]
    assert np.mean(day_to_day) < np.mean(diurnal) - 0.3


def test_a_mixture_has_a_day_and_lumps() -> None:
    for seed in SEEDS:
        drawn = demand("mixture", seed, 5)
        assert drawn.lumps.sum() > 0, seed
        # the median day, so that a flash crowd in one night does not hide the cycle
        by_hour_of_day = np.median(drawn.rates_per_h.reshape(-1, 60).mean(axis=1).reshape(5, 24), axis=0)
        assert by_hour_of_day[10:19].mean() > 1.3 * by_hour_of_day[0:5].mean(), seed


def test_the_cli_writes_a_trace_the_evaluator_reads(tmp_path: Path) -> None:
    out = tmp_path / "batch.csv"
    result = CliRunner().invoke(
        app, ["sim", "traces", "--family", "batch", "--seed", "200", "--days", "1", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert load_trace(out).arrivals_per_min == generate("batch", 200, 1).arrivals_per_min
    printed = CliRunner().invoke(app, ["sim", "traces", "--family", "batch", "--seed", "200", "--days", "1"])
    assert printed.stdout == out.read_text()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--family", "lumpy", "--seed", "1"], "unknown family 'lumpy'"),
        (["--family", "batch", "--seed", "1", "--days", "0"], "days must be"),
        (["--family", "batch", "--seed", "-3"], "seed must be"),
    ],
)
def test_a_wrong_option_is_one_clear_line(args: list[str], words: str) -> None:
    result = CliRunner().invoke(app, ["sim", "traces", *args])
    assert result.exit_code == 2
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_family_benchmark_keeps_train_and_test_apart_and_compares_with_the_best_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from benchmarks import policy as bench

    monkeypatch.chdir(tmp_path)  # the benchmark writes bench-results/ where it runs
    assert bench.families(["quiet-surges"], [100], [200], 1, Console(file=io.StringIO())) == 0
    result = json.loads((tmp_path / "bench-results" / "policy.json").read_text())
    train, test = result["splits"]["train"], result["splits"]["test"]
    assert (train["seeds"], test["seeds"]) == ([100], [200])
    assert [t["trace"] for t in train["traces"]["quiet-surges"]] == ["quiet-surges-100"]
    record = test["traces"]["quiet-surges"][0]
    results = record["results"]
    best = min(bench.BASELINES, key=lambda p: results[p]["objective_usd"])
    assert record["best_baseline"] == best
    assert record["predictive_vs_best_baseline"] == pytest.approx(
        results["predictive"]["objective_usd"] / results[best]["objective_usd"], rel=1e-3
    )
    # every policy and the achievable run score at or above the bound on the test split
    assert all(ratio >= 1 - 1e-9 for ratio in record["ratio_to_bound"].values())
    assert "clairvoyant-run" in results and "clairvoyant-run" not in train["traces"]["quiet-surges"][0]["results"]
    # both bounds on test seeds; the gap split divides by the higher of the two
    fluid, whole = results["clairvoyant"]["objective_usd"], results["clairvoyant-whole-machines"]["objective_usd"]
    assert record["whole_machine_vs_fluid_bound"] == pytest.approx(whole / fluid, rel=1e-3)
    hindsight = results["target-tracking-hindsight"]["objective_usd"]
    assert record["hindsight_vs_tighter_bound"] == pytest.approx(hindsight / max(fluid, whole), rel=1e-3)
    assert "geomean_hindsight_vs_tighter_bound" in test["overall"]
    assert "geomean_predictive_vs_bound" in test["overall"]
    assert "geomean_predictive_vs_hindsight" in test["overall"]
    # the hindsight reference is reported, apart: never the best baseline
    assert result["references"] == ["target-tracking-hindsight"]
    assert results["target-tracking-hindsight"]["kind"] == "hindsight_reference"
    assert record["best_baseline"] != "target-tracking-hindsight"
    assert record["predictive_vs_hindsight"] == pytest.approx(
        results["predictive"]["objective_usd"] / results["target-tracking-hindsight"]["objective_usd"], rel=1e-3
    )
    assert result["fitted_constants"] == json.loads(json.dumps([c.as_dict() for c in FITTED_CONSTANTS]))


def test_the_levers_benchmark_divides_each_lever_by_the_on_demand_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--levers` had no test and divided by a policy it no longer ran (a KeyError since parking became the
    default): each lever's objective ÷ predictive-on-demand's on the same trace, on-demand's own ratio 1."""
    from rich.console import Console

    from benchmarks import policy as bench

    monkeypatch.chdir(tmp_path)
    assert bench.levers(["quiet-surges"], [200], 1, Console(file=io.StringIO()), with_runs=False, workers=1) == 0
    result = json.loads((tmp_path / "bench-results" / "policy_levers.json").read_text())
    family = result["families"]["quiet-surges"]
    record = family["traces"][0]
    on_demand = record["predictive-on-demand"]["objective_usd"]
    assert record["predictive-on-demand"]["ratio_to_on_demand"] == 1.0
    for lever in ("predictive-park", "predictive-bids", "predictive-levers", "predictive-standby"):
        assert record[lever]["ratio_to_on_demand"] == pytest.approx(record[lever]["objective_usd"] / on_demand, 1e-3)
        assert family["ratio_to_on_demand"][lever] == record[lever]["ratio_to_on_demand"]  # one seed: its own
    assert set(result["geomean_ratio_to_on_demand"]) == {
        "predictive-park",
        "predictive-bids",
        "predictive-levers",
        "predictive-standby",
    }


def test_the_levers_benchmark_with_runs_shows_what_parking_is_worth_to_a_run_that_knows_the_future(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--with-runs` puts each trace's clairvoyant run with parking ÷ the one without beside the policy's own
    lever figures: the ceiling the lever has where demand can be foreseen."""
    from rich.console import Console

    from benchmarks import policy as bench

    monkeypatch.chdir(tmp_path)
    assert bench.levers(["diurnal"], [200], 1, Console(file=io.StringIO()), with_runs=True, workers=1) == 0
    result = json.loads((tmp_path / "bench-results" / "policy_levers.json").read_text())
    family = result["families"]["diurnal"]
    record = family["traces"][0]
    references = record["references_usd"]
    expected = references["clairvoyant-run-levers"] / references["clairvoyant-run"]
    assert record["clairvoyant_run_park_vs_on_demand"] == pytest.approx(expected, abs=1e-3)
    assert family["clairvoyant_run_park_vs_on_demand"] == record["clairvoyant_run_park_vs_on_demand"]


def test_the_draws_benchmark_replays_each_trace_in_other_worlds_and_counts_the_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--draws 2`: draw 0 is the trace in its own seed's world (the family table's figures), draw 1 another
    market and other launch luck; the per-draw verdicts, the spread and the verdict on the mean follow from the
    objectives written beside them."""
    from rich.console import Console

    from benchmarks import policy as bench
    from sim.vast.scenario import Scenario
    from sim.world.evaluate import BASELINES, evaluate
    from sim.world.families import generate

    monkeypatch.chdir(tmp_path)
    assert bench.draws(["quiet-surges"], [200], 2, 1, Console(file=io.StringIO()), workers=1) == 0
    result = json.loads((tmp_path / "bench-results" / "policy_draws.json").read_text())
    family = result["families"]["quiet-surges"]
    runs = family["traces"]["200"]["objectives"]
    assert len(runs) == 2 and runs[0] != runs[1]  # another world, another outcome
    trace = generate("quiet-surges", 200, 1)
    own = Scenario.load(bench.SCENARIO).model_copy(update={"seed": 200})
    assert runs[0]["predictive"] == pytest.approx(evaluate(trace, "predictive", own, 200).objective_usd, abs=1e-3)
    ratios = [r["predictive"] / min(r[b] for b in BASELINES) for r in runs]
    assert family["traces"]["200"]["predictive_vs_best_baseline"] == pytest.approx(ratios, abs=1e-3)
    assert family["worse_per_draw"] == [int(r > 1.0) for r in ratios]
    assert family["verdict_differs"] == int((ratios[0] > 1.0) != (ratios[1] > 1.0))
    assert family["rms_log_change"] == pytest.approx(abs(math.log(ratios[1] / ratios[0])), abs=1e-3)
    mean = {p: (runs[0][p] + runs[1][p]) / 2 for p in runs[0]}
    assert family["geomean_on_mean"] == pytest.approx(mean["predictive"] / min(mean[b] for b in BASELINES), abs=1e-3)
    with pytest.raises(ValueError, match="at least 2"):
        bench.draws(["quiet-surges"], [200], 1, 1, Console(file=io.StringIO()), workers=1)
