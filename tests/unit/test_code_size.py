"""Modules and functions stay a size one can read: no module in ``foldexp/`` over 400 lines, no
function over 80 (STYLE.md). A module that grows past the limit is split by its jobs, a function
into named steps; this test names each one over, with its size.
"""

from __future__ import annotations

import ast
from pathlib import Path

import foldexp

ROOT = Path(foldexp.__file__).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _sources() -> list[tuple[Path, str]]:
    return [(p, p.read_text(encoding="utf-8")) for p in sorted(ROOT.rglob("*.py"))]


def test_no_module_is_over_400_lines() -> None:
    over = [
        f"{path.relative_to(ROOT.parent)}: {len(text.splitlines())} lines"
        for path, text in _sources()
        if len(text.splitlines()) > MAX_MODULE_LINES
    ]
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by job):\n" + "\n".join(
        over
    )


def test_no_function_is_over_80_lines() -> None:
    over = []
    for path, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if size > MAX_FUNCTION_LINES:
                    where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
                    over.append(f"{where} {node.name}: {size} lines")
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (split them into steps):\n" + (
        "\n".join(over)
    )
