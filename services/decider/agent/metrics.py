"""The agent's Prometheus metrics, on the decider's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.decider.agent.tools import TOOL_NAMES

TOKEN_BUCKETS = (500, 1_000, 2_000, 4_000, 6_000, 8_000, 10_000, 12_000, 16_000, 24_000, 32_000, 48_000)
TOOL_OUTCOMES = ("ok", "refused", "invalid", "unknown_tool", "duplicate", "over_limit", "error")
MODEL_FAILURE_KINDS = ("unreachable", "timeout", "error_status", "malformed", "unreadable_answer", "no_tools")


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.prompt_tokens = Gauge(
            "fleetpilot_agent_prompt_tokens",
            "Largest prompt of the last agent run, counted conservatively before sending (tokens)",
            registry=registry,
        )
        self.request_prompt_tokens = Histogram(
            "fleetpilot_agent_request_prompt_tokens",
            "Prompt size of each model request, counted conservatively before sending (tokens)",
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.reported_prompt_tokens = Histogram(
            "fleetpilot_agent_model_prompt_tokens",
            "Prompt size of each model request as the model counted it (prompt_eval_count)",
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.estimate_below_model = Counter(
            "fleetpilot_agent_token_estimate_low_total",
            "Requests where the model counted more prompt tokens than the agent's conservative estimate",
            registry=registry,
        )
        self.rounds = Histogram(
            "fleetpilot_agent_rounds",
            "Model requests per agent run",
            buckets=tuple(range(1, 17)),
            registry=registry,
        )
        self.tool_calls = Counter(
            "fleetpilot_agent_tool_calls_total",
            "Tool calls the model made, by tool and outcome (unknown names are counted as 'unknown')",
            ["tool", "outcome"],
            registry=registry,
        )
        self.runs = Counter("fleetpilot_agent_runs_total", "Agent runs, by status", ["status"], registry=registry)
        self.degraded = Gauge(
            "fleetpilot_agent_degraded",
            "1 while the last agent run was degraded (the policy acted alone), else 0",
            registry=registry,
        )
        self.model_failures = Counter(
            "fleetpilot_agent_model_failures_total",
            "Failed model calls and unreadable answers, by kind",
            ["kind"],
            registry=registry,
        )
        self.session_rebuilds = Counter(
            "fleetpilot_agent_session_rebuilds_total",
            "Runs that found part of the saved session missing or unreadable and rebuilt without it",
            registry=registry,
        )
        self.overlapping_runs = Counter(
            "fleetpilot_agent_overlapping_runs_total",
            "Runs refused because another agent run was still active (the decider's lock should make this 0)",
            registry=registry,
        )
        for tool in (*TOOL_NAMES, "unknown"):
            for outcome in TOOL_OUTCOMES:
                self.tool_calls.labels(tool, outcome)
        for status in ("ok", "degraded", "skipped"):
            self.runs.labels(status)
        for kind in MODEL_FAILURE_KINDS:
            self.model_failures.labels(kind)
