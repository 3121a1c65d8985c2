"""Parsing the project's own source in a test process that also runs Ray's threads."""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse_source(source: str | Path) -> ast.Module:
    """The module ``source`` (its text, or a file's path) as an AST.

    This CPython (3.11.7) keeps the AST constructor's recursion depth in state its
    threads share (CPython issue 106905). A collection during the parse runs
    finalizers, and a Ray object's releases the GIL: a background thread that formats
    a traceback (3.11's caret anchors parse its line) then parses in between, and
    the test's parse fails with "SystemError: AST constructor recursion depth
    mismatch" (a full run at load 90 failed four source-checking tests so). With the
    collector off, nothing in the parse lets another thread run. Measured with a
    GIL-releasing finalizer and a parsing thread: 36 of 40 parses failed, 0 of 40
    with the collector off.
    """
    text = source.read_text() if isinstance(source, Path) else source
    collecting = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(text)
    finally:
        if collecting:
            gc.enable()
