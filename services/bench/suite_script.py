"""The suite as a rented machine gets it: the `gpu_suite` package joined into one self-contained script.

A machine downloads one file and runs it with its own python3 (services/bench/onstart.py), so the package's
modules are written out in dependency order under the package docstring, each without its own docstring, its
`from __future__` line (one heads the script) or its imports of its siblings, whose names the script defines
earlier.
"""

from __future__ import annotations

import ast
from pathlib import Path

from services.bench import gpu_suite

PACKAGE = gpu_suite.__name__
# each after the modules it imports from; __main__ last, for its `if __name__ == "__main__"`
SUITE_MODULES = ("backend", "cpu", "cuda", "driver", "cli", "__main__")


def suite_script() -> str:
    package_dir = Path(gpu_suite.__file__).parent
    head = (
        _docstring((package_dir / "__init__.py").read_text(encoding="utf-8")) + "\nfrom __future__ import annotations\n"
    )
    bodies = [_body((package_dir / f"{module}.py").read_text(encoding="utf-8")) for module in SUITE_MODULES]
    return "\n\n".join([head, *bodies])


def _docstring(source: str) -> str:
    """A module's docstring as written in its source."""
    first = ast.parse(source).body[0]
    return "".join(source.splitlines(keepends=True)[first.lineno - 1 : first.end_lineno])


def _body(source: str) -> str:
    """A module's source less its docstring, its `from __future__` line and its imports from the package."""
    lines = source.splitlines(keepends=True)
    dropped: set[int] = set()
    for index, node in enumerate(ast.parse(source).body):
        if _dropped(node, first=index == 0):
            dropped.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    return "".join(line for number, line in enumerate(lines) if number not in dropped).strip("\n") + "\n"


def _dropped(node: ast.stmt, *, first: bool) -> bool:
    if first and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return isinstance(node.value.value, str)
    if isinstance(node, ast.ImportFrom) and node.module is not None:
        return node.module == "__future__" or node.module.startswith(PACKAGE)
    return False
