"""The provisioner's own settings: a value no machine can use is refused with its name, by the settings class and
by `fleetpilot config --check`, before anything is rented."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.provisioner.settings import ProvisionerSettings
from tests.cli.conftest import FLEETPILOT, cli_environment
from tests.cli.test_mistakes import assert_one_clear_line


@pytest.mark.parametrize("ports", ["-5,99999", "0", "8000,65536"])
def test_a_container_port_outside_1_to_65535_is_refused(ports: str) -> None:
    with pytest.raises(ValidationError, match="worker_ports"):
        ProvisionerSettings(worker_ports=ports)  # type: ignore[arg-type]  # as the environment gives it
    assert ProvisionerSettings(worker_ports="1,8000,65535").worker_ports == [1, 8000, 65535]  # type: ignore[arg-type]


def test_config_check_refuses_out_of_range_container_ports_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(FLEETPILOT), "config", "--check"],
        env=cli_environment(FLEETPILOT_PROVISIONER_WORKER_PORTS="-5,99999"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_one_clear_line(done, "FLEETPILOT_PROVISIONER_WORKER_PORTS", "'-5'", "'99999'")
