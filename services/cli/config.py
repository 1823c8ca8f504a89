"""`fleetpilot config`: every setting of every service, with its environment variable and default; `--effective`
adds the value in force and where it came from (default, the environment, or a `.env` file); `--check`
validates them all and says the first problem in one line.

The README's configuration reference is this command's output; a test keeps the two in step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer
from dotenv import dotenv_values, load_dotenv

from services.cli.settings_classes import SETTINGS_CLASSES, load_class

if TYPE_CHECKING:  # imported where used: every command loads `.env` through this module, most need no pydantic
    pass


# (title, "module:Class"): the settings classes, in the order an operator meets them
def describe_default(field: Any) -> str:
    from pydantic import SecretStr

    if field.default_factory is not None:
        return "(computed)"
    default = field.default
    if isinstance(default, SecretStr):
        return '""' if not default.get_secret_value() else "(secret)"
    if default is None:
        return "unset"
    if isinstance(default, tuple | list | frozenset | set):
        return ", ".join(str(item) for item in default) or "(empty)"
    return str(default)


def reference_rows() -> list[tuple[str, str, str, str]]:
    """(section, environment variable, default, description) for every setting."""
    rows = []
    for title, spec in SETTINGS_CLASSES:
        settings_class = load_class(spec)
        prefix = str(settings_class.model_config.get("env_prefix", ""))
        for name, field in settings_class.model_fields.items():
            rows.append((title, f"{prefix}{name}".upper(), describe_default(field), field.description or ""))
    return rows


def markdown_reference() -> str:
    lines = []
    section = None
    for title, env, default, description in reference_rows():
        if title != section:
            section = title
            lines += ["", f"#### {title}", "", "| variable | default | meaning |", "|---|---|---|"]
        lines.append(f"| `{env}` | `{default}` | {description} |")
    return "\n".join(lines).strip() + "\n"


Source = Literal["default", "env", ".env"]
DOTENV = Path(".env")
_DOTENV_SUPPLIED: dict[Path, set[str]] = {}  # per file, the variables it put into this process's environment


def load_dotenv_file(path: Path = DOTENV) -> set[str]:
    """Put a `.env` file's FLEETPILOT_* values into the environment, under what is set there already (the
    environment wins), so every command and service reads them alike; returns the variables it supplied."""
    key = path.resolve()
    if key in _DOTENV_SUPPLIED:  # the `fleetpilot` callback loaded it already; it is in the environment now
        return _DOTENV_SUPPLIED[key]
    supplied: set[str] = set()
    if path.is_file():
        supplied = {name for name in dotenv_values(path) if name.startswith("FLEETPILOT_") and name not in os.environ}
        load_dotenv(path, override=False)
    _DOTENV_SUPPLIED[key] = supplied
    return supplied


def source_of(variable: str, from_dotenv: set[str]) -> Source:
    if variable in from_dotenv:
        return ".env"
    return "env" if variable in os.environ else "default"


def shown_value(value: Any) -> str:
    from pydantic import SecretStr

    if isinstance(value, SecretStr):
        return "(secret, set)" if value.get_secret_value() else '""'
    if value is None:
        return "unset"
    if isinstance(value, tuple | list | frozenset | set):
        return ", ".join(str(item) for item in value) or "(empty)"
    return str(value)


def effective_rows(from_dotenv: set[str]) -> list[tuple[str, str, str, Source]]:
    """(section, environment variable, value in force, where it came from) for every setting; raises
    pydantic's ValidationError (the CLI says it in one line) when a value is not acceptable."""
    rows = []
    for title, spec in SETTINGS_CLASSES:
        settings_class = load_class(spec)
        prefix = str(settings_class.model_config.get("env_prefix", ""))
        loaded = settings_class()
        for name in settings_class.model_fields:
            variable = f"{prefix}{name}".upper()
            rows.append((title, variable, shown_value(getattr(loaded, name)), source_of(variable, from_dotenv)))
    return rows


def configuration_problems() -> list[str]:
    """Unknown FLEETPILOT_* variables and contradicting settings, one line each (services/cli/config_checks.py);
    a value that is not acceptable on its own raises pydantic's ValidationError instead."""
    from services.cli.config_checks import inconsistencies, unknown_variables
    from services.decider.config import DeciderSettings
    from services.provisioner.settings import ProvisionerSettings
    from shared.settings import Settings

    variables = [variable for _, variable, _, _ in reference_rows()]
    contradictions = inconsistencies(Settings(), ProvisionerSettings(), DeciderSettings())
    return unknown_variables(os.environ, variables) + contradictions


def refuse_problems() -> None:
    """The configuration's problems as one UserMistake (the CLI says it in one line, exit 2)."""
    from services.cli.errors import UserMistake

    if problems := configuration_problems():
        raise UserMistake("; ".join(problems))


def config(
    effective: bool = typer.Option(False, "--effective", help="the value in force and its source, per setting"),
    check: bool = typer.Option(False, "--check", help="validate every setting; exit 2 with the first problem"),
    dotenv: Path = typer.Option(DOTENV, "--env-file", help="the .env file read under the environment"),
) -> None:
    """Print every setting: environment variable, default and meaning (markdown)."""
    from_dotenv = load_dotenv_file(dotenv)
    if not (effective or check):
        typer.echo(markdown_reference())
        return
    rows = effective_rows(from_dotenv)
    refuse_problems()
    if effective:
        width = max(len(variable) for _, variable, _, _ in rows)
        section = None
        for title, variable, value, source in rows:
            if title != section:
                section = title
                typer.echo(f"# {title}")
            typer.echo(f"{variable:<{width}}  {value}  ({source})")
    if check:
        counts = {source: sum(1 for row in rows if row[3] == source) for source in ("env", ".env")}
        typer.echo(f"configuration OK: {len(rows)} settings, {counts['env']} from the environment, "
                   f"{counts['.env']} from {dotenv}, the rest defaults")  # fmt: skip
