"""The agent's tools carried out for one run: limits and duplicates first, then the arguments checked, then the
action through the guardrails (`ports.act`), a look-up, a note kept, or a reply to the operator."""

from __future__ import annotations

import json
import logging
import uuid

from services.decider.agent import prompt, reading, tools
from services.decider.agent.context import ToolRequest, call_key, cap_output
from services.decider.agent.directing import DirectivePorts, directive_from
from services.decider.agent.failures import ModelFailure
from services.decider.agent.memory import Memory, PlanItem, open_items, remember, replace_plan
from services.decider.agent.record import reply_from_record
from services.decider.agent.run_state import TRACE_CALLS_MAX, RunState, ToolLogEntry
from shared.contract import BenchRequest, OfferQuery, OperatorReply

log = logging.getLogger("fleetpilot.decider.agent")

OFFERS_ASKED = 20


class ToolDesk(RunState):
    """A run's tool calls: each one logged, counted and answered with a result the model reads."""

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
        if isinstance(args, tools.DirectiveToolArgs):
            return await self._set_directive(name, args.directive_args())
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

    async def _read_instructions(self) -> list[str]:
        """Each waiting message read once as a limit (reading.py), checked in code against its words, then stored
        through the desk, asked back or refused. The answer is said in the reply word for word, and the lines
        returned show it to the model. Only a message the model could not read keeps the limit tools offered."""
        settings = self.agent.settings
        pending = self.inputs.signal.pending_tasks if self.inputs.signal is not None else None
        facts = reading.Facts(settings.budget_usd_per_h, settings.max_instances, pending)
        now = self.agent.clock.now()
        lines: list[str] = []
        for conversation, message in self.conversations.items():
            try:
                read = await self.agent.read_instruction(message.text, now)
            except ModelFailure as failure:
                self._count_failure(failure)
                continue
            judged = reading.judge(read, message.text, now, facts)
            self.readings[conversation] = read
            if judged is None:
                continue
            if isinstance(judged, tools.DirectiveArgs):
                said = (await self._set_directive(f"read as {read.kind.value}", judged, conversation)).text
            else:
                said = judged.question if isinstance(judged, reading.Ask) else judged.reason
                self.directive_answers.setdefault(conversation, []).append(said)
            lines.append(f"  [conversation {conversation}] the message read as {read.kind.value}: {said}")
        # every message read (a limit stored, asked back or refused, or a question): no limit tool is left to call
        # (offered beside a question, the 0.5B model stored "what did today cost so far?" as an exclusion)
        if all(c in self.readings for c in self.conversations):
            self.schemas = tools.tool_schemas(
                list(self.conversations), compact=self.compact, action_tools=self.offered, limit_tools=False
            )
        return lines

    async def _set_directive(
        self, name: str, args: tools.DirectiveArgs, conversation: str | None = None
    ) -> tools.ToolResult:
        """The instruction stored through the decider's desk; its answer (the effect in numbers, or why it was
        refused) is also what the operator's reply says, whatever the model writes."""
        if not self.conversations:
            return tools.error_result(name, "error: no operator message asks for a directive in this run.", "invalid")
        conversation = conversation or next(reversed(self.conversations))
        message = self.conversations[conversation]
        now = self.agent.clock.now()
        directive = directive_from(args, now=now, operator=message.operator, instruction=message.text)
        if isinstance(directive, str):
            return tools.error_result(name, f"error: {directive}. Nothing was stored.", "invalid")
        if not isinstance(self.ports, DirectivePorts):
            said = "directives cannot be stored from this run; the operator can use `fleetpilot directives add`"
            return tools.error_result(name, f"error: {said}.", "error")
        answer = await self.ports.add_directive(directive)
        self.directives_asked.append(directive)
        self.record_answers.setdefault(conversation, []).append(answer.message)
        self.directive_answers.setdefault(conversation, []).append(answer.message)
        outcome: tools.ToolOutcome = "ok" if answer.ok else "refused"
        return tools.ToolResult(answer.message, tools.gist(name, answer.message[:120]), outcome)

    async def _send_reply(self, conversation: str, text: str) -> None:
        footer = prompt.numbers_footer(self.inputs)
        said = reply_from_record(text, self.record_answers.get(conversation, []))
        unsaid = [answer for answer in self.directive_answers.get(conversation, []) if answer not in said]
        body = "\n".join([*unsaid, said, footer])
        reply = OperatorReply(
            occurred_at=self.agent.clock.now(),
            source=tools.SOURCE,
            conversation_id=conversation,
            in_reply_to=self.conversations[conversation].event_id,
            text=body,
        )
        await self.ports.reply_to_operator(reply)
        self.replied.add(conversation)

    async def _reply_to_waiting_operators(self, answer: prompt.Answer | None) -> None:
        """An operator always gets an answer, even when the model did not call reply_to_operator. Without the
        model's answer only a question the record answers is replied to here; the decider answers the rest."""
        for conversation in self.conversations:
            if conversation in self.replied or (answer is None and not self.record_answers.get(conversation)):
                continue
            text = f"{answer.assessment}\n{answer.decision}" if answer is not None else ""
            try:
                await self._send_reply(conversation, text)
            except Exception as error:
                log.error("could not reply to operator conversation %s: %r", conversation, error)
