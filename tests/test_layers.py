"""Layers point one way, with no exception: ``raytopic.core`` imports nothing above it;
the actors (the data plane) import only themselves and core; the coordinator (the
control plane) imports the actors it makes and core; none of them imports a handle
module (``api/``: topic, publisher, subscriber, ...), which import them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

MAY_IMPORT = {
    "core": ("raytopic.core",),
    "actors": ("raytopic.actors", "raytopic.core"),
    "coordinator": ("raytopic.coordinator", "raytopic.actors", "raytopic.core"),
}
"""Each layer's folder, and the packages its modules may import."""


def _imports(path: Path) -> set[str]:
    """The ``raytopic`` modules a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "raytopic" or name.startswith("raytopic.")}


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def _wrong_imports(folder: str) -> list[str]:
    wrong = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        wrong += [
            f"{relative}: {name}"
            for name in sorted(_imports(path))
            if not _within(name, MAY_IMPORT[folder])
        ]
    return wrong


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_a_layer_imports_only_itself_and_the_layers_below(folder: str) -> None:
    assert _wrong_imports(folder) == []


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    # How actors/dead_letters.py once reached the coordinator.
    module = tmp_path / "late.py"
    module.write_text("def f():\n    from raytopic.coordinator.launch import launch_topic\n")
    assert _imports(module) == {"raytopic.coordinator.launch"}
    assert not _within("raytopic.coordinator.launch", MAY_IMPORT["actors"])
