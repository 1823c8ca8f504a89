"""`python -m sim.openai --port 8100 --tokens-per-s 50 ...`: the stand-in as its own process."""

from __future__ import annotations

import argparse
from dataclasses import fields

from sim.openai.server import StandInConfig, serve


def parse_args(argv: list[str] | None = None) -> tuple[StandInConfig, str, int]:
    parser = argparse.ArgumentParser(description="OpenAI-compatible streaming stand-in")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    for field in fields(StandInConfig):
        kind = {"model": str, "max_batch": int, "tokens_per_chunk": int, "default_max_tokens": int}.get(
            field.name, float
        )
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=kind, default=field.default)
    args = vars(parser.parse_args(argv))
    host, port = args.pop("host"), args.pop("port")
    return StandInConfig(**args), host, port


if __name__ == "__main__":
    config, host, port = parse_args()
    serve(config, host, port)
