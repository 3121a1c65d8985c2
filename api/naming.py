"""Moved to :mod:`raytopic.core.naming`: this path re-exports it until every
importer has switched (then it goes)."""

from raytopic.core.naming import *  # noqa: F403
from raytopic.core.naming import __all__  # noqa: F401
