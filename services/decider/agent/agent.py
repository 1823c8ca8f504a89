"""The agent's run: observe, let the model call tools for a few rounds, keep what matters, answer the operator.

It implements the decider's `Advisor`. Every action goes through `ports.act` (the decider's guardrails); the model
is reached through the ollama client, so the same code talks to a real Ollama and to the stand-in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

import httpx
from ollama import AsyncClient, ChatResponse, ResponseError
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.decider.advisor import AdvisorOutcome, DeciderPorts, RunInputs
from services.decider.agent import prompt, tools
from services.decider.agent.config import AgentConfig
from services.decider.agent.context import (
    ContextBudgetError,
    ToolRequest,
    Turn,
    call_key,
    cap_output,
    compact,
    fit_to_budget,
    trim_history,
)
from services.decider.agent.memory import (
    Memory,
    PlanItem,
    make_anchor,
    open_items,
    recent_memories,
    remember,
    replace_plan,
)
from services.decider.agent.metrics import AgentMetrics
from services.decider.agent.store import AgentStore, LoadedState, RedisAgentStore
from services.decider.agent.tokens import estimate_tools_tokens
from shared.clock import Clock
from shared.contract import AgentTrace, BenchRequest, OfferQuery, OperatorMessage, OperatorReply
from shared.service import ServiceContext
from shared.settings import Settings

log = logging.getLogger("fleetpilot.decider.agent")

OFFERS_ASKED = 20
TRACE_CALLS_MAX = 40
STORED_RUN_ID = ""  # turns saved for later runs are compacted as seen from a run that is not this one


@dataclass(frozen=True)
class ToolLogEntry:
    name: str
    arguments: dict[str, object]
    outcome: tools.ToolOutcome


class ModelFailure(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class OllamaAgent:
    """An `Advisor`: one `advise` per decider run, never two at once (a Redis marker catches an overlap)."""

    def __init__(
        self,
        *,
        settings: Settings,
        clock: Clock,
        store: AgentStore,
        registry: CollectorRegistry,
        config: AgentConfig | None = None,
        client: AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.store = store
        self.config = config or AgentConfig()
        self.model = settings.ollama_model
        self.client = client or AsyncClient(host=settings.ollama_host, timeout=self.config.call_timeout_s)
        self.registry = registry
        self.metrics = AgentMetrics(registry)
        self.tools_confirmed = False
        self._owned_redis: Redis | None = None
        self.last_run: AgentRun | None = None  # what the latest run did, for the evaluation suite

    async def aclose(self) -> None:
        await self.client._client.aclose()
        if self._owned_redis is not None:
            await self._owned_redis.aclose()

    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
        try:
            other = await self.store.claim_run(inputs.run_id, self.config.run_marker_ttl_s)
        except (RedisError, OSError) as error:
            log.warning("agent run marker unavailable (%s); relying on the decider's lock", error)
            other = None
        if other is not None:
            self.metrics.overlapping_runs.inc()
            self.metrics.runs.labels("skipped").inc()
            log.error("agent run %s refused: run %s is still active (two runs at once)", inputs.run_id, other)
            decision = f"another agent run ({other}) was still active; this run did nothing"
            return AdvisorOutcome(trace=AgentTrace(status="skipped", decision=decision), status="ok")
        try:
            state = await self._load_state()
            self.last_run = AgentRun(self, inputs, ports, state)
            return await self.last_run.execute()
        finally:
            try:
                await self.store.release_run(inputs.run_id)
            except (RedisError, OSError) as error:
                log.warning("could not clear the agent run marker (%s); it expires by itself", error)

    async def _load_state(self) -> LoadedState:
        try:
            state = await self.store.load()
        except (RedisError, OSError) as error:
            state = LoadedState(problems=[f"state store unreachable ({type(error).__name__})"])
        if state.problems:
            self.metrics.session_rebuilds.inc()
            log.warning("agent session rebuilt without: %s", "; ".join(state.problems))
        return state

    async def chat(self, messages: list[Turn], schemas: list[dict[str, object]]) -> ChatResponse:
        """One model call; every way it can fail becomes a classified `ModelFailure`."""
        try:
            async with asyncio.timeout(self.config.call_timeout_s + 1.0):  # backstop over httpx's own timeout
                response = await self.client.chat(
                    model=self.model,
                    messages=[m.wire() for m in messages],
                    tools=schemas,
                    stream=False,
                    options={
                        "num_ctx": self.config.num_ctx,
                        "temperature": self.config.temperature,
                        "num_predict": self.config.max_output_tokens,
                    },
                )
        except ConnectionError as error:
            raise ModelFailure("unreachable", str(error)[:200]) from None
        except (TimeoutError, httpx.TimeoutException):
            raise ModelFailure("timeout", f"no answer within {self.config.call_timeout_s:.0f} s") from None
        except ResponseError as error:
            raise ModelFailure("error_status", f"HTTP {error.status_code}: {str(error.error)[:200]}") from None
        except httpx.HTTPError as error:
            raise ModelFailure("unreachable", f"{type(error).__name__}: {str(error)[:200]}") from None
        except ValueError as error:  # a body that is not JSON, or JSON that is not a chat response
            raise ModelFailure("malformed", f"{type(error).__name__}: {str(error)[:200]}") from None
        return response

    async def check_tools_capability(self) -> None:
        """The model must support tools; asked once (`/api/show`), then remembered."""
        if self.tools_confirmed:
            return
        try:
            async with asyncio.timeout(self.config.call_timeout_s):
                shown = await self.client.show(self.model)
        except (ConnectionError, TimeoutError, ResponseError, httpx.HTTPError, ValueError) as error:
            raise ModelFailure("unreachable", f"model info unavailable: {type(error).__name__}") from None
        capabilities = list(shown.capabilities or [])
        if capabilities and "tools" not in capabilities:
            raise ModelFailure("no_tools", f"model {self.model} does not support tools (has {capabilities})")
        self.tools_confirmed = True


class AgentRun:
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
        self.compact = self.config.prompt_style == "compact"
        # the calls that carry out the policy's recommendation (none on stale data: they would only be refused)
        self.recommended = [] if inputs.stale else [prompt.action_call(a) for a in inputs.recommended_actions]
        self.schemas = tools.tool_schemas(
            list(self.conversations), compact=self.compact, action_tools={name for name, _ in self.recommended}
        )
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

    @staticmethod
    def _conversations(messages: list[OperatorMessage]) -> OrderedDict[str, OperatorMessage]:
        """Each conversation's latest message: the one a reply answers."""
        latest: OrderedDict[str, OperatorMessage] = OrderedDict()
        for message in messages:
            latest.pop(message.conversation_id, None)
            latest[message.conversation_id] = message
        return latest

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
        # was launched in this run, and answers the operator itself
        degraded = answer is None
        if answer is not None:
            await self._reply_to_waiting_operators(answer)
        await self._save(answer, failure)
        return self._outcome(observation_text, answer, failure, rounds, degraded)

    async def _converse(self, system: Turn, anchor: Turn) -> tuple[prompt.Answer | None, str | None, int]:
        history = self.state.history
        tools_tokens = estimate_tools_tokens(self.schemas)
        failures = 0
        rounds = 0
        try:
            await self.agent.check_tools_capability()
        except ModelFailure as failure:
            self._count_failure(failure)
            if failure.kind == "no_tools":
                return None, failure.detail, rounds
            failures += 1
        while rounds < self.config.max_rounds and failures < self.config.max_model_failures:
            rounds += 1
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
            try:
                response = await self.agent.chat(fit.messages, self.schemas)
            except ModelFailure as failure:
                failures += 1
                self._count_failure(failure)
                continue
            self._check_estimate(fit.tokens, response.prompt_eval_count)
            message = response.message
            content = prompt.strip_thinking(message.content or "")[: self.config.tool_output_cap_chars]
            if message.tool_calls:
                requests = [
                    ToolRequest(name=call.function.name[:200], arguments=dict(call.function.arguments or {}))
                    for call in message.tool_calls
                ]
                run_id = self.inputs.run_id
                self.current.append(
                    Turn(role="assistant", kind="tool_request", content=content, tool_calls=requests, run_id=run_id)
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
                    return self._finish_answer(self.finished), None, rounds
                if self.repeated is not None:
                    closed, why = self._close_after_repeat(self.repeated)
                    return closed, why, rounds
                continue
            answer = prompt.parse_answer(content)
            self.current.append(Turn(role="assistant", kind="answer", content=content, run_id=self.inputs.run_id))
            if answer is not None and self.compact and not self.reminded and (pending := self.pending_calls()):
                # a 0.5B model wrote "DECISION: launch 20" as its answer and called nothing: once, it is told
                self.reminded = True
                reminder = prompt.pending_reminder(pending)
                self.current.append(Turn(role="user", kind="nudge", content=reminder, run_id=self.inputs.run_id))
                continue
            if answer is not None:
                return answer, None, rounds
            failures += 1
            self._count_failure(ModelFailure("unreadable_answer", content[:120]))
            if self.compact and self.tool_log and not self.pending_calls():
                # the calls are made and only the final answer is missing: a 0.5B model wrote its call again as
                # text here; what it did stands, and another round of a CPU model would only repeat it
                return self._closing_answer("the model wrote no final answer", content[:300]), None, rounds
            reminder = prompt.COMPACT_FORMAT_REMINDER if self.compact else prompt.FORMAT_REMINDER
            self.current.append(Turn(role="user", kind="nudge", content=reminder, run_id=self.inputs.run_id))
        if failures >= self.config.max_model_failures:
            return None, f"the model failed {failures} times (last: {self.last_failure})", rounds
        return None, f"no final answer within {self.config.max_rounds} rounds", rounds

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

    # ---- tools

    async def _call_tool(self, request: ToolRequest) -> tools.ToolResult:
        name = request.name
        if self.tool_calls_made >= self.config.max_tool_calls:
            result = tools.error_result(
                name,
                f"refused: the limit of {self.config.max_tool_calls} tool calls in one run is reached. "
                "Nothing was done. Give your final answer now.",
                "over_limit",
            )
        else:
            self.tool_calls_made += 1
            key = call_key(name, request.arguments)
            if key in self.seen_calls:
                self.repeated = name
                result = tools.ToolResult(
                    f"refused: exact duplicate of an earlier call in this run ({name} with the same arguments). "
                    f"Nothing was done again. Its result was: {self.seen_calls[key]}",
                    tools.gist(name, "duplicate refused"),
                    "duplicate",
                )
            elif self.compact and name in tools.ACTION_TOOLS and self._repeats_an_action(name, request.arguments):
                # the same action with other arguments (a 0.5B model added one): still the action already taken
                self.repeated = name
                result = tools.ToolResult(
                    f"refused: {name} was already called in this run for this; its result stands. "
                    "Nothing was done again.",
                    tools.gist(name, "repeat refused"),
                    "duplicate",
                )
            else:
                result = await self._validated_call(name, request.arguments)
                self.seen_calls[key] = result.gist
        text = cap_output(
            result.text,
            self.config.tool_output_cap_chars,
            tools.HOW_TO_GET_MORE.get(name, tools.DEFAULT_HOW_TO_GET_MORE),
        )
        label = name if name in tools.ARGUMENT_MODELS else "unknown"
        self.tool_log.append(ToolLogEntry(name, request.arguments, result.outcome))
        if self.compact and self.finished is None:
            text += f"\n{prompt.next_step(self.pending_calls(), self.reply_due())}"
        self.metrics.tool_calls.labels(label, result.outcome).inc()
        if len(self.trace_calls) < TRACE_CALLS_MAX:
            self.trace_calls.append(
                f"{name[:60]} {json.dumps(request.arguments, default=str)[:200]} → {result.outcome}"
            )
        return tools.ToolResult(text, result.gist, result.outcome)

    async def _validated_call(self, name: str, arguments: dict[str, object]) -> tools.ToolResult:
        parsed = tools.parse_arguments(name, arguments, self.schemas)
        if isinstance(parsed, tools.ToolResult):
            return parsed
        try:
            return await self._execute(name, parsed)
        except Exception as error:  # a port failed (NATS timeout, Redis down): the model is told, the run goes on
            log.warning("agent tool %s failed in run %s: %r", name, self.inputs.run_id, error)
            return tools.error_result(
                name, f"error: {name} failed ({type(error).__name__}: {str(error)[:200]}).", "error"
            )

    async def _execute(self, name: str, args: tools.ToolArgs) -> tools.ToolResult:
        now = self.agent.clock.now()
        if name in tools.ACTION_TOOLS:
            return await self._act(name, args)
        if isinstance(args, tools.GetOffersArgs):
            query = OfferQuery(
                occurred_at=now,
                source=tools.SOURCE,
                gpu_models=args.gpu_models or [],
                max_price_usd_per_h=args.max_price,
                limit=OFFERS_ASKED,
            )
            return tools.offers_result(await self.ports.find_offers(query))
        if isinstance(args, tools.BenchmarkArgs):
            request = BenchRequest(
                occurred_at=now,
                source=tools.SOURCE,
                instance_id=args.instance_id,
                kind=args.kind,
                reason=f"asked by the agent in run {self.inputs.run_id}",
            )
            await self.ports.request_benchmark(request)
            return tools.ok_result(
                name,
                f"benchmark ({args.kind}) requested for #{args.instance_id}; the verdict arrives as a later trigger",
            )
        if isinstance(args, tools.RememberArgs):
            memory = Memory(category=args.category, text=args.text, at=now, run_id=self.inputs.run_id)
            self.memories, is_new = remember(self.memories, memory, self.config.memories_max)
            await self.agent.store.save_memories(self.memories)
            said = "remembered" if is_new else "already remembered; kept as the most recent"
            return tools.ok_result(name, f"{said} ({len(self.memories)} notes kept)", said)
        if isinstance(args, tools.UpdatePlanArgs):
            items = [PlanItem(content=i.content, status=i.status, priority=i.priority) for i in args.items]
            self.plan = replace_plan(items, self.config.plan_items_max)
            await self.agent.store.save_plan(self.plan)
            return tools.ok_result(name, f"plan saved: {len(self.plan)} items, {len(open_items(self.plan))} open")
        if isinstance(args, tools.ScheduleArgs):
            self.next_check_s = args.delay_s
            return tools.ok_result(name, f"next check in {args.delay_s} s ({args.reason[:80]})")
        if isinstance(args, tools.ReplyArgs):
            return await self._reply(args)
        if isinstance(args, tools.FinishArgs):
            return self._finish(args)
        raise AssertionError(f"no handler for tool {name}")  # ARGUMENT_MODELS and this dispatch must agree

    def _finish(self, args: tools.FinishArgs) -> tools.ToolResult:
        pending = self.pending_calls()
        if args.decision is None:
            # read as "done" whenever there was something to do: a bare finish() never holds back a recommendation
            acted = any(entry.name in tools.ACTION_TOOLS and entry.outcome == "ok" for entry in self.tool_log)
            args = args.model_copy(update={"decision": "done" if acted or pending else "hold"})
        if args.decision == "done" and pending:
            # "done" with nothing done contradicts itself: a 0.5B model answered a launch it never made
            return tools.ToolResult(
                f"refused: finish says done, but the recommended {', '.join(pending)} is not made yet. "
                'Make it now, or call finish with decision "hold" to hold on purpose.',
                tools.gist(tools.FINISH, "refused: calls not made"),
                "refused",
            )
        self.finished = args
        return tools.ok_result(tools.FINISH, f"final answer taken: {args.decision}")

    async def _act(self, name: str, args: tools.ToolArgs) -> tools.ToolResult:
        if self.inputs.stale:
            return tools.ToolResult(
                "REFUSED: the demand signal or the fleet snapshot is stale, so this run only holds. Nothing was done.",
                tools.gist(name, "refused: stale data"),
                "refused",
            )
        key = f"ag-{uuid.uuid4().hex}"
        now = self.agent.clock.now()
        if isinstance(args, tools.LaunchArgs):
            command = tools.launch_command(args, now=now, idempotency_key=key)
            verdict = await self.ports.act(command)
        elif isinstance(args, tools.ParkArgs):
            verdict = await self.ports.act(tools.park_command(args, now=now, idempotency_key=key))
        elif isinstance(args, tools.ResumeArgs):
            verdict = await self.ports.act(tools.resume_command(args, now=now, idempotency_key=key))
        else:
            assert isinstance(args, tools.RemovalArgs)
            verdict = await self.ports.act(tools.removal_command(name, args, now=now, idempotency_key=key))
        if verdict.verdict == "allowed":
            self.acted = True
        return tools.verdict_result(name, verdict)

    async def _reply(self, args: tools.ReplyArgs) -> tools.ToolResult:
        if not self.conversations:
            return tools.error_result(
                "reply_to_operator", "error: no operator message is waiting for a reply in this run.", "invalid"
            )
        conversation = args.conversation_id or next(reversed(self.conversations))
        if conversation not in self.conversations:
            known = ", ".join(self.conversations)
            return tools.error_result(
                "reply_to_operator",
                f"error: unknown conversation_id {conversation[:80]!r} (waiting: {known}).",
                "invalid",
            )
        await self._send_reply(conversation, args.text.strip() or f"Policy: {self.inputs.recommendation}")
        return tools.ok_result("reply_to_operator", f"reply sent to conversation {conversation}", "reply sent")

    async def _send_reply(self, conversation: str, text: str) -> None:
        footer = prompt.numbers_footer(self.inputs)
        body = f"{text.strip()[: 7900 - len(footer)]}\n{footer}"
        reply = OperatorReply(
            occurred_at=self.agent.clock.now(),
            source=tools.SOURCE,
            conversation_id=conversation,
            in_reply_to=self.conversations[conversation].event_id,
            text=body,
        )
        await self.ports.reply_to_operator(reply)
        self.replied.add(conversation)

    async def _reply_to_waiting_operators(self, answer: prompt.Answer) -> None:
        """An operator always gets an answer, even when the model did not call reply_to_operator."""
        for conversation in self.conversations:
            if conversation in self.replied:
                continue
            try:
                await self._send_reply(conversation, f"{answer.assessment}\n{answer.decision}")
            except Exception as error:
                log.error("could not reply to operator conversation %s: %r", conversation, error)

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


def create_agent(ctx: ServiceContext, config: AgentConfig | None = None) -> OllamaAgent:
    """The agent as the decider wires it: its registry, its clock, Redis at the configured URL."""
    redis = Redis.from_url(ctx.settings.redis_url, socket_timeout=5.0, socket_connect_timeout=5.0)
    agent = OllamaAgent(
        settings=ctx.settings,
        clock=ctx.clock,
        store=RedisAgentStore(redis, ctx.settings.subject_prefix),
        registry=ctx.metrics.registry,
        config=config,
    )
    agent._owned_redis = redis
    return agent


__all__ = ["ContextBudgetError", "ModelFailure", "OllamaAgent", "create_agent"]
