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
import typing
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


def _options(function: object) -> dict[str, object]:
    """A signature's parameters and their annotations, with ``**options:
    Unpack[SomeTypedDict]`` spread into the typed dict's keys (as a checker reads
    them; their annotations resolved)."""
    parameters = inspect.signature(function).parameters  # type: ignore[arg-type]
    found: dict[str, object] = {}
    for name, parameter in parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and "Unpack[" in str(
            parameter.annotation
        ):
            # this one annotation only (others may name what only a checker imports)
            unpacked = eval(parameter.annotation, function.__globals__)  # type: ignore[attr-defined]
            (options,) = typing.get_args(unpacked)
            found.update(typing.get_type_hints(options))
        else:
            found[name] = parameter.annotation
    return found


def _is_loose(annotation: object) -> bool:
    """An annotation that lets any string through."""
    if annotation is inspect.Parameter.empty or annotation is str:
        return True
    if isinstance(annotation, str):  # as written (``from __future__ import annotations``)
        return "str" in {part.strip() for part in annotation.split("|")}
    return str in typing.get_args(annotation)


def test_options_with_fixed_choices_are_literals_in_public_signatures() -> None:
    loose = []
    checked = set()
    for where, function in _public_callables():
        try:
            options = _options(function)
        except (TypeError, ValueError):
            continue  # a builtin's slot: no Python signature
        for name in CHOICES & set(options):
            checked.add(name)
            if _is_loose(options[name]):
                loose.append(f"{where}({name}: {options[name]})")
    assert loose == []
    assert checked == CHOICES  # each option is found in some signature


def test_the_check_reads_the_options_of_an_unpacked_typed_dict() -> None:
    import raytopic

    options = _options(raytopic.Topic.subscriber)
    assert {"start", "mode", "on_poison", "group"} <= set(options)
    assert not _is_loose(options["start"])
    assert _is_loose(str | None) and _is_loose("StartName | str")
