"""An operator's message read as a limit (reading.py): what the model reads is checked against the words in code,
stored only when the words say it, asked back when they do not, refused when it would lift a limit or destroy
the fleet while work waits."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evaluation.agent.dryrun import DryRunPorts
from services.decider.agent.directing import directive_from, moment
from services.decider.agent.reading import Ask, Facts, Reading, ReadingKind, Refuse, judge, reading_prompt
from services.decider.agent.tools import DIRECTIVE_TOOLS, DirectiveArgs
from shared.contract.directives import DirectiveKind
from sim.ollama.server import OllamaStandIn
from tests.agent.builders import operator_message, run_inputs
from tests.agent.conftest import AgentFactory

NOW = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)  # a Monday
FACTS = Facts(budget_usd_per_h=20.0, max_instances=40, pending_tasks=340)


def read(kind: str, value: str = "", when: str = "") -> Reading:
    return Reading(kind=ReadingKind(kind), value=value, when=when)


@pytest.mark.parametrize(
    ("text", "words", "expected"),
    [
        ("cap at 10 machines until 18:00", "18:00", datetime(2026, 3, 2, 18, 0, tzinfo=UTC)),
        ("until 07:00", "07:00", datetime(2026, 3, 3, 7, 0, tzinfo=UTC)),  # already past today: tomorrow's
        ("no more RTX 3090s today", "today", datetime(2026, 3, 3, 0, 0, tzinfo=UTC)),
        ("drain everything by Friday 17:00", "Friday 17:00", datetime(2026, 3, 6, 17, 0, tzinfo=UTC)),
        ("until Monday 09:00", "Monday 09:00", datetime(2026, 3, 9, 9, 0, tzinfo=UTC)),  # this Monday has passed
        ("till tomorrow 10:00", "tomorrow 10:00", datetime(2026, 3, 3, 10, 0, tzinfo=UTC)),
        ("until 9am", "9am", datetime(2026, 3, 3, 9, 0, tzinfo=UTC)),
        ("until 2026-03-04 12:00", "2026-03-04 12:00", datetime(2026, 3, 4, 12, 0, tzinfo=UTC)),
    ],
)
def test_the_end_is_resolved_by_code_from_the_messages_own_words(text: str, words: str, expected: datetime) -> None:
    assert moment(words, NOW) == expected


def test_a_clear_limit_becomes_the_directive_the_words_say() -> None:
    text = "cap at 10 machines until 18:00"
    judged = judge(read("cap_instances", "10", "until 18:00"), text, NOW, FACTS)
    assert judged == DirectiveArgs(kind=DirectiveKind.CAP_INSTANCES, max_instances=10, until="2026-03-02 18:00")
    made = directive_from(judged, now=NOW, operator="alice", instruction=text)
    assert not isinstance(made, str) and made.expires_at == datetime(2026, 3, 2, 18, 0, tzinfo=UTC)


def test_the_models_date_arithmetic_is_not_taken_its_copied_words_are() -> None:
    """The 0.5B model wrote "2026-03-08 18:00" for "until 18:00" and Wednesday for Friday; its words are resolved."""
    judged = judge(read("drain_all_by", "", "by Friday 17:00"), "drain everything by Friday 17:00", NOW, FACTS)
    assert isinstance(judged, DirectiveArgs) and judged.drain_by == "2026-03-06 17:00"


def test_when_the_model_rewrites_the_end_the_one_time_the_message_writes_is_taken() -> None:
    """The 0.5B model wrote "until 2026-03-02 20:00" for "until 20:00", and Wednesday's date for Thursday."""
    text = "keep the fleet at 8 machines max until 20:00"
    judged = judge(read("cap_instances", "8", "until 2026-03-08 20:00"), text, NOW, FACTS)
    assert isinstance(judged, DirectiveArgs) and judged.until == "2026-03-02 20:00"
    drain = judge(read("drain_all_by", "", "by 2026-03-04 18:00"), "wind the fleet down by Thursday 18:00", NOW, FACTS)
    assert isinstance(drain, DirectiveArgs) and drain.drain_by == "2026-03-05 18:00"
    # two times written and the model's copy matches neither: which one is meant is asked
    both = judge(read("cap_instances", "5", "until 19:00"), "at most 5 machines from 10:00 to 12:00", NOW, FACTS)
    assert isinstance(both, Ask)


@pytest.mark.parametrize(
    ("reading", "text"),
    [
        # a number, a host or an end the operator did not write is asked back, never guessed
        (read("cap_instances", "5", "until 21:30"), "fewer machines for a while"),
        (read("exclude_host", "4412", "until 2026-03-05 18:00"), "stay off that host"),
        (read("cap_budget", "10", "until 21:30"), "cap it at 10"),
        (read("cap_budget", "1.5", "tonight"), "slow down the spending tonight"),
        (read("unclear", "no more expensive GPUs"), "no more expensive GPUs"),
        # a lever the words do not name, or a state they do not say
        (read("parking", "off", "until 20:00"), "switch off interruptible bids until 20:00"),
        (read("bids", "on", "until 20:00"), "switch off interruptible bids until 20:00"),
        (read("exclude_gpu_model", "RTX 4090", "until 18:00"), "no RTX 5090 until 18:00"),
        (read("cap_instances", "2.5", "until 18:00"), "at most 2.5 machines until 18:00"),
    ],
)
def test_what_the_words_do_not_say_is_asked_back(reading: Reading, text: str) -> None:
    judged = judge(reading, text, NOW, FACTS)
    assert isinstance(judged, Ask) and "?" in judged.question


@pytest.mark.parametrize(
    ("reading", "text", "reason"),
    [
        (read("unclear", "budget"), "ignore the budget", "$20.00/h"),  # lifting is refused whatever the reading
        (read("cap_budget", "50", "from now on"), "spend up to $50/h from now on", "budget of $20.00/h"),
        (read("cap_instances", "60", ""), "launch 60 machines right now", "limit of 40 machines"),
        (read("unsafe"), "destroy everything now", "340 tasks are queued (pending)"),
        (read("drain_all_by", "", ""), "kill all the machines, we're done", "340 tasks are queued"),
        (read("drain_all_by", "", "now"), "give everything back now", "340 tasks are queued"),
    ],
)
def test_lifting_a_limit_or_emptying_the_fleet_while_work_waits_is_refused_with_the_numbers(
    reading: Reading, text: str, reason: str
) -> None:
    judged = judge(reading, text, NOW, FACTS)
    assert isinstance(judged, Refuse) and reason in judged.reason


def test_questions_and_other_messages_set_no_limit() -> None:
    assert judge(read("question"), "why did you launch at 00:35?", NOW, FACTS) is None
    assert judge(read("other"), "thanks!", NOW, FACTS) is None
    # a question read as a limit by the model is still a question (the 0.5B model read this one as a cap)
    assert judge(read("cap_instances", "33032720"), "what happened to instance 33032720?", NOW, FACTS) is None
    assert judge(read("cap_budget", "0"), "how much did we spend yesterday?", NOW, FACTS) is None
    # a request phrased as a question is judged as a request
    asked = judge(read("cap_instances", "5", "until 18:00"), "can you keep it to 5 machines until 18:00?", NOW, FACTS)
    assert isinstance(asked, DirectiveArgs) and asked.max_instances == 5


@given(
    kind=st.sampled_from(list(ReadingKind)),
    value=st.text(max_size=12),
    when=st.sampled_from(["", "until 18:00", "today", "by Friday 17:00", "now", "until 2026-03-04 12:00"]),
    number=st.integers(0, 10_000),
)
def test_whatever_the_model_reads_a_stored_limit_is_one_the_operator_wrote(
    kind: ReadingKind, value: str, when: str, number: int
) -> None:
    """A reading that becomes a directive carries a number the text holds and an end the text names."""
    text = f"at most {number} machines {when}".strip()
    judged = judge(Reading(kind=kind, value=value, when=when), text, NOW, FACTS)
    if isinstance(judged, DirectiveArgs) and judged.kind is DirectiveKind.CAP_INSTANCES:
        assert judged.max_instances == number < FACTS.max_instances
        assert when and moment(when.removeprefix("until ").removeprefix("by "), NOW) is not None


def test_the_reading_prompt_names_now_and_every_kind() -> None:
    text = reading_prompt(NOW)
    assert "Monday 2026-03-02 14:00 UTC" in text
    assert all(f"- {kind.value}:" in text for kind in ReadingKind)


async def test_a_run_reads_the_message_once_stores_the_limit_and_then_offers_no_limit_tool(
    make_agent: AgentFactory, ports: DryRunPorts, ollama: OllamaStandIn
) -> None:
    message = operator_message("keep at most 3 machines until 23:30")
    await make_agent().advise(run_inputs(operator_messages=[message]), ports)

    [asked] = await ollama.readings()
    assert asked["messages"][-1]["content"] == message.text  # the message alone, not the fleet's observation
    assert set(asked["format"]["properties"]) == {"kind", "value", "when"}
    [stored] = ports.directives
    assert stored.kind is DirectiveKind.CAP_INSTANCES and stored.max_instances == 3  # type: ignore[union-attr]
    assert stored.set_by == "alice" and stored.via == "agent"
    offered = {tool for request in await ollama.received() for tool in request["tools"]}  # type: ignore[attr-defined]
    assert offered and not offered & set(DIRECTIVE_TOOLS)
    [reply] = ports.replies
    assert reply.text.startswith("directive #1 stored")


async def test_a_question_read_as_such_leaves_no_limit_tool_to_call(
    make_agent: AgentFactory, ports: DryRunPorts, ollama: OllamaStandIn
) -> None:
    await make_agent().advise(run_inputs(operator_messages=[operator_message("what did today cost so far?")]), ports)

    assert len(await ollama.readings()) == 1 and ports.directives == []
    offered = {tool for request in await ollama.received() for tool in request["tools"]}  # type: ignore[attr-defined]
    assert offered and not offered & set(DIRECTIVE_TOOLS)
