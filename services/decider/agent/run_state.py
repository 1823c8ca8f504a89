"""Where one agent run stands: what it was shown, which calls the model made, which recommended calls are still
pending, and how the run closes when the model stops short."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.decider.advisor import DeciderPorts, RunInputs
from services.decider.agent import prompt, tools
from services.decider.agent.context import Turn
from services.decider.agent.failures import ModelFailure
from services.decider.agent.reading import Reading
from services.decider.agent.store import LoadedState
from shared.contract import OperatorMessage
from shared.contract.directives import Directive

if TYPE_CHECKING:
    from services.decider.agent.agent import OllamaAgent

log = logging.getLogger("fleetpilot.decider.agent")

TRACE_CALLS_MAX = 40


@dataclass(frozen=True)
class ToolLogEntry:
    name: str
    arguments: dict[str, object]
    outcome: tools.ToolOutcome


class RunState:
    """One run's state: what the model has been shown and told, and what it has done."""

    def __init__(self, agent: OllamaAgent, inputs: RunInputs, ports: DeciderPorts, state: LoadedState) -> None:
        self.agent = agent
        self.config = agent.config
        self.metrics = agent.metrics
        self.inputs = inputs
        self.ports = ports
        self.state = state
        self.memories = list(state.memories)
        self.plan = list(state.plan)
        self.conversations = self._conversations(inputs.operator_messages)
        self.compact = self.config.prompt_style in ("compact", "open")
        # the calls that carry out the policy's recommendation (none on stale data: they would only be refused)
        self.recommended = [] if inputs.stale else [prompt.action_call(a) for a in inputs.recommended_actions]
        self.offered = tools.ACTION_TOOLS if self.config.prompt_style == "open" else {n for n, _ in self.recommended}
        self.schemas = tools.tool_schemas(list(self.conversations), compact=self.compact, action_tools=self.offered)
        self.current: list[Turn] = []
        self.seen_calls: dict[str, str] = {}
        self.tool_calls_made = 0
        self.trace_calls: list[str] = []
        self.tool_log: list[ToolLogEntry] = []  # every call the model asked for, in order, with its outcome
        self.acted = False
        self.replied: set[str] = set()
        self.next_check_s: int | None = None
        self.max_prompt_tokens = 0
        self.last_failure = ""
        self.finished: tools.FinishArgs | None = None
        self.reminded = False  # told once that its answer came before the recommended calls
        self.repeated: str | None = None  # a call the model made again after its result: the end of the run
        # per conversation, the record's ready answers to what its question names (record.py): shown to the model,
        # and the reply when the model's words lose their numbers
        self.record_answers: dict[str, list[str]] = {}
        self.directives_asked: list[Directive] = []  # what the directive tools handed the desk, stored or refused
        # per conversation, the desk's answers to the directive tools: every reply carries them word for word (a model's
        # text that merely quotes the operator's numbers back would hide a refusal)
        self.directive_answers: dict[str, list[str]] = {}
        self.readings: dict[str, Reading] = {}  # each waiting message as the model read it (reading.py)

    @staticmethod
    def _conversations(messages: list[OperatorMessage]) -> OrderedDict[str, OperatorMessage]:
        """Each conversation's latest message: the one a reply answers."""
        latest: OrderedDict[str, OperatorMessage] = OrderedDict()
        for message in messages:
            latest.pop(message.conversation_id, None)
            latest[message.conversation_id] = message
        return latest

    # ---- where the run stands, and how it closes

    def _made_calls(self, name: str) -> list[dict[str, object]]:
        """The arguments of this run's calls of an action tool that reached the guardrails (allowed or refused)."""
        return [e.arguments for e in self.tool_log if e.name == name and e.outcome in ("ok", "refused")]

    def _repeats_an_action(self, name: str, arguments: dict[str, object]) -> bool:
        """A removal of a machine already removed in this run, or one launch more than the policy recommended."""
        made = self._made_calls(name)
        if name == "launch_instances":
            return len(made) >= sum(1 for tool, _ in self.recommended if tool == name)
        return any(earlier.get("instance_id") == arguments.get("instance_id") for earlier in made)

    def pending_calls(self) -> list[str]:
        """The recommended calls the model has not made yet, by tool name (launches by count: the policy can
        recommend a replacement and a launch for demand, which differ only in their arguments)."""
        launches = len(self._made_calls("launch_instances"))
        pending = []
        for name, arguments in self.recommended:
            if name == "launch_instances":
                if launches > 0:
                    launches -= 1
                    continue
            elif any(earlier.get("instance_id") == arguments.get("instance_id") for earlier in self._made_calls(name)):
                continue
            pending.append(name)
        return pending

    def reply_due(self) -> bool:
        return any(conversation not in self.replied for conversation in self.conversations)

    def _done_summary(self) -> str:
        done = [line for line in self.trace_calls if line.split(" ", 1)[0] in tools.ACTION_TOOLS]
        return "; ".join(done) if done else "no fleet change"

    def _closing_answer(self, how: str, assessment: str) -> prompt.Answer:
        decision = f"{how}; the calls made stand: {self._done_summary()}"
        return prompt.closing_answer(self.inputs, decision, assessment)

    def _finish_answer(self, args: tools.FinishArgs) -> prompt.Answer:
        return prompt.closing_answer(self.inputs, f"{args.decision}: {self._done_summary()}", args.reason)

    def _close_after_repeat(self, name: str) -> tuple[prompt.Answer | None, str | None]:
        """A call made again after its result ends the run: more rounds only repeated it (a 0.5B model did so
        until the round cap, then the run fell back). What was done stands; the policy applies only what the
        model left undone."""
        pending = self.pending_calls()
        if pending:
            return None, f"the model repeated {name} before making the recommended {', '.join(pending)}"
        return self._closing_answer(f"the model repeated {name} instead of answering", ""), None

    def _check_estimate(self, estimated: int, reported: int | None) -> None:
        """The budget is only as good as the count: a model that counts more than we did is worth an alarm."""
        if reported is None:
            return
        self.metrics.reported_prompt_tokens.observe(reported)
        if reported > estimated:
            self.metrics.estimate_below_model.inc()
            log.error(
                "prompt token estimate %d below the model's count %d in run %s: the budget may be exceeded",
                estimated,
                reported,
                self.inputs.run_id,
            )

    def _count_failure(self, failure: ModelFailure) -> None:
        self.last_failure = str(failure)
        self.metrics.model_failures.labels(failure.kind).inc()
        log.warning("agent model call failed in run %s: %s", self.inputs.run_id, failure)
