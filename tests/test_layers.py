"""Layers point one way: the actors, the coordinator and ``raytopic.core`` never import
a handle module (``api/``: topic, publisher, subscriber, ...); the handles import them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BELOW_THE_HANDLES = ("raytopic.actors", "raytopic.coordinator", "raytopic.core")


def _imports(path: Path) -> set[str]:
    """The ``raytopic`` modules a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "raytopic" or name.startswith("raytopic.")}


def _below(name: str) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in BELOW_THE_HANDLES)


def test_actors_and_coordinator_import_no_handle_module() -> None:
    wrong = []
    for folder in ("actors", "coordinator"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            wrong += [f"{relative}: {name}" for name in sorted(_imports(path)) if not _below(name)]
    assert wrong == []


def test_core_imports_only_core() -> None:
    wrong = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        wrong += [
            f"{relative}: {name}"
            for name in sorted(_imports(path))
            if not name.startswith("raytopic.core")
        ]
    assert wrong == []
