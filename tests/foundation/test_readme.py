"""The README keeps its promises: every setting documented, the two commands, a job-system snippet that works."""

from __future__ import annotations

import re
from pathlib import Path

import nats

from services.cli.config import reference_rows
from shared.contract import QueueSnapshot, TaskEvent
from shared.streams import DEMAND, ensure_streams
from shared.subjects import Subjects
from sim.infra import NatsServer

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_documents_every_setting() -> None:
    text = README.read_text()
    missing = [env for _, env, _, _ in reference_rows() if f"`{env}`" not in text]
    assert not missing, f"README lacks {missing}: paste `fleetpilot config` into its configuration reference"


def test_readme_gives_the_two_commands() -> None:
    text = README.read_text()
    assert "make demo" in text and "make test" in text


async def test_the_job_system_snippet_publishes_what_demand_reads(nats_server: NatsServer) -> None:
    snippet = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert snippet, "the README's job-system snippet is missing"
    code = snippet.group(1).replace("nats://127.0.0.1:4222", nats_server.url).replace("asyncio.run(main())", "")
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await ensure_streams(js, Subjects("fp"))
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    await namespace["main"]()  # type: ignore[operator]
    sub = await js.pull_subscribe("fp.demand.>", stream=DEMAND.name(Subjects("fp")))
    messages = await sub.fetch(2, timeout=5)
    assert TaskEvent.model_validate_json(messages[0].data).task_id == "task-42"
    assert QueueSnapshot.model_validate_json(messages[1].data).queues[0].pending == 59
    await nc.close()
