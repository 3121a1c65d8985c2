"""The resequencer's public path: ``raytopic.resequencer`` keeps working, and reader
specs stored before the move (they pickle ``raytopic.resequencer.Resequence``) still
load. It lives in :mod:`raytopic.core.resequencer` (channels run it)."""

from raytopic.core.resequencer import *  # noqa: F403
from raytopic.core.resequencer import (  # noqa: F401  (used by name elsewhere)
    ReleaseCallback,
    __all__,
    _check_correlation_id,
    _check_int,
    _check_seq,
    _check_settings,
)
