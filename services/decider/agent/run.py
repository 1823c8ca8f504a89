"""One agent run: observe, let the model call tools for a few rounds, keep what matters, answer the operator."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from ollama import ChatResponse
from redis.exceptions import RedisError

from services.decider.advisor import AdvisorOutcome
from services.decider.agent import prompt, record
from services.decider.agent.context import ToolRequest, Turn, compact, fit_to_budget, trim_history
from services.decider.agent.failures import ModelFailure
from services.decider.agent.memory import make_anchor, open_items, recent_memories
from services.decider.agent.tokens import estimate_tools_tokens
from services.decider.agent.tool_desk import ToolDesk
from shared.contract import AgentTrace

log = logging.getLogger("fleetpilot.decider.agent")

STORED_RUN_ID = ""  # turns saved for later runs are compacted as seen from a run that is not this one
UNREADABLE: Literal["unreadable"] = "unreadable"


@dataclass(frozen=True)
class Closed:
    """How a round ended the run: with the model's answer, or with why there is none."""

    answer: prompt.Answer | None
    failure: str | None


class AgentRun(ToolDesk):
    """The conversation with the model, round by round, and what the run hands back and keeps."""

    # ---- the run

    async def execute(self) -> AdvisorOutcome:
        run_id = self.inputs.run_id
        settings = self.agent.settings
        system = Turn(
            role="system",
            kind="system",
            content=prompt.system_prompt(
                budget_usd_per_h=settings.budget_usd_per_h, max_instances=settings.max_instances, compact=self.compact
            ),
        )
        anchor = Turn(role="user", kind="anchor", content=prompt.anchor_text(self.state.anchor))
        read_lines = await self._read_instructions() if self.conversations else []
        observation_text = prompt.render_observation(
            self.inputs,
            plan=self.plan,
            memories=recent_memories(self.memories, self.config.memories_shown),
            limits=prompt.ObservationLimits(
                max_instance_lines=self.config.max_instance_lines,
                memories_shown=self.config.memories_shown,
                operator_messages_shown=self.config.operator_messages_shown,
                budget_usd_per_h=settings.budget_usd_per_h,
                max_instances=settings.max_instances,
            ),
            session_note=prompt.session_note(self.state.problems),
            compact=self.compact,
            record_lines=[*read_lines, *await self._look_up_record()],
            limits_read=bool(read_lines),
        )
        self.current = [
            Turn(
                role="user",
                kind="observation",
                content=observation_text,
                gist=prompt.observation_gist(self.inputs),
                run_id=run_id,
            )
        ]
        answer, failure, rounds = await self._converse(system, anchor)
        # without an answer the model's judgement is unknown: the decider re-applies the policy, counting what
        # was launched in this run, and answers the operator itself (a question the record answers is answered here)
        degraded = answer is None
        await self._reply_to_waiting_operators(answer)
        await self._save(answer, failure)
        return self._outcome(observation_text, answer, failure, rounds, degraded)

    async def _look_up_record(self) -> list[str]:
        """The record's answers to what the waiting questions name, read once for the run; lines for the
        observation (none when no question names anything, or the agent has no reader)."""
        reader = self.agent.record_reader
        asked = {c: record.queries_in(m.text, self.inputs.now) for c, m in self.conversations.items()}
        if reader is None or not any(asked.values()):
            return []
        found = await reader.read(self.inputs.now - timedelta(hours=record.RECORD_WINDOW_H))
        present = record.Present(self.inputs.now, self.inputs.recommendation, self.inputs.signal, self.inputs.snapshot)
        lines = []
        for conversation, queries in asked.items():
            self.record_answers[conversation] = [record.answer(query, found, present) for query in queries]
            lines += [f"  [conversation {conversation}] {text}" for text in self.record_answers[conversation]]
        return lines

    async def _converse(self, system: Turn, anchor: Turn) -> tuple[prompt.Answer | None, str | None, int]:
        failures = 0
        rounds = 0
        try:
            await self.agent.check_tools_capability()
        except ModelFailure as failure:
            self._count_failure(failure)
            if failure.kind == "no_tools":
                return None, failure.detail, rounds
            failures += 1
        tools_tokens = estimate_tools_tokens(self.schemas)
        while rounds < self.config.max_rounds and failures < self.config.max_model_failures:
            rounds += 1
            try:
                response = await self._ask_model(system, anchor, tools_tokens)
            except ModelFailure as failure:
                failures += 1
                self._count_failure(failure)
                continue
            closed: Closed | Literal["again", "unreadable"] | None
            if response.message.tool_calls:
                closed = await self._take_tool_calls(response)
            else:
                closed = self._take_answer(response)
            if isinstance(closed, Closed):
                return closed.answer, closed.failure, rounds
            if closed is UNREADABLE:
                failures += 1
        if failures >= self.config.max_model_failures:
            return None, f"the model failed {failures} times (last: {self.last_failure})", rounds
        return None, f"no final answer within {self.config.max_rounds} rounds", rounds

    async def _ask_model(self, system: Turn, anchor: Turn, tools_tokens: int) -> ChatResponse:
        """One round's request: the session's history and this run's turns, compacted and fitted to the budget."""
        history = self.state.history
        combined = compact([*history, *self.current], self.inputs.run_id, self.config.keep_recent_messages)
        fit = fit_to_budget(
            [system, anchor],
            combined[: len(history)],
            combined[len(history) :],
            tools_tokens,
            self.config.token_budget,
        )
        self.metrics.request_prompt_tokens.observe(fit.tokens)
        self.max_prompt_tokens = max(self.max_prompt_tokens, fit.tokens)
        response = await self.agent.chat(fit.messages, self.schemas)
        self._check_estimate(fit.tokens, response.prompt_eval_count)
        return response

    def _content(self, response: ChatResponse) -> str:
        return prompt.strip_thinking(response.message.content or "")[: self.config.tool_output_cap_chars]

    async def _take_tool_calls(self, response: ChatResponse) -> Closed | None:
        """Carry out the calls the model asked for; the run closes on a finish or on a repeated call."""
        requests = [
            ToolRequest(name=call.function.name[:200], arguments=dict(call.function.arguments or {}))
            for call in response.message.tool_calls or []
        ]
        run_id = self.inputs.run_id
        self.current.append(
            Turn(
                role="assistant",
                kind="tool_request",
                content=self._content(response),
                tool_calls=requests,
                run_id=run_id,
            )
        )
        for request in requests:
            result = await self._call_tool(request)
            self.current.append(
                Turn(
                    role="tool",
                    kind="tool_result",
                    content=result.text,
                    tool_name=request.name,
                    gist=result.gist,
                    run_id=run_id,
                )
            )
        if self.finished is not None:
            return Closed(self._finish_answer(self.finished), None)
        if self.repeated is not None:
            return Closed(*self._close_after_repeat(self.repeated))
        return None

    def _take_answer(self, response: ChatResponse) -> Closed | Literal["again", "unreadable"]:
        """A text answer: taken when it reads as one; a reminder when calls are pending or it does not read."""
        content = self._content(response)
        answer = prompt.parse_answer(content)
        self.current.append(Turn(role="assistant", kind="answer", content=content, run_id=self.inputs.run_id))
        if answer is not None and self.compact and not self.reminded and (pending := self.pending_calls()):
            # a 0.5B model wrote "DECISION: launch 20" as its answer and called nothing: once, it is told
            self.reminded = True
            reminder = prompt.pending_reminder(pending)
            self.current.append(Turn(role="user", kind="nudge", content=reminder, run_id=self.inputs.run_id))
            return "again"
        if answer is not None:
            return Closed(answer, None)
        self._count_failure(ModelFailure("unreadable_answer", content[:120]))
        if self.compact and self.tool_log and not self.pending_calls():
            # the calls are made and only the final answer is missing: a 0.5B model wrote its call again as
            # text here; what it did stands, and another round of a CPU model would only repeat it
            return Closed(self._closing_answer("the model wrote no final answer", content[:300]), None)
        reminder = prompt.COMPACT_FORMAT_REMINDER if self.compact else prompt.FORMAT_REMINDER
        self.current.append(Turn(role="user", kind="nudge", content=reminder, run_id=self.inputs.run_id))
        return UNREADABLE

    # ---- what the next run keeps

    async def _save(self, answer: prompt.Answer | None, failure: str | None) -> None:
        # format reminders helped this run only; later runs need the answers, not the nagging
        kept = [turn for turn in [*self.state.history, *self.current] if turn.kind != "nudge"]
        stored = compact(kept, STORED_RUN_ID, self.config.keep_recent_messages)
        history = trim_history(stored, self.config.history_messages_max)
        concerns = [item.content for item in open_items(self.plan)]
        if failure:
            concerns.insert(0, f"last run had no usable model answer: {failure}")
        anchor = make_anchor(
            run_id=self.inputs.run_id,
            at=self.agent.clock.now(),
            previous=self.state.anchor,
            fleet_summary=prompt.fleet_summary(self.inputs.snapshot),
            demand_summary=prompt.demand_summary(self.inputs.signal),
            last_decision=answer.decision if answer else f"no decision: {failure}",
            concerns=concerns,
        )
        try:
            await self.agent.store.save_run(history, anchor)
        except (RedisError, OSError) as error:
            log.warning("agent session not saved (%s); the next run rebuilds without it", error)

    def _outcome(
        self, observation: str, answer: prompt.Answer | None, failure: str | None, rounds: int, degraded: bool
    ) -> AdvisorOutcome:
        status: Literal["ok", "degraded"] = "degraded" if degraded else "ok"
        self.metrics.rounds.observe(rounds)
        self.metrics.prompt_tokens.set(self.max_prompt_tokens)
        self.metrics.runs.labels(status).inc()
        self.metrics.degraded.set(1 if degraded else 0)
        if degraded:
            log.error(
                "AGENT DEGRADED in run %s: %s; the policy's guarded recommendation is applied alone",
                self.inputs.run_id,
                failure,
            )
        decision = answer.decision if answer else f"no model decision: {failure}"
        if answer is None and self.acted:
            decision += " (actions already allowed in this run stand; the policy counts them)"
        trace = AgentTrace(
            observation=(answer.observation if answer else observation)[:20000],
            assessment=(answer.assessment if answer else "")[:8000],
            decision=decision[:8000],
            rounds=rounds,
            tool_calls=self.trace_calls,
            prompt_tokens=self.max_prompt_tokens,
            status=status,
        )
        return AdvisorOutcome(trace=trace, status=status, next_check_s=self.next_check_s)
