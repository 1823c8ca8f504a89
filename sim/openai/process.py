"""The stand-in as a child process on a free port (tests and benchmarks measure it over real HTTP)."""

from __future__ import annotations

import sys
from dataclasses import fields

import httpx

from sim.infra import LocalServer
from sim.openai.server import StandInConfig


class OpenAIStandIn(LocalServer):
    name = "openai-standin"

    def __init__(self, config: StandInConfig | None = None, port: int | None = None) -> None:
        super().__init__(port)
        self.config = config or StandInConfig()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "sim.openai", "--port", str(self.port)]
        for field in fields(StandInConfig):
            value = getattr(self.config, field.name)
            if value is not None:
                cmd += [f"--{field.name.replace('_', '-')}", str(value)]
        return cmd

    def stats(self) -> dict[str, int]:
        """What the server counted: requests, max_in_flight, max_decoding, tokens."""
        response = httpx.get(f"{self.url}/sim/stats", timeout=5.0)
        response.raise_for_status()
        return dict(response.json()["stats"])
