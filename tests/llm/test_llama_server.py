"""The adapter in front of a real llama-server and the real 0.5B model, when `fleetpilot llm serve` has built
and assembled them (under FLEETPILOT_LLM_DIR or .llm); skipped otherwise, saying what is missing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from ollama import AsyncClient

from evaluation.llm.runtime import MODEL_CARD, LocalModel, LocalModelPaths, default_root, missing_parts
from services.decider.agent.tools import tool_schemas

PATHS = LocalModelPaths(default_root())
MISSING = missing_parts(PATHS)
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"local model not installed ({'; '.join(MISSING)}); `make llm` installs it"
)


@pytest.fixture
async def client() -> AsyncIterator[AsyncClient]:
    async with LocalModel(PATHS, context_tokens=8192) as model:
        ollama = AsyncClient(host=model.ollama_host, timeout=600.0)
        yield ollama
        await ollama._client.aclose()


async def test_the_real_model_answers_a_tool_offer_with_a_valid_tool_call(client: AsyncClient) -> None:
    shown = await client.show(MODEL_CARD.name)
    assert "tools" in (shown.capabilities or [])
    response = await client.chat(
        model=MODEL_CARD.name,
        messages=[
            {
                "role": "user",
                "content": "Tasks arrive at 410/h and two machines do 240/h. Launch 2 RTX 4090 machines now, "
                "normal priority, because of sustained demand.",
            }
        ],
        tools=tool_schemas(),
        stream=False,
        options={"temperature": 0, "num_predict": 96},
    )

    calls = response.message.tool_calls or []
    assert [call.function.name for call in calls] == ["launch_instances"], response.message.content
    assert calls[0].function.arguments.get("count") == 2
    assert response.prompt_eval_count is not None and response.prompt_eval_count > 500  # the tools are in the prompt
