"""`fleetpilot demo`: the whole system on one machine, at an accelerated simulated clock.

It starts a private nats-server (JetStream) and redis-server, the vast.ai simulator, the Ollama stand-in, the
job system stand-in and every service as its own process (`fleetpilot run <service>`, the production entry
point), replays a bundled diurnal trace, shows a live view and ends with a summary. `--fast` runs a short
version whose summary is checked (work done, budget held, no dead letters, metrics exported): CI runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nats
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from services.cli.demo_dashboard import DashboardRecorder
from services.cli.errors import UserMistake, writable_file
from services.cli.render import decision_lines
from services.cli.terminal_text import cell
from shared.contract import (
    DeadLetter,
    DecisionRecord,
    DemandSignal,
    FleetSnapshot,
    InstanceState,
    InstanceTransitioned,
)
from shared.settings import Settings
from shared.streams import DLQ
from sim.prometheus import INSTALL_HINT, prometheus_binary
from sim.stack import SERVICES, Stack, StackPlan
from sim.world.trace import TraceError, load_trace

# the demo's log folder keeps every decision the decider audited, as `fleetpilot audit tail` prints it: the stack (and
# its audit stream) is gone when the summary asks why a launch was given back
DECISIONS_LOG = "decisions.log"

# Metrics each service must export (checked at the end of the demo, and by the end-to-end test).
REQUIRED_METRICS: dict[str, tuple[str, ...]] = {
    "demand": (
        "fleetpilot_demand_arrival_rate_per_hour",
        "fleetpilot_demand_backlog_worker_hours",
        "fleetpilot_dead_letters_total",
    ),
    "fleet": ("fleetpilot_fleet_instances", "fleetpilot_spend_usd_per_hour", "fleetpilot_dead_letters_total"),
    "provisioner": (
        "fleetpilot_vast_api_calls_total",
        "fleetpilot_vast_rate_limited_total",
        "fleetpilot_vast_api_latency_seconds",
        "fleetpilot_spend_usd_per_hour",
        "fleetpilot_budget_usd_per_hour",
        "fleetpilot_dead_letters_total",
    ),
    "decider": (
        "fleetpilot_decider_runs_total",
        "fleetpilot_decider_run_duration_seconds",
        "fleetpilot_guardrail_refusals_total",
        "fleetpilot_agent_prompt_tokens",
        "fleetpilot_dead_letters_total",
    ),
    "bench": ("fleetpilot_dead_letters_total",),
}


@dataclass
class LiveState:
    signal: DemandSignal | None = None
    snapshot: FleetSnapshot | None = None
    decisions: deque[DecisionRecord] = field(default_factory=lambda: deque(maxlen=6))
    decision_outcomes: Counter[str] = field(default_factory=Counter)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    producing_ids: set[int] = field(default_factory=set)
    seen_ids: set[int] = field(default_factory=set)
    # every decision as `fleetpilot audit tail` shows it, for the operator to read after the stack is gone
    decisions_log: Path | None = None


def render(stack: Stack, state: LiveState) -> Group:
    header = f"simulated {stack.now():%a %H:%M}  ·  x{stack.plan.speed:.0f}  ·  trace {stack.plan.trace.name}"
    demand = Table.grid(padding=(0, 2))
    if state.signal:
        s = state.signal
        rate_1h = next((w.arrival_rate_per_h for w in s.windows if w.window_s == 3600), s.sustained_arrival_rate_per_h)
        demand.add_row("state", f"[bold]{s.state.value}[/]  ({s.trend.value})")
        demand.add_row("arrivals", f"{rate_1h:.0f} tasks/h (1 h), sustained {s.sustained_arrival_rate_per_h:.0f}")
        demand.add_row("capacity", f"{s.fleet_capacity_tasks_per_h:.0f} tasks/h, {s.producing_workers} producing")
        demand.add_row("queue", f"{s.pending_tasks} pending, {s.running_tasks} running")
        demand.add_row("backlog", f"{s.backlog_worker_hours:.2f} worker-hours")
    else:
        demand.add_row("waiting for the first demand signal…")
    fleet = Table(show_header=False, box=None, padding=(0, 1))
    if state.snapshot:
        snap = state.snapshot
        counts = ", ".join(f"{state_.value} {n}" for state_, n in sorted(snap.counts_by_state.items()) if n)
        fleet.add_row(f"[bold]{counts or 'no instances'}[/]  ·  ${snap.spend_usd_per_h:.2f}/h")
        for line in snap.instances[:12]:
            fleet.add_row(cell(line.line))  # a GPU model the job system named, shown as written
        if len(snap.instances) > 12:
            fleet.add_row(f"… and {len(snap.instances) - 12} more")
    decisions = Table(show_header=False, box=None, padding=(0, 1))
    for record in list(state.decisions)[::-1]:
        decisions.add_row(f"{record.started_at:%H:%M}", record.outcome, cell(record.recommendation[:110]))
    return Group(
        Panel(header, style="cyan"),
        Panel(demand, title="demand"),
        Panel(fleet, title="fleet"),
        Panel(decisions, title=f"decisions ({sum(state.decision_outcomes.values())})"),
    )


async def follow(nc: Any, state: LiveState) -> None:
    async def on_signal(msg: Any) -> None:
        state.signal = DemandSignal.model_validate_json(msg.data)

    async def on_snapshot(msg: Any) -> None:
        state.snapshot = FleetSnapshot.model_validate_json(msg.data)

    async def on_decision(msg: Any) -> None:
        record = DecisionRecord.model_validate_json(msg.data)
        state.decisions.append(record)
        state.decision_outcomes[record.outcome] += 1
        if state.decisions_log is not None:
            with state.decisions_log.open("a") as log:
                log.write("\n".join(decision_lines(record)) + "\n\n")

    async def on_dead_letter(msg: Any) -> None:
        state.dead_letters.append(DeadLetter.model_validate_json(msg.data))

    async def on_transition(msg: Any) -> None:
        event = InstanceTransitioned.model_validate_json(msg.data)
        state.seen_ids.add(event.instance_id)
        if event.to_state.value == "producing":
            state.producing_ids.add(event.instance_id)

    subjects = Settings(subject_prefix="fp").subjects
    await nc.subscribe(subjects.demand_signal, cb=on_signal)
    await nc.subscribe(subjects.fleet_snapshot_published, cb=on_snapshot)
    await nc.subscribe(subjects.decision_audit, cb=on_decision)
    await nc.subscribe(subjects.dead_letters_all, cb=on_dead_letter)
    await nc.subscribe(subjects.fleet_instance_all, cb=on_transition)


async def scrape_metrics(stack: Stack) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(timeout=5.0) as client:
        for name, required in REQUIRED_METRICS.items():
            url = f"http://127.0.0.1:{stack.ports[name]}/metrics"
            try:
                text = (await client.get(url)).text
            except httpx.HTTPError as error:
                found[name] = {"url": url, "error": str(error), "missing": list(required)}
                continue
            exported = sorted({line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")})
            found[name] = {"url": url, "missing": [m for m in required if m not in exported], "exported": exported}
    return found


# The vast stand-in's injected host faults (sim/vast/scenario.py's fates: 3 % stuck loading, 3 % exiting with a
# docker error): such a machine can never produce whatever FleetPilot decides; its part is to fail, destroy and
# replace it, which `failed_at_end` and the waits judge. Counted apart from the launches FleetPilot itself gave
# back unproduced, or one unlucky day of the stand-in's dice (3 faults of 22 launches: 14 % at a 6 % fault rate)
# failed the verdict meant for the policy's waste.
HOST_FAULT_FATES = frozenset({"stuck_loading", "exit_error"})


def given_back_unproduced(
    ledger: dict[str, Any], state: LiveState, demand_ended_at: datetime | None = None, *, host_faults: bool = False
) -> list[int]:
    """Launched machines that were given back or failed before ever producing, while demand still came: once the
    replay's trace has ended, giving back a machine still loading is the right decision, not a wasted launch
    (the fast demo's morning ends at noon, mid-climb, and its last launches are then rightly given back).
    `host_faults`: the machines whose host was made to fail (HOST_FAULT_FATES) instead of the others."""
    return sorted(
        int(entry["instance_id"])
        for entry in ledger.get("entries", [])
        if entry.get("destroyed_at")
        and int(entry["instance_id"]) not in state.producing_ids
        and (demand_ended_at is None or datetime.fromisoformat(entry["destroyed_at"]) < demand_ended_at)
        and (entry.get("fate") in HOST_FAULT_FATES) == host_faults
    )


def launched_again_soon(ledger: dict[str, Any], given_back: list[int], within: timedelta) -> list[int]:
    """Of the machines `given_back` unproduced, those after which another machine was launched within `within`:
    the policy changed its mind and pays a startup twice. One given back with nothing launched after it was a
    hedge or a forecast the day did not bear out, and giving it back saved what it would have cost loading."""
    entries = ledger.get("entries", [])
    created = [datetime.fromisoformat(entry["created_at"]) for entry in entries if entry.get("created_at")]
    destroyed = {
        int(e["instance_id"]): datetime.fromisoformat(e["destroyed_at"]) for e in entries if e.get("destroyed_at")
    }
    return [
        instance_id
        for instance_id in given_back
        if any(destroyed[instance_id] < at <= destroyed[instance_id] + within for at in created)
    ]


def wasted_launches(
    ledger: dict[str, Any], state: LiveState, demand_ended_at: datetime | None = None, *, host_faults: bool = False
) -> int:
    """How many `given_back_unproduced` names."""
    return len(given_back_unproduced(ledger, state, demand_ended_at, host_faults=host_faults))


def demand_end(stack: Stack) -> datetime:
    """When the replayed trace's last minute ends, on the stack's clock."""
    started = stack.jobs_started_at or stack.sim_epoch  # the job stand-in replays from its own start
    return started + timedelta(minutes=stack.plan.minutes)


def failed_at_end(state: LiveState) -> int:
    """Machines the last fleet snapshot still showed failed: neither destroyed nor replaced."""
    if state.snapshot is None:
        return 0
    return int(state.snapshot.counts_by_state.get(InstanceState.FAILED, 0))


def clock_summary(stack: Stack) -> dict[str, Any]:
    """How fast the simulated clock really ran: the governor slows it while the stack waits for a CPU."""
    governor = stack.governor
    if governor is None:
        return {"speed_asked": stack.plan.speed, "speed_achieved": stack.plan.speed}
    return {
        "speed_asked": stack.plan.speed,
        "speed_achieved": round(governor.achieved_speed(), 1),
        "speed_lowest": round(min(governor.log.lowest, stack.plan.speed), 1),
        "slowed_wall_s": round(governor.log.slowed_s, 1),
    }


def summarise(
    stack: Stack,
    state: LiveState,
    ledger: dict[str, Any],
    metrics: dict[str, Any],
    dashboard_panels: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    jobs = json.loads(stack.job_summary_path.read_text()) if stack.job_summary_path.exists() else {}
    wasted = given_back_unproduced(ledger, state, demand_end(stack))
    return {
        **jobs,
        "cost_usd": round(float(ledger.get("total_cost_usd", 0.0)), 2),
        "peak_spend_usd_per_h": round(float(ledger.get("peak_committed_usd_per_h", 0.0)), 2),
        "budget_usd_per_h": stack.plan.budget_usd_per_h,
        "peak_instances": int(ledger.get("peak_instances", 0)),
        "max_instances": stack.plan.max_instances,
        "launches": len(ledger.get("entries", [])),
        "wasted_launches": len(wasted),
        "wasted_instance_ids": wasted,
        "relaunched_launches": len(relaunched := launched_again_soon(ledger, wasted, RELAUNCH_WITHIN)),
        "relaunched_instance_ids": relaunched,
        "decisions_log": str(state.decisions_log) if state.decisions_log else None,
        "given_back_after_the_demand": wasted_launches(ledger, state) - len(wasted),
        "host_faults": wasted_launches(ledger, state, host_faults=True),
        "decisions": dict(state.decision_outcomes),
        "dead_letters": len(state.dead_letters),
        "failed_at_end": failed_at_end(state),
        **clock_summary(stack),
        "metrics": metrics,
        "crashed_processes": stack.crashed(),
        # with --dashboard-png: every dashboard panel's query as Prometheus answered it (series, points, error)
        **({"dashboard_panels": dashboard_panels} if dashboard_panels is not None else {}),
    }


# The verdict's bounds on how well the work was done. A machine takes 1-2 h to produce, so the first tasks of a
# morning wait about that long whatever the policy does: quiet runs of the bundled traces measure a wait p95 of
# 55-68 min (full and fast); past WAIT_P95_BOUND_MIN the fleet came late or was replaced under the work.
WAIT_P95_BOUND_MIN = 90.0
# Launches given back or failed before they ever produced, while demand still came, host faults apart: at most a
# quarter of the launches, and two (the day that printed ✓ wasted 17 of 59). The policy gives back a machine still
# loading when the demand no longer needs it, which saves the hours it would have billed before producing: the
# full demo on a busy machine gave back 0 of 18, 0 of 18 and 0 of 15 at three earlier policies, then 2 of 18 (a dip
# before noon), 0 of 16, 0 of 18 and 3 of 25 (a late launch trimmed as the rise flattened), none followed by a launch;
# then 2 of 18 and 0 of 16. One busy day gave back 20 of 68, all followed by a launch, and printed ✗: fleet read its
# task events 8,000 behind the clock and failed working producers as dead (since then it judges no silence while
# that far behind, and the clock governor slows for such a backlog).
WASTED_LAUNCH_SHARE_BOUND = 0.25
WASTED_LAUNCHES_TOLERATED = 2
# ... and of those, on the full day, the ones followed by another launch within a startup (1-2 h): the policy
# changed its mind and paid a startup twice. At most a tenth of the launches, and one. The fast demo's six hours
# rent 5 to 11 machines and how many it gives back varies from run to run on a quiet machine (0 of 5, 2 of 11
# measured): its only bound is the quarter and two of all give-backs, which holds these too
RELAUNCH_WITHIN_H = 2
RELAUNCH_WITHIN = timedelta(hours=RELAUNCH_WITHIN_H)
RELAUNCHED_SHARE_BOUND = 0.10
RELAUNCHED_TOLERATED = 1


def check(summary: dict[str, Any], *, fast: bool = False) -> list[str]:
    """The demo's verdict: each line is a failure (the work not done, done badly, or the budget broken)."""
    problems = []
    submitted, completed = summary.get("tasks_submitted", 0), summary.get("tasks_completed", 0)
    if submitted == 0:
        problems.append("the job system submitted no task")
    if completed < 0.9 * submitted:
        problems.append(f"only {completed} of {submitted} tasks completed")
    if summary["launches"] == 0:
        problems.append("no machine was launched")
    elif (wasted := summary.get("wasted_launches", 0)) > max(
        WASTED_LAUNCHES_TOLERATED, WASTED_LAUNCH_SHARE_BOUND * summary["launches"]
    ):
        problems.append(
            f"{wasted} of {summary['launches']} launches never produced, host faults apart"
            f" (over {WASTED_LAUNCH_SHARE_BOUND:.0%})" + _which(summary, summary.get("wasted_instance_ids", []))
        )
    # a summary that does not say which were launched again counts every machine given back unproduced
    elif not fast and (relaunched := summary.get("relaunched_launches", wasted)) > max(
        RELAUNCHED_TOLERATED, RELAUNCHED_SHARE_BOUND * summary["launches"]
    ):
        problems.append(
            f"{relaunched} of {summary['launches']} launches were given back unproduced and others launched within"
            f" {RELAUNCH_WITHIN_H} h (over {RELAUNCHED_SHARE_BOUND:.0%})"
            + _which(summary, summary.get("relaunched_instance_ids", summary.get("wasted_instance_ids", [])))
        )
    if summary.get("failed_at_end"):
        problems.append(f"{summary['failed_at_end']} machines were left failed at the end, not destroyed")
    if float(summary.get("wait_p95_min", 0.0)) > WAIT_P95_BOUND_MIN:
        problems.append(f"task wait p95 {summary['wait_p95_min']} min, over the bound of {WAIT_P95_BOUND_MIN:.0f} min")
    if summary["peak_spend_usd_per_h"] > summary["budget_usd_per_h"] + 1e-9:
        problems.append(f"spend peaked at ${summary['peak_spend_usd_per_h']}/h over the budget")
    if summary["peak_instances"] > summary["max_instances"]:
        problems.append(f"{summary['peak_instances']} instances at once, over the maximum")
    if summary["dead_letters"]:
        problems.append(f"{summary['dead_letters']} dead letters")
    if not summary["decisions"]:
        problems.append("the decider recorded no decision")
    for service, found in summary["metrics"].items():
        if found.get("missing"):
            problems.append(f"{service} does not export {', '.join(found['missing'])}")
    if summary["crashed_processes"]:
        problems.append(f"processes exited early: {', '.join(summary['crashed_processes'])}")
    for where, answer in summary.get("dashboard_panels", {}).items():
        if answer["error"] or not answer["points"]:
            problems.append(f"dashboard panel {where} has no data ({answer['error'] or 'empty answer'})")
    return problems


def _which(summary: dict[str, Any], instance_ids: list[int]) -> str:
    """The machines a waste verdict names, and where the decisions that gave them back are kept."""
    ids = ", ".join(f"#{i}" for i in instance_ids)
    log = summary.get("decisions_log")
    return (f": {ids}" if ids else "") + (f" (the decisions that gave them back: {log})" if log else "")


def simulated_time(stack: Stack) -> Callable[[float], datetime]:
    return stack.sim_at


def replay_running(stack: Stack, started_s: float, timeout_s: float) -> bool:
    """The job system still replays, nothing crashed, and the wall limit is not reached. The limit stretches as
    the governor slows the clock (a slower clock needs more wall time for the same simulated day), at most 4x."""
    governor = stack.governor
    stretch = 1.0 if governor is None else min(4.0, max(1.0, stack.plan.speed / max(1e-9, governor.achieved_speed())))
    within = time.monotonic() < started_s + timeout_s * stretch
    return stack.processes["jobs"].poll() is None and within and not stack.crashed()


async def run_demo(
    plan: StackPlan, console: Console, live_view: bool, timeout_s: float, dashboard_png: Path | None = None
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="fleetpilot-demo-"))
    stack = Stack(plan, workdir, governed=True)
    state = LiveState(decisions_log=workdir / DECISIONS_LOG)
    recorder = DashboardRecorder(SERVICES, workdir) if dashboard_png else None
    dashboard_panels = None
    try:
        await asyncio.to_thread(stack.start)
        if recorder is not None:
            await asyncio.to_thread(recorder.start, stack.ports)
            console.print(f"  prometheus   {recorder.prometheus.url}")
        console.print(f"[dim]logs in {workdir}[/]")
        for name in SERVICES:
            console.print(f"  {name:<12} http://127.0.0.1:{stack.ports[name]}/metrics")
        nc = await nats.connect(stack.nats.url)
        await follow(nc, state)
        stack.start_jobs()
        started_s = time.monotonic()
        jobs = stack.processes["jobs"]
        if live_view:
            with Live(render(stack, state), console=console, refresh_per_second=2) as live:
                while replay_running(stack, started_s, timeout_s):
                    live.update(render(stack, state))
                    await asyncio.sleep(0.5)
        else:
            last_print = 0.0
            while replay_running(stack, started_s, timeout_s):
                if time.monotonic() - last_print > 10:
                    last_print = time.monotonic()
                    s, snap = state.signal, state.snapshot
                    console.print(
                        f"{stack.now():%H:%M} demand={s.state.value if s else '-'} "
                        f"pending={s.pending_tasks if s else '-'} "
                        f"fleet={dict((k.value, v) for k, v in snap.counts_by_state.items()) if snap else '-'} "
                        f"decisions={sum(state.decision_outcomes.values())} "
                        f"clock=x{stack.clock.read()[2] if stack.clock else stack.plan.speed:.0f}"
                    )
                await asyncio.sleep(0.5)
        if recorder is not None and dashboard_png is not None:
            dashboard_panels = await asyncio.to_thread(
                recorder.finish, dashboard_png, simulated_time(stack), stack.plan.speed
            )
            console.print(f"dashboard picture: {dashboard_png}")
        async with httpx.AsyncClient(timeout=5.0) as client:
            ledger = (await client.get(f"http://127.0.0.1:{stack.ports['vast']}/_sim/ledger")).json()
        metrics = await scrape_metrics(stack)
        js = nc.jetstream()
        with contextlib.suppress(Exception):
            state_ = (await js.stream_info(DLQ.name(Settings(subject_prefix="fp").subjects))).state
            if state_.messages > len(state.dead_letters):
                console.print(f"[yellow]{state_.messages} dead letters in the DLQ stream[/]")
        await nc.close()
        summary = summarise(stack, state, ledger, metrics, dashboard_panels)
        if jobs.poll() is None:
            summary["timed_out"] = True
        return summary
    finally:
        if recorder is not None:
            await asyncio.to_thread(recorder.close)
        await asyncio.to_thread(stack.close)


def with_options(plan: StackPlan, trace: Path | None, budget_usd_per_h: float | None, speed: float | None) -> StackPlan:
    """The plan with the options given; a trace is read first, so a bad one is one line, not a failed replay."""
    changes: dict[str, Any] = {}
    if trace is not None:
        try:
            minutes = len(load_trace(trace).arrivals_per_min)
        except TraceError as error:
            raise UserMistake(f"--trace {error}") from None
        start = plan.start_minute if plan.start_minute < minutes else 0
        changes.update(trace=trace, start_minute=start, minutes=min(plan.minutes, minutes - start))
    if budget_usd_per_h is not None:
        changes["budget_usd_per_h"] = budget_usd_per_h
    if speed is not None:
        changes["speed"] = speed
    return dataclasses.replace(plan, **changes)


def print_summary(console: Console, summary: dict[str, Any]) -> None:
    table = Table(title="FleetPilot demo summary", show_header=False)
    rows = [
        ("tasks served", f"{summary.get('tasks_completed', 0)} of {summary.get('tasks_submitted', 0)}"),
        ("wait p50 / p95 / max", f"{summary.get('wait_p50_min', 0)} / {summary.get('wait_p95_min', 0)} / "
                                 f"{summary.get('wait_max_min', 0)} min"),
        ("cost", f"${summary['cost_usd']:.2f}"),
        ("peak spend", f"${summary['peak_spend_usd_per_h']:.2f}/h (budget ${summary['budget_usd_per_h']:.2f}/h)"),
        ("launches / wasted", f"{summary['launches']} / {summary['wasted_launches']}"
                              + (f" ({summary.get('relaunched_launches', 0)} followed by a launch within"
                                 f" {RELAUNCH_WITHIN_H} h)"
                                 if summary["wasted_launches"] else "")
                              + (f" (+{summary['given_back_after_the_demand']} unproduced, given back after the trace"
                                 " ended)" if summary.get("given_back_after_the_demand") else "")
                              + (f"; {summary['host_faults']} host faults, destroyed and replaced"
                                 if summary.get("host_faults") else "")),
        ("peak instances", f"{summary['peak_instances']} (max {summary['max_instances']})"),
        ("decisions", ", ".join(f"{k} {v}" for k, v in sorted(summary["decisions"].items())) or "none"),
        ("dead letters", str(summary["dead_letters"])),
        ("failed at the end", str(summary.get("failed_at_end", 0))),
        ("clock", f"x{summary['speed_asked']:.0f} asked, x{summary['speed_achieved']:.0f} achieved"
                  + (f" (slowed {summary['slowed_wall_s']:.0f} s of wall time, lowest x{summary['speed_lowest']:.0f})"
                     if summary.get("slowed_wall_s") else "")),
    ]  # fmt: skip
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)


def demo(
    fast: bool = typer.Option(False, "--fast", help="a short run whose summary is checked (CI uses it)"),
    summary_json: Path = typer.Option(None, help="also write the summary as JSON here"),
    live: bool = typer.Option(None, help="live terminal view (default: when the output is a terminal)"),
    timeout_s: float = typer.Option(None, help="wall-clock limit for the replay (default 600, fast 240)"),
    dashboard_png: Path = typer.Option(
        None, help="run Prometheus beside the stack, evaluate every dashboard panel's query, draw them here"
    ),
    trace: Path = typer.Option(None, help="a CSV trace `minute,arrivals` to replay (default: the bundled diurnal)"),
    budget_usd_per_h: float = typer.Option(None, min=0.01, help="the fleet's budget in $/h (default 20, fast 10)"),
    speed: float = typer.Option(None, min=1.0, help="simulated seconds per wall second (default 360, fast 720)"),
) -> None:
    """Run the whole system on simulated vast.ai and Ollama: a day of demand in a few minutes."""
    console = Console()
    writable_file(summary_json, "--summary-json")
    writable_file(dashboard_png, "--dashboard-png")
    if dashboard_png and prometheus_binary() is None:
        raise UserMistake(f"--dashboard-png needs Prometheus's `prometheus` binary on the PATH ({INSTALL_HINT})")
    plan = with_options(StackPlan.fast() if fast else StackPlan.full(), trace, budget_usd_per_h, speed)
    live_view = console.is_terminal if live is None else live
    limit = timeout_s or (240.0 if fast else 600.0)
    console.print(
        f"FleetPilot demo: {plan.minutes / 60:.0f} simulated hours of {plan.trace.name} "
        f"at x{plan.speed:.0f}, budget ${plan.budget_usd_per_h:.0f}/h"
    )
    summary = asyncio.run(run_demo(plan, console, live_view, limit, dashboard_png))
    print_summary(console, summary)
    if summary_json:
        summary_json.write_text(json.dumps(summary, indent=2) + "\n")
    problems = check(summary, fast=fast)
    if summary.get("timed_out"):
        problems.append(f"the replay did not finish within {limit:.0f} s of wall time")
    if problems:
        for problem in problems:
            console.print(f"[red]✗ {problem}[/]")
        raise typer.Exit(1)
    console.print(
        f"[green]✓ work done (wait p95 ≤ {WAIT_P95_BOUND_MIN:.0f} min, "
        f"≤ {WASTED_LAUNCH_SHARE_BOUND:.0%} launches given back unproduced, "
        + ("" if fast else f"≤ {RELAUNCHED_SHARE_BOUND:.0%} given back and launched again, ")
        + "no machine left failed), budget held, no dead letters, every service exports its metrics[/]"
    )
