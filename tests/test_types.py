"""The package's annotations checked as a user's type checker sees them.

raytopic ships ``py.typed``, so every user's checker trusts its annotations.
mypy runs on the package as the wheel lays it out (pyproject's ``package-dir``
folders under their package names: ``mkdocs_hooks.package_tree``, which the docs'
API reference reads too), with pyproject's ``[tool.mypy]`` settings: the editable
install maps folders to packages in a way mypy cannot follow, so checking the
source tree would check nothing.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from mkdocs_hooks import package_tree

from tests.test_packaging import ROOT


@pytest.mark.slow  # mypy reads Ray's, pandas' and PySpark's annotations too
def test_mypy_finds_no_error_in_the_installed_package(tmp_path: Path) -> None:
    site = package_tree()  # the wheel's layout, as the docs' API reference reads it
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "-p",
            "raytopic",
        ],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert checked.returncode == 0, checked.stdout[-8000:] + checked.stderr[-2000:]
    assert "Success: no issues found" in checked.stdout


CHOICES = {"start", "overflow", "on_poison", "mode", "sync", "placement"}
"""Options with a fixed set of values: a public signature names them as a
``Literal`` (or the exported enum), so a user's checker catches ``start="earlist"``."""


def _public_callables() -> list[tuple[str, object]]:
    import raytopic
    import raytopic.data
    import raytopic.serve
    import raytopic.spark

    found = []
    for module in (raytopic, raytopic.data, raytopic.spark, raytopic.serve):
        for name in module.__all__:
            thing = getattr(module, name)
            if inspect.isclass(thing):
                found.extend(
                    (f"{module.__name__}.{name}.{attribute}", member)
                    for attribute, member in vars(thing).items()
                    if callable(member)
                    and (not attribute.startswith("_") or attribute == "__init__")
                )
            elif callable(thing):
                found.append((f"{module.__name__}.{name}", thing))
    return found


def test_options_with_fixed_choices_are_literals_in_public_signatures() -> None:
    loose = []
    for where, function in _public_callables():
        try:
            parameters = inspect.signature(function).parameters
        except (TypeError, ValueError):
            continue  # a builtin's slot: no Python signature
        for name in CHOICES & set(parameters):
            annotation = parameters[name].annotation
            alternatives = {part.strip() for part in str(annotation).split("|")}
            if "str" in alternatives or annotation is inspect.Parameter.empty:
                loose.append(f"{where}({name}: {annotation})")
    assert loose == []
