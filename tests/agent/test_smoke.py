"""`make agent-smoke` (python -m evaluation.agent.smoke) against the stand-in, and its clear refusals."""

from __future__ import annotations

import asyncio
import os
import sys

from shared.processes import free_port
from sim.ollama.server import OllamaStandIn


async def smoke(host: str, model: str = "qwen3:8b") -> tuple[int, str, str]:
    env = {**os.environ, "FLEETPILOT_OLLAMA_HOST": host, "FLEETPILOT_OLLAMA_MODEL": model}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "evaluation.agent.smoke",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_one_dry_run_decision_with_a_tool_capable_model(ollama: OllamaStandIn) -> None:
    code, out, err = await smoke(ollama.url)
    assert code == 0, err
    assert "dry run (nothing is published)" in out
    assert "tool: launch_instances" in out and "guardrail: allowed" in out
    assert "DECISION: followed the policy" in out
    assert "reply to the operator:" in out and "pending" in out
    received = await ollama.received()
    assert received and all(r["num_ctx"] for r in received)


async def test_no_ollama_is_a_clear_message_not_a_traceback() -> None:
    code, _, err = await smoke(f"http://127.0.0.1:{free_port()}")
    assert code == 2
    assert "no Ollama reachable at http://127.0.0.1:" in err and "FLEETPILOT_OLLAMA_HOST" in err
    assert "Traceback" not in err


async def test_a_missing_model_or_one_without_tools_is_named(ollama: OllamaStandIn) -> None:
    code, _, err = await smoke(ollama.url, model="llama3.2")
    assert code == 2 and "model 'llama3.2' is not pulled" in err and "ollama pull llama3.2" in err
    await ollama.set_behaviour("follow", capabilities=["completion"])
    code, _, err = await smoke(ollama.url)
    assert code == 2 and "does not support tools" in err
