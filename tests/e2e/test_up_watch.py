"""`fleetpilot up` while it runs: it says each launch with the spend it leaves, restarts a service that crashed
after printing the end of its log, and refuses a second stack in its workdir. Real processes, as a user runs them."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.cli.conftest import FLEETPILOT, cli_environment
from tests.e2e.test_newcomer import UpSession, fleetpilot, wait_for
from tests.e2e.test_up_stop import children_of, command_line


def test_up_says_launches_restarts_a_crashed_service_and_refuses_a_second_stack(tmp_path: Path) -> None:
    session = UpSession(tmp_path)
    try:
        session.ready()
        second = subprocess.run(
            [str(FLEETPILOT), "up", "--workdir", str(tmp_path)],
            env=cli_environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2, (second.stdout, second.stderr)
        assert f"a stack already runs there (fleetpilot up, pid {session.process.pid})" in second.stderr

        [fleet] = [pid for pid in children_of(session.process.pid) if " run fleet " in command_line(pid)]
        os.kill(fleet, signal.SIGKILL)  # a crash, as the OOM killer does it
        wait_for(lambda: "restarting fleet (1 of 3)" in session.lines, "fleet restarted")
        crash = session.lines.index("restarting fleet (1 of 3)")
        assert session.lines[crash - 1].startswith("  | "), session.lines[crash - 5 : crash + 1]  # its log tail

        env = session.environment()
        assert fleetpilot("fleetpilot publish queue default=40", env, tmp_path).returncode == 0
        wait_for(lambda: any(line.startswith("  launch done: instance ") for line in session.lines), "a launch said")
        wait_for(lambda: any(line.startswith("  spend now $") for line in session.lines), "the spend said")
        assert session.process.poll() is None, session.lines  # the crash did not tear the stack down
    finally:
        assert session.stop() == 0, session.lines
