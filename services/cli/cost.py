"""`fleetpilot cost`: what vast.ai charged the account, from vast's own charges (the provisioner asks vast.ai, the
only service that does): the total since a day, GPU, storage and bandwidth apart, per GPU model and per machine."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import nats.errors
import typer

from services.cli.terminal_text import printable
from shared.contract import ChargeLine, ChargeList, ChargesQuery
from shared.service import connect_once
from shared.settings import Settings

KINDS = ("gpu", "storage", "bandwidth", "other")
ASK_TIMEOUT_S = 15.0  # the provisioner pages through vast.ai's charges: seconds, not milliseconds


@dataclass
class Costs:
    """Charges summed: in all, per GPU model and per machine, each kind apart."""

    total: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_model: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    by_machine: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    model_of: dict[int, str] = field(default_factory=dict)


def summed(lines: Iterable[ChargeLine]) -> Costs:
    costs = Costs()
    for line in lines:
        model = line.gpu_model or "not FleetPilot's" if line.instance_id is not None else "account"
        model = printable(model, single_line=True)  # vast.ai's word for it, printed as a name on one line
        costs.total[line.kind] += line.amount_usd
        costs.by_model[model][line.kind] += line.amount_usd
        if line.instance_id is not None:
            costs.by_machine[line.instance_id][line.kind] += line.amount_usd
            costs.model_of[line.instance_id] = model
    return costs


def _split(amounts: dict[str, float]) -> str:
    parts = [f"{kind} ${amounts[kind]:.2f}" for kind in KINDS if amounts.get(kind)]
    return ", ".join(parts) or "nothing"


def render(costs: Costs, since: date, top: int) -> list[str]:
    """At most 80 characters a line."""
    lines = [f"vast.ai charged ${sum(costs.total.values()):.2f} since {since:%Y-%m-%d} (UTC): {_split(costs.total)}"]
    if not costs.by_machine and not costs.total:
        return lines
    lines.append("by GPU model:")
    for model, amounts in sorted(costs.by_model.items(), key=lambda item: -sum(item[1].values())):
        machines = sum(1 for m in costs.model_of.values() if m == model)
        lines.append(f"  {model[:18]:<18} ${sum(amounts.values()):>8.2f}  {machines} machines  {_split(amounts)}"[:80])
    ranked = sorted(costs.by_machine.items(), key=lambda item: -sum(item[1].values()))
    lines.append(f"by machine (the {min(top, len(ranked))} dearest of {len(ranked)}):")
    for instance_id, amounts in ranked[:top]:
        model = costs.model_of.get(instance_id, "")[:12]
        lines.append(f"  #{instance_id:<10} {model:<12} ${sum(amounts.values()):>7.2f}  {_split(amounts)}"[:80])
    return lines


async def ask_charges(settings: Settings, since: date) -> ChargeList:
    query = ChargesQuery(occurred_at=datetime.now(UTC), source="cli", since=since)
    client = await connect_once(settings)
    try:
        reply = await client.request(
            settings.subjects.provision_charges, query.model_dump_json().encode(), timeout=ASK_TIMEOUT_S
        )
    finally:
        await client.close()
    return ChargeList.model_validate_json(reply.data)


def cost(
    days: int = typer.Option(1, "--days", min=1, max=90, help="today and the days before it, in UTC (1: today)"),
    since_day: str = typer.Option(None, "--since", help="from this UTC day on (YYYY-MM-DD), instead of --days"),
    top: int = typer.Option(10, "--top", min=1, help="how many machines to list, dearest first"),
) -> None:
    """What vast.ai charged: today (or the last --days), GPU, storage and bandwidth apart, per model and machine."""
    settings = Settings()
    today = settings.make_clock().now().date()  # the stack's clock: simulated under `fleetpilot up`
    since = today - timedelta(days=days - 1)
    if since_day is not None:
        try:
            since = date.fromisoformat(since_day)
        except ValueError:
            raise typer.BadParameter(
                f"{since_day!r}: expected a day such as 2026-03-02", param_hint="--since"
            ) from None
    try:
        charges = asyncio.run(ask_charges(settings, since))
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        typer.echo("no answer from the provisioner (is it running?): the cost is unknown, not $0", err=True)
        raise typer.Exit(1) from None
    except (OSError, nats.errors.Error) as error:
        typer.echo(f"cannot reach NATS at {settings.nats_url_for_humans}: {error!r}", err=True)
        raise typer.Exit(1) from None
    partial = charges.error is not None and charges.unreadable_rows > 0 and bool(charges.lines)
    if charges.error is not None and not partial:
        why = printable(charges.error, single_line=True)  # vast.ai's words
        typer.echo(f"vast.ai's charges could not be read: {why} (the cost is unknown, not $0)", err=True)
        raise typer.Exit(1)
    for line in render(summed(charges.lines), since, top):
        typer.echo(line)
    if partial:
        # the rows read are shown, said to be partial, and the exit code says the cost is not whole
        typer.echo(
            f"PARTIAL: {charges.unreadable_rows} of vast.ai's charge rows could not be read (their amounts are"
            " unknown): the cost is at least the above, not the whole",
            err=True,
        )
        raise typer.Exit(1)
