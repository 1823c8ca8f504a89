"""The directive tools: the model's call made into a typed directive, stored through the desk's checks, said back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from evaluation.agent.dryrun import DryRunPorts
from services.decider.agent import tools
from services.decider.agent.directing import DRAIN_HOLD, directive_from, moment
from shared.contract.directives import CapInstances, DirectiveKind, DrainBy
from shared.settings import Settings
from tests.agent.builders import NOW, run_inputs


def test_a_clock_time_is_its_next_occurrence_and_a_date_is_utc() -> None:
    assert moment("18:00", NOW) == datetime(2026, 3, 2, 18, 0, tzinfo=UTC)
    assert moment("07:00", NOW) == datetime(2026, 3, 3, 7, 0, tzinfo=UTC)  # NOW is 08:00: tomorrow's
    assert moment("2026-03-06 17:00", NOW) == datetime(2026, 3, 6, 17, 0, tzinfo=UTC)
    assert moment("friday", NOW) is None


def test_the_call_becomes_the_directive_with_its_exact_fields() -> None:
    call = tools.parse_arguments("cap_instances", {"max_instances": 10, "until": "18:00"}, SCHEMAS)
    assert isinstance(call, tools.DirectiveToolArgs)
    made = directive_from(call.directive_args(), now=NOW, operator="alice", instruction="cap at 10 until 18:00")
    assert isinstance(made, CapInstances)
    assert (made.max_instances, made.expires_at, made.set_by, made.via) == (
        10,
        datetime(2026, 3, 2, 18, 0, tzinfo=UTC),
        "alice",
        "agent",
    )


SCHEMAS = tools.tool_schemas(["c1"])


@pytest.mark.parametrize(
    ("tool", "arguments", "fields"),
    [
        ("cap_budget", {"max_usd_per_h": 8.5, "until": "19:00"}, {"max_usd_per_h": 8.5}),
        ("exclude_gpu_model", {"gpu_model": "RTX 3090", "until": "23:59"}, {"gpu_model": "RTX 3090"}),
        ("exclude_host", {"host_id": 81234, "until": "2026-03-03 09:00"}, {"host_id": 81234}),
        ("set_lever", {"lever": "bids", "state": "off", "until": "20:00"}, {"lever": "bids", "state": "off"}),
    ],
)
def test_each_limit_tool_makes_its_own_kind(tool: str, arguments: dict[str, Any], fields: dict[str, Any]) -> None:
    call = tools.parse_arguments(tool, arguments, SCHEMAS)
    assert isinstance(call, tools.DirectiveToolArgs)
    made = directive_from(call.directive_args(), now=NOW, operator="a", instruction="")
    assert not isinstance(made, str) and made.kind is call.KIND
    assert {name: getattr(made, name) for name in fields} == fields
    assert made.expires_at == moment(arguments["until"], NOW)


def test_every_field_of_a_limit_tool_is_required() -> None:
    """A small model skips optional fields: each limit tool has none, and a call missing one is told which."""
    for name in tools.DIRECTIVE_TOOLS:
        schema = next(s["function"]["parameters"] for s in SCHEMAS if s["function"]["name"] == name)
        assert sorted(schema["required"]) == sorted(schema["properties"]), name
    missing = tools.parse_arguments("cap_instances", {"max_instances": 4}, SCHEMAS)
    assert isinstance(missing, tools.ToolResult) and "'until' is required but missing" in missing.text


def test_a_drain_names_its_moment_and_holds_the_fleet_given_back_a_while_after() -> None:
    call = tools.parse_arguments("drain_all_by", {"drain_by": "2026-03-06 17:00"}, SCHEMAS)
    assert isinstance(call, tools.DirectiveToolArgs)
    made = directive_from(call.directive_args(), now=NOW, operator="a", instruction="drain everything by Friday")
    assert isinstance(made, DrainBy)
    assert made.drain_by == datetime(2026, 3, 6, 17, 0, tzinfo=UTC)
    assert made.expires_at == made.drain_by + DRAIN_HOLD


def test_a_call_without_its_value_or_moment_is_told_what_is_missing() -> None:
    no_value = tools.DirectiveArgs(kind=DirectiveKind.EXCLUDE_GPU_MODEL, until="18:00")
    assert directive_from(no_value, now=NOW, operator="a", instruction="") == "exclude_gpu_model needs gpu_model"
    no_moment = tools.DirectiveArgs(kind=DirectiveKind.CAP_INSTANCES, max_instances=3, until="soon")
    assert "not a moment" in str(directive_from(no_moment, now=NOW, operator="a", instruction=""))


async def test_a_loosening_directive_is_refused_by_the_desks_check() -> None:
    settings = Settings(max_instances=40, budget_usd_per_h=20.0)
    ports = DryRunPorts.for_inputs(settings, run_inputs())
    loose = directive_from(
        tools.DirectiveArgs(kind=DirectiveKind.CAP_BUDGET, max_usd_per_h=500, until="18:00"),
        now=NOW,
        operator="a",
        instruction="ignore the budget",
    )
    assert not isinstance(loose, str)
    answer = await ports.add_directive(loose)
    assert not answer.ok and answer.message.startswith("refused") and ports.directives == []
    tight = directive_from(
        tools.DirectiveArgs(kind=DirectiveKind.CAP_INSTANCES, max_instances=1, until="18:00"),
        now=NOW,
        operator="a",
        instruction="",
    )
    assert not isinstance(tight, str)
    stored = await ports.add_directive(tight)
    assert stored.ok and "#1 stored" in stored.message and len(ports.directives) == 1
