"""Operator directives in effect: how the active ones tighten the guardrails, set the policy's levers and pick
the machines to give back, and what each one does to the fleet of now, in numbers.

Pure: directives, a snapshot and `now` in, limits, configs and removals out. A directive only ever tightens the
configured limits (shared/contract/directives.py); `check_new` refuses one that would loosen them or mean nothing.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from services.decider.guardrails import REMOVABLE_STATES, GuardrailConfig, GuardrailRule, exclusion_key
from services.decider.policy import PolicyConfig, RemovalPlan, RemovalVerb
from services.decider.policy.config import DEFAULT_CONFIG
from shared import gpu_models
from shared.contract import FleetSnapshot, InstanceLine, InstanceState, RemovalReason
from shared.contract.directives import (
    CapBudget,
    CapInstances,
    Directive,
    DrainBy,
    ExcludeGpuModel,
    ExcludeHost,
    Lever,
    SetLever,
)

S = InstanceState
# A drain starts this long before its moment, so the machines are gone by then: the task a producer runs ends
# (~4 min), the policy destroys a drained machine once it was quiet for drain_grace_s (10 min), and a heartbeat
# run (5 min) may lie between
DRAIN_LEAD_S = 1200.0
# a launch must be able to produce before a drain; until the policy has measured the fleet's startup, DESIGN.md's
# 1-2 h (the policy's own default)
DEFAULT_STARTUP_S = DEFAULT_CONFIG.default_startup_s
# bids switched on where the configuration has no share: the share the world simulator measured them at
# (sim/world/evaluate.py "predictive-bids", sim/world/fitted.py)
BIDS_ON_SHARE = 0.5
# a producer without a finished task this long (two ~4 min tasks and more) is idle: it drains at once
IDLE_S = 600.0


@dataclass(frozen=True)
class DirectiveRemoval:
    """A machine a directive gives back: drained after its tasks, or destroyed when it has none to finish."""

    directive_id: int
    plan: RemovalPlan


def active_directives(directives: Iterable[Directive], now: datetime) -> tuple[Directive, ...]:
    """Those in force at `now` (not revoked, not expired), by number."""
    return tuple(sorted((d for d in directives if d.active(now)), key=lambda d: d.directive_id))


def drain_starts_at(directive: DrainBy) -> datetime:
    return directive.drain_by - timedelta(seconds=DRAIN_LEAD_S)


def no_launch_after(directive: DrainBy, startup_s: float) -> datetime:
    return directive.drain_by - timedelta(seconds=startup_s)


def tightened(
    guardrails: GuardrailConfig, active: Sequence[Directive], now: datetime, *, startup_s: float = DEFAULT_STARTUP_S
) -> GuardrailConfig:
    """The guardrails with every active directive applied. Only ever tighter: each limit starts at the configured
    one and may only fall, each exclusion is added to those there; the directive behind each change is named in
    `directive_ids`. `startup_s`: how long a launch takes to produce (the policy's learned figure when known)."""
    limits = guardrails
    ids = dict(guardrails.directive_ids)
    for directive in sorted(active, key=lambda d: d.directive_id):
        if isinstance(directive, CapInstances) and directive.max_instances < limits.max_instances:
            limits = replace(limits, max_instances=directive.max_instances)
            ids[GuardrailRule.MAX_INSTANCES.value] = directive.directive_id
        elif isinstance(directive, CapBudget) and directive.max_usd_per_h < limits.budget_usd_per_h:
            limits = replace(limits, budget_usd_per_h=directive.max_usd_per_h)
            ids[GuardrailRule.BUDGET.value] = directive.directive_id
        elif isinstance(directive, DrainBy):
            if now >= drain_starts_at(directive) and limits.max_instances > 0:
                limits = replace(limits, max_instances=0)
                ids[GuardrailRule.MAX_INSTANCES.value] = directive.directive_id
            last_launch = no_launch_after(directive, startup_s)
            if limits.no_launch_after is None or last_launch < limits.no_launch_after:
                limits = replace(limits, no_launch_after=last_launch)
                ids[GuardrailRule.DIRECTIVE.value] = directive.directive_id
        elif isinstance(directive, ExcludeGpuModel):
            limits = replace(limits, excluded_gpu_models=limits.excluded_gpu_models | {directive.gpu_model})
            ids.setdefault(exclusion_key(gpu_model=directive.gpu_model), directive.directive_id)
        elif isinstance(directive, ExcludeHost):
            limits = replace(limits, excluded_host_ids=limits.excluded_host_ids | {directive.host_id})
            ids.setdefault(exclusion_key(host_id=directive.host_id), directive.directive_id)
    return replace(limits, directive_ids=ids)


def check_new(directive: Directive, configured: GuardrailConfig) -> str | None:
    """Why a new directive is refused (it would loosen a limit, or change nothing), or None when it may be stored."""
    if isinstance(directive, CapInstances) and directive.max_instances >= configured.max_instances:
        relation = "above" if directive.max_instances > configured.max_instances else "equal to"
        return (
            f"cap {directive.max_instances} is {relation} the configured max_instances {configured.max_instances}: "
            "a directive can only tighten the limits"
        )
    if isinstance(directive, CapBudget) and directive.max_usd_per_h >= configured.budget_usd_per_h:
        relation = "above" if directive.max_usd_per_h > configured.budget_usd_per_h else "equal to"
        return (
            f"${directive.max_usd_per_h:.2f}/h is {relation} the configured budget "
            f"${configured.budget_usd_per_h:.2f}/h: a directive can only tighten the limits"
        )
    if isinstance(directive, DrainBy) and directive.drain_by >= directive.expires_at:
        # it would end the moment it is due: the cap of zero and the launch stop lapse with it, and the policy
        # launches again right after the drain
        return (
            f"the directive ends at {directive.expires_at:%a %H:%M} UTC, the moment the drain is due: give an "
            "expiry after the drain, for as long as the fleet must stay given back"
        )
    # A lever switched on is accepted as well as off: park and bids are the policy's choice of how to serve the
    # demand (a stopped disk, a cheaper bid), not a limit, and every action they lead to still passes the
    # guardrails as tightened by the other directives. An exclusion of a model or host the fleet never rented
    # is accepted too: the GPU catalogue holds priors, not vast's whole market, and excluding more costs nothing.
    return None


def levers(policy_config: PolicyConfig, active: Sequence[Directive]) -> PolicyConfig:
    """The policy's config with the active lever directives applied; where two set the same lever, the newest
    (the operator's latest word) wins. Bids on keep a configured share, else BIDS_ON_SHARE."""
    config = policy_config
    lever_directives = [d for d in active if isinstance(d, SetLever)]
    for directive in sorted(lever_directives, key=lambda d: (d.set_at, d.directive_id)):
        on = directive.state == "on"
        if directive.lever is Lever.PARK:
            config = replace(config, park=on)
        else:
            config = replace(config, bid_share=(policy_config.bid_share or BIDS_ON_SHARE) if on else 0.0)
    return config


def removals_for(
    snapshot: FleetSnapshot | None,
    active: Sequence[Directive],
    now: datetime,
    *,
    leaving: frozenset[int] = frozenset(),
) -> list[DirectiveRemoval]:
    """The machines the active directives give back now. `leaving`: machines already on their way out (a removal
    in flight, or one this run decided), counted as gone like the draining ones.

    From a DrainBy's drain start every machine goes. Otherwise the fleet above the tightest instance cap, then
    what stays above the tightest budget cap, is chosen: first what produces nothing (failed, parked, still
    starting: an hour or more before a first task), then idle producers (no task to finish); among busy
    producers an instance cap gives back the slowest (it limits machines, so the fastest are kept) and a budget
    cap the dearest per task (it limits dollars, so the most tasks per dollar are kept)."""
    if snapshot is None or not active:
        return []
    staying = [line for line in snapshot.instances if line.state is not S.DRAINING and line.instance_id not in leaving]
    drains = [d for d in active if isinstance(d, DrainBy) and now >= drain_starts_at(d)]
    if drains:
        first = min(drains, key=lambda d: d.drain_by)
        return [_give_back(line, first.directive_id, RemovalReason.OPERATOR_REQUEST) for line in staying]
    removals: list[DirectiveRemoval] = []
    caps = [d for d in active if isinstance(d, CapInstances)]
    if caps and len(staying) > (cap := min(caps, key=lambda d: d.max_instances)).max_instances:
        chosen = sorted(staying, key=_slowest_first(now))[: len(staying) - cap.max_instances]
        removals += [_give_back(line, cap.directive_id, RemovalReason.OPERATOR_REQUEST) for line in chosen]
        staying = [line for line in staying if line not in chosen]
    budgets = [d for d in active if isinstance(d, CapBudget)]
    if budgets:
        budget = min(budgets, key=lambda d: d.max_usd_per_h)
        committed = sum(line.committed_usd_per_h for line in staying)
        for line in sorted(staying, key=_dearest_per_task_first(now)):
            if committed <= budget.max_usd_per_h + 1e-9:
                break
            removals.append(_give_back(line, budget.directive_id, RemovalReason.BUDGET))
            committed -= line.committed_usd_per_h
    return removals


def _give_back(line: InstanceLine, directive_id: int, reason: RemovalReason) -> DirectiveRemoval:
    # a machine that may hold a task drains (it finishes first); one that cannot is destroyed: nothing to wait for
    verb: RemovalVerb = "drain" if line.state in REMOVABLE_STATES["drain"] else "destroy"
    return DirectiveRemoval(directive_id, RemovalPlan(verb, line.instance_id, reason))


def _producing_tier(line: InstanceLine, now: datetime) -> int:
    """0 failed, 1 parked, 2 starting or resuming, 3 idle producer, 4 busy producer: given back in this order."""
    if line.state is S.FAILED:
        return 0
    if line.state is S.PARKED:
        return 1
    if line.state is not S.PRODUCING:
        return 2
    quiet_s = (now - (line.last_task_at or line.state_since)).total_seconds()
    return 3 if quiet_s >= IDLE_S else 4


def _slowest_first(now: datetime) -> Callable[[InstanceLine], tuple[int, float, float]]:
    return lambda line: (_producing_tier(line, now), line.throughput_tasks_per_h or 0.0, -line.price_usd_per_h)


def _dearest_per_task_first(now: datetime) -> Callable[[InstanceLine], tuple[int, float]]:
    def key(line: InstanceLine) -> tuple[int, float]:
        rate = line.throughput_tasks_per_h or 0.0
        usd_per_task = line.price_usd_per_h / rate if rate > 0 else float("inf")
        return _producing_tier(line, now), -usd_per_task

    return key


def effect(directive: Directive, snapshot: FleetSnapshot | None, configured: GuardrailConfig, now: datetime) -> str:
    """What the directive does to the fleet of now, in numbers, in one line (the operator's answer to an add)."""
    until = _moment(directive.expires_at, now)
    lines = snapshot.instances if snapshot is not None else []
    staying = [line for line in lines if line.state is not S.DRAINING]
    fleet_now = "" if snapshot is not None else " (fleet unknown now)"
    removals = removals_for(snapshot, [directive], now)
    if isinstance(directive, CapInstances):
        head = f"cap {directive.max_instances} machines until {until} (configured {configured.max_instances})"
        after = f"{len(removals)} above it will drain after their tasks" if removals else "nothing above it"
        return f"{head}: {len(staying)} now, {after}{fleet_now}"
    if isinstance(directive, CapBudget):
        head = f"${directive.max_usd_per_h:.2f}/h until {until} (configured ${configured.budget_usd_per_h:.2f}/h)"
        committed = sum(line.committed_usd_per_h for line in staying)
        after = f"the {len(removals)} dearest per task above it drain ({_ids(removals)})" if removals else "within it"
        return f"{head}: committed ${committed:.2f}/h now, {after}{fleet_now}"
    if isinstance(directive, ExcludeGpuModel):
        model = gpu_models.normalised(directive.gpu_model)
        on_it = [line for line in staying if line.gpu_model and gpu_models.normalised(line.gpu_model) == model]
        unheard = _unheard_of(directive.gpu_model, lines)
        return f"no new {directive.gpu_model} until {until}: {_stay(on_it)}{fleet_now}{unheard}"
    if isinstance(directive, ExcludeHost):
        there = [line for line in staying if line.host_id == directive.host_id]
        return f"nothing new on host {directive.host_id} until {until}: {_stay(there, ' there')}{fleet_now}"
    if isinstance(directive, DrainBy):
        return (
            f"every machine given back by {_moment(directive.drain_by, now)}: {len(staying)} now drain from "
            f"{_moment(drain_starts_at(directive), now)}, no launch from "
            f"{_moment(no_launch_after(directive, DEFAULT_STARTUP_S), now)} (startup {DEFAULT_STARTUP_S / 3600:.1f} h)"
            f"{fleet_now}"
        )
    return f"{directive.lever.value} {directive.state} until {until}: {_lever_meaning(directive)}"


def label(directive: Directive) -> str:
    """The directive in a few words, after its number in an explanation: "#3 cap 10"."""
    if isinstance(directive, CapInstances):
        return f"cap {directive.max_instances}"
    if isinstance(directive, CapBudget):
        return f"${directive.max_usd_per_h:.2f}/h"
    if isinstance(directive, ExcludeGpuModel):
        return f"no {directive.gpu_model}"
    if isinstance(directive, ExcludeHost):
        return f"no host {directive.host_id}"
    if isinstance(directive, DrainBy):
        return f"drain by {directive.drain_by:%a %H:%M} UTC"
    return f"{directive.lever.value} {directive.state}"


def _lever_meaning(directive: SetLever) -> str:
    if directive.lever is Lever.PARK:
        if directive.state == "on":
            return "surplus producers are stopped with their disk kept and resumed before any launch"
        return "no machine is parked; the parked ones are resumed or given back as before"
    if directive.state == "on":
        return f"a share of the growth that can wait launches as interruptible bids ({BIDS_ON_SHARE:.0%} if unset)"
    return "every launch on-demand, no new interruptible bid"


def _stay(lines: Sequence[InstanceLine], where: str = "") -> str:
    """Machines an exclusion leaves alone: the running ones stay, the parked ones are not resumed."""
    parked = sum(1 for line in lines if line.state is S.PARKED)
    text = f"{len(lines) - parked} running{where} stay until given back"
    return text + (f", {parked} parked not resumed" if parked else "")


def _unheard_of(gpu_model: str, lines: Sequence[InstanceLine]) -> str:
    """A warning for a model neither the catalogue nor the fleet knows: vast lists more models than the catalogue,
    so it is excluded as written, but a misspelt one ("RTX 4009") excludes nothing the operator meant."""
    if gpu_models.find(gpu_model) is not None:
        return ""
    known = {*gpu_models.CATALOG, *(line.gpu_model for line in lines if line.gpu_model)}
    if gpu_models.normalised(gpu_model) in {gpu_models.normalised(name) for name in known}:
        return ""
    close = difflib.get_close_matches(gpu_model, sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f" (warning: {gpu_model!r} is no model the catalogue or the fleet knows, excluded as written{hint})"


def _ids(removals: Sequence[DirectiveRemoval]) -> str:
    return " ".join(f"#{r.plan.instance_id}" for r in removals)


def _moment(at: datetime, now: datetime) -> str:
    """18:00 UTC today, Mon 00:00 UTC on another day."""
    return f"{at:%H:%M} UTC" if at.date() == now.date() else f"{at:%a %H:%M} UTC"
