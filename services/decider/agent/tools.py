"""The agent's tools: pydantic models that validate what the model sends and generate the JSON schemas it sees
(model_json_schema(), each field's description), and the pure translation of a valid call into a contract
command or a short result text.

Small models skip optional booleans but fill required enums, so every critical parameter is a required enum.
A call with an unknown name or invalid arguments is answered with a precise error and never executed.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from services.decider.agent.memory import MemoryCategory, PlanPriority, PlanStatus
from services.decider.agent.untrusted import one_line
from shared.contract import (
    DestroyInstance,
    DrainInstance,
    GuardrailVerdict,
    LaunchInstances,
    LaunchReason,
    OfferList,
    RemovalReason,
    ResumeInstance,
    StopInstance,
)
from shared.contract.directives import DirectiveKind, Lever

SOURCE = "decider"
LAUNCH_COUNT_MAX = 100  # only nonsense is refused here: the guardrails cap the fleet, the budget and launches per hour
SCHEDULE_MIN_S = 30
SCHEDULE_MAX_S = 3600
ToolOutcome = Literal["ok", "refused", "invalid", "unknown_tool", "duplicate", "over_limit", "error"]

LAUNCH_REASONS = [r.value for r in LaunchReason]
REMOVAL_REASONS = [r.value for r in RemovalReason]


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


INSTANCE_ID = "the instance id, as in the fleet lines (#id)"


class LaunchArgs(ToolArgs):
    count: int = Field(ge=1, le=LAUNCH_COUNT_MAX, description=f"how many machines, 1 to {LAUNCH_COUNT_MAX}")
    gpu_models: list[str] = Field(max_length=8, description='preferred GPU models, e.g. ["RTX 4090"]; [] = any')
    launch_priority: Literal["normal", "emergency"] = Field(
        description="emergency only when workers are stalled with tasks queued"
    )
    reason: LaunchReason = Field(description="why")
    # left out (as small models leave optional fields out): every machine on-demand, the safe side
    interruptible: int = Field(
        default=0,
        ge=0,
        le=LAUNCH_COUNT_MAX,
        description="how many of count are interruptible bids (cheaper, paused while outbid); 0 = none",
    )

    @model_validator(mode="after")
    def _interruptible_within_count(self) -> LaunchArgs:
        if self.interruptible > self.count:
            raise ValueError(f"interruptible must be at most count ({self.count})")
        return self


class ParkArgs(ToolArgs):
    instance_id: int = Field(description=INSTANCE_ID)


class ResumeArgs(ToolArgs):
    instance_id: int = Field(description="the parked instance's id (#id)")
    reason: LaunchReason = Field(description="why it is needed again")


class RemovalArgs(ToolArgs):
    instance_id: int = Field(description=INSTANCE_ID)
    reason: RemovalReason = Field(description="why it goes")


class GetOffersArgs(ToolArgs):
    gpu_models: list[str] | None = Field(default=None, max_length=8, description="only these GPU models (optional)")
    max_price: float | None = Field(
        default=None, gt=0, le=100, description="only offers at or under this $/h (optional)"
    )


class BenchmarkArgs(ToolArgs):
    instance_id: int = Field(description="the instance id (#id)")
    kind: Literal["gpu", "serving"] = Field(description="gpu: raw GPU speed; serving: the task endpoint")


class RememberArgs(ToolArgs):
    category: MemoryCategory = Field(description="what kind of note")
    text: str = Field(min_length=3, max_length=300, description="one sentence, at most 300 characters")


class PlanItemArgs(ToolArgs):
    content: str = Field(min_length=1, max_length=300, description="the step")
    status: PlanStatus = Field(description="where it stands")
    priority: PlanPriority = Field(description="how much it matters")


class UpdatePlanArgs(ToolArgs):
    items: list[PlanItemArgs] = Field(max_length=30, description="every plan item")


class ScheduleArgs(ToolArgs):
    delay_s: int = Field(
        ge=SCHEDULE_MIN_S, le=SCHEDULE_MAX_S, description=f"seconds, {SCHEDULE_MIN_S} to {SCHEDULE_MAX_S}"
    )
    reason: str = Field(min_length=3, max_length=200, description="what to look at then")


CONVERSATION_ID = "conversation_id"


class ReplyArgs(ToolArgs):
    # optional: a 0.5B model called reply_to_operator({}); the reply then gives the policy's reasoning, and every
    # reply ends with the fleet and demand numbers anyway
    text: str = Field(
        default="",
        max_length=4000,
        description="the answer, citing the fleet and demand numbers (left out: the policy's reasoning)",
    )
    # offered (as a required enum of the waiting ones) only when several conversations wait: see tool_schemas
    conversation_id: str | None = Field(
        default=None, max_length=128, description="which operator conversation this answers"
    )


class DirectiveArgs(ToolArgs):
    """An operator's instruction as one directive request: the kind, its one value, and when it ends. Not a tool
    itself: each kind is its own tool below (DirectiveToolArgs), whose fields are all required."""

    kind: DirectiveKind
    until: str = Field(min_length=4, max_length=40)
    gpu_model: str | None = Field(default=None, max_length=64)
    host_id: int | None = Field(default=None, ge=0)
    max_instances: int | None = Field(default=None, ge=0)
    max_usd_per_h: float | None = Field(default=None, ge=0)
    drain_by: str | None = Field(default=None, max_length=40)
    lever: Lever | None = None
    state: Literal["on", "off"] | None = None


UNTIL = 'when it ends, UTC: "YYYY-MM-DD HH:MM" or "HH:MM"'


class DirectiveToolArgs(ToolArgs):
    """One kind of operator limit as its own tool, every field required. The 0.5B model offered one
    set_directive(kind, until, six optional values) stored none of 15 clear instructions: small models skip
    optional fields and pick a tool by its name, so "cap at 10 machines" finds cap_instances(max_instances,
    until)."""

    KIND: ClassVar[DirectiveKind]

    def directive_args(self) -> DirectiveArgs:
        return DirectiveArgs(kind=self.KIND, **self.model_dump())


class CapInstancesArgs(DirectiveToolArgs):
    KIND = DirectiveKind.CAP_INSTANCES
    max_instances: int = Field(ge=0, description="at most this many machines")
    until: str = Field(min_length=4, max_length=40, description=UNTIL)


class CapBudgetArgs(DirectiveToolArgs):
    KIND = DirectiveKind.CAP_BUDGET
    max_usd_per_h: float = Field(ge=0, description="at most this many dollars per hour")
    until: str = Field(min_length=4, max_length=40, description=UNTIL)


class ExcludeGpuModelArgs(DirectiveToolArgs):
    KIND = DirectiveKind.EXCLUDE_GPU_MODEL
    gpu_model: str = Field(min_length=2, max_length=64, description='the GPU model, e.g. "RTX 3090"')
    until: str = Field(min_length=4, max_length=40, description=UNTIL)


class ExcludeHostArgs(DirectiveToolArgs):
    KIND = DirectiveKind.EXCLUDE_HOST
    host_id: int = Field(ge=0, description="the vast host id")
    until: str = Field(min_length=4, max_length=40, description=UNTIL)


class DrainAllByArgs(DirectiveToolArgs):
    KIND = DirectiveKind.DRAIN_BY
    drain_by: str = Field(
        min_length=4, max_length=40, description='when every machine is given back, UTC: "YYYY-MM-DD HH:MM"'
    )

    def directive_args(self) -> DirectiveArgs:
        # its end is the desk's (directing.DRAIN_HOLD after the moment): the operator named only the moment
        return DirectiveArgs(kind=self.KIND, drain_by=self.drain_by, until=self.drain_by)


class SetLeverArgs(DirectiveToolArgs):
    KIND = DirectiveKind.LEVER
    lever: Lever = Field(description="park: stop idle machines and keep their disk; bids: interruptible machines")
    state: Literal["on", "off"] = Field(description="on or off")
    until: str = Field(min_length=4, max_length=40, description=UNTIL)


FinishDecision = Literal["done", "hold"]


class FinishArgs(ToolArgs):
    # optional: asked for it as a required enum, a 0.5B model still called finish({}) in 7 of 35 runs; left out,
    # it is read from the calls made (any action: done, else hold), which are what the run is judged on anyway
    decision: FinishDecision | None = Field(
        default=None, description="done: the recommended calls were made; hold: nothing changed"
    )
    reason: str = Field(default="", max_length=500, description="one sentence citing the numbers")


@dataclass(frozen=True)
class Tool:
    name: str
    arguments: type[ToolArgs]
    description: str


TOOLS = (
    Tool(
        "launch_instances",
        LaunchArgs,
        f"Rent new GPU machines (1 to {LAUNCH_COUNT_MAX}). They produce only after 1-2 hours. Guardrails apply.",
    ),
    Tool(
        "drain_instance",
        RemovalArgs,
        "Stop giving a machine new tasks and let it finish; it is then given back. Guardrails apply.",
    ),
    Tool("destroy_instance", RemovalArgs, "Give a machine back at once (loses its running tasks). Guardrails apply."),
    Tool(
        "park_instance",
        ParkArgs,
        "Stop a drained machine but keep its disk (storage billed only) to resume it in minutes later.",
    ),
    Tool(
        "resume_instance",
        ResumeArgs,
        "Start a parked machine again: it produces in minutes, unless its GPU was rented meanwhile.",
    ),
    Tool(
        "get_offers",
        GetOffersArgs,
        "Look up the best current rental offers, ranked by expected cost per task. Output is capped.",
    ),
    Tool("request_benchmark", BenchmarkArgs, "Benchmark a machine whose throughput looks wrong."),
    Tool("remember", RememberArgs, "Keep one short note for later runs (shown in every observation)."),
    Tool(
        "update_plan",
        UpdatePlanArgs,
        "Replace the plan for multi-step work (shown every run, survives restarts). Send the whole list.",
    ),
    Tool(
        "schedule_next_check",
        ScheduleArgs,
        f"Ask to be woken again in delay_s seconds ({SCHEDULE_MIN_S} to {SCHEDULE_MAX_S}).",
    ),
    # an operator's clear limit, one tool per kind (listed before the reply, which a small model reaches for first)
    Tool("cap_instances", CapInstancesArgs, "Operator's limit: at most N machines until a time."),
    Tool("cap_budget", CapBudgetArgs, "Operator's limit: at most $N per hour until a time."),
    Tool("exclude_gpu_model", ExcludeGpuModelArgs, "Operator's limit: rent no machine of this GPU model until a time."),
    Tool("exclude_host", ExcludeHostArgs, "Operator's limit: rent nothing on this vast host until a time."),
    Tool("drain_all_by", DrainAllByArgs, "Operator's order: every machine given back by a moment."),
    Tool("set_lever", SetLeverArgs, "Operator's choice: parking or interruptible bids on or off until a time."),
    Tool("reply_to_operator", ReplyArgs, "Answer the operator's message. Cite the fleet and demand numbers."),
    Tool(
        "finish",
        FinishArgs,
        "The final answer, once the recommended calls are made (or there were none): ends the run.",
    ),
)
ARGUMENT_MODELS: dict[str, type[ToolArgs]] = {tool.name: tool.arguments for tool in TOOLS}
ACTION_TOOLS = frozenset({"launch_instances", "drain_instance", "destroy_instance", "park_instance", "resume_instance"})
# offered in the compact style when no recommendation names the tools; park and resume only when recommended
EVERYDAY_ACTION_TOOLS = frozenset({"launch_instances", "drain_instance", "destroy_instance"})
FINISH = "finish"
TOOL_NAMES = tuple(ARGUMENT_MODELS)
# the tools that store an operator's limit: offered only while an operator's message waits
DIRECTIVE_TOOLS = tuple(tool.name for tool in TOOLS if issubclass(tool.arguments, DirectiveToolArgs))

# what a small model may be offered (prompt_style "compact"): the fleet-changing tools, a reply, the final answer
COMPACT_TOOLS = (
    "launch_instances",
    "drain_instance",
    "destroy_instance",
    "park_instance",
    "resume_instance",
    *DIRECTIVE_TOOLS,
    "reply_to_operator",
    FINISH,
)


def tool_schemas(
    conversation_ids: list[str] | None = None,
    *,
    compact: bool = False,
    action_tools: Collection[str] | None = None,
    limit_tools: bool = True,
) -> list[dict[str, Any]]:
    """The schemas for one run; reply_to_operator asks for a conversation only when several are waiting.

    compact: only the fleet tools in `action_tools` (all three when None: the policy's recommended ones in a
    run), reply_to_operator when an operator is waiting, and `finish`, the final answer as a call with a required
    enum. A 0.5B model offered nine tools picks ones it has no use for; offered launch_instances on a fleet that
    keeps up, it launched. The set stays the same for the whole run: the tools are part of the prompt prefix the
    server keeps cached between rounds."""
    # limit_tools False: the run already read the operator's message as a limit (reading.py) and stored it, asked
    # back or refused; a limit tool offered again would only store it twice
    operator_tools = ("reply_to_operator", *(DIRECTIVE_TOOLS if limit_tools else ()))
    if not compact:
        wanted = [
            name
            for name in TOOL_NAMES
            if name != FINISH and (name not in DIRECTIVE_TOOLS or (conversation_ids and limit_tools))
        ]
    else:
        fleet_tools = EVERYDAY_ACTION_TOOLS if action_tools is None else frozenset(action_tools)
        wanted = [
            name
            for name in COMPACT_TOOLS
            if name in fleet_tools or name == FINISH or (name in operator_tools and conversation_ids)
        ]
    return [_function_schema(tool, conversation_ids) for tool in TOOLS if tool.name in wanted]


def _function_schema(tool: Tool, conversation_ids: list[str] | None) -> dict[str, Any]:
    parameters = parameters_schema(tool.arguments)
    if CONVERSATION_ID in parameters["properties"]:
        conversation = parameters["properties"].pop(CONVERSATION_ID)
        if conversation_ids and len(conversation_ids) > 1:
            conversation = {**conversation, "enum": list(conversation_ids)}
            parameters["properties"][CONVERSATION_ID] = _shown(conversation, {})
            parameters["required"].append(CONVERSATION_ID)
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": parameters},
    }


# what the model is shown of each JSON schema node, in this order (the prompt prefix a server caches, and the
# tokens the stand-in counts, follow it): the limits (minimum, maxLength...) stay in the pydantic models, whose
# errors name them; titles, defaults and $refs only cost a small model's prompt tokens
SHOWN_KEYWORDS = ("type", "required", "properties", "items", "enum", "description")


def parameters_schema(model: type[ToolArgs]) -> dict[str, Any]:
    """The model's JSON schema (model_json_schema()) as small models read it best: every $ref inlined, an
    optional field shown as its value's type (not anyOf with null), and `required` always present."""
    schema = model.model_json_schema()
    return _shown(schema, schema.get("$defs", {}))


def _shown(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        node = {**defs[node["$ref"].rpartition("/")[2]], **{k: v for k, v in node.items() if k != "$ref"}}
    if "anyOf" in node:
        values = [branch for branch in node["anyOf"] if branch.get("type") != "null"]
        if len(values) != 1:  # a small model fills one type per argument; a union would leave it guessing
            raise TypeError(f"a tool argument has one type, or is optional; not {node['anyOf']}")
        node = {**values[0], **{k: v for k, v in node.items() if k != "anyOf"}}
    if "properties" in node:
        node = {**node, "required": node.get("required", [])}
    shown: dict[str, Any] = {}
    for keyword in SHOWN_KEYWORDS:
        if keyword == "properties" and keyword in node:
            shown[keyword] = {name: _shown(prop, defs) for name, prop in node[keyword].items()}
        elif keyword == "items" and keyword in node:
            shown[keyword] = _shown(node[keyword], defs)
        elif keyword in node:
            shown[keyword] = list(node[keyword]) if isinstance(node[keyword], list) else node[keyword]
    return shown


@dataclass(frozen=True)
class ToolResult:
    text: str
    gist: str
    outcome: ToolOutcome


def gist(tool: str, summary: str) -> str:
    return f"[compacted: {tool} → {summary}]"


def error_result(tool: str, text: str, outcome: ToolOutcome) -> ToolResult:
    return ToolResult(text=text, gist=gist(tool, f"error ({outcome})"), outcome=outcome)


def offered_names(schemas: list[dict[str, Any]]) -> list[str]:
    return [schema["function"]["name"] for schema in schemas]


def unknown_tool(name: str, offered: list[str] | None = None) -> ToolResult:
    return error_result(
        "unknown",
        f"error: unknown tool {name[:80]!r}. Nothing was done. The tools are: {', '.join(offered or TOOL_NAMES)}.",
        "unknown_tool",
    )


def _allowed_values(schemas: list[dict[str, Any]], tool: str, field: str) -> list[Any] | None:
    for schema in schemas:
        function = schema["function"]
        if function["name"] == tool:
            prop = function["parameters"]["properties"].get(field)
            if prop is not None:
                return prop.get("enum") or (prop.get("items") or {}).get("enum")
    return None


def describe_invalid(tool: str, error: ValidationError, schemas: list[dict[str, Any]]) -> str:
    """Names each field and the value given, and the allowed values of an enum, so the model can correct it."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(arguments)"
        field = str(item["loc"][0]) if item["loc"] else ""
        if item["type"] == "missing":
            problem = f"'{where}' is required but missing"
        elif item["type"] == "extra_forbidden":
            problem = f"'{where}' is not a parameter of {tool}"
        else:
            problem = f"'{where}' = {str(item.get('input'))[:80]!r}: {item['msg']}"
        allowed = _allowed_values(schemas, tool, field) if len(item["loc"]) == 1 else None
        if allowed:
            problem += f" (allowed: {', '.join(map(str, allowed))})"
        problems.append(problem)
    listed = "; ".join(problems)
    return f"error: invalid arguments for {tool}: {listed}. Nothing was done; call it again with valid arguments."


def parse_arguments(tool: str, arguments: Any, schemas: list[dict[str, Any]]) -> ToolArgs | ToolResult:
    model = ARGUMENT_MODELS.get(tool)
    offered = offered_names(schemas)
    if model is None or tool not in offered:  # a tool this run did not offer is not one the model may use
        return unknown_tool(tool, offered)
    if not isinstance(arguments, dict):
        return error_result(tool, f"error: arguments for {tool} must be a JSON object. Nothing was done.", "invalid")
    try:
        return model.model_validate(arguments)
    except ValidationError as error:
        return error_result(tool, describe_invalid(tool, error, schemas), "invalid")


# ---- actions: a valid call becomes a contract command for `ports.act`


def launch_command(args: LaunchArgs, *, now: datetime, idempotency_key: str) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=now,
        source=SOURCE,
        idempotency_key=idempotency_key,
        requested_by="agent",
        count=args.count,
        gpu_models=args.gpu_models,
        launch_priority=args.launch_priority,
        reason=args.reason,
        interruptible=args.interruptible,
    )


def park_command(args: ParkArgs, *, now: datetime, idempotency_key: str) -> StopInstance:
    return _instance_command(StopInstance, args.instance_id, RemovalReason.PARK, now, idempotency_key)


def resume_command(args: ResumeArgs, *, now: datetime, idempotency_key: str) -> ResumeInstance:
    return _instance_command(ResumeInstance, args.instance_id, args.reason, now, idempotency_key)


def removal_command(
    tool: str, args: RemovalArgs, *, now: datetime, idempotency_key: str
) -> DrainInstance | DestroyInstance:
    if tool == "drain_instance":
        return _instance_command(DrainInstance, args.instance_id, args.reason, now, idempotency_key)
    return _instance_command(DestroyInstance, args.instance_id, args.reason, now, idempotency_key)


InstanceCommand = TypeVar("InstanceCommand", StopInstance, ResumeInstance, DrainInstance, DestroyInstance)


def _instance_command(
    command: type[InstanceCommand], instance_id: int, reason: Any, now: datetime, idempotency_key: str
) -> InstanceCommand:
    return command(
        occurred_at=now,
        source=SOURCE,
        idempotency_key=idempotency_key,
        requested_by="agent",
        instance_id=instance_id,
        reason=reason,
    )


def verdict_result(tool: str, verdict: GuardrailVerdict) -> ToolResult:
    if verdict.verdict == "allowed":
        return ToolResult(f"done: {verdict.explanation}", gist(tool, f"done: {verdict.explanation[:120]}"), "ok")
    rule = verdict.rule or "guardrail"
    return ToolResult(
        f"REFUSED by guardrail '{rule}': {verdict.explanation} Nothing was done. "
        "Do not repeat this call; choose something else or hold.",
        gist(tool, f"refused by {rule}"),
        "refused",
    )


# ---- read-only and bookkeeping tools


def offers_result(offers: OfferList) -> ToolResult:
    if offers.error:
        return ToolResult(
            f"error: the offer search failed: {offers.error} (this means unknown, not that there are none)",
            gist("get_offers", "search failed"),
            "error",
        )
    if not offers.offers:
        return ToolResult("no offers match", gist("get_offers", "0 offers"), "ok")
    lines = [f"{len(offers.offers)} offers, best first (expected $/task ranks them):"]
    for offer in offers.offers:
        # a host's own words: on one line and short, so that it neither poses as a line of ours nor pushes the
        # other offers out of the result's cap
        where = f" {one_line(offer.geolocation, 40)}" if offer.geolocation else ""
        host = f" host {offer.host_id}" if offer.host_id is not None else ""
        lines.append(
            f"#{offer.offer_id} {one_line(offer.gpu_model, 40)} x{offer.num_gpus} ${offer.price_usd_per_h:.2f}/h "
            f"reliability {offer.reliability:.2f} ${offer.expected_usd_per_task:.4f}/task{host}{where}"
        )
    best = offers.offers[0]
    best_model = one_line(best.gpu_model, 40)
    summary = f"{len(offers.offers)} offers, best #{best.offer_id} {best_model} ${best.price_usd_per_h:.2f}/h"
    return ToolResult("\n".join(lines), gist("get_offers", summary), "ok")


def ok_result(tool: str, text: str, summary: str | None = None) -> ToolResult:
    return ToolResult(text, gist(tool, summary or text[:120]), "ok")


HOW_TO_GET_MORE = {
    "get_offers": "For fewer lines, call get_offers again with gpu_models or a lower max_price.",
}
DEFAULT_HOW_TO_GET_MORE = "Narrow the request to see the rest."
