"""MkDocs hook: lets mkdocstrings read the package from its source, statically.

``raytopic`` is installed from folders whose names are not its own (pyproject's
``package-dir``: ``api/`` is ``raytopic``, ``core/`` is ``raytopic.core``, ...), which
griffe's search by folder name cannot find. The hook lays out a ``raytopic`` folder of
links to them in a temporary directory and gives it to the Python handler as its path.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import tomllib
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parent


def package_tree() -> Path:
    """A temporary directory holding ``raytopic/`` as the wheel lays it out (links)."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    top = tempfile.mkdtemp(prefix="raytopic-docs-")
    atexit.register(shutil.rmtree, top, ignore_errors=True)
    for package, folder in sorted(dirs["package-dir"].items()):  # "raytopic" first
        target = Path(top, *package.split("."))
        if package == "raytopic":
            target.mkdir()
            for entry in (ROOT / folder).iterdir():
                (target / entry.name).symlink_to(entry)
        else:
            target.symlink_to(ROOT / folder)
    return Path(top)


@event_priority(100)  # before mkdocstrings' on_config, which makes the handler
def on_config(config):
    handlers = config.plugins["mkdocstrings"].config.handlers
    python = handlers.setdefault("python", {})
    python["paths"] = [str(package_tree())]
    return config
