"""No code of raytopic's async actors blocks on Ray (issue 51: the coordinator logged
"Using blocking ray.get inside async actor").

The channel, the coordinator and the transaction registry are async actors: while
one waits in ``ray.get``, its event loop serves nothing, and a thread of its process
that does (``asyncio.to_thread``) ties up a worker thread for a Ray round trip and
makes Ray warn. This checks raytopic's own code, not what Ray prints: from every
``async def`` in ``actors/`` and ``coordinator/`` and in the applications' async
actors (``ASYNC_ACTOR_MODULES``) it follows, transitively, each call of a plain
function or class name that resolves to raytopic's code (a class: its
``__init__``; in the same module, or imported by name), each ``self.method()`` of
the same class, and each
function handed to ``asyncio.to_thread`` or ``run_in_executor``; it fails on any
``ray.get``, ``ray.wait`` with a timeout other than 0, or ``time.sleep`` reached.

What it does not prove: calls through other objects (``self._fleet.ask(...)``, a
part's method, an actor handle) are not followed, so a blocking call reached only
that way goes unseen. It is a net for the direct case and the thread-borne one
(the coordinator made dead-letter topics in ``to_thread(ensure_dead_letter_topic)``,
whose ``launch_topic`` called ``ray.get``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tests.python_sources import parse_source

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = {
    "actors": "raytopic.actors",
    "coordinator": "raytopic.coordinator",
    "core": "raytopic.core",
    "api": "raytopic",
}
"""Each folder and the import name of its package."""

ACTOR_FOLDERS = ("actors", "coordinator")
"""Where the async actors' code lives: every ``async def`` there runs on an actor's loop."""

ASYNC_ACTOR_MODULES = (
    "raytopic.transaction.registry",
    "raytopic.serve.board_actor",
    "raytopic.serve.policy",
    "raytopic.client.control_log",
)
"""The async actors (and the code run on Serve's controller) of the applications, and
the control log they await (``ControlLogLoader``, reached through an attribute)."""


@dataclass
class _Module:
    name: str
    functions: dict[str, ast.AST] = field(default_factory=dict)  # "f" or "Class.f"
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # alias -> (module, name)


def _module_name(path: Path, root: Path) -> str:
    relative = path.relative_to(root)
    folder, *rest = relative.with_suffix("").parts
    parts = [PACKAGES[folder], *rest]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _load(sources: dict[str, str]) -> dict[str, _Module]:
    """Every module's functions (top level and methods) and its imports by name."""
    modules = {}
    for name, source in sources.items():
        module = _Module(name)
        tree = parse_source(source)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                module.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        module.functions[f"{node.name}.{item.name}"] = item
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    module.imported[alias.asname or alias.name] = (node.module, alias.name)
        modules[name] = module
    return modules


def _blocking(call: ast.Call) -> str | None:
    """What a call blocks on, if it is ``ray.get``, a waiting ``ray.wait`` or ``time.sleep``."""
    func = call.func
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return None
    owner, attr = func.value.id, func.attr
    if (owner, attr) in (("ray", "get"), ("time", "sleep")):
        return f"{owner}.{attr}"
    if (owner, attr) == ("ray", "wait"):
        timeout = next((k.value for k in call.keywords if k.arg == "timeout"), None)
        if not (isinstance(timeout, ast.Constant) and timeout.value == 0):
            return "ray.wait"
    return None


def _callees(call: ast.Call) -> list[ast.expr]:
    """The functions a call runs: itself, or what it hands to a thread."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "to_thread" and call.args:
        return [call.args[0]]
    if isinstance(func, ast.Attribute) and func.attr == "run_in_executor" and len(call.args) > 1:
        return [call.args[1]]
    return [func]


def _resolve(
    modules: dict[str, _Module], module: _Module, owner: str | None, target: ast.expr
) -> tuple[_Module, str] | None:
    if isinstance(target, ast.Name):  # a function, or a class: its __init__ runs
        for name in (target.id, f"{target.id}.__init__"):
            if name in module.functions:
                return module, name
        source = module.imported.get(target.id)
        if source is not None and source[0] in modules:
            found = modules[source[0]]
            for name in (source[1], f"{source[1]}.__init__"):
                if name in found.functions:
                    return found, name
        return None
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
        and owner is not None
        and f"{owner}.{target.attr}" in module.functions
    ):
        return module, f"{owner}.{target.attr}"
    return None


def blocking_calls(sources: dict[str, str], roots: list[str]) -> list[str]:
    """Every blocking call reachable from an ``async def`` of the ``roots`` modules, as
    ``module:function:line: call (from module:root)``."""
    modules = _load(sources)
    found = []
    for root_name in roots:
        root = modules[root_name]
        for start, node in root.functions.items():
            if not isinstance(node, ast.AsyncFunctionDef):
                continue
            seen: set[tuple[str, str]] = set()
            todo = [(root, start)]
            while todo:
                module, name = todo.pop()
                if (module.name, name) in seen:
                    continue
                seen.add((module.name, name))
                owner = name.split(".")[0] if "." in name else None
                for call in ast.walk(module.functions[name]):
                    if not isinstance(call, ast.Call):
                        continue
                    what = _blocking(call)
                    if what is not None:
                        found.append(
                            f"{module.name}:{name}:{call.lineno}: {what} (from {root_name}:{start})"
                        )
                    for callee in _callees(call):
                        resolved = _resolve(modules, module, owner, callee)
                        if resolved is not None:
                            todo.append(resolved)
    return sorted(set(found))


def _package_sources() -> dict[str, str]:
    return {
        _module_name(path, ROOT): path.read_text()
        for folder in PACKAGES
        for path in sorted((ROOT / folder).rglob("*.py"))
    }


def test_no_async_actor_code_blocks_on_ray() -> None:
    sources = _package_sources()
    roots = [
        name
        for name in sources
        if any(name.startswith(PACKAGES[folder] + ".") for folder in ACTOR_FOLDERS)
        or name in ASYNC_ACTOR_MODULES
    ]
    assert set(ASYNC_ACTOR_MODULES) <= set(roots)  # (a module moved: name it anew)
    assert blocking_calls(sources, roots) == []


def test_the_check_follows_calls_and_threads_into_other_modules() -> None:
    """How the coordinator once blocked: a thread, then a plain call, then ray.get."""
    sources = {
        "raytopic.coordinator.boss": (
            "import asyncio\n"
            "from raytopic.coordinator.maker import make\n"
            "class Boss:\n"
            "    async def serve(self):\n"
            "        await asyncio.to_thread(make, 1)\n"
            "    async def tick(self):\n"
            "        self._pause()\n"
            "    def _pause(self):\n"
            "        time.sleep(1)\n"
            "    async def fine(self):\n"
            "        ray.wait([], timeout=0)\n"
            "        await self._fleet.ask()\n"
        ),
        "raytopic.coordinator.maker": (
            "def make(n):\n    return _start(n)\ndef _start(n):\n    return ray.get(n)\n"
        ),
    }
    assert blocking_calls(sources, ["raytopic.coordinator.boss"]) == [
        "raytopic.coordinator.boss:Boss._pause:9: time.sleep (from raytopic.coordinator.boss:"
        "Boss.tick)",
        "raytopic.coordinator.maker:_start:4: ray.get (from raytopic.coordinator.boss:Boss.serve)",
    ]
