"""Moved to :mod:`raytopic.core.resequencer`: this path re-exports it until every
importer has switched (then it goes)."""

from raytopic.core.resequencer import *  # noqa: F403
from raytopic.core.resequencer import (  # noqa: F401  (used by name elsewhere)
    ReleaseCallback,
    __all__,
    _check_correlation_id,
    _check_int,
    _check_seq,
    _check_settings,
)
