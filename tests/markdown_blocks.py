"""The ```python blocks of a Markdown page (the README, a docs page), and how a test
runs one: as pasted, as a script of its own, on the session's cluster.

A block runs alone unless the text just above it says it "continues the block
above": then it runs after that block, as one script. Other blocks (shell, the
command listing) are not run. ``tests/test_readme.py`` runs the README's blocks,
``tests/test_docs.py`` those of every page under ``docs/``.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.script_runner import Run, RunnerTimeout, ScriptRunner, run_apart

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CONTINUES = "continues the block above"
"""What the text before a block says when the block needs the one above it."""


@dataclass(frozen=True)
class Block:
    """One ```python block of a page."""

    heading: str
    """The section it is in."""
    line: int
    """The line of its opening fence (1-based)."""
    code: str
    """Its text, with the blocks it continues before it."""
    prose: str = field(default="", compare=False)
    """The text between it and the block before it."""
    page: str = field(default="README.md", compare=False)
    """The page it is on, relative to the repository."""

    @property
    def id(self) -> str:
        where = "" if self.page == "README.md" else Path(self.page).with_suffix("").as_posix()
        name = f"{where} {self.heading}".lower()
        return f"{re.sub(r'[^a-z0-9]+', '-', name).strip('-')}-line{self.line}"

    @property
    def needs_spark(self) -> bool:
        return "raytopic.spark" in self.code

    @property
    def starts_a_ray(self) -> bool:
        """It starts a Ray of its own (each start takes seconds), not the session's."""
        return 'address="local"' in self.code

    @property
    def example(self) -> Path | None:
        """The example script the block says it is ("This block is `examples/x.py`"):
        it must be that script verbatim, whose run is ``tests/test_examples.py``'s."""
        said = re.search(r"This block is \[?`?examples/([\w.]+\.py)", self.prose)
        return None if said is None else EXAMPLES / said.group(1)


def python_blocks(text: str, page: str = "README.md") -> list[Block]:
    """A page's python blocks, in order, each with the code it runs."""
    blocks: list[Block] = []
    heading, prose, fence, code = "", "", None, []
    for number, line in enumerate(text.splitlines(), start=1):
        if fence is not None:
            if line.startswith("```"):
                if fence[1] == "python":
                    before = blocks[-1].code if CONTINUES in prose and blocks else ""
                    blocks.append(Block(heading, fence[0], before + "".join(code), prose, page))
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
    assert fence is None, f"{page}: the block at line {fence[0]} is never closed"
    return blocks


def page_blocks(path: Path) -> list[Block]:
    """The python blocks of one page of the repository."""
    return python_blocks(path.read_text(), path.relative_to(ROOT).as_posix())


def check_writes_only_under_a_temporary_directory(block: Block) -> None:
    assert "/mnt" not in block.code
    assert not re.search(r"""["'](/|~)""", block.code), "an absolute path in a block"
    if re.search(r"store=|checkpointLocation|\.write\b|open\(", block.code):
        assert "tempfile" in block.code, "a block that writes files writes them under tempfile"


def check_is_its_example(block: Block) -> None:
    script = block.example
    assert script is not None
    assert script.read_text().endswith(block.code), f"the block is not {script.name} as it is"


def run_cases(blocks: list[Block]) -> list[object]:
    """The blocks a test runs (an example script's block runs as the script), each
    a pytest param; Spark's slow, and a block's that starts a Ray of its own."""
    cases = []
    for block in blocks:
        if block.example:
            continue
        if block.needs_spark:  # Spark on Ray starts in tens of seconds, more on a busy machine
            marks = [pytest.mark.slow, pytest.mark.timeout(600)]
            cases.append(pytest.param(block, marks=marks, id=block.id))
        elif block.starts_a_ray:
            cases.append(pytest.param(block, marks=pytest.mark.slow, id=block.id))
        else:
            cases.append(pytest.param(block, id=block.id))
    return cases


def run_block(block: Block, ray_cluster: str, tmp_path: Path, runner: ScriptRunner) -> None:
    """Run a block as pasted, on the session's cluster: it must end with 0, leave no
    topic behind and write nothing into its working directory. It runs in the
    interpreter ``runner`` keeps for the session's scripts (``tests/script_runner.py``),
    unless it starts a Ray or a Spark of its own: then in a fresh interpreter."""
    import raytopic as rt
    from raytopic.transaction.registry import TRANSACTION_STATE

    topics_before = set(rt.list_topics())
    # A Ray of a block's own starts in 10-30 s here, longer on a busy machine, and a
    # block may start two (a whole-cluster restart took 134 s beside a full run).
    timeout = 540 if block.needs_spark else 240 if block.starts_a_ray else 120
    try:
        if block.starts_a_ray or block.needs_spark:
            done: subprocess.CompletedProcess[str] | Run = run_apart(
                block.code, ray_cluster, tmp_path, timeout
            )
        else:
            done = runner.run(code=block.code, cwd=tmp_path, timeout=timeout)
    except (subprocess.TimeoutExpired, RunnerTimeout) as hung:
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
