"""Commands imported when they run, not when `fleetpilot` starts: importing every command's module (NATS, the
contract, uvicorn, the simulators) took 1.4 s before `--help` or `--version` could answer.

A lazy command is listed with the short help written beside its target, so `fleetpilot --help` imports none
of them; tests/cli/test_lazy_commands.py keeps each written help equal to the command's own.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
import typer.main
from typer._click import Command, Context
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class LazyTarget:
    """`module:attribute`, a typer app (a command group) or a command function, and its one-line help."""

    spec: str
    short_help: str

    def load(self, name: str) -> Command:
        """The command as `app.add_typer(...)` / `app.command(...)` on `fleetpilot` itself would build it (no
        shell-completion options of its own: `fleetpilot` has none)."""
        module, _, attribute = self.spec.partition(":")
        target = getattr(importlib.import_module(module), attribute)
        parent = typer.Typer(add_completion=False)
        parent.callback()(lambda: None)  # a group, even around one command, so the command keeps its name
        if isinstance(target, typer.Typer):
            parent.add_typer(target, name=name)
        else:
            parent.command(name)(target)
        group = typer.main.get_command(parent)
        assert isinstance(group, TyperGroup)
        return group.commands[name]


class LazyCommand(TyperCommand):
    """Stands in for a command until it is used: listed by its written help, loaded on first parse."""

    def __init__(self, name: str, target: LazyTarget) -> None:
        super().__init__(name, help=target.short_help, short_help=target.short_help)
        self.target = target
        self._loaded: Command | None = None

    def loaded(self) -> Command:
        if self._loaded is None:
            self._loaded = self.target.load(self.name or "")
        return self._loaded

    def make_context(
        self, info_name: str | None, args: list[str], parent: Context | None = None, **extra: Any
    ) -> Context:
        return self.loaded().make_context(info_name, args, parent=parent, **extra)


class LazyGroup(TyperGroup):
    """`fleetpilot`'s group: its own commands, plus the lazy ones of `lazy_commands` (set by the app)."""

    lazy_commands: dict[str, LazyTarget] = {}

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *sorted(self.lazy_commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name in self.lazy_commands:
            return LazyCommand(cmd_name, self.lazy_commands[cmd_name])
        return super().get_command(ctx, cmd_name)
