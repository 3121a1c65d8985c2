"""Moved to :mod:`raytopic.core.records`: this path re-exports it until every
importer has switched (then it goes)."""

from raytopic.core.records import *  # noqa: F403
from raytopic.core.records import (
    __all__,  # noqa: F401
    _Origin,  # noqa: F401  (used by name elsewhere)
)
