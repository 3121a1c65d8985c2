"""Every third-party module the package imports is declared in pyproject.toml: by its
dependencies (or theirs), so that ``pip install -e .`` gives it, or directly by the
extra of the feature that needs it (``raytopic[spark]``: pyspark, raydp)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

PACKAGE_FOLDERS = ("api", "actors", "coordinator", "core")
"""The folders of the package ``raytopic`` (tests and examples are not installed)."""


def _name(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


_SCAN = """
import ast, json, sys
from pathlib import Path

root, folders = Path(sys.argv[1]), sys.argv[2:]
found = {}
for folder in folders:
    for path in sorted((root / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in ("raytopic", "__future__"):
                    found.setdefault(top, path.relative_to(root).as_posix())
print(json.dumps(found))
"""


def _imported_modules() -> dict[str, str]:
    """Each top-level module the package imports that is neither the standard
    library's nor its own -> a file importing it.

    Parsed in a process of its own: this CPython's ast module keeps its recursion
    depth in state its threads share (CPython issue 106905), and another thread of
    the test session's process building ASTs meanwhile fails the parse
    ("SystemError: AST constructor recursion depth mismatch", seen in a full run)."""
    scan = subprocess.run(
        [sys.executable, "-c", _SCAN, str(ROOT), *PACKAGE_FOLDERS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(scan.stdout)


def _declared() -> set[str]:
    """The distributions ``pip install -e .`` brings, and those an extra names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pending = [Requirement(text) for text in project["dependencies"]]
    # An extra's own requirements only: what one of them brings in turn is theirs
    # (raydp brings psutil, which the bench needs without the spark extra).
    declared = {
        _name(Requirement(text).name)
        for extra in project["optional-dependencies"].values()
        for text in extra
        if _name(Requirement(text).name) != _name(project["name"])
    }
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        requirement = pending.pop()
        name, extras = _name(requirement.name), frozenset(requirement.extras)
        if name == _name(project["name"]) or (name, extras) in seen:
            continue
        seen.add((name, extras))
        declared.add(name)
        for text in metadata.requires(requirement.name) or []:
            needed = Requirement(text)
            wanted = needed.marker is None or any(
                needed.marker.evaluate({"extra": extra}) for extra in (*extras, "")
            )
            if wanted:
                pending.append(needed)
    return declared


def test_every_module_the_package_imports_is_declared() -> None:
    declared = _declared()
    providers = metadata.packages_distributions()
    undeclared = [
        f"{module} (imported by {path})"
        for module, path in sorted(_imported_modules().items())
        if not declared & {_name(d) for d in providers.get(module, [])}
    ]
    assert undeclared == []
