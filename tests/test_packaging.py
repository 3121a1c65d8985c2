"""The folders that make up the package are exactly the ones pyproject installs."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "raytopic": "api",
    "raytopic.actors": "actors",
    "raytopic.coordinator": "coordinator",
    "raytopic.core": "core",
}


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_folder_is_listed() -> None:
    setuptools = pyproject()["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for package, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *relative.parts]))
    assert found == listed


def package_folder(package: str) -> Path:
    """Where setuptools finds ``package``: its own folder, else under its parent's."""
    dirs = pyproject()["tool"]["setuptools"]["package-dir"]
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        folder = dirs.get(".".join(parts[:cut]))
        if folder is not None:
            return ROOT / folder / Path(*parts[cut:])
    raise AssertionError(f"{package} is in no package-dir folder")


def test_package_data_files_exist() -> None:
    """A data file moved without its package-data entry would be missing from the wheel."""
    data = pyproject()["tool"]["setuptools"]["package-data"]
    missing = [
        f"{package}: {name}"
        for package, names in data.items()
        for name in names
        if not (package_folder(package) / name).is_file()
    ]
    assert missing == []


def test_package_dirs_are_the_design_folders() -> None:
    assert pyproject()["tool"]["setuptools"]["package-dir"] == FOLDERS


def test_public_names_resolve() -> None:
    import raytopic

    missing = [name for name in raytopic.__all__ if not hasattr(raytopic, name)]
    assert missing == []


def test_no_module_of_the_package_is_named_like_a_public_name() -> None:
    """Importing ``raytopic.x`` sets the package's attribute ``x`` to that module, over
    the lazily imported public name (a subpackage ``raytopic.transactions`` once made
    ``rt.transactions(...)`` a module in every process that had imported it first)."""
    import raytopic

    modules = {
        entry.stem if entry.suffix == ".py" else entry.name
        for entry in (ROOT / FOLDERS["raytopic"]).iterdir()
        if entry.suffix == ".py" or (entry / "__init__.py").is_file()
    }
    assert modules & set(raytopic.__all__) == set()
