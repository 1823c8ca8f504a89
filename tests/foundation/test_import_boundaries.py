"""Production code stands alone: nothing in services/ or shared/ imports the simulators, the evaluation, the
benchmarks or the tests (the command line aside, whose sim, demo, up, llm and agent eval commands start them),
and no two of its modules import each other, directly or round a loop, at import time or inside a function."""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = ("services", "shared")
OUTSIDE_PRODUCTION = ("sim", "evaluation", "benchmarks", "tests")
COMMAND_LINE = "services.cli"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_under(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    return {module_name(root, path): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def _statements(node: ast.AST, type_checking: bool) -> Iterator[ast.AST]:
    yield node
    for child in ast.iter_child_nodes(node):
        if type_checking or not _is_type_checking(child):
            yield from _statements(child, type_checking)


def imported_names(name: str, path: Path, *, type_checking: bool = True) -> set[str]:
    """Every module or `module.attribute` the file imports, wherever the import statement sits; without
    `type_checking`, leaving out the imports under `if TYPE_CHECKING:` (annotations only, never run)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _statements(ast.parse(path.read_text(), filename=str(path)), type_checking):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def forbidden_imports(root: Path) -> dict[str, list[str]]:
    """Production module -> what it imports from outside production (the command line excepted)."""
    found = {}
    for name, path in modules_under(root, PRODUCTION).items():
        if name == COMMAND_LINE or name.startswith(COMMAND_LINE + "."):
            continue
        outside = sorted({i for i in imported_names(name, path) if i.partition(".")[0] in OUTSIDE_PRODUCTION})
        if outside:
            found[name] = outside
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Production module -> the production modules it imports when it runs (`from a import b` is a.b when b is
    a module); a type-only import cannot make a cycle."""
    modules = modules_under(root, PRODUCTION)
    return {
        name: {i for i in imported_names(name, path, type_checking=False) if i in modules and i != name}
        for name, path in modules.items()
    }


def import_cycle(root: Path) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(import_graph(root)).prepare()
    except graphlib.CycleError as error:
        return list(error.args[1])
    return None


def test_no_production_module_imports_the_simulators_the_evaluation_benchmarks_or_tests() -> None:
    assert forbidden_imports(REPO) == {}


def test_production_modules_import_each_other_without_a_cycle() -> None:
    assert import_cycle(REPO) is None


def test_the_walk_sees_the_whole_production_tree() -> None:
    graph = import_graph(REPO)
    assert len(graph) > 100
    assert "services.cli.service_apps" in graph["services.cli.main"]
    assert "shared.contract" in graph["services.fleet.core"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for package in ("services", "services/cli", "services/fleet", "shared", "sim"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "services/fleet/core.py").write_text("from shared import clock\n")
    (tmp_path / "shared/clock.py").write_text("import datetime\n")
    (tmp_path / "services/cli/sim.py").write_text("from sim import world\n")
    return tmp_path


def test_the_checks_find_a_simulator_import_and_a_cycle_made_on_purpose(tree: Path) -> None:
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from services.fleet import core\n"
    (tree / "shared/clock.py").write_text(type_only)  # annotations only: no cycle
    assert forbidden_imports(tree) == {} and import_cycle(tree) is None
    (tree / "services/fleet/app.py").write_text("def build():\n    from sim.vast import server\n")
    (tree / "shared/clock.py").write_text("def now():\n    from services.fleet import core\n")
    assert forbidden_imports(tree) == {"services.fleet.app": ["sim.vast", "sim.vast.server"]}
    cycle = import_cycle(tree)
    assert cycle is not None and set(cycle) == {"services.fleet.core", "shared.clock"}
