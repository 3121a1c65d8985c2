"""The records' public path: ``raytopic.records`` keeps working (and Elements pickled
under it still load). They live in :mod:`raytopic.core.records` (the actors build them)."""

from raytopic.core.records import *  # noqa: F403
from raytopic.core.records import (
    __all__,  # noqa: F401
    _Origin,  # noqa: F401  (used by name elsewhere)
)
