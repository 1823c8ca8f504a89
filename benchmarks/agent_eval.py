"""The agent evaluation suite: every scenario through the real agent and guardrails, scored against the
expected decision, on the Ollama stand-in (default), the local llama-server model, or any Ollama host.

    python -m benchmarks.agent_eval                      # the stand-in only (seconds)
    python -m benchmarks.agent_eval --target local       # the real 0.5B model (tens of minutes on 2 cores)
    python -m benchmarks.agent_eval --target host --host http://127.0.0.1:11434 --model qwen3:8b

Writes bench-results/agent_eval.json and prints a table per target.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import cast

from benchmarks.common import write_result
from evaluation.agent.suite import TargetKind, run_suite
from evaluation.llm.runtime import LocalModelError, LocalModelPaths, default_root, missing_parts

NAME = "agent_eval"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{NAME}", description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", choices=["standin", "local", "host"], help="repeatable")
    parser.add_argument("--host", default="http://127.0.0.1:11434", help="Ollama host for --target host")
    parser.add_argument("--model", default="qwen3:8b", help="model for --target host")
    parser.add_argument("--scenario", action="append", help="run only these scenarios (repeatable)")
    parser.add_argument("--dir", type=Path, default=None, help="the local model's folder (default .llm)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    kinds = cast(list[TargetKind], args.target or ["standin"])
    llm_dir = args.dir or default_root()
    if "local" in kinds and (missing := missing_parts(LocalModelPaths(llm_dir))):
        print(
            f"agent_eval: the local model is not installed ({'; '.join(missing)}): run `make llm` once", file=sys.stderr
        )
        return 2
    try:
        results = asyncio.run(
            run_suite(kinds, scenario_names=args.scenario, host=args.host, model=args.model, llm_dir=llm_dir, say=print)
        )
    except (ValueError, LocalModelError) as error:
        print(f"agent_eval: {error}", file=sys.stderr)
        return 2
    path = write_result(NAME, results)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
