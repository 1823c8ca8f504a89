"""`python -m sim.jobs --trace FILE`: run the job system stand-in against the configured NATS and vast.ai API."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import typer

from shared.settings import Settings
from sim.jobs.runner import JobRunConfig, JobRunner, window_of
from sim.world.trace import load_trace


def main(
    trace: Path = typer.Option(..., exists=True, help="CSV `minute,arrivals`"),
    summary: Path = typer.Option(None, help="write the final summary JSON here"),
    worker_boot_s: float = typer.Option(600.0, help="simulated seconds from vast 'running' to a working worker"),
    drain_limit_s: float = typer.Option(4 * 3600.0, help="simulated seconds to wait for the queue after the trace"),
    start_minute: int = typer.Option(0, help="start this many minutes into the trace"),
    minutes: int = typer.Option(None, help="replay only this many minutes"),
    scale: float = typer.Option(1.0, help="multiply arrivals by this factor"),
    bench_report_url: str = typer.Option(None, help="bench's report intake, where booting machines file results"),
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()
    config = JobRunConfig(
        trace=window_of(list(load_trace(trace).arrivals_per_min), start_minute, minutes, scale),
        bench_report_url=bench_report_url,
        worker_boot_s=worker_boot_s,
        drain_limit_s=drain_limit_s,
        summary_path=summary,
    )
    result = asyncio.run(JobRunner(settings, settings.make_clock(), config).run())
    typer.echo(json.dumps(result))


if __name__ == "__main__":
    typer.run(main)
