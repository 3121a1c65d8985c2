"""Moved to :mod:`raytopic.core.errors`: this path re-exports it until every
importer has switched (then it goes)."""

from raytopic.core.errors import *  # noqa: F403
from raytopic.core.errors import __all__  # noqa: F401
