"""`fleetpilot config`: every setting described, the values in force with their source, and `--check`."""

from __future__ import annotations

from pathlib import Path

from services.cli.config import SETTINGS_CLASSES, load_class, reference_rows
from tests.cli.conftest import RunCli


def test_every_setting_has_a_description() -> None:
    undescribed = [env for _, env, _, description in reference_rows() if not description.strip()]
    assert not undescribed, f"settings without a description (Field(description=...)): {undescribed}"


def test_every_settings_class_is_listed() -> None:
    """A new settings class must be added to SETTINGS_CLASSES, or `config` (and its checks) would miss it."""
    import pkgutil

    from pydantic_settings import BaseSettings

    import services

    listed = {load_class(spec) for _, spec in SETTINGS_CLASSES}
    found = set()
    for module in pkgutil.walk_packages(services.__path__, "services."):
        if module.name.rsplit(".", 1)[-1] in ("config", "settings"):
            namespace = __import__(module.name, fromlist=["*"])
            found |= {
                value
                for value in vars(namespace).values()
                if isinstance(value, type) and issubclass(value, BaseSettings) and value.__module__ == module.name
            }
    assert found <= listed, f"not in SETTINGS_CLASSES: {sorted(c.__name__ for c in found - listed)}"


def test_effective_values_say_where_each_came_from(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("FLEETPILOT_MAX_INSTANCES=7\nFLEETPILOT_BUDGET_USD_PER_H=3\n")
    done = run_cli("config", "--effective", FLEETPILOT_BUDGET_USD_PER_H="5", FLEETPILOT_VAST_API_KEY="hunter2")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("FLEET")}
    assert rows["FLEETPILOT_BUDGET_USD_PER_H"] == "5.0  (env)"  # the environment wins over .env
    assert rows["FLEETPILOT_MAX_INSTANCES"] == "7  (.env)"
    assert rows["FLEETPILOT_DECIDER_MODE"] == "shadow  (default)"
    assert rows["FLEETPILOT_VAST_API_KEY"] == "(secret, set)  (env)" and "hunter2" not in done.stdout


def test_check_passes_a_valid_configuration_and_names_a_bad_value(run_cli: RunCli, tmp_path: Path) -> None:
    good = run_cli("config", "--check")
    assert good.returncode == 0 and good.stdout.startswith("configuration OK"), good.stderr
    (tmp_path / ".env").write_text("FLEETPILOT_FLEET_TICK_S=soon\n")
    bad = run_cli("config", "--check")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: FLEETPILOT_FLEET_TICK_S='soon': input should be a valid number, unable to parse string as a number"
    ]
