"""Layers point one way, with one listed exception (``ENTRIES``).

Below the handles: ``raytopic.core`` imports nothing above it; the actors (the data
plane) import only themselves and core; the coordinator (the control plane) imports
the actors it makes and core. The client handles (``api/client/``, ``raytopic.client``:
topic, publisher, subscriber, ...) import those three and themselves, and hold no
actor class. The applications built on the handles (``raytopic.autoscale``,
``.bridge``, ``.serve``, ``.transactions``) import the handles and what is below
them, never one another. ``raytopic.tools`` (the CLI, benchmarks, demo) and the
public modules at the top of ``api/`` (``raytopic``, ``raytopic.spark``, ...) may
import anything; nothing below them imports them."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.python_sources import parse_source

ROOT = Path(__file__).resolve().parent.parent

BELOW_HANDLES = ("raytopic.coordinator", "raytopic.actors", "raytopic.core")
HANDLES = ("raytopic.client", *BELOW_HANDLES)
APPLICATIONS = ("autoscale", "bridge", "serve", "transaction")
"""The folders under ``api/`` built on the handles."""

MAY_IMPORT = {
    "core": ("raytopic.core",),
    "actors": ("raytopic.actors", "raytopic.core"),
    "coordinator": BELOW_HANDLES,
    "api/client": HANDLES,
    **{f"api/{app}": (f"raytopic.{app}", *HANDLES) for app in APPLICATIONS},
}
"""Each layer's folder, and the packages its modules may import."""

ENTRIES = {("api/client/topic.py", "raytopic.autoscale.autoscaler")}
"""Imports against the direction, each made only when called (or for type checkers),
never at import time: ``Topic.autoscale`` and ``Topic.autoscaler`` (the contract's
methods, DESIGN section 4) start and find a group's autoscaler, whose scaler actor
runs subscribers of the topic."""


def _nodes(tree: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node, with whether it lies inside a function body."""
    for child in ast.iter_child_nodes(tree):
        inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        yield child, inside
        yield from _nodes(child, inside)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(path: Path, *, types: bool = True) -> dict[str, str]:
    """The ``raytopic`` modules a file imports, each with when: ``"import"`` (at import
    time), ``"call"`` (only inside functions) or ``"types"`` (only under ``if
    TYPE_CHECKING:``, for type checkers); ``types=False`` leaves the last out."""
    tree = parse_source(path)
    for_types: set[int] = set()
    for node, _ in _nodes(tree):
        if _is_type_checking(node):
            for_types.update(id(inner) for inner in ast.walk(node))
    found: dict[str, str] = {}
    for node, in_function in _nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        when = "types" if id(node) in for_types else "call" if in_function else "import"
        if when == "types" and not types:
            continue
        for name in names:
            if name == "raytopic" or name.startswith("raytopic."):
                earlier = found.get(name, when)
                found[name] = "import" if "import" in (earlier, when) else when
    return found


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def _wrong_imports(folder: str) -> list[str]:
    wrong = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for name, when in sorted(_imports(path).items()):
            if _within(name, MAY_IMPORT[folder]):
                continue
            if when != "import" and (relative, name) in ENTRIES:
                continue
            wrong.append(f"{relative}: {name}")
    return wrong


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_a_layer_imports_only_itself_and_the_layers_below(folder: str) -> None:
    assert _wrong_imports(folder) == []


def test_the_entries_against_the_direction_are_still_there() -> None:
    # An entry no longer needed is taken off the list (it would let one back in).
    for relative, name in ENTRIES:
        assert _imports(ROOT / relative).get(name) in ("call", "types"), (relative, name)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT / "api").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["raytopic", *parts])


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (module -> modules it imports), or []."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            found = visit(imported)
            if found:
                return found
        path.pop()
        done.add(module)
        return []

    for module in sorted(graph):
        found = visit(module)
        if found:
            return found
    return []


def _handle_and_application_graph() -> dict[str, set[str]]:
    """The modules of ``api/`` and the ones of theirs each imports as the program
    runs (at import time or when called; not the imports for type checkers only)."""
    modules = {_module_name(path): path for path in (ROOT / "api").rglob("*.py")}
    graph = {}
    for module, path in modules.items():
        imported = set()
        for name in _imports(path, types=False):
            if _within(name, BELOW_HANDLES):
                continue  # another folder's (their own tests check them)
            while name and name not in modules:  # ``from raytopic.x import name``
                name = name.rpartition(".")[0]
            if name and name != module:
                imported.add(name)
        graph[module] = imported
    return graph


def test_the_handles_and_applications_import_no_module_in_a_cycle() -> None:
    assert _cycle(_handle_and_application_graph()) == []


def test_no_actor_class_in_the_client_handles() -> None:
    # The handles run in the user's process; an actor belongs to its application.
    made = []
    for path in sorted((ROOT / "api/client").rglob("*.py")):
        for node in ast.walk(parse_source(path)):
            remote = isinstance(node, ast.Attribute) and node.attr == "remote"
            if remote and isinstance(node.value, ast.Name) and node.value.id == "ray":
                made.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert made == []


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    # How actors/dead_letters.py once reached the coordinator.
    module = tmp_path / "late.py"
    module.write_text("def f():\n    from raytopic.coordinator.launch import launch_topic\n")
    assert _imports(module) == {"raytopic.coordinator.launch": "call"}
    assert not _within("raytopic.coordinator.launch", MAY_IMPORT["actors"])


def test_the_check_refuses_an_application_imported_by_a_handle(tmp_path: Path) -> None:
    module = tmp_path / "up.py"
    module.write_text("from raytopic.bridge.streams import Stream\n")
    assert _imports(module) == {"raytopic.bridge.streams": "import"}
    assert not _within("raytopic.bridge.streams", MAY_IMPORT["api/client"])
    assert not _within("raytopic.serve.adapter", MAY_IMPORT["api/bridge"])  # nor another app


def test_the_cycle_check_finds_a_cycle_through_a_call_time_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []
