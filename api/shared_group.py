"""Moved to :mod:`raytopic.core.shared_group`: this path re-exports it until every
importer has switched (then it goes).
Stores written before the move pickle SharedGroup definitions as
``raytopic.shared_group._rebuild``: keep that name importable while such a
store may still be opened.
"""

from raytopic.core.shared_group import *  # noqa: F403
from raytopic.core.shared_group import (
    __all__,  # noqa: F401
    _rebuild,  # noqa: F401  (used by name elsewhere)
)
