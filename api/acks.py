"""Moved to :mod:`raytopic.core.acks`: this path re-exports it until every
importer has switched (then it goes)."""

from raytopic.core.acks import *  # noqa: F403
from raytopic.core.acks import __all__  # noqa: F401
