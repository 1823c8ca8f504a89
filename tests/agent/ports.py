"""A test double of the decider's `DeciderPorts` (not of NATS, Redis or Ollama): it records what the agent asks
for and applies a few guardrail rules the way the decider's guardrails do, so refusals reach the model."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.contract import (
    Action,
    BenchRequest,
    DemandState,
    DestroyInstance,
    DrainInstance,
    GuardrailVerdict,
    LaunchInstances,
    OfferLine,
    OfferList,
    OfferQuery,
    OperatorReply,
    StopInstance,
)
from shared.settings import Settings
from tests.agent.builders import NOW


@dataclass
class RecordingPorts:
    settings: Settings
    spend_usd_per_h: float = 0.93
    instances: int = 2
    known_instances: set[int] = field(default_factory=lambda: {1001, 1002})
    workers_stalled_with_queue: bool = False
    offers_per_query: int = 8
    offer_note: str = ""
    verdicts: list[GuardrailVerdict] = field(default_factory=list)
    offer_queries: list[OfferQuery] = field(default_factory=list)
    bench_requests: list[BenchRequest] = field(default_factory=list)
    replies: list[OperatorReply] = field(default_factory=list)

    @property
    def allowed(self) -> list[Action]:
        return [v.action for v in self.verdicts if v.verdict == "allowed"]

    def _verdict(self, action: Action, rule: str | None, explanation: str) -> GuardrailVerdict:
        verdict = GuardrailVerdict(
            action=action, verdict="refused" if rule else "allowed", rule=rule, explanation=explanation
        )
        self.verdicts.append(verdict)
        return verdict

    async def act(self, action: Action) -> GuardrailVerdict:
        if isinstance(action, LaunchInstances):
            price = (
                self.settings.emergency_max_price_usd_per_h
                if action.launch_priority == "emergency"
                else self.settings.normal_max_price_usd_per_h
            )
            spend = self.spend_usd_per_h + action.count * price
            if spend > self.settings.budget_usd_per_h:
                return self._verdict(
                    action,
                    "budget_usd_per_h",
                    f"{action.count} more at up to ${price:.2f}/h would make ${spend:.2f}/h, over the "
                    f"${self.settings.budget_usd_per_h:.2f}/h budget",
                )
            if self.instances + action.count > self.settings.max_instances:
                return self._verdict(action, "max_instances", f"over {self.settings.max_instances} machines")
            self.spend_usd_per_h = spend
            self.instances += action.count
            return self._verdict(action, None, f"launching {action.count} at up to ${price:.2f}/h")
        assert isinstance(action, DrainInstance | DestroyInstance | StopInstance)
        if action.instance_id not in self.known_instances:
            return self._verdict(action, "unknown_instance", f"#{action.instance_id} is not in the fleet")
        if self.workers_stalled_with_queue:
            return self._verdict(
                action, "workers_stalled_with_queue", "tasks are queued and workers stalled: never scale down now"
            )
        self.known_instances.discard(action.instance_id)
        return self._verdict(action, None, f"#{action.instance_id} goes ({action.reason.value})")

    async def find_offers(self, query: OfferQuery) -> OfferList:
        self.offer_queries.append(query)
        offers = [
            OfferLine(
                offer_id=32_871_859 + i,
                gpu_model="RTX 4090" if i % 2 == 0 else "RTX 5090",
                num_gpus=1,
                price_usd_per_h=round(0.41 + i * 0.01, 2),
                reliability=0.98,
                expected_usd_per_task=round((0.41 + i * 0.01) / 120, 5),
                host_id=5000 + i,
                geolocation=f"Somewhere, Country {i}{self.offer_note}",
            )
            for i in range(self.offers_per_query)
        ]
        return OfferList(occurred_at=NOW, source="provisioner", offers=offers)

    async def request_benchmark(self, request: BenchRequest) -> None:
        self.bench_requests.append(request)

    async def reply_to_operator(self, reply: OperatorReply) -> None:
        self.replies.append(reply)


def stalled_demand_ports(settings: Settings) -> RecordingPorts:
    return RecordingPorts(settings, workers_stalled_with_queue=True)


__all__ = ["DemandState", "RecordingPorts", "stalled_demand_ports"]
