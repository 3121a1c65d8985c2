"""The docs site builds with ``mkdocs build --strict`` (a broken link, anchor, snippet or
docstring fails it), and every ```python block of its pages runs as pasted, on the
session's cluster, as the README's do (``tests/markdown_blocks.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.markdown_blocks import (
    ROOT,
    Block,
    check_is_its_example,
    check_writes_only_under_a_temporary_directory,
    page_blocks,
    run_block,
    run_cases,
)
from tests.script_runner import ScriptRunner

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
BLOCKS = [block for page in PAGES for block in page_blocks(page)]


@pytest.mark.slow  # a build renders the API reference from every docstring
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # no plea to move to MkDocs 2
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    built = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("index.html")}
    pages = {
        "index.html"
        if page.name == "index.md"
        else f"{page.relative_to(DOCS).with_suffix('')}/index.html"
        for page in PAGES
    }
    assert pages <= built, sorted(pages - built)


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [page.relative_to(DOCS).as_posix() for page in PAGES]
    assert [page for page in missing if f" {page}\n" not in nav] == []


def test_the_docs_have_python_blocks() -> None:
    assert len(BLOCKS) >= 10  # the parser found them (a changed fence style would hide them)


def test_the_glossary_the_code_follows_is_in_the_docs() -> None:
    """tests/test_words.py points at it: "Words" (and the folder table beside it)."""
    words = (DOCS / "words.md").read_text()
    assert "\n## Words\n" in words and "\n## Folders\n" in words
    for folder in ("api/", "actors/", "coordinator/", "core/", "tests/", "examples/"):
        assert f"| `{folder}` |" in words, folder


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_the_block_writes_only_under_a_temporary_directory(block: Block) -> None:
    check_writes_only_under_a_temporary_directory(block)


@pytest.mark.parametrize(
    "block", [block for block in BLOCKS if block.example], ids=lambda block: block.id
)
def test_a_block_that_is_an_example_script_is_it_verbatim(block: Block) -> None:
    check_is_its_example(block)


@pytest.mark.parametrize("block", run_cases(BLOCKS))
def test_the_block_runs(
    block: Block,
    ray_cluster: str,
    ray_session: None,
    script_runner: ScriptRunner,
    tmp_path: Path,
) -> None:
    run_block(block, ray_cluster, tmp_path, script_runner)
