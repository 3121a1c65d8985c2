"""``python -m raytopic.cli``: the ``raytopic`` command, which lives in
:mod:`raytopic.tools.cli` (kept as the module path the design names)."""

import sys

from raytopic.tools.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
