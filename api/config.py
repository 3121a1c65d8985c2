"""Moved to :mod:`raytopic.core.config`: this path re-exports it until every
importer has switched (then it goes)."""

from raytopic.core.config import *  # noqa: F403
from raytopic.core.config import __all__  # noqa: F401
