"""The shared-group definition's public path. Stores written before the move pickle
SharedGroup definitions as ``raytopic.shared_group._rebuild``: this name keeps them
loading. It lives in :mod:`raytopic.core.shared_group` (channels keep definitions)."""

from raytopic.core.shared_group import *  # noqa: F403
from raytopic.core.shared_group import (
    __all__,  # noqa: F401
    _rebuild,  # noqa: F401  (used by name elsewhere)
)
