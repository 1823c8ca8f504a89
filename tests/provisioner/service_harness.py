"""Running the provisioner service in a test: real NATS, real Redis, the vast.ai simulator over real HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from services.provisioner.app import ProvisionerService, assemble
from services.provisioner.settings import DOCUMENTED_SPACING_S, ProvisionerSettings
from shared.bus import event_headers
from shared.clock import Clock
from shared.contract import InstanceObserved, ProvisionCommand, ProvisionResult, VastAccountObserved
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import COMMANDS
from sim.vast.scenario import OfferSpec, Scenario
from tests.helpers import eventually

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)

# no client-side spacing or backoff waits (the quiet simulator has no rate limits), a reconcile an hour
NO_WAITS = dict.fromkeys(DOCUMENTED_SPACING_S, 0.0)
QUIET = ProvisionerSettings(
    spacing_s=NO_WAITS,
    rate_limited_wait_s=NO_WAITS,
    backoff_initial_s=0.0,
    backoff_max_s=0.0,
    max_attempts=3,
    reconcile_interval_s=3600.0,
    allowed_gpu_models=["RTX 4090", "RTX 5090", "RTX 3090"],
    min_reliability=0.9,
    min_cuda=12.0,
    min_disk_gb=20.0,
    disk_gb=20.0,
    lease_poll_s=0.05,
    ambiguous_settle_s=0.0,  # the tests' simulated clock moves only when told; the settle has its own test
    bench_url="http://bench.test:8000",
    report_token="report-token-for-tests",
)

# ranked by expected $/task: A (0.48/120) < A2 (0.49/120) < B (0.52/120) < C (0.30/66), though C is cheapest per hour
OFFER_A, OFFER_A2, OFFER_B, OFFER_C = 201, 202, 203, 204
MARKET = [
    OfferSpec(offer_id=OFFER_A, gpu_model="RTX 4090", price_usd_per_h=0.48, host_id=50, machine_id=500),
    OfferSpec(offer_id=OFFER_A2, gpu_model="RTX 4090", price_usd_per_h=0.49, host_id=50, machine_id=501),
    OfferSpec(offer_id=OFFER_B, gpu_model="RTX 4090", price_usd_per_h=0.52, host_id=60, machine_id=600),
    OfferSpec(offer_id=OFFER_C, gpu_model="RTX 3090", price_usd_per_h=0.30, host_id=70, machine_id=700),
]


def market_scenario(**overrides: object) -> Scenario:
    base: dict[str, object] = {
        "offers": MARKET,
        "startup": {"startup_s": {"min": 600, "max": 600}},
        "billing": {"storage_usd_per_gb_month": 0.0},
    }
    return Scenario.quiet(**{**base, **overrides})


class BusRecorder:
    """Everything the provisioner publishes: instance observations and command results, in order."""

    def __init__(self, nc: NatsClient, settings: Settings) -> None:
        self.nc = nc
        self.settings = settings
        self.observed: list[InstanceObserved] = []
        self.results: list[ProvisionResult] = []
        self.accounts: list[VastAccountObserved] = []

    async def start(self) -> None:
        subjects = self.settings.subjects
        await self.nc.subscribe(subjects.provision_instance_all, cb=self._on_instance)
        await self.nc.subscribe(subjects.provision_result, cb=self._on_result)
        await self.nc.subscribe(subjects.provision_account, cb=self._on_account)
        await self.nc.flush()

    async def _on_instance(self, msg: Msg) -> None:
        self.observed.append(InstanceObserved.model_validate_json(msg.data))

    async def _on_account(self, msg: Msg) -> None:
        self.accounts.append(VastAccountObserved.model_validate_json(msg.data))

    async def _on_result(self, msg: Msg) -> None:
        self.results.append(ProvisionResult.model_validate_json(msg.data))

    async def result_for(self, key: str, timeout_s: float = 15.0) -> ProvisionResult:
        def found() -> ProvisionResult | None:
            return next((r for r in self.results if r.idempotency_key == key), None)

        result: ProvisionResult = await eventually(found, timeout_s=timeout_s)
        return result

    def observed_of(self, instance_id: int) -> list[InstanceObserved]:
        return [o for o in self.observed if o.instance_id == instance_id]


async def send(js: JetStreamContext, settings: Settings, verb: str, command: ProvisionCommand) -> None:
    await js.publish(
        settings.subjects.provision_command(verb),
        command.model_dump_json().encode(),
        headers=event_headers(command),
        stream=COMMANDS.name(settings.subjects),
    )


@contextlib.asynccontextmanager
async def running_provisioner(
    settings: Settings, clock: Clock, vast_url: str, config: ProvisionerSettings = QUIET, **overrides: object
) -> AsyncIterator[ProvisionerService]:
    service_settings = settings.model_copy(update={"vast_api_url": vast_url, **overrides})
    service = assemble(ServiceContext("provisioner", service_settings, clock), config)
    await service.app.start()
    try:
        yield service
    finally:
        await service.app.stop()
