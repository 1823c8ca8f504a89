"""How `fleetpilot` answers an ordinary mistake: one line naming the variable or option and what it expects,
exit code 2, no traceback. Everything else (a bug) keeps its traceback."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
import typer.main
from typer._click import exceptions as click_errors  # typer carries its own click; its errors are these

if TYPE_CHECKING:  # imported where used: pydantic-settings alone costs `fleetpilot --version` 0.15 s
    from pydantic import ValidationError
    from pydantic_settings import BaseSettings, SettingsError

# an ordinary mistake, as click and the shell expect
USAGE_EXIT_CODE = 2
# a Ctrl-C, as the shell reports a process ended by SIGINT (128 + 2)
INTERRUPTED_EXIT_CODE = 130


class UserMistake(Exception):
    """Raised where a command finds bad input it can describe in one line (the line is the message)."""


def settings_classes_by_name() -> dict[str, type[BaseSettings]]:
    from services.cli.settings_classes import SETTINGS_CLASSES, load_class

    classes = [load_class(spec) for _, spec in SETTINGS_CLASSES]
    return {settings_class.__name__: settings_class for settings_class in classes}


def environment_variable(settings_class: type[BaseSettings] | None, field: str) -> str:
    prefix = str(settings_class.model_config.get("env_prefix", "")) if settings_class else "FLEETPILOT_"
    return f"{prefix}{field}".upper()


def describe_settings_error(error: ValidationError) -> str:
    """`FLEETPILOT_BUDGET_USD_PER_H='abc': expected a number (Input should be a valid number, ...)`, one per
    problem: the variable a person sets, not the pydantic field behind it."""
    settings_class = settings_classes_by_name().get(error.title)
    problems = []
    for item in error.errors():
        if not item["loc"]:  # a check of several settings at once: its words name the variables
            problems.append(_said(item["msg"]))
            continue
        variable = environment_variable(settings_class, str(item["loc"][0]))
        got = item.get("input")
        value = f"={got!r}" if isinstance(got, str | int | float) else ""
        problems.append(f"{variable}{value}: {_said(item['msg'])}")
    return "; ".join(problems)


def _said(message: str) -> str:
    """pydantic's message as a line's clause: its prefix for a validator's own words dropped, a first word in
    lower case (a validator names variables in capitals, which lowering the whole message lost)."""
    message = message.removeprefix("Value error, ")
    first_word = message.split(" ", 1)[0]
    return message[:1].lower() + message[1:] if first_word[1:].islower() else message


def describe_undecodable_setting(error: SettingsError) -> str:
    """pydantic-settings' `error parsing value for field "spacing_s" from source "EnvSettingsSource"` (a value
    that is not the JSON a dict-typed setting wants) as the variable, what was wrong and what is expected."""
    field = str(error).partition('field "')[2].partition('"')[0]
    variables = [
        environment_variable(settings_class, field)
        for settings_class in settings_classes_by_name().values()
        if field in settings_class.model_fields
    ]
    variable = " or ".join(variables) or field or "a FLEETPILOT_* variable"
    cause = f" ({error.__cause__})" if error.__cause__ else ""
    return f'{variable}: not readable{cause}; expected a JSON object, e.g. {{"name": value}}'


def is_settings_error(error: ValidationError) -> bool:
    return error.title in settings_classes_by_name()


def writable_file(path: Path | None, option: str) -> Path | None:
    """Checks an output path before any work is done, so an hour's run does not end in a failed write."""
    if path is None:
        return None
    target = path.expanduser()
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UserMistake(f"{option} {path}: is a directory; expected a file path to write")
    if not parent.is_dir():
        raise UserMistake(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UserMistake(f"{option} {path}: not writable; expected a path this user may write")
    return path


def one_line(error: BaseException) -> str:
    """A bad file's problem in one line: each pydantic problem as `field: message (got value)`, a YAML or
    JSON error's first line, an OS error's reason and file."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        problems = []
        for item in error.errors():
            field = ".".join(str(part) for part in item["loc"]) or "value"
            got = item.get("input")
            shown = f" (got {got!r})" if isinstance(got, str | int | float | bool) else ""
            problems.append(f"{field}: {item['msg']}{shown}")
        return "; ".join(problems)
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    text = " ".join(str(error).split())
    return text or type(error).__name__


def load_scenario(path: str, option: str = "--scenario") -> Any:
    """A vast.ai simulator scenario file, or a UserMistake naming the option, the file and the problem."""
    import yaml

    from sim.vast.scenario import Scenario

    try:
        return Scenario.load(path)
    except (OSError, ValueError, yaml.YAMLError) as error:  # pydantic's ValidationError is a ValueError
        raise UserMistake(f"{option} {path}: {one_line(error)}") from None


def describe_bad_setting(error: Exception) -> str:
    """A bad FLEETPILOT_* value in one line; any other error (a bug) is raised again, with its traceback."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    if isinstance(error, ValidationError) and is_settings_error(error):
        return describe_settings_error(error)
    if isinstance(error, SettingsError):
        return describe_undecodable_setting(error)
    raise error


def fail(line: str) -> NoReturn:
    typer.echo(f"error: {line}", err=True)
    raise SystemExit(USAGE_EXIT_CODE)


class FleetPilotApp(typer.Typer):
    """The `fleetpilot` command: usage errors, bad settings and UserMistake end in one line and exit code 2."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        command = typer.main.get_command(self)
        kwargs["standalone_mode"] = False  # errors come back here as exceptions, to be said in one line
        try:
            result = command.main(*args, **kwargs)
        except click_errors.NoArgsIsHelpError as error:  # `fleetpilot` alone: the help, as before
            typer.echo(error.ctx.get_help() if error.ctx else str(error))
            raise SystemExit(USAGE_EXIT_CODE) from None
        except click_errors.UsageError as error:
            fail(error.format_message().replace("\n", " "))
        except click_errors.ClickException as error:
            fail(error.format_message())
        except click_errors.Abort:
            typer.echo("aborted", err=True)
            raise SystemExit(130) from None
        except UserMistake as error:
            fail(str(error))
        except KeyboardInterrupt:  # Ctrl-C before typer's own handling (while the commands are looked up)
            typer.echo("interrupted", err=True)
            raise SystemExit(INTERRUPTED_EXIT_CODE) from None
        except Exception as error:
            fail(describe_bad_setting(error))
        if result == INTERRUPTED_EXIT_CODE:  # typer turns a Ctrl-C into a silent exit 130; say it in one line
            typer.echo("interrupted", err=True)
        sys.exit(result if isinstance(result, int) else 0)
