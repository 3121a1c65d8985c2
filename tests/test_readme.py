"""Every ```python block of README.md runs as pasted, on the session's cluster.

A block runs alone, in a fresh interpreter, unless the text just above it says
it "continues the block above": then it runs after that block, as one script.
Other blocks (shell, the command listing) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
CONTINUES = "continues the block above"
"""What the text before a block says when the block needs the one above it."""


@dataclass(frozen=True)
class Block:
    """One ```python block of the README."""

    heading: str
    """The section it is in."""
    line: int
    """The line of its opening fence (1-based)."""
    code: str
    """Its text, with the blocks it continues before it."""
    prose: str = field(default="", compare=False)
    """The text between it and the block before it."""

    @property
    def id(self) -> str:
        return f"{re.sub(r'[^a-z0-9]+', '-', self.heading.lower()).strip('-')}-line{self.line}"

    @property
    def needs_spark(self) -> bool:
        return "raytopic.spark" in self.code


def readme_blocks(text: str) -> list[Block]:
    """The README's python blocks, in order, each with the code it runs."""
    blocks: list[Block] = []
    heading, prose, fence, code = "", "", None, []
    for number, line in enumerate(text.splitlines(), start=1):
        if fence is not None:
            if line.startswith("```"):
                if fence[1] == "python":
                    before = blocks[-1].code if CONTINUES in prose and blocks else ""
                    blocks.append(Block(heading, fence[0], before + "".join(code), prose))
                    prose = ""
                fence, code = None, []
            else:
                code.append(line + "\n")
        elif line.startswith("```"):
            fence = (number, line[3:].strip())
        else:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            prose += line + "\n"
    assert fence is None, f"README.md: the block at line {fence[0]} is never closed"
    return blocks


BLOCKS = readme_blocks(README.read_text())


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 5  # the parser found them (a changed fence style would hide them)


def test_a_block_that_continues_the_one_above_runs_after_it() -> None:
    text = "## A\n```python\nx = 1\n```\n```\n$ shell\n```\nThis continues the block above:\n"
    text += "```python\nprint(x)\n```\n## B\n```python\ny = 2\n```\n"
    assert readme_blocks(text) == [
        Block("A", 2, "x = 1\n"),
        Block("A", 9, "x = 1\nprint(x)\n"),
        Block("B", 13, "y = 2\n"),
    ]


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_the_block_writes_only_under_a_temporary_directory(block: Block) -> None:
    assert "/mnt" not in block.code
    assert not re.search(r"""["'](/|~)""", block.code), "an absolute path in a block"
    if re.search(r"store=|checkpointLocation|\.write\b|open\(", block.code):
        assert "tempfile" in block.code, "a block that writes files writes them under tempfile"


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example_of(block: Block) -> Path | None:
    """The example script a block says it is ("This block is [examples/x.py]"): it
    must be that script verbatim, whose run is ``tests/test_examples.py``'s."""
    said = re.search(r"This block is \[examples/([\w.]+\.py)\]", block.prose)
    return None if said is None else EXAMPLES / said.group(1)


@pytest.mark.parametrize(
    "block", [block for block in BLOCKS if _example_of(block)], ids=lambda block: block.id
)
def test_a_block_that_is_an_example_script_is_it_verbatim(block: Block) -> None:
    script = _example_of(block)
    assert script is not None
    assert script.read_text().endswith(block.code), f"the block is not {script.name} as it is"


def _run_case(block: Block) -> object:
    if block.needs_spark:  # Spark on Ray starts in tens of seconds, more on a busy machine
        return pytest.param(block, marks=[pytest.mark.slow, pytest.mark.timeout(600)], id=block.id)
    return pytest.param(block, id=block.id)


@pytest.mark.parametrize("block", [_run_case(block) for block in BLOCKS if not _example_of(block)])
def test_the_block_runs(block: Block, ray_cluster: str, ray_session: None, tmp_path: Path) -> None:
    import raytopic as rt
    from raytopic.transaction_registry import TRANSACTION_STATE

    topics_before = set(rt.list_topics())
    try:
        done = subprocess.run(
            [sys.executable, "-c", block.code],
            cwd=tmp_path,
            env={**os.environ, "RAY_ADDRESS": ray_cluster},
            capture_output=True,
            text=True,
            timeout=540 if block.needs_spark else 120,
            check=False,
        )
    except subprocess.TimeoutExpired as hung:
        output = hung.stderr or ""
        output = output.decode(errors="replace") if isinstance(output, bytes) else output
        pytest.fail(f"still running after {hung.timeout} s (a block must end):\n{output[-3000:]}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    # A test running beside this one (pytest -n) may have made a topic meanwhile:
    # it goes when that test ends. A topic the block left behind stays.
    # The namespace's transaction registry keeps its state on a topic of its own, as
    # long as the registry lives (it outlives a block, as the registry actor does).
    left = set(rt.list_topics()) - topics_before - {TRANSACTION_STATE}
    deadline = time.monotonic() + 120
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left &= set(rt.list_topics())
    assert not left, f"the block left topics behind: {sorted(left)}"
    assert not any(tmp_path.iterdir()), "the block wrote into its working directory"
