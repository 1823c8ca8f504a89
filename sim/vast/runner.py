"""Serving the vast.ai simulator: in-process on a free port (tests, benchmarks) or in the foreground (the CLI)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

import uvicorn

from shared.processes import free_port
from sim.vast.server import VastSimulator


class _InProcessServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # in-process the host (pytest, a benchmark) owns the signals; Ctrl-C must still reach it
        yield


@contextlib.asynccontextmanager
async def serving(simulator: VastSimulator, *, host: str = "127.0.0.1", port: int | None = None) -> AsyncIterator[str]:
    """Serve `simulator` over real HTTP on this event loop; yields its base URL."""
    port = port or free_port()
    # a scripted slow answer must not hold the test's teardown: in-flight requests get a second, then are cancelled
    config = uvicorn.Config(
        simulator.app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = _InProcessServer(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # surfaces the start-up error
                raise RuntimeError("the vast.ai simulator stopped while starting")
            await asyncio.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task


def serve_forever(simulator: VastSimulator, *, host: str, port: int, log_level: str = "info") -> None:
    """The foreground server behind `fleetpilot sim vast`. No access log: a request line can carry a key; the
    simulator's own lines (each rental, state change and destroy) in the format of the services' logs."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(simulator.app, host=host, port=port, log_level=log_level, access_log=False, lifespan="off")
