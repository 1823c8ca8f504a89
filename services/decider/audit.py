"""The run's audit: its DecisionRecord, built from the run's basis and what its ports did, and published on the
audit stream."""

from __future__ import annotations

import logging
from datetime import datetime

from services.decider import SERVICE
from services.decider.advisor import AdvisorOutcome
from services.decider.decision import snapshot_digest
from services.decider.run_basis import RunBasis
from services.decider.run_ports import RunPorts
from shared.bus import publish_event
from shared.contract import DecisionRecord, RunOutcome
from shared.contract.audit import DeciderMode
from shared.service import ServiceContext
from shared.streams import AUDIT

log = logging.getLogger("fleetpilot.decider")


def decision_record(
    basis: RunBasis,
    ports: RunPorts,
    *,
    explanation: str,
    outcome: AdvisorOutcome | None,
    result: RunOutcome,
    finished_at: datetime,
    mode: DeciderMode,
) -> DecisionRecord:
    data = basis.data
    return DecisionRecord(
        occurred_at=finished_at,
        source=SERVICE,
        run_id=basis.run_id,
        fencing_token=ports.lease.token,
        triggers=list(basis.triggers),
        started_at=basis.started_at,
        finished_at=finished_at,
        duration_s=(finished_at - basis.started_at).total_seconds(),
        signal_freshness=data.signal_freshness,
        snapshot_freshness=data.snapshot_freshness,
        signal=data.signal,
        snapshot_digest=snapshot_digest(data.snapshot),
        recommendation=explanation[:4000],
        verdicts=ports.verdicts,
        commands_sent=ports.commands_sent,
        mode=mode,
        commands_withheld=ports.commands_withheld,
        outcome=result,
        agent=outcome.trace if outcome else None,
        directives=[directive.directive_id for directive in basis.in_force.directives],
    )


async def publish_record(ctx: ServiceContext, record: DecisionRecord) -> None:
    """A record the bus refuses is logged: the run's commands went out already, and it is not retried."""
    try:
        await publish_event(ctx.broker, ctx.subjects.decision_audit, record, stream=AUDIT.name(ctx.subjects))
    except Exception as error:
        log.error("could not publish the decision record of %s: %r", record.run_id, error)
