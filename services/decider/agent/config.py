"""The agent's limits, from `FLEETPILOT_AGENT_*` variables; Ollama's host and model come from the shared Settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AgentConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETPILOT_AGENT_", env_file=None, extra="ignore", allow_inf_nan=False
    )

    # an 8B model on one GPU answers a 12k-token prompt in seconds; a minute means it is gone. Eight rounds of
    # it stay inside the decider's advisor timeout (600 s)
    call_timeout_s: float = Field(
        default=60.0, gt=0, description="one model call without an answer this long has failed"
    )
    max_rounds: int = Field(default=8, ge=1, le=32, description="model calls per run")
    max_tool_calls: int = Field(default=12, ge=1, le=64, description="tool calls per run")
    # failed calls plus unparseable answers in one run before the policy is applied alone
    max_model_failures: int = Field(
        default=3, ge=1, description="failed or unreadable answers per run before the policy decides alone"
    )
    # compact: a short system prompt, only the fleet tools the policy recommends this run, a reply when one is
    # due and `finish` for the final answer, for small local models (a 0.5B Qwen on CPU) that lose the format and
    # the rules in the full prompt. open: the compact prompt with every fleet tool on every run (issue 27: in the
    # compact style a hold offers no fleet tool, so agreeing with the policy there is partly by construction)
    prompt_style: Literal["full", "compact", "open"] = Field(
        default="full",
        description="compact: short prompt, the recommended fleet tools and a finish call, for small local models; "
        "open: the compact prompt offering every fleet tool on every run",
    )
    # an answer and a few tool calls fit in a few hundred tokens; a 0.5B model once generated 1,300 tokens and
    # counting (a loop), which on a CPU is minutes of nothing
    max_output_tokens: int = Field(default=768, ge=64, description="most tokens the model may write per call")
    # low: the same observation should lead to the same decision
    temperature: float = Field(
        default=0.2, ge=0, le=2, description="sampling temperature (low: the same observation, the same decision)"
    )

    # the predecessor's context grew to 38k tokens; every request stays under this (conservative count)
    token_budget: int = Field(default=12_000, ge=2_000, description="every prompt stays under this many tokens")
    # Ollama silently truncates a prompt longer than num_ctx, so num_ctx = budget + room for the answer
    reply_reserve_tokens: int = Field(
        default=2_048, ge=256, description="room for the answer: num_ctx = token_budget + this"
    )
    keep_recent_messages: int = Field(
        default=5, ge=1, description="messages of this run kept whole when the prompt is trimmed"
    )
    tool_output_cap_chars: int = Field(
        default=2_400, ge=200, description="a tool's output is cut to this many characters"
    )
    # the anchor, memories and plan carry what matters across runs; raw history is only recent context
    history_messages_max: int = Field(default=30, ge=0, description="turns of earlier runs kept in Redis")

    # the observation stays bounded at 1000 machines: individual lines up to this, then a summary
    max_instance_lines: int = Field(
        default=40, ge=1, description="instances listed one per line in the observation; the rest summarised"
    )
    memories_max: int = Field(default=60, ge=1, description="memories kept across runs")
    memories_shown: int = Field(default=12, ge=0, description="memories put in each prompt")
    memory_text_max_chars: int = Field(default=300, ge=20, description="longest memory text")
    plan_items_max: int = Field(default=12, ge=1, description="items in the agent's plan")
    operator_messages_shown: int = Field(default=5, ge=1, description="operator messages put in a prompt")

    @property
    def num_ctx(self) -> int:
        return self.token_budget + self.reply_reserve_tokens

    @property
    def run_marker_ttl_s(self) -> int:
        """How long the 'a run is active' marker lives if a run dies without clearing it."""
        return int(self.max_rounds * self.call_timeout_s + 60)
