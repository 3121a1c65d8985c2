"""The errors' public path: ``from raytopic.errors import DataLossError`` keeps working.
They live in :mod:`raytopic.core.errors` (the actors raise them too)."""

from raytopic.core.errors import *  # noqa: F403
from raytopic.core.errors import __all__  # noqa: F401
