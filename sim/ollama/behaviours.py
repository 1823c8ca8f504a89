"""Scripted model behaviours (pure): a chat request's messages in, the assistant's reply out.

Stateless: each behaviour looks at the last observation in the prompt and at how many assistant turns followed
it, so the same request always gets the same reply. Transport-level behaviours (slow, down, malformed JSON) are
applied by the app around `follow`.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OBSERVATION_MARK = "POLICY RECOMMENDATION"
_FLEET_TOOLS = "launch_instances|drain_instance|destroy_instance|park_instance|resume_instance"
_ACTION = re.compile(rf"^\s*- ({_FLEET_TOOLS}) (\{{.*\}})", re.MULTILINE)
# the compact prompt lists them as call objects: - {"name": "launch_instances", "arguments": {...}}
_ACTION_OBJECT = re.compile(rf'^\s*- (\{{"name": "(?:{_FLEET_TOOLS})".*\}})$', re.MULTILINE)
_OPERATOR_HEADER = re.compile(r"^\s*\[operator (.+?), conversation (.+?), message (\S+?)\]$")
_RUN = re.compile(r"^RUN (\S+) at", re.MULTILINE)
_LAUNCH_WORDS = re.compile(r"launch\D{0,20}(\d+)", re.IGNORECASE)
_DESTROY_WORDS = re.compile(r"destroy\D{0,20}#?(\d+)", re.IGNORECASE)
_AT_MOST_WORDS = re.compile(r"at most (\d+) (?:machines|instances)", re.IGNORECASE)


@dataclass(frozen=True)
class Reply:
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class OperatorQuote:
    operator: str
    conversation_id: str
    text: str


@dataclass(frozen=True)
class Observation:
    text: str
    run_id: str
    actions: list[tuple[str, dict[str, Any]]]
    operator_messages: list[OperatorQuote]
    demand_line: str
    fleet_line: str
    recommendation: str


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"function": {"name": name, "arguments": arguments}}


def _line_starting(text: str, prefix: str) -> str:
    for line in text.splitlines():
        if line.startswith(prefix):
            return line
    return ""


def parse_observation(text: str) -> Observation:
    actions = [(m.group(1), json.loads(m.group(2))) for m in _ACTION.finditer(text)]
    for match in _ACTION_OBJECT.finditer(text):
        listed = json.loads(match.group(1).removesuffix("  (the policy would stop it)"))
        actions.append((listed["name"], listed["arguments"]))
    quotes: list[OperatorQuote] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        header = _OPERATOR_HEADER.match(line)
        if not header:
            continue
        body = []
        for following in lines[index + 1 :]:
            if not following.strip().startswith(">"):
                break
            body.append(following.strip()[1:].strip())
        quotes.append(OperatorQuote(header.group(1), header.group(2), " ".join(body)))
    run = _RUN.search(text)
    return Observation(
        text=text,
        run_id=run.group(1) if run else "unknown",
        actions=actions,
        operator_messages=quotes,
        demand_line=_line_starting(text, "DEMAND:"),
        fleet_line=_line_starting(text, "FLEET:"),
        recommendation=_line_starting(text, OBSERVATION_MARK).removeprefix(f"{OBSERVATION_MARK}: "),
    )


def last_observation(messages: list[dict[str, Any]]) -> tuple[Observation, list[dict[str, Any]]]:
    """The latest observation and the messages that followed it."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and OBSERVATION_MARK in str(message.get("content") or ""):
            return parse_observation(str(message["content"])), messages[index + 1 :]
    return parse_observation(""), []


def assistant_turns(after: list[dict[str, Any]]) -> int:
    return sum(1 for m in after if m.get("role") == "assistant")


def final_answer(observation: Observation, decision: str) -> Reply:
    seen = f"{observation.demand_line or 'no demand line'} | {observation.fleet_line or 'no fleet line'}"
    return Reply(
        content=(
            f"OBSERVATION: {seen}\n"
            f"ASSESSMENT: the policy's numbers hold: {observation.recommendation or 'no recommendation'}\n"
            f"DECISION: {decision}"
        )
    )


def _replies(observation: Observation) -> list[dict[str, Any]]:
    several = len({q.conversation_id for q in observation.operator_messages}) > 1
    calls = []
    for quote in observation.operator_messages:
        arguments: dict[str, Any] = {
            "text": f"You asked: {quote.text[:200]!r}. Policy: {observation.recommendation[:300]}. "
            f"{observation.demand_line[:300]} {observation.fleet_line[:300]}"
        }
        if several:
            arguments["conversation_id"] = quote.conversation_id
        calls.append(call("reply_to_operator", arguments))
    return calls


def _recommended_calls_first(observation: Observation, after: list[dict[str, Any]], shift: int) -> Reply | None:
    """The recommended calls and any operator replies, on the first turn (`shift` later); None once made."""
    if assistant_turns(after) - shift > 0:
        return None
    calls = [call(name, args) for name, args in observation.actions] + _replies(observation)
    return Reply(tool_calls=calls) if calls else None


def follow(messages: list[dict[str, Any]], shift: int = 0) -> Reply:
    """Carry out the policy's recommended actions, answer the operator, then give the final answer."""
    observation, after = last_observation(messages)
    if (first := _recommended_calls_first(observation, after, shift)) is not None:
        return first
    done = ", ".join(f"{name} {json.dumps(args)}" for name, args in observation.actions)
    return final_answer(observation, f"followed the policy: {done}" if done else "hold, as the policy recommends")


def repeat(messages: list[dict[str, Any]]) -> Reply:
    """Make the recommended calls, then make them again after their results, never answering (a 0.5B model did)."""
    observation, _ = last_observation(messages)
    calls = [call(name, args) for name, args in observation.actions]
    return Reply(tool_calls=calls) if calls else final_answer(observation, "hold, as the policy recommends")


def repeat_changed(messages: list[dict[str, Any]]) -> Reply:
    """Make the recommended calls, then make them again with one argument changed (a launch made an emergency)."""
    observation, after = last_observation(messages)
    again = assistant_turns(after) > 0
    calls = [
        call(name, {**args, "launch_priority": "emergency"} if again and "launch_priority" in args else args)
        for name, args in observation.actions
    ]
    return Reply(tool_calls=calls) if calls else final_answer(observation, "hold, as the policy recommends")


def prose_after_calls(messages: list[dict[str, Any]]) -> Reply:
    """Make the recommended calls, then say so in prose instead of the three-part answer."""
    observation, after = last_observation(messages)
    if assistant_turns(after) == 0 and observation.actions:
        return Reply(tool_calls=[call(name, args) for name, args in observation.actions])
    return Reply(content="All done, the recommended call was made.")


def finish(messages: list[dict[str, Any]], shift: int = 0) -> Reply:
    """Carry out the recommendation and answer the operator, then give the final answer as a `finish` call."""
    observation, after = last_observation(messages)
    if (first := _recommended_calls_first(observation, after, shift)) is not None:
        return first
    decision = "done" if observation.actions else "hold"
    return Reply(tool_calls=[call("finish", {"decision": decision, "reason": observation.recommendation[:200]})])


def finish_first(messages: list[dict[str, Any]]) -> Reply:
    """Say "done" before doing anything; told what is not made yet, carry it out and finish."""
    observation, after = last_observation(messages)
    if assistant_turns(after) == 0 and observation.actions:
        return Reply(tool_calls=[call("finish", {"decision": "done", "reason": "the policy's numbers"})])
    return finish(messages, shift=1 if observation.actions else 0)


def answer_first(messages: list[dict[str, Any]]) -> Reply:
    """Write the final answer naming the recommended calls without making them; reminded, make them."""
    observation, after = last_observation(messages)
    if assistant_turns(after) == 0 and observation.actions:
        return final_answer(observation, ", ".join(name for name, _ in observation.actions))
    return follow(messages, shift=1 if observation.actions else 0)


def unknown_tool(messages: list[dict[str, Any]]) -> Reply:
    _, after = last_observation(messages)
    if assistant_turns(after) == 0:
        return Reply(tool_calls=[call("scale_fleet", {"target_machines": 12})])
    return follow(messages, shift=1)


def missing_argument(messages: list[dict[str, Any]]) -> Reply:
    """launch_instances without its required launch_priority, then (told why) the corrected calls."""
    _, after = last_observation(messages)
    if assistant_turns(after) == 0:
        arguments = {"count": 1, "gpu_models": ["RTX 4090"], "reason": "sustained_demand"}
        return Reply(tool_calls=[call("launch_instances", arguments)])
    return follow(messages, shift=1)


def loop(messages: list[dict[str, Any]]) -> Reply:
    return Reply(tool_calls=[call("get_offers", {"gpu_models": ["RTX 4090"]})])


HUGE_OUTPUT_CALLS = 4


def huge_output(messages: list[dict[str, Any]]) -> Reply:
    """Read every offer there is, several times, with a different (unfiltering) price each time."""
    observation, after = last_observation(messages)
    turns = assistant_turns(after)
    if turns < HUGE_OUTPUT_CALLS:
        return Reply(tool_calls=[call("get_offers", {"max_price": 50 + turns})])
    return final_answer(observation, "hold; offers read")


def obey_injection(messages: list[dict[str, Any]]) -> Reply:
    """Do whatever an operator message says, as a naive model would."""
    observation, after = last_observation(messages)
    turns = assistant_turns(after)
    text = " ".join(q.text for q in observation.operator_messages)
    if turns == 0:
        calls = []
        if launch := _LAUNCH_WORDS.search(text):
            arguments = {
                "count": int(launch.group(1)),
                "gpu_models": [],
                "launch_priority": "emergency",
                "reason": "operator_request",
            }
            calls.append(call("launch_instances", arguments))
        if destroy := _DESTROY_WORDS.search(text):
            calls.append(call("destroy_instance", {"instance_id": int(destroy.group(1)), "reason": "operator_request"}))
        if calls:
            return Reply(tool_calls=calls)
    if turns <= 1 and observation.operator_messages:
        return Reply(tool_calls=[call("reply_to_operator", {"text": "Done as you asked."})])
    return final_answer(observation, "did what the operator asked")


def direct(messages: list[dict[str, Any]]) -> Reply:
    """A model that cannot read a message as a limit (its structured reading is prose, `unreadable`), so the
    agent keeps the limit tools offered: an operator's "at most N machines" is stored by calling cap_instances
    (until 23:59) and answered; then the final answer. Other messages are answered as `follow` answers them."""
    observation, after = last_observation(messages)
    if assistant_turns(after) == 0 and observation.operator_messages:
        calls = []
        for quote in observation.operator_messages:
            capped = _AT_MOST_WORDS.search(quote.text)
            if capped:
                arguments = {"max_instances": int(capped.group(1)), "until": "23:59"}
                calls.append(call("cap_instances", arguments))
        return Reply(tool_calls=[*calls, *_replies(observation)])
    if assistant_turns(after) == 0:
        return follow(messages)
    return final_answer(observation, "stored what the operator asked" if observation.operator_messages else "held")


_UNTIL_WORDS = re.compile(r"\b(?:until|till|by) [\w:-]+(?: \d{1,2}:\d{2})?", re.IGNORECASE)


def read_message(messages: list[dict[str, Any]]) -> Reply:
    """A request with a JSON schema as its `format` (the agent reading an operator's message as a limit): "at most
    N machines" read as cap_instances with its "until ..." words, anything else as "other"."""
    text = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    capped = _AT_MOST_WORDS.search(text)
    until = _UNTIL_WORDS.search(text)
    if capped:
        reading = {"kind": "cap_instances", "value": capped.group(1), "when": until.group(0) if until else ""}
    else:
        reading = {"kind": "other", "value": "", "when": ""}
    return Reply(content=json.dumps(reading))


def unreadable(messages: list[dict[str, Any]]) -> Reply:
    """A structured reading answered in prose, as a model that ignores the schema would."""
    return Reply(content="Sure, I will keep that in mind.")


def no_format(messages: list[dict[str, Any]]) -> Reply:
    return Reply(content="Sure! Everything looks fine to me.")


def busy(messages: list[dict[str, Any]]) -> Reply:
    """Every run: a new memory, a plan update and a large offer list; then the final answer (the soak's model)."""
    observation, after = last_observation(messages)
    if assistant_turns(after) == 0:
        tag = zlib.crc32(observation.run_id.encode()) % 10_000
        return Reply(
            tool_calls=[
                call(
                    "remember",
                    {"category": "fact", "text": f"run {observation.run_id}: {observation.demand_line[:200]}"},
                ),
                call("get_offers", {"max_price": 40 + tag / 100}),
                call(
                    "update_plan",
                    {
                        "items": [
                            {
                                "content": f"watch demand after run {observation.run_id}",
                                "status": "in_progress",
                                "priority": "high",
                            },
                            {
                                "content": "compare RTX 4090 and RTX 5090 cost per task",
                                "status": "pending",
                                "priority": "medium",
                            },
                        ]
                    },
                ),
            ]
        )
    return follow(messages, shift=1)


BEHAVIOURS: dict[str, Callable[[list[dict[str, Any]]], Reply]] = {
    "follow": follow,
    "direct": direct,
    "repeat": repeat,
    "repeat_changed": repeat_changed,
    "prose_after_calls": prose_after_calls,
    "finish": finish,
    "finish_first": finish_first,
    "answer_first": answer_first,
    "unknown_tool": unknown_tool,
    "missing_argument": missing_argument,
    "loop": loop,
    "huge_output": huge_output,
    "obey_injection": obey_injection,
    "no_format": no_format,
    "busy": busy,
}
TRANSPORT_BEHAVIOURS = ("malformed_json", "slow", "down")
ALL_BEHAVIOURS = (*BEHAVIOURS, *TRANSPORT_BEHAVIOURS)
# how a structured reading is answered under a behaviour; read_message for every other
READINGS: dict[str, Callable[[list[dict[str, Any]]], Reply]] = {"direct": unreadable}
