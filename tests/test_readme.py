"""Every ```python block of README.md runs as pasted, on the session's cluster (the
machinery, shared with ``tests/test_docs.py``: ``tests/markdown_blocks.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.markdown_blocks import (
    ROOT,
    Block,
    check_is_its_example,
    check_writes_only_under_a_temporary_directory,
    page_blocks,
    python_blocks,
    run_block,
    run_cases,
)
from tests.script_runner import ScriptRunner

README = ROOT / "README.md"
BLOCKS = page_blocks(README)
FIRST_LINES = 20
"""The two commands are in the README's first lines, exactly as ``.ci/run`` runs the
second."""


def test_the_readme_has_a_quick_start_block() -> None:
    assert len(BLOCKS) >= 1  # the parser found it (a changed fence style would hide it)


def test_the_two_commands_open_the_readme() -> None:
    first = README.read_text().splitlines()[:FIRST_LINES]
    assert '    pip install -e ".[spark]" && raytopic demo' in first
    assert '    pip install -e ".[dev]" && python -m pytest' in first
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]" && python -m pytest' in ci


def test_the_readme_is_a_landing_page() -> None:
    assert len(README.read_text().splitlines()) <= 300


def test_a_block_that_continues_the_one_above_runs_after_it() -> None:
    text = "## A\n```python\nx = 1\n```\n```\n$ shell\n```\nThis continues the block above:\n"
    text += "```python\nprint(x)\n```\n## B\n```python\ny = 2\n```\n"
    assert python_blocks(text) == [
        Block("A", 2, "x = 1\n"),
        Block("A", 9, "x = 1\nprint(x)\n"),
        Block("B", 13, "y = 2\n"),
    ]


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_the_block_writes_only_under_a_temporary_directory(block: Block) -> None:
    check_writes_only_under_a_temporary_directory(block)


def test_a_block_that_is_an_example_script_is_it_verbatim() -> None:
    # One test over them all: the landing page holds none today (a parametrized
    # test over none was reported skipped), and one added later is checked here.
    for block in BLOCKS:
        if block.example:
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


def test_every_link_of_the_readme_reaches_a_file() -> None:
    """The landing page's links into the docs and the examples (the docs' own links
    are checked by ``mkdocs build --strict``: tests/test_docs.py)."""
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert len(targets) >= 10
    missing = [target for target in targets if not (ROOT / target).is_file()]
    assert missing == []
