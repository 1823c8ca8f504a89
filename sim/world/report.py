"""How an evaluation is shown: a readable table, and a plot of what the policy did over time."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from sim.world.evaluate import Evaluation


def _minutes(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def table(evaluation: Evaluation, console: Console | None = None) -> None:
    console = console or Console()
    r = evaluation.as_dict()
    for warning in evaluation.warnings:
        console.print(f"[bold red]WARNING:[/] {warning}", highlight=False)
    title = f"{evaluation.policy} on {evaluation.trace} (seed {evaluation.seed})"
    if evaluation.kind == "lower_bound":
        title += ": a lower bound, not a run"
    elif evaluation.kind == "clairvoyant_run":
        title += ": a run that reads the future (an upper bound on the optimum)"
    out = Table(title=title, show_header=False)
    out.add_column("measure")
    out.add_column("value", justify="right")
    rows = [
        ("objective", f"${r['objective_usd']:,.2f}"),
        ("cost", f"${r['cost_usd']:,.2f}"),
        ("delay cost", f"${r['delay_cost_usd']:,.2f}"),
    ]
    if evaluation.kind == "lower_bound" and "milp_solved" in r:
        # the whole-machine bound: the solver's proof, and its best plan (whole machines, still clairvoyant)
        rows += [
            ("tasks", f"{r['tasks_submitted']:,}"),
            ("solved to 1 % / stopped at its time limit", "solved" if r["milp_solved"] else f"gap {r['milp_gap']:.1%}"),
            ("best plan: machines / starts / delay",
             f"${r['plan_machine_usd']:,.2f} / ${r['plan_start_usd']:,.2f} / ${r['plan_delay_usd']:,.2f}"),
            ("best plan's peak machines", f"{r['plan_peak_machines']}"),
        ]  # fmt: skip
    elif evaluation.kind == "lower_bound":
        # no waits, machines or launches: the bound's plan is fractional and no fleet could follow it
        rows += [
            ("tasks", f"{r['tasks_submitted']:,}"),
            ("work-only bound", f"${r['work_bound_usd']:,.2f}"),
            ("the achievable run", "--policy clairvoyant-run"),
        ]
    else:
        rows += [
            ("tasks submitted / completed", f"{r['tasks_submitted']:,} / {r['tasks_completed']:,}"),
            (
                "wait p50 / p95 / max",
                f"{_minutes(r['wait_p50_min'])} / {_minutes(r['wait_p95_min'])} / {_minutes(r['wait_max_min'])} min",
            ),
            ("machine-hours (idle)", f"{r['machine_hours']:,.1f} ({r['idle_machine_hours']:,.1f})"),
            ("launches (wasted)", f"{r['launches']} ({r['wasted_launches']})"),
            ("peak instances", f"{r['peak_instances']}"),
        ]
    rows.append(("simulation wall time", f"{r['sim_wall_s']:.2f} s"))
    for label, value in rows:
        out.add_row(label, value)
    objective = evaluation.objective
    out.caption = (
        f"delay charged at ${objective.delay_usd_per_task_h}/task-h beyond {objective.grace_min:g} min of waiting"
    )
    console.print(out)


def plot(evaluation: Evaluation, path: str | Path) -> Path:
    """Queue length, fleet size by state and spend over time, one panel each (matplotlib, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = evaluation.samples
    hours = [s.at_s / 3600 for s in samples]
    figure, (queue_ax, fleet_ax, spend_ax) = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True)
    figure.suptitle(
        f"{evaluation.policy} on {evaluation.trace}: objective ${evaluation.objective_usd:,.2f}"
        f" (cost ${evaluation.cost_usd:,.2f} + delay ${evaluation.delay_cost_usd:,.2f})"
    )
    queue_ax.plot(hours, [s.queue_tasks for s in samples], color="tab:red", linewidth=1)
    queue_ax.set_ylabel("queued tasks")
    states = [
        ("producing", [s.producing for s in samples], "tab:green"),
        ("loading", [s.loading for s in samples], "tab:orange"),
        ("resuming", [s.resuming for s in samples], "tab:pink"),
        ("draining", [s.draining for s in samples], "tab:blue"),
        ("failed/offline", [s.failed for s in samples], "tab:gray"),
        # parked machines hold no GPU but are billed for their disks and come back in minutes: shown apart
        ("parked", [s.parked for s in samples], "tab:olive"),
    ]
    fleet_ax.stackplot(hours, *[values for _, values, _ in states], labels=[name for name, _, _ in states],
                       colors=[color for _, _, color in states], step="post")  # fmt: skip
    fleet_ax.set_ylabel("instances")
    fleet_ax.legend(loc="upper left", fontsize="small")
    if evaluation.kind == "lower_bound":
        fleet_ax.set_title("the bound's relaxed plan (fractional machines), not a run", fontsize="small")
    spend_ax.plot(hours, [s.spend_usd_per_h for s in samples], color="tab:purple", linewidth=1, label="$/h")
    spend_ax.set_ylabel("spend $/h")
    cumulative = spend_ax.twinx()
    cumulative.plot(hours, [s.cost_usd for s in samples], color="black", linewidth=1, linestyle="--")
    cumulative.set_ylabel("cost so far $ (dashed)")
    spend_ax.set_xlabel("simulated hours")
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
