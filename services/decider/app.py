"""decider's wiring: trigger and operator subscribers, the run loop, Redis single flight, metrics.

Every replica sees every trigger (its own durable push consumer, new messages only) rather than sharing one
durable: a replica that dies mid-run leaves its triggers with the others, which take over once the lock
expires, and a trigger another replica's run already saw is recognised by its event id and not run twice.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import pydantic
from faststream.asgi import AsgiFastStream
from faststream.nats import ConsumerConfig, DeliverPolicy
from faststream.nats.annotations import NatsMessage

from services.decider import SERVICE
from services.decider.advisor import Advisor
from services.decider.config import DeciderSettings
from services.decider.lock import RedisSingleFlight
from services.decider.metrics import DeciderMetrics
from services.decider.policy import PredictivePolicy
from services.decider.runner import Decider
from shared.bus import JETSTREAM_ACK_POLICY, answer_request
from shared.contract import OperatorMessage, Trigger
from shared.contract.directives import DirectiveRequest
from shared.service import ServiceContext, asgi_app
from shared.settings import Settings
from shared.streams import ACK_WAIT_S, MAX_DELIVER, OPERATOR, TRIGGERS, StreamSpec, bound_stream

# a crashed replica's consumers are removed by the server after this long without a subscriber
REPLICA_CONSUMER_INACTIVE_S = 3600.0


def replica_consumer(spec: StreamSpec, settings: Settings, durable: str) -> dict[str, Any]:
    """A push consumer of this replica alone: every replica receives every message, from now on."""
    return {
        "stream": bound_stream(spec, settings.subjects),
        "durable": durable,
        "config": ConsumerConfig(
            durable_name=durable,
            deliver_policy=DeliverPolicy.NEW,
            ack_wait=ACK_WAIT_S,
            max_deliver=MAX_DELIVER,
            inactive_threshold=REPLICA_CONSUMER_INACTIVE_S,
        ),
        "ack_policy": JETSTREAM_ACK_POLICY,
    }


def load_advisor(spec: str, ctx: ServiceContext) -> Advisor | None:
    """`package.module:factory` → factory(ctx); how a deployment plugs the agent in without code changes."""
    if not spec:
        return None
    module_name, _, attribute = spec.partition(":")
    if not attribute:
        raise ValueError(f"FLEETPILOT_DECIDER_ADVISOR must look like 'package.module:factory', got {spec!r}")
    factory = getattr(importlib.import_module(module_name), attribute)
    advisor: Advisor = factory(ctx)
    return advisor


def wire(
    ctx: ServiceContext, advisor: Advisor | None = None, *, config: DeciderSettings | None = None
) -> tuple[AsgiFastStream, Decider]:
    """The app and its Decider (tests and the benchmark look at the decider's state)."""
    config = config or DeciderSettings()
    metrics = DeciderMetrics(ctx.metrics.registry)
    single_flight = RedisSingleFlight(ctx.settings.redis_url, ctx.subjects.prefix, config.replica_id, config.lock_ttl_s)
    decider = Decider(
        ctx,
        config,
        metrics,
        single_flight,
        PredictivePolicy(config.policy_config(ctx.settings)),
        advisor or load_advisor(config.advisor, ctx),
    )
    ctx.health_checks.append(decider.not_deciding)
    replica = f"decider-{config.replica_id}"

    # FastStream warns that a durable push consumer does not scale across instances: here that is the point,
    # each replica has its own
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The JetStream Push consumer with the `durable` option")

        @ctx.broker.subscriber(
            ctx.subjects.triggers_of("p0"), **replica_consumer(TRIGGERS, ctx.settings, f"{replica}-p0")
        )
        async def on_p0_trigger(trigger: Trigger) -> None:
            decider.on_trigger(trigger)

        @ctx.broker.subscriber(
            ctx.subjects.triggers_of("p1"), **replica_consumer(TRIGGERS, ctx.settings, f"{replica}-p1")
        )
        async def on_p1_trigger(trigger: Trigger) -> None:
            decider.on_trigger(trigger)

        @ctx.broker.subscriber(
            ctx.subjects.operator_message, **replica_consumer(OPERATOR, ctx.settings, f"{replica}-operator")
        )
        async def on_operator_message(message: OperatorMessage) -> None:
            decider.on_operator_message(message)

    desk = decider.directive_desk

    # a queue group: of several replicas one answers (they share the store); no_reply: the answer goes out through
    # answer_request, which sends it to an inbox only
    @ctx.broker.subscriber(ctx.subjects.decider_directives, queue=SERVICE, no_reply=True)
    async def on_directive_request(msg: NatsMessage) -> None:
        try:
            request = DirectiveRequest.model_validate_json(msg.body)
        except pydantic.ValidationError as error:
            await answer_request(ctx.broker, ctx.metrics, msg, desk.malformed(error))
            raise  # and dead-lettered with the reason, as any message that cannot be valid
        await answer_request(ctx.broker, ctx.metrics, msg, await desk.answer(request))

    app = asgi_app(ctx)
    app.after_startup(decider.start)
    app.on_shutdown(decider.stop)
    return app, decider


def build(
    ctx: ServiceContext, advisor: Advisor | None = None, *, config: DeciderSettings | None = None
) -> AsgiFastStream:
    """`advisor`: the LLM agent, or None for the policy alone (or FLEETPILOT_DECIDER_ADVISOR names a factory)."""
    return wire(ctx, advisor, config=config)[0]


def create_app(settings: Settings | None = None) -> AsgiFastStream:
    """Entry point for `fleetpilot run decider`."""
    return build(ServiceContext.from_settings(SERVICE, settings))
