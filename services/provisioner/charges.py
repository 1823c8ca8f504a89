"""The account's charges as FleetPilot reports them: vast.ai's charge rows, each named by kind and day and tied to
the GPU model the provisioner knows the instance by. Pure: rows and what is known in, contract lines out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import cast

from services.provisioner.reconcile import KnownInstance
from services.provisioner.vast_models import VastCharge
from shared.contract import ChargeLine
from shared.contract.offers import ChargeKind


def charge_lines(charges: Iterable[VastCharge], known: Mapping[int, KnownInstance]) -> list[ChargeLine]:
    lines = []
    for charge in charges:
        instance = known.get(charge.instance_id) if charge.instance_id is not None else None
        lines.append(
            ChargeLine(
                instance_id=charge.instance_id,
                gpu_model=instance.gpu_model if instance is not None else None,
                kind=cast(ChargeKind, charge.kind),
                day=datetime.fromtimestamp(charge.timestamp, UTC).date(),
                quantity=max(0.0, charge.quantity),
                amount_usd=max(0.0, charge.amount),
                description=charge.description[:300],
            )
        )
    return sorted(lines, key=lambda line: (line.day, line.instance_id or 0, line.kind))
