"""`fleetpilot bench ...`: the GPU suite on this machine, and the serving sweep against an OpenAI-compatible URL."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import nats
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from services.bench import gpu_suite
from services.bench.config import BenchSettings
from services.bench.onstart import onstart_command
from services.bench.references import GpuReference, reference_for
from services.bench.report import SuiteReport
from services.bench.serving import ModelDiscoveryFailed, run_sweep
from services.bench.serving_stats import LevelSummary, ServingRun, ServingWorkload, serving_result
from services.bench.verdict import gpu_result, judge_gpu
from services.cli.errors import writable_file
from services.cli.terminal_text import cell, printable
from shared.bus import event_headers, nats_connect_options
from shared.contract import BenchResult
from shared.settings import Settings
from shared.streams import BENCH, missing_streams

bench_app = typer.Typer(help="Benchmarks: the GPU suite on this machine, serving sweeps against an endpoint.")
console = Console()
SOURCE = "cli"
RESULTS_DIR = Path("bench-results")


class StreamsMissing(Exception):
    """The result's stream does not exist: creating it is the admin step's (`fleetpilot streams ensure`)."""


async def publish_result(result: BenchResult) -> None:
    """Onto `<prefix>.bench.result` in JetStream, as the bench service would. Like every service it only binds:
    on a locked-down NATS an operator's user may not create streams."""
    settings = Settings()
    client = await nats.connect(**nats_connect_options(settings), connect_timeout=5, max_reconnect_attempts=1)
    try:
        js = client.jetstream()
        if BENCH.name(settings.subjects) in await missing_streams(js, settings.subjects):
            raise StreamsMissing(
                f"JetStream stream {BENCH.name(settings.subjects)} does not exist: run `fleetpilot streams ensure`"
                " with the NATS admin user first"
            )
        payload = result.model_dump_json().encode()
        stream = BENCH.name(settings.subjects)
        await js.publish(settings.subjects.bench_result, payload, headers=event_headers(result), stream=stream)
    finally:
        await client.close()


def publish_or_exit(result: BenchResult) -> None:
    try:
        asyncio.run(publish_result(result))
    except StreamsMissing as error:
        typer.echo(f"error: --publish: {error}", err=True)
        raise typer.Exit(2) from None


def reference_summary(reference: GpuReference | None) -> dict[str, Any] | None:
    if reference is None:
        return None
    return {
        "model": reference.model,
        "kind": reference.source.kind,
        "document": reference.source.document,
        "published": reference.source.published,
        "method": reference.source.method,
        "expected": reference.expected_metrics(),
    }


def print_gpu(report: SuiteReport, result: BenchResult, reference: GpuReference | None) -> None:
    expected = reference.expected_metrics() if reference else {}
    # the GPU name and the explanation come from the machine's own report: shown as written, never as markup
    table = Table(title=cell(f"GPU suite on {report.gpu_name or report.device} ({report.device})"))
    for column in ("metric", "measured", "expected", "ratio"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name, value in report.metrics.items():
        ratio = result.ratios_to_reference.get(name)
        table.add_row(
            name,
            f"{value:.2f}",
            f"{expected[name]:.2f}" if name in expected else "-",
            f"{ratio:.2f}" if ratio is not None else "-",
        )
    console.print(table)
    print_verdict(result)


def print_verdict(result: BenchResult) -> None:
    """The explanation quotes the endpoint or the machine (its model id, its error texts): a Text, so rich obeys
    none of its `[link=...]` markup, and escaped, so the terminal obeys none of its control characters."""
    console.print(
        Text.assemble("verdict: ", (result.verdict, "bold"), f": {printable(result.explanation, single_line=True)}")
    )


@bench_app.command("gpu")
def bench_gpu(
    as_json: bool = typer.Option(False, "--json", help="print the report and result as one JSON object"),
    device: str = typer.Option("auto", help="auto (GPU when usable, else CPU), cuda or cpu"),
    min_time_s: float = typer.Option(None, help="least seconds per measurement (default: 1.0 GPU, 0.2 CPU)"),
    publish: bool = typer.Option(False, help="also publish the BenchResult on the bus (FLEETPILOT_NATS_URL)"),
) -> None:
    """Run the GPU suite on this machine and judge it against the detected GPU model's reference."""
    if device not in ("auto", "cuda", "cpu"):
        raise typer.BadParameter(f"device must be auto, cuda or cpu, got {device!r}")
    backend, unusable = gpu_suite.select_backend(device)
    if backend is None:
        raw = gpu_suite.unusable_report(unusable or "no backend", None)
    else:
        raw = gpu_suite.run_suite(backend, gpu_suite.SuiteSizes.for_device(backend.device, min_time_s))
    report = SuiteReport.model_validate(raw)
    reference = reference_for(report.gpu_name) if report.device == "cuda" else None
    judgement = judge_gpu(report, reference, BenchSettings().thresholds())
    result = gpu_result(report, judgement, occurred_at=datetime.now(UTC), source=SOURCE)
    if publish:
        publish_or_exit(result)
    if as_json:
        document = {
            "report": report.model_dump(mode="json", by_alias=True),
            "result": result.model_dump(mode="json"),
            "reference": reference_summary(reference),
        }
        typer.echo(json.dumps(document, indent=2))
    else:
        print_gpu(report, result, reference)
    if result.verdict == "fail":
        raise typer.Exit(1)


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"--levels must be comma-separated integers, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise typer.BadParameter(f"--levels needs at least one level, each at least 1, got {text!r}")
    return levels


def print_serving(run: ServingRun, result: BenchResult, out: Path) -> None:
    table = Table(title=cell(f"serving sweep on {run.url} ({run.model})"))  # the model id is the endpoint's
    columns = ("c", "ok/all", "out tok/s", "req/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50")
    for column in columns:
        table.add_column(column, justify="right")
    ratios = {level.concurrency: level.ratios for level in run.comparison.levels} if run.comparison else {}

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.1f} ms"

    for level in run.levels:
        speedup = ratios.get(level.concurrency, {}).get("output_tokens_per_s")
        throughput = f"{level.output_tokens_per_s:.1f}" + (f" (x{speedup:.2f})" if speedup else "")
        table.add_row(
            str(level.concurrency),
            f"{level.requests_ok}/{level.requests}",
            throughput,
            f"{level.requests_per_s:.2f}",
            ms(level.ttft_p50_s),
            ms(level.ttft_p99_s),
            ms(level.itl_p50_s),
            ms(level.itl_p99_s),
            ms(level.tpot_p50_s),
        )
    console.print(table)
    print_verdict(result)
    console.print(Text(f"written to {out}"))


@bench_app.command("serving")
def bench_serving(
    url: str = typer.Option(..., help="the OpenAI-compatible server, e.g. http://host:8000 (with or without /v1)"),
    model: str = typer.Option(None, help="model name (default: the server's first in /v1/models)"),
    api: str = typer.Option("chat", help="chat (/v1/chat/completions) or completions (/v1/completions)"),
    levels: str = typer.Option("1,8,32,128,256", help="concurrency levels, comma-separated"),
    requests_per_level: int = typer.Option(None, help="requests at each level (default: max(4 x level, 16))"),
    prompt_tokens: int = typer.Option(512, help="mean prompt length in tokens (uniform within +-20%)"),
    output_tokens: int = typer.Option(256, help="mean output length in tokens (uniform within +-20%)"),
    seed: int = typer.Option(0, help="seed of the prompt and length draws; equal seeds send equal requests"),
    ignore_eos: bool = typer.Option(True, help="ask the server to generate every requested token"),
    baseline: Path = typer.Option(None, help="a previous run's file: report ratios to it per level"),
    out: Path = typer.Option(None, help="where to write the run (default: bench-results/serving-<time>.json)"),
    as_json: bool = typer.Option(False, "--json", help="print the run and result as one JSON object"),
    publish: bool = typer.Option(False, help="also publish the BenchResult on the bus (FLEETPILOT_NATS_URL)"),
) -> None:
    """Sweep concurrency levels against an endpoint (an API key, if needed: FLEETPILOT_BENCH_SERVING_API_KEY)."""
    if api not in ("chat", "completions"):
        raise typer.BadParameter(f"--api must be chat or completions, got {api!r}")
    writable_file(out, "--out")  # before a sweep of many minutes, not after
    settings = BenchSettings()
    workload = ServingWorkload(
        levels=parse_levels(levels),
        requests_per_level=requests_per_level,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        seed=seed,
        api=api,
        model=model,
        ignore_eos=ignore_eos,
        request_timeout_s=settings.serving_request_timeout_s,
        sweep_budget_s=settings.serving_sweep_budget_s,
    )
    previous = ServingRun.model_validate_json(baseline.read_text()) if baseline else None
    started_at = datetime.now(UTC)

    def progress(level: LevelSummary) -> None:
        if not as_json:
            console.print(f"c={level.concurrency}: {level.output_tokens_per_s:.1f} output tok/s", highlight=False)

    api_key = settings.serving_api_key
    try:
        run = asyncio.run(
            run_sweep(
                url,
                workload,
                started_at=started_at,
                baseline=previous,
                api_key=api_key.get_secret_value() if api_key else None,
                on_level=progress,
            )
        )
    except (httpx.HTTPError, ModelDiscoveryFailed) as error:  # down, or no usable model list: one line, no trace
        typer.echo(f"error: could not start the sweep: {printable(str(error), single_line=True)}", err=True)
        raise typer.Exit(1) from None
    result = serving_result(run, occurred_at=datetime.now(UTC), source=SOURCE)
    target = out or RESULTS_DIR / f"serving-{started_at:%Y%m%dT%H%M%SZ}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(run.model_dump_json(by_alias=True, indent=2))
    if publish:
        publish_or_exit(result)
    if as_json:
        document = {"run": run.model_dump(mode="json", by_alias=True), "result": result.model_dump(mode="json")}
        typer.echo(json.dumps({**document, "file": str(target)}, indent=2))
    else:
        print_serving(run, result, target)
    if result.verdict == "fail":
        raise typer.Exit(1)


@bench_app.command("onstart")
def bench_onstart(
    bench_url: str = typer.Option(
        ..., help="where rented instances reach the bench service, e.g. https://bench.example"
    ),
    task_command: str = typer.Option(None, help="one real task of the workload, timed end to end on the instance"),
) -> None:
    """Print the shell line for vast's onstart (the provisioner's FLEETPILOT_PROVISIONER_ONSTART) that benchmarks
    each new instance; each instance's report token comes in its environment, set by the provisioner."""
    typer.echo(onstart_command(bench_url, task_command=task_command))
