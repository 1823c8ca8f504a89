"""Serving benchmark arithmetic: the seeded workload, per-level summaries, run comparisons and the verdict.

Definitions (those of vLLM's benchmark_serving): TTFT is request start to the first streamed token; ITL is
the gap between consecutive content chunks, pooled over a level's requests (a speculative decoder sends
several tokens per chunk, so its ITL is per chunk, and TPOT, decode time per output token, is the fair
per-token figure); throughput is a level's output tokens over its wall time, first start to last end.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from shared.contract import BenchResult
from shared.contract.bench import BenchVerdict
from shared.untrusted_text import printable

SCHEMA = "fleetpilot.serving_bench/1"
DEFAULT_LEVELS = (1, 8, 32, 128, 256)

# A healthy endpoint drops no request at these loads: any failure makes the run degraded; losing most of a
# level means the endpoint is not serving.
FAIL_ERROR_SHARE = 0.5
# With ignore_eos the server must generate every token asked for. Fewer than half means it stopped at the end of
# the text anyway (a server without the extension: Ollama, llama.cpp) or counted what it never sent, and its
# rates would be those of a different, shorter workload.
IGNORE_EOS_MIN_SHARE = 0.5

# Common short English words: about one token each in the tokenizers of Llama, Qwen and GPT models.
_PROMPT_TEXT = (
    "the time work day world life hand part place case week point group number fact water city night home "
    "story money month book word side kind head house service friend power hour game line end member law car "
    "name team idea body face level office door health person art war history party result change morning"
)
PROMPT_WORDS = tuple(_PROMPT_TEXT.split())

ServingApi = Literal["chat", "completions"]


class ServingWorkload(BaseModel):
    """What a sweep sends; two runs with the same workload send the same prompts, level by level."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    levels: tuple[int, ...] = Field(default=DEFAULT_LEVELS, min_length=1)
    requests_per_level: int | None = Field(default=None, ge=1, description="default: max(level x waves, min)")
    waves: int = Field(default=4, ge=1)
    min_requests: int = Field(default=16, ge=1)
    prompt_tokens: int = Field(default=512, ge=1)
    output_tokens: int = Field(default=256, ge=1)
    length_spread: float = Field(default=0.2, ge=0, lt=1, description="lengths uniform within mean x (1 +- spread)")
    seed: int = 0
    api: ServingApi = "chat"
    model: str | None = Field(default=None, max_length=256, description="default: the endpoint's first model")
    ignore_eos: bool = Field(default=True, description="vLLM/SGLang extension: always generate output_tokens")
    warmup_requests: int = Field(default=1, ge=0)
    request_timeout_s: float = Field(default=600.0, gt=0, allow_inf_nan=False, description="each request, whole")
    sweep_budget_s: float = Field(
        default=3600.0, gt=0, allow_inf_nan=False, description="warm-up and every level; what is left is not run"
    )

    def requests_at(self, level: int) -> int:
        return self.requests_per_level or max(level * self.waves, self.min_requests)


@dataclass(frozen=True)
class PlannedRequest:
    prompt: str
    prompt_tokens: int
    output_tokens: int


def _length(rng: random.Random, mean: int, spread: float) -> int:
    low, high = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
    return rng.randint(low, high)


def plan_requests(workload: ServingWorkload, level: int) -> list[PlannedRequest]:
    """The level's requests, the same for every run with this workload (seeded by seed and level)."""
    rng = random.Random(f"{workload.seed}:{level}")
    planned = []
    for _ in range(workload.requests_at(level)):
        prompt_tokens = _length(rng, workload.prompt_tokens, workload.length_spread)
        output_tokens = _length(rng, workload.output_tokens, workload.length_spread)
        prompt = " ".join(rng.choice(PROMPT_WORDS) for _ in range(prompt_tokens))
        planned.append(PlannedRequest(prompt, prompt_tokens, output_tokens))
    return planned


def counted_output_tokens(claimed: int | None, content_chunks: int, text_bytes: int, max_tokens: int) -> int:
    """The output tokens one request is credited with: the server's usage count, but never more than was asked
    for, nor more than the text that arrived can hold. Each token a server streams decodes to at least one byte
    of UTF-8 (a byte-fallback token to exactly one), so the text's bytes bound the tokens behind it however many
    tokens a chunk carries (a speculative decoder sends several; counting chunks would undercount it). Tokens
    that decode to nothing (skipped special tokens) are not credited: an undercount, never an inflation.
    Without a usage count, each content chunk counts as one token."""
    if claimed is None:
        return min(content_chunks, max_tokens)
    return min(claimed, max_tokens, text_bytes)


def more_chunks_than_asked(content_chunks: int, max_tokens: int) -> str | None:
    """Every content chunk holds at least one token, so more chunks than max_tokens is a server that does not
    stop (an endless stream would otherwise keep a sweep busy until its deadline)."""
    if content_chunks <= max_tokens:
        return None
    return f"more content chunks than the {max_tokens} tokens asked for"


def output_shortfall(counted: int, max_tokens: int, ignore_eos: bool) -> str | None:
    if not ignore_eos or counted >= max_tokens * IGNORE_EOS_MIN_SHARE:
        return None
    return (
        f"{counted} of the {max_tokens} output tokens asked for with ignore_eos: the server stops early or ignores"
        " ignore_eos (sweep without it: --no-ignore-eos)"
    )


@dataclass(frozen=True)
class RequestTiming:
    """One request as the client saw it; times in seconds on one monotonic timer."""

    start_s: float
    end_s: float
    first_token_s: float | None = None
    chunk_times_s: tuple[float, ...] = ()
    output_tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.first_token_s is not None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.start_s

    @property
    def inter_chunk_s(self) -> list[float]:
        return [later - earlier for earlier, later in zip(self.chunk_times_s, self.chunk_times_s[1:], strict=False)]

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_s is None or self.output_tokens < 2 or not self.chunk_times_s:
            return None
        return (self.chunk_times_s[-1] - self.first_token_s) / (self.output_tokens - 1)


class LevelSummary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(ge=1)
    requests: int = Field(ge=0)
    requests_ok: int = Field(ge=0)
    requests_failed: int = Field(ge=0)
    duration_s: float = Field(ge=0)
    output_tokens: int = Field(ge=0)
    output_tokens_per_s: float = Field(ge=0)
    requests_per_s: float = Field(ge=0)
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p99_s: float | None = None
    tpot_p50_s: float | None = None
    latency_p50_s: float | None = None
    error_samples: list[str] = Field(default_factory=list, max_length=3)

    @property
    def error_share(self) -> float:
        return self.requests_failed / self.requests if self.requests else 1.0


def percentile(values: list[float], q: float) -> float | None:
    """numpy's default ("linear") percentile, in the standard library: the service image carries no numpy."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def summarize_level(concurrency: int, timings: list[RequestTiming], duration_s: float) -> LevelSummary:
    ok = [t for t in timings if t.ok]
    failed = [t for t in timings if not t.ok]
    output_tokens = sum(t.output_tokens for t in ok)
    ttfts = [t.ttft_s for t in ok if t.ttft_s is not None]
    itls = [gap for t in ok for gap in t.inter_chunk_s]
    tpots = [t.tpot_s for t in ok if t.tpot_s is not None]
    latencies = [t.end_s - t.start_s for t in ok]
    # error texts are the server's words: escaped here, once, before they reach a file, an event or a terminal
    samples = sorted({printable(t.error or "no token received", single_line=True) for t in failed})[:3]
    return LevelSummary(
        concurrency=concurrency,
        requests=len(timings),
        requests_ok=len(ok),
        requests_failed=len(failed),
        duration_s=duration_s,
        output_tokens=output_tokens,
        output_tokens_per_s=output_tokens / duration_s if duration_s > 0 else 0.0,
        requests_per_s=len(ok) / duration_s if duration_s > 0 else 0.0,
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p99_s=percentile(ttfts, 99),
        itl_p50_s=percentile(itls, 50),
        itl_p99_s=percentile(itls, 99),
        tpot_p50_s=percentile(tpots, 50),
        latency_p50_s=percentile(latencies, 50),
        error_samples=[sample[:300] for sample in samples],
    )


COMPARED_METRICS = (
    "output_tokens_per_s",
    "requests_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p99_s",
    "tpot_p50_s",
)


class LevelComparison(BaseModel):
    """candidate / baseline per metric: 1.8 on output_tokens_per_s is 1.8x the throughput; 0.9 on ttft is 10% less."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int
    ratios: dict[str, float]


class ServingComparison(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline_url: str
    baseline_started_at: datetime
    levels: list[LevelComparison]


class ServingRun(BaseModel):
    """One sweep; also the file format (`--baseline FILE` reads one back)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_name: Literal["fleetpilot.serving_bench/1"] = Field(default="fleetpilot.serving_bench/1", alias="schema")
    url: str
    model: str
    workload: ServingWorkload
    started_at: datetime
    levels: list[LevelSummary]
    comparison: ServingComparison | None = None

    def level(self, concurrency: int) -> LevelSummary | None:
        return next((level for level in self.levels if level.concurrency == concurrency), None)


def compare_runs(candidate: ServingRun, baseline: ServingRun) -> ServingComparison:
    """Ratios per concurrency level both runs measured."""
    compared = []
    for level in candidate.levels:
        base = baseline.level(level.concurrency)
        if base is None:
            continue
        ratios = {}
        for name in COMPARED_METRICS:
            mine, theirs = getattr(level, name), getattr(base, name)
            if mine is not None and theirs:
                ratios[name] = mine / theirs
        compared.append(LevelComparison(concurrency=level.concurrency, ratios=ratios))
    return ServingComparison(baseline_url=baseline.url, baseline_started_at=baseline.started_at, levels=compared)


def without_credentials(url: str) -> str:
    """The URL without user:password@, so an endpoint's credentials never reach an event or a file."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def judge_serving(run: ServingRun) -> tuple[BenchVerdict, str]:
    failing = [level for level in run.levels if level.requests_ok == 0 or level.error_share > FAIL_ERROR_SHARE]
    failed_requests = sum(level.requests_failed for level in run.levels)
    if failing:
        levels = ", ".join(f"c={level.concurrency} ({level.requests_failed}/{level.requests})" for level in failing)
        samples = "; ".join(failing[0].error_samples)
        return "fail", f"failed requests at {levels}: {samples}"
    best = max(run.levels, key=lambda level: level.output_tokens_per_s)
    peak = f"peak {best.output_tokens_per_s:.0f} output tok/s at c={best.concurrency}"
    if failed_requests:
        return "degraded", f"{failed_requests} failed requests; {peak}"
    return "pass", peak


def flat_metrics(run: ServingRun) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for level in run.levels:
        for name in (*COMPARED_METRICS, "latency_p50_s", "requests_failed"):
            value = getattr(level, name)
            if value is not None:
                metrics[f"c{level.concurrency}_{name}"] = float(value)
    return metrics


def flat_ratios(comparison: ServingComparison | None) -> dict[str, float]:
    if comparison is None:
        return {}
    return {f"c{level.concurrency}_{name}": r for level in comparison.levels for name, r in level.ratios.items()}


def _serving_event(
    *, occurred_at: datetime, source: str, instance_id: int | None, event_id: str | None, **fields: Any
) -> BenchResult:
    ids = {"event_id": event_id} if event_id else {}
    return BenchResult(
        **ids, occurred_at=occurred_at, source=source, instance_id=instance_id, kind="serving", device="http", **fields
    )


def serving_result(
    run: ServingRun,
    *,
    occurred_at: datetime,
    source: str,
    instance_id: int | None = None,
    event_id: str | None = None,
) -> BenchResult:
    verdict, summary = judge_serving(run)
    levels = ",".join(str(level.concurrency) for level in run.levels)
    model = printable(run.model, single_line=True)  # a discovered one is escaped already; a baseline file's not
    explanation = f"serving sweep c={levels} on {without_credentials(run.url)} ({model}): {verdict}: {summary}"
    if run.comparison is not None:
        explanation += f"; ratios to baseline {without_credentials(run.comparison.baseline_url)}"
    return _serving_event(
        occurred_at=occurred_at,
        source=source,
        instance_id=instance_id,
        event_id=event_id,
        verdict=verdict,
        metrics=flat_metrics(run),
        ratios_to_reference=flat_ratios(run.comparison),
        error=summary[:2000] if verdict == "fail" else None,
        explanation=explanation[:1000],
    )


def unreachable_result(
    url: str,
    error: BaseException,
    *,
    occurred_at: datetime,
    source: str,
    instance_id: int | None = None,
    event_id: str | None = None,
) -> BenchResult:
    """The verdict on an endpoint the sweep could not even start against (down, no model, refused)."""
    reason = f"{type(error).__name__}: {error}"[:500]
    return _serving_event(
        occurred_at=occurred_at,
        source=source,
        instance_id=instance_id,
        event_id=event_id,
        verdict="fail",
        error=reason,
        explanation=f"serving sweep on {without_credentials(url)}: fail: could not start: {reason}"[:1000],
    )
