"""provisioner's wiring: commands from the COMMANDS work queue, offer look-ups, bench verdicts and the demand
signal in; instance observations and command results out; reconciliation on start-up and on a schedule."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from faststream.asgi import AsgiFastStream
from faststream.nats.annotations import NatsMessage

from services.provisioner.dry_run import DryRunVastClient, refused_in_shadow_mode
from services.provisioner.metrics import ProvisionerMetrics
from services.provisioner.operations import Provisioner
from services.provisioner.outcome_log import outcome_line
from services.provisioner.settings import ProvisionerSettings
from services.provisioner.standby import ActiveLease
from services.provisioner.store import ProvisionerStore
from services.provisioner.vast_client import VastClient
from shared.bus import answer_request, durable_pull, publish_event
from shared.contract import (
    BenchResult,
    ChargesQuery,
    DemandSignal,
    DestroyInstance,
    FleetSnapshot,
    InstanceObserved,
    LaunchInstances,
    OfferQuery,
    ProvisionCommand,
    ProvisionResult,
    ResumeInstance,
    StopInstance,
    VastAccountObserved,
)
from shared.redis_client import connect_redis
from shared.service import ServiceContext, asgi_app, stop_tasks
from shared.settings import Settings
from shared.streams import BENCH, COMMANDS, INSTANCES, LATEST, durable_consumer

SERVICE = "provisioner"
ACTIVE_LINE = "active: this replica reconciles with vast.ai (it holds the lease)"
STANDBY_LINE = "standing by: another provisioner replica holds the lease and reconciles; taking over when it lapses"

log = logging.getLogger("fleetpilot.provisioner")


class BusPublisher:
    """Instance observations and command results go to the INSTANCES stream (durable, de-duplicated by id)."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.stream = INSTANCES.name(ctx.subjects)
        self.latest_stream = LATEST.name(ctx.subjects)

    async def instance(self, event: InstanceObserved) -> None:
        await publish_event(
            self.ctx.broker, self.ctx.subjects.provision_instance(event.state), event, stream=self.stream
        )

    async def result(self, event: ProvisionResult) -> None:
        await publish_event(self.ctx.broker, self.ctx.subjects.provision_result, event, stream=self.stream)

    async def account(self, event: VastAccountObserved) -> None:
        # the last value is what `fleetpilot status` shows
        await publish_event(self.ctx.broker, self.ctx.subjects.provision_account, event, stream=self.latest_stream)


@dataclass
class VastListing:
    """Whether vast.ai's instance list was read at the last reconciliation: a provisioner that cannot reach or
    list vast.ai knows nothing of the fleet it pays for, and says so on /health (a refused key has its own
    reason, VastApiMetrics.auth_problem)."""

    failed_since: datetime | None = None

    def record(self, listed: bool, now: datetime) -> None:
        if listed:
            self.failed_since = None
        elif self.failed_since is None:
            self.failed_since = now

    def problem(self) -> str | None:
        if self.failed_since is None:
            return None
        return (
            f"vast.ai could not be reached or listed since {self.failed_since:%Y-%m-%d %H:%M:%S} UTC: the fleet "
            "is unknown (the log says why; FLEETPILOT_VAST_API_URL?)"
        )


@dataclass
class ProvisionerService:
    app: AsgiFastStream
    operations: Provisioner  # tests and tools reach the operations through it
    context: ServiceContext


def build(ctx: ServiceContext, config: ProvisionerSettings | None = None, *, dry_run: bool = False) -> AsgiFastStream:
    return assemble(ctx, config, dry_run=dry_run).app


def assemble(
    ctx: ServiceContext, config: ProvisionerSettings | None = None, *, dry_run: bool = False
) -> ProvisionerService:
    """`dry_run`: vast.ai is read for real and every create/stop/destroy is logged instead of sent."""
    config = config or ProvisionerSettings()
    metrics = ProvisionerMetrics(ctx.metrics.registry)
    metrics.budget.set(ctx.settings.budget_usd_per_h)
    metrics.max_instances.set(ctx.settings.max_instances)
    redis = connect_redis(ctx.settings.redis_url)
    store = ProvisionerStore(redis, f"fleetpilot:{ctx.settings.subject_prefix}:{SERVICE}")
    client_class = DryRunVastClient if dry_run else VastClient
    ctx.health_checks.append(metrics.vast.auth_problem)
    client = client_class(
        ctx.settings.vast_api_url, ctx.settings.vast_api_key, clock=ctx.clock, settings=config, metrics=metrics.vast
    )
    publisher = BusPublisher(ctx)
    provisioner = Provisioner(client, store, ctx.clock, ctx.settings, config, metrics, publisher)
    subscribe_commands(ctx, provisioner, publisher, config)
    subscribe_queries_and_learning(ctx, provisioner)

    listing = VastListing()
    # a refused key fails every list too; its own reason says more, so it is not said twice
    ctx.health_checks.append(lambda: None if metrics.vast.auth_problem() else listing.problem())
    loop = ReconcileLoop(ctx, provisioner, ActiveLease(store, config.lease_ttl_s), listing, config)

    async def stop_everything() -> None:
        await loop.stop()
        await client.aclose()
        await redis.aclose()

    app = asgi_app(ctx)
    app.on_startup(loop.take_the_lease)
    app.after_startup(loop.start)
    app.on_shutdown(stop_everything)
    return ProvisionerService(app, provisioner, ctx)


def subscribe_commands(
    ctx: ServiceContext, provisioner: Provisioner, publisher: BusPublisher, config: ProvisionerSettings
) -> None:
    """One durable consumer per verb; every command refused in shadow mode before vast.ai is asked."""
    subjects = ctx.subjects

    def command_consumer(verb: str) -> dict[str, Any]:
        # one durable per verb (a work-queue stream wants non-overlapping consumers), shared by every replica,
        # so each command is taken by one replica; one at a time, with an ack wait a slow launch fits in
        durable = f"{SERVICE}-{verb}"
        options = durable_pull(COMMANDS, ctx.settings, durable, batch_size=1)
        options["config"] = durable_consumer(durable, ack_wait_s=config.command_ack_wait_s)
        return options

    async def answer(command: ProvisionCommand, result: ProvisionResult) -> None:
        if result.outcome == "done":  # a refusal or failure is logged where it is decided, as a warning
            log.info(outcome_line(command, result, provisioner.known))
        await publisher.result(result)

    @ctx.broker.subscriber(subjects.provision_command("launch"), **command_consumer("launch"))
    async def on_launch(command: LaunchInstances, msg: NatsMessage) -> None:
        refusal = refused_in_shadow_mode(command, "launch", ctx.settings, ctx.clock.now())
        await answer(command, refusal or await provisioner.launch(command, heartbeat=msg.in_progress))

    @ctx.broker.subscriber(subjects.provision_command("stop"), **command_consumer("stop"))
    async def on_stop(command: StopInstance, msg: NatsMessage) -> None:
        refusal = refused_in_shadow_mode(command, "stop", ctx.settings, ctx.clock.now())
        await answer(command, refusal or await provisioner.stop(command, heartbeat=msg.in_progress))

    @ctx.broker.subscriber(subjects.provision_command("destroy"), **command_consumer("destroy"))
    async def on_destroy(command: DestroyInstance, msg: NatsMessage) -> None:
        refusal = refused_in_shadow_mode(command, "destroy", ctx.settings, ctx.clock.now())
        await answer(command, refusal or await provisioner.destroy(command, heartbeat=msg.in_progress))

    @ctx.broker.subscriber(subjects.provision_command("resume"), **command_consumer("resume"))
    async def on_resume(command: ResumeInstance, msg: NatsMessage) -> None:
        refusal = refused_in_shadow_mode(command, "resume", ctx.settings, ctx.clock.now())
        await answer(command, refusal or await provisioner.resume(command, heartbeat=msg.in_progress))


def subscribe_queries_and_learning(ctx: ServiceContext, provisioner: Provisioner) -> None:
    """Offer and charge searches answered; bench verdicts, demand and production learned from."""
    subjects = ctx.subjects

    # a queue group: of several replicas one answers, and one search reaches vast.ai; no_reply: the answer goes out
    # through answer_request, which sends it to an inbox only
    @ctx.broker.subscriber(subjects.provision_offers, queue=SERVICE, no_reply=True)
    async def on_offer_query(query: OfferQuery, msg: NatsMessage) -> None:
        await answer_request(ctx.broker, ctx.metrics, msg, await provisioner.offers(query))

    @ctx.broker.subscriber(subjects.provision_charges, queue=SERVICE, no_reply=True)
    async def on_charges_query(query: ChargesQuery, msg: NatsMessage) -> None:
        await answer_request(ctx.broker, ctx.metrics, msg, await provisioner.charges(query))

    @ctx.broker.subscriber(subjects.bench_result, **durable_pull(BENCH, ctx.settings, f"{SERVICE}-bench"))
    async def on_bench_result(result: BenchResult) -> None:
        await provisioner.learn_bench(result)

    @ctx.broker.subscriber(subjects.demand_signal, **durable_pull(LATEST, ctx.settings, f"{SERVICE}-demand"))
    async def on_demand_signal(signal: DemandSignal) -> None:
        await provisioner.learn_demand(signal)

    # what machines produce for us outranks what their hosts' benchmarks claim (host_history.py)
    @ctx.broker.subscriber(subjects.fleet_snapshot_published, **durable_pull(LATEST, ctx.settings, f"{SERVICE}-fleet"))
    async def on_fleet_snapshot(snapshot: FleetSnapshot) -> None:
        await provisioner.learn_production(snapshot)


class ReconcileLoop:
    """Reconciliation with vast.ai's list, by the replica that holds the lease; a standby lists nothing (two
    replicas would double every vast.ai call) and takes over when the lease is free."""

    def __init__(
        self,
        ctx: ServiceContext,
        provisioner: Provisioner,
        active: ActiveLease,
        listing: VastListing,
        config: ProvisionerSettings,
    ) -> None:
        self.ctx = ctx
        self.provisioner = provisioner
        self.active = active
        self.listing = listing
        self.interval_s = config.reconcile_interval_s
        self.tasks: list[asyncio.Task[None]] = []

    async def take_the_lease(self) -> None:
        """Before the first command is consumed, so the first list comes first, as without a standby."""
        with contextlib.suppress(Exception):  # Redis away: the loop tries again
            await self.active.hold()

    async def start(self) -> None:
        self.tasks.append(asyncio.create_task(self.run_forever(), name="provisioner-reconcile"))

    async def stop(self) -> None:
        await stop_tasks(self.tasks)
        with contextlib.suppress(Exception):  # Redis away: the lease expires by itself
            await self.active.release()

    async def run_forever(self) -> None:
        was_active: bool | None = None
        first_round = True
        while True:
            try:
                # the first round's lease was taken before the broker started (take_the_lease)
                is_active = self.active.token is not None if first_round else await self.active.hold()
                first_round = False
                if is_active != was_active:
                    log.info(ACTIVE_LINE if is_active else STANDBY_LINE)
                    was_active = is_active
                if is_active:
                    self.listing.record(await self.provisioner.reconcile(), self.ctx.clock.now())
            except Exception:  # Redis or NATS away: log, and try again on the next round
                log.exception("reconciliation failed")
            await self.ctx.clock.sleep(self.interval_s)


def create_app(settings: Settings | None = None, *, dry_run: bool = False) -> AsgiFastStream:
    """Entry point for `fleetpilot run provisioner [--dry-run]`."""
    config = ProvisionerSettings.from_environment()
    config.check_onstart()  # before anything is rented: a machine without its benchmark line is money lost
    ctx = ServiceContext.from_settings(
        SERVICE,
        settings,
        secrets={"FLEETPILOT_BENCH_REPORT_TOKEN": config.report_token},
        public_urls={"FLEETPILOT_PROVISIONER_BENCH_URL": config.bench_url},
    )
    return build(ctx, config, dry_run=dry_run)
