"""What the provisioner answers and learns outside the fleet's changes: offer and charge searches, bench
verdicts, production throughput and demand."""

from __future__ import annotations

from datetime import UTC, datetime, time

from services.provisioner.charges import charge_lines
from services.provisioner.host_history import (
    IMPLAUSIBLE_ABOVE_MEDIAN,
    Incident,
    IncidentKind,
    bench_ratio,
    production_ratios,
)
from services.provisioner.ranking import (
    ThroughputKnowledge,
    gpus_per_producer,
    per_gpu_paces,
)
from services.provisioner.state import (
    SOURCE,
    ProvisionerState,
    log,
)
from services.provisioner.vast_client import (
    VastError,
)
from shared import gpu_models
from shared.contract import (
    BenchResult,
    ChargeList,
    ChargesQuery,
    DemandSignal,
    FleetSnapshot,
    OfferLine,
    OfferList,
    OfferQuery,
)


class Learning(ProvisionerState):
    async def offers(self, query: OfferQuery) -> OfferList:
        """Ranked offers within the configuration (the emergency cap at most); an error means unknown, not none."""
        now = self.clock.now()
        try:
            # read-only, outside the fleet lease: its own copy of the history, never the operations' one
            history = await self.store.load_history()
            cap = query.max_price_usd_per_h or self.settings.emergency_max_price_usd_per_h
            constraints = self.constraints.narrowed_to(query.gpu_models, cap)
            ranked = await self._ranked_offers(constraints, history) if constraints.allowed_gpu_models else []
        except VastError as error:
            return OfferList(occurred_at=now, source=SOURCE, error=str(error)[:1000])
        lines = [
            OfferLine(
                offer_id=r.offer.id,
                gpu_model=r.offer.gpu_name,
                num_gpus=r.offer.num_gpus,
                price_usd_per_h=r.offer.dph_total,
                reliability=r.offer.reliability_score,
                expected_usd_per_task=r.expected_usd_per_task,
                host_id=r.offer.host_id,
                machine_id=r.offer.machine_id,
                geolocation=r.offer.geolocation,
            )
            for r in ranked[: query.limit]
        ]
        return OfferList(occurred_at=now, source=SOURCE, offers=lines)

    async def charges(self, query: ChargesQuery) -> ChargeList:
        """What vast.ai charged since the query's day; an error means unknown, never $0. Rows vast sent that could
        not be read make the total partial: the lines read come with an error saying so, never a silent sum."""
        now = self.clock.now()
        since_s = datetime.combine(query.since, time(0), tzinfo=UTC).timestamp()
        try:
            listing = await self.client.list_charges(since_s)
        except VastError as error:
            return ChargeList(occurred_at=now, source=SOURCE, error=str(error)[:1000])
        lines = charge_lines(listing.charges, self.known)
        if listing.unreadable_rows:
            partial = (
                f"{listing.unreadable_rows} of vast.ai's {listing.unreadable_rows + len(listing.charges)} charge rows "
                "could not be read (their amounts are unknown): the total of the rows read is partial"
            )
            return ChargeList(
                occurred_at=now, source=SOURCE, lines=lines, error=partial, unreadable_rows=listing.unreadable_rows
            )
        return ChargeList(occurred_at=now, source=SOURCE, lines=lines)

    async def learn_bench(self, result: BenchResult) -> None:
        """A failed bench penalises the machine and its host; any verdict leaves a measured throughput ratio."""
        if result.instance_id is None:
            return
        async with self._exclusive():
            instance = self.known.get(result.instance_id)
            if instance is None:
                return
            history = self.history
            now = self.clock.now()
            if result.verdict == "fail":
                history.record(
                    Incident(
                        at=now,
                        kind=IncidentKind.BENCH_FAILED,
                        instance_id=instance.instance_id,
                        host_id=instance.host_id,
                        machine_id=instance.machine_id,
                    )
                )
            reference = gpu_models.reference_tasks_per_h(instance.gpu_model or result.gpu_model)
            ratio = bench_ratio(result.ratios_to_reference, result.metrics, reference)
            if ratio is not None and instance.machine_id is not None and result.verdict != "fail":
                history.record_measure(instance.machine_id, ratio, now)
            history.forget_old(now)
            await self.store.save_history(history)

    async def learn_production(self, snapshot: FleetSnapshot) -> None:
        """What each producing machine did for us: the measure ranking prefers to any benchmark its host ran; and
        how many GPUs stand behind each of demand's producers, by model (`learn_demand`)."""
        self.producer_gpus = gpus_per_producer(snapshot.instances)
        ratios = production_ratios(snapshot.instances)
        for machine_id, ratio in sorted(ratios.implausible.items()):
            log.warning(
                "machine %s: fleet's snapshot says it produced %.1f times its model's reference, more than %.0f times"
                " what its model's machines typically do: a miscount, not recorded as its throughput",
                machine_id, ratio, IMPLAUSIBLE_ABOVE_MEDIAN,
            )  # fmt: skip
        if not ratios.trusted:
            return
        async with self._exclusive():
            for machine_id, ratio in ratios.trusted.items():
                self.history.record_task_throughput(machine_id, ratio, snapshot.occurred_at)
            await self.store.save_history(self.history)

    async def learn_demand(self, signal: DemandSignal) -> None:
        """demand's paces by GPU model, per GPU; left unlearnt until fleet's first snapshot says what a producer
        is (a 4-GPU machine's pace stored as one GPU's ranked its model four times too fast)."""
        if self.producer_gpus is None:
            return
        observed = per_gpu_paces(signal.throughput_by_gpu_model_tasks_per_h, self.producer_gpus)
        if observed:
            await self.store.save_observed_throughput(observed)
            self.knowledge = ThroughputKnowledge({**self.knowledge.observed_tasks_per_h_by_model, **observed})
