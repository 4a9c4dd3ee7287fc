"""The layers stay visible: no module imports from a layer above its own.

types, kernels → blocks → compiler → executor → models → experiments → train → analysis / bench
→ cli; ``foldexp.data`` is a leaf that imports nothing else from foldexp.
"""

from __future__ import annotations

import ast
from pathlib import Path

import foldexp

ROOT = Path(foldexp.__file__).parent
RANK = {
    "types": 0, "kernels": 0, "blocks": 1, "compiler": 2, "executor": 3, "testing": 4, "models": 4,
    "data": 4, "config": 5, "experiments": 5.2, "train": 5.5, "analysis": 5.7, "bench": 5.7,
    "demo": 5, "cli": 6, "__main__": 6, "__init__": 3, "conf": 5, "startup": 0,
    "cpus": 0,
    "logs": 0,
}  # fmt: skip


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    return [n for n in names if n == "foldexp" or n.startswith("foldexp.")]


def test_no_module_imports_a_higher_layer() -> None:
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        module = ".".join(rel.parts)
        own = _layer(module)
        for imported in _imports(path):
            target = _layer(imported)
            if own == "data" and target != "data":
                bad.append(f"{module} imports {imported} (data is a leaf layer)")
            elif RANK.get(target, 0) > RANK.get(own, 0):
                bad.append(f"{module} imports {imported} (layer {target} is above {own})")
    assert not bad, "\n".join(bad)
