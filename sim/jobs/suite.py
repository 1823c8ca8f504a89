"""What a demo machine's onstart does, for real: fetch bench's suite script, run it, and let it post its report.

A rented machine runs `services.bench.onstart.onstart_command`'s line at container start. The simulated
machines have no GPU, so the job stand-in runs the same two steps with the suite's CPU variant (numpy): the
script is downloaded from bench's `GET /bench/suite.py`, run as its own process with the environment the
instance was created with (its label and its own report token) and vast's `CONTAINER_ID`, and it measures
and POSTs its report with that token, as on vast. Nothing here is computed
from the reference table: the figures are this machine's CPU measured now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import httpx

from services.bench.intake import REPORT_PATH, SUITE_PATH

log = logging.getLogger("fleetpilot.jobs.suite")

# two suites at a time: each is short, but a burst of launches must not take every core from the services
CONCURRENT_SUITES = 2
SUITE_TIMEOUT_S = 300.0


def suite_url_for(report_url: str) -> str:
    """bench serves the suite beside its intake: `.../bench/report` → `.../bench/suite.py`."""
    base = report_url.removesuffix(REPORT_PATH).rstrip("/")
    return base + SUITE_PATH


class DemoMachineSuites:
    """Runs the suite once per instance, in the background; `outcomes` holds each run's exit code."""

    def __init__(self, report_url: str, *, min_time_s: float = 0.05) -> None:
        self.report_url = report_url
        self.min_time_s = min_time_s
        self.outcomes: dict[int, int] = {}
        self._limit = asyncio.Semaphore(CONCURRENT_SUITES)
        self._tasks: set[asyncio.Task[None]] = set()
        self._workdir = tempfile.TemporaryDirectory(prefix="fleetpilot-suite-")
        self._script: Path | None = None

    def start(self, instance_id: int, instance_env: Mapping[str, str]) -> None:
        """`instance_env`: what the instance was created with (vast lists it as `extra_env`)."""
        task = asyncio.create_task(self._run(instance_id, dict(instance_env)), name=f"suite-{instance_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        """Until every suite started so far has finished."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._workdir.cleanup()

    async def _fetch_script(self) -> Path:
        """Downloaded once, as every machine's onstart downloads it: the same file bench serves."""
        if self._script is None:
            async with httpx.AsyncClient(timeout=30.0) as client:
                response = await client.get(suite_url_for(self.report_url))
                response.raise_for_status()
            path = Path(self._workdir.name) / "fleetpilot_gpu_suite.py"
            path.write_text(response.text, encoding="utf-8")
            self._script = path
        return self._script

    async def _run(self, instance_id: int, instance_env: dict[str, str]) -> None:
        async with self._limit:
            try:
                script = await self._fetch_script()
            except httpx.HTTPError as error:
                log.warning("instance %s: cannot fetch the suite from bench: %r", instance_id, error)
                return
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("FLEETPILOT_")},
                **{k: v for k, v in instance_env.items() if not k.startswith("-p ")},  # port mappings are no env
                "CONTAINER_ID": str(instance_id),  # what vast sets inside an instance
            }
            process = await asyncio.create_subprocess_exec(
                sys.executable, str(script), "--device", "cpu", "--report-url", self.report_url,
                "--min-time-s", str(self.min_time_s),
                env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                _, stderr = await asyncio.wait_for(process.communicate(), SUITE_TIMEOUT_S)
            except TimeoutError:
                process.kill()
                await process.wait()
                log.warning("instance %s: the suite ran past %.0f s and was stopped", instance_id, SUITE_TIMEOUT_S)
                return
            code = process.returncode if process.returncode is not None else -1
            self.outcomes[instance_id] = code
            if code != 0:
                log.warning("instance %s: suite exited %s: %s", instance_id, code, stderr.decode()[-300:].strip())
