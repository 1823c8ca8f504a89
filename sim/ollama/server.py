"""Running the stand-in: in-process on a free port, or in the foreground (`fleetpilot sim ollama`)."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

import httpx
import uvicorn

from shared.processes import free_port
from sim.ollama.app import StandInState, build_app

STOP_TIMEOUT_S = 5.0


class OllamaStandIn:
    """`async with OllamaStandIn(behaviour="loop") as ollama:` then point the client at `ollama.url`."""

    def __init__(self, *, behaviour: str = "follow", port: int | None = None, state: StandInState | None = None):
        self.state = state or StandInState(behaviour=behaviour)
        self.port = port or free_port()
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        config = uvicorn.Config(
            build_app(self.state),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it (port taken, ...)
                raise RuntimeError("the Ollama stand-in stopped before it started")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Close the port: from now on the client sees a connection refused."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), STOP_TIMEOUT_S)
        except TimeoutError:  # a connection that never closes must not hold the caller
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._server = None
        self._task = None

    async def received(self, full: bool = False) -> list[dict[str, object]]:
        async with httpx.AsyncClient(base_url=self.url, timeout=10.0) as client:
            response = await client.get("/_sim/received", params={"full": "1" if full else "0"})
            response.raise_for_status()
            return list(response.json()["requests"])

    async def readings(self) -> list[dict[str, object]]:
        """The structured readings asked (requests with a JSON schema as `format`), kept apart from `received`."""
        async with httpx.AsyncClient(base_url=self.url, timeout=10.0) as client:
            response = await client.get("/_sim/received")
            response.raise_for_status()
            return list(response.json()["readings"])

    async def set_behaviour(self, behaviour: str, **options: object) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=10.0) as client:
            response = await client.post("/_sim/behaviour", json={"behaviour": behaviour, **options})
            response.raise_for_status()

    async def __aenter__(self) -> OllamaStandIn:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def serve(*, port: int, host: str = "127.0.0.1", behaviour: str = "follow", model: str | None = None) -> None:
    """Blocking: the stand-in in the foreground until interrupted."""
    state = StandInState(behaviour=behaviour)
    if model:
        state.model = model
    uvicorn.run(build_app(state), host=host, port=port, log_level="info", access_log=False)
