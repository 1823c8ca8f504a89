"""Directives over NATS against the decider in-process on real NATS and Redis: add, list and revoke on
`<prefix>.decider.directives`, a refusal, a restart, a malformed request, and the runs that enforce them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from pydantic import BaseModel
from redis.asyncio import Redis

from services.decider.directive_store import DirectiveStore
from shared.contract import DeadLetter, TriggerReason
from shared.contract.directives import (
    CapInstances,
    DirectiveAnswer,
    DirectiveList,
    DirectiveRequest,
    ExcludeGpuModel,
)
from shared.settings import Settings
from sim.infra import RedisServer
from tests.decider.factories import producing, signal, snapshot
from tests.decider.harness import audit_log, collect, publish_inputs, publish_trigger, running_decider
from tests.decider.test_decider_app import ScriptedAdvisor, short_fleet, trigger
from tests.helpers import eventually, request_when_subscribed


def now() -> datetime:
    return datetime.now(UTC)


def cap(max_instances: int, *, hours: float = 4.0, at: datetime | None = None) -> CapInstances:
    at = at or now()
    return CapInstances(
        directive_id=1, set_at=at, set_by="alice", via="cli", expires_at=at + timedelta(hours=hours),
        max_instances=max_instances,
    )  # fmt: skip


def no_model(gpu_model: str) -> ExcludeGpuModel:
    t = now()
    return ExcludeGpuModel(
        directive_id=1, set_at=t, set_by="bob", via="cli", expires_at=t + timedelta(hours=2), gpu_model=gpu_model
    )


async def ask(nc: NatsClient, settings: Settings, question: DirectiveRequest, answer: type[BaseModel]) -> BaseModel:
    reply = await request_when_subscribed(nc, settings.subjects.decider_directives, question.model_dump_json().encode())
    return answer.model_validate_json(reply.data)


async def add(nc: NatsClient, settings: Settings, directive: CapInstances | ExcludeGpuModel) -> DirectiveAnswer:
    request = DirectiveRequest(
        occurred_at=now(), source="cli", operation="add", operator=directive.set_by, directive=directive
    )
    answer = await ask(nc, settings, request, DirectiveAnswer)
    assert isinstance(answer, DirectiveAnswer)
    return answer


async def revoke(nc: NatsClient, settings: Settings, directive_id: int) -> DirectiveAnswer:
    request = DirectiveRequest(
        occurred_at=now(), source="cli", operation="revoke", operator="carol", directive_id=directive_id
    )
    answer = await ask(nc, settings, request, DirectiveAnswer)
    assert isinstance(answer, DirectiveAnswer)
    return answer


async def listing(nc: NatsClient, settings: Settings) -> DirectiveList:
    request = DirectiveRequest(occurred_at=now(), source="cli", operation="list", operator="carol")
    answer = await ask(nc, settings, request, DirectiveList)
    assert isinstance(answer, DirectiveList)
    return answer


async def served_fleet(js: JetStreamContext, settings: Settings) -> None:
    t = now()
    await publish_inputs(js, settings, signal(t, pending=8, rate_per_h=300, producing_workers=4),
                         snapshot(t, producing(4, t)))  # fmt: skip


async def test_add_list_and_revoke_over_nats_each_waking_a_run_that_names_the_directives_in_force(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await served_fleet(js, settings)
    audit = await audit_log(nc, settings)
    async with running_decider(settings):
        first = await add(nc, settings, cap(6))
        assert first.ok, first.message
        assert first.message.startswith("directive #1 stored: ")
        assert isinstance(first.directive, CapInstances) and first.directive.directive_id == 1
        # the change woke a run (P1), which enforced it
        await eventually(lambda: any(record.directives == [1] for record in audit.items))
        [woken] = [record for record in audit.items if record.directives == [1]]
        assert [ref.reason for ref in woken.triggers] == [TriggerReason.DIRECTIVE_CHANGED]

        second = await add(nc, settings, no_model("RTX 3090"))
        assert second.ok and second.directive is not None and second.directive.directive_id == 2
        revoked = await revoke(nc, settings, 1)
        assert revoked.ok and revoked.message == "directive #1 revoked"
        assert revoked.directive is not None and revoked.directive.revoked_by == "carol"
        await eventually(lambda: audit.items and audit.items[-1].directives == [2])

        listed = await listing(nc, settings)
        assert listed.error is None
        assert [(d.directive_id, d.revoked_by) for d in listed.directives] == [(2, None), (1, "carol")]

        again = await revoke(nc, settings, 1)
        assert not again.ok and again.message == "#1 was revoked already, by carol"
        unknown = await revoke(nc, settings, 7)
        assert not unknown.ok and "no directive #7" in unknown.message


async def test_a_directive_that_would_loosen_a_configured_limit_is_refused_with_the_reason(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    """Depends on the enforcement's check_new: a cap above the configured max_instances loosens nothing it may."""
    async with running_decider(settings):
        answer = await add(nc, settings, cap(settings.max_instances + 100))
        assert not answer.ok
        assert answer.message.startswith("refused: ") and len(answer.message) > len("refused: ")
        assert (await listing(nc, settings)).directives == []


async def test_directives_survive_a_restart_of_the_decider(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    async with running_decider(settings):
        assert (await add(nc, settings, cap(6))).ok
    async with running_decider(settings):
        [kept] = (await listing(nc, settings)).directives
        assert isinstance(kept, CapInstances) and kept.max_instances == 6 and kept.directive_id == 1
        assert (await add(nc, settings, cap(5))).message.startswith("directive #2 stored")


async def test_an_expired_directive_binds_no_run(settings: Settings, nc: NatsClient, js: JetStreamContext) -> None:
    client = Redis.from_url(settings.redis_url, decode_responses=True)
    earlier = now() - timedelta(hours=2)
    try:
        expired = await DirectiveStore(client, settings.subjects.prefix).add(cap(3, hours=1, at=earlier), earlier)
    finally:
        await client.aclose()
    assert not isinstance(expired, str)
    await served_fleet(js, settings)
    audit = await audit_log(nc, settings)
    async with running_decider(settings):
        assert (await add(nc, settings, cap(6))).ok
        await eventually(lambda: audit.items)
        assert audit.items[0].directives == [2]
        statuses = [(d.directive_id, d.active(now())) for d in (await listing(nc, settings)).directives]
        assert statuses == [(2, True), (1, False)]


async def test_a_malformed_request_gets_one_clear_line_and_is_dead_lettered(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    letters = await collect(nc, settings.subjects.dead_letter("decider"), DeadLetter)
    async with running_decider(settings):
        reply = await request_when_subscribed(
            nc, settings.subjects.decider_directives, b'{"operation": "drop", "operator": "x"}'
        )
        answer = DirectiveAnswer.model_validate_json(reply.data)
        assert not answer.ok
        assert answer.message.startswith("malformed directives request: ") and "operation = 'drop'" in answer.message
        await eventually(lambda: letters.items)
    [letter] = letters.items
    assert letter.reason == "invalid_message" and letter.original_subject == settings.subjects.decider_directives
    assert "operation" in letter.error


async def test_without_redis_the_directives_are_unknown_and_nothing_is_stored(
    settings: Settings, nc: NatsClient, js: JetStreamContext, redis_server: RedisServer
) -> None:
    async with running_decider(settings):
        assert (await add(nc, settings, cap(6))).ok
        redis_server.stop()
        listed = await listing(nc, settings)
        assert listed.directives == []
        assert listed.error is not None and listed.error.startswith("the directives are unknown: redis: ")
        answer = await add(nc, settings, cap(5))
        assert not answer.ok and answer.message.startswith("not stored, the directive store is unreachable")
        gone = await revoke(nc, settings, 1)
        assert not gone.ok and gone.message.startswith("not revoked")
        redis_server.start()
        await eventually(lambda: _listed_again(nc, settings))


async def _listed_again(nc: NatsClient, settings: Settings) -> bool:
    listed = await listing(nc, settings)
    return listed.error is None and [d.directive_id for d in listed.directives] == [1]


async def test_an_agents_launch_is_judged_by_the_limits_the_directives_tighten(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    """The agent acts through the run's ports: its launch of 100 meets the directive's cap of 4, not the
    configured max_instances (2 producing: 2 more at most), and the verdict names the directive."""
    advisor = ScriptedAdvisor(act_on=["oversized"])
    async with running_decider(settings):
        assert (await add(nc, settings, cap(4))).ok  # stored first: the run below reads it
    await short_fleet(js, settings)  # 2 producing, demand above them: the agent's run acts
    async with running_decider(settings, advisor):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: advisor.verdicts)
    [verdict] = advisor.verdicts
    assert verdict.verdict == "allowed" and verdict.rule == "max_instances"
    assert verdict.action.count == 2 and verdict.directive_id == 1  # type: ignore[union-attr]
